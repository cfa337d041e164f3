"""tigon.nn.glu_down_proj / glu_packed_down_proj: ``down_proj(glu(gate, up))`` whose backward
recomputes the product. Bitwise equal to the unfused path (outputs and every gradient), the
product is not saved, fallbacks (no_grad, autocast, hooked / wrapped Linear), torch.compile,
and the patched HF MLP classes (LlamaMLP, GemmaMLP, Phi3MLP)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import DEVICES
from torch import nn
from transformers import GemmaConfig, LlamaConfig, Phi3Config
from transformers.models.gemma.modeling_gemma import GemmaMLP
from transformers.models.llama.modeling_llama import LlamaMLP
from transformers.models.phi3.modeling_phi3 import Phi3MLP

import tigon
from tigon.transformers import mlp as tm
from tigon.transformers.families import FAMILIES

ACTIVATIONS = ["silu", "gelu_pytorch_tanh"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
IN, OUT = 40, 24


def _inputs(packed, lead, dtype, device):
    if packed:
        return (torch.randn(*lead, 2 * IN, dtype=dtype, device=device),)
    return (
        torch.randn(*lead, IN, dtype=dtype, device=device),
        torch.randn(*lead, IN, dtype=dtype, device=device),
    )


def _run(fused, packed, activation, linear, inputs, dy, in_place=True, needs=None):
    """(y, input grads..., weight grad, bias grad); inputs pass through `* 1` so that in-place
    gradients land in fresh projection-like buffers, as inside an MLP."""
    linear.zero_grad(set_to_none=True)
    needs = needs or (True,) * len(inputs)
    leaves = [x.clone().requires_grad_(n) for x, n in zip(inputs, needs)]
    args = [x * 1 for x in leaves]
    if packed:
        if fused:
            y = tigon.nn.glu_packed_down_proj(activation, *args, linear, in_place)
        else:
            y = linear(tigon.ops.glu_packed(activation, *args, in_place))
    elif fused:
        y = tigon.nn.glu_down_proj(activation, *args, linear, in_place)
    else:
        y = linear(tigon.ops.glu(activation, *args, in_place))
    if y.requires_grad:
        y.backward(dy)
    bias = linear.bias.grad if linear.bias is not None else None
    return [y.detach(), *(x.grad for x in leaves), linear.weight.grad, bias]


def _assert_identical(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None:
            assert g is None, i
        else:
            assert g is not None and g.dtype == w.dtype and torch.equal(g, w), i


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("lead", [(13,), (3, 11), (2, 3, 5)], ids=["2d", "3d", "4d"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("packed", [False, True], ids=["split", "packed"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_bitwise_equal_to_unfused(activation, packed, bias, lead, dtype, device):
    linear = nn.Linear(IN, OUT, bias=bias).to(device=device, dtype=dtype)
    inputs = _inputs(packed, lead, dtype, device)
    dy = torch.randn(*lead, OUT, dtype=dtype, device=device)
    for in_place in (True, False):
        want = _run(False, packed, activation, linear, inputs, dy, in_place)
        got = _run(True, packed, activation, linear, inputs, dy, in_place)
        _assert_identical(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_bitwise_equal_large_and_strided_gradient(dtype, device):
    """Shapes where the GEMMs block, and a non-contiguous incoming gradient."""
    linear = nn.Linear(256, 192, bias=True).to(device=device, dtype=dtype)
    gate = torch.randn(4, 130, 256, dtype=dtype, device=device)
    up = torch.randn_like(gate)
    dy = torch.randn(4, 192, 130, dtype=dtype, device=device).transpose(1, 2)
    want = _run(False, False, "silu", linear, (gate, up), dy)
    got = _run(True, False, "silu", linear, (gate, up), dy)
    _assert_identical(got, want)


NEEDS = [
    # (gate/up requires grad, weight, bias)
    ((True, False), True, True),
    ((False, True), True, True),
    ((False, False), True, True),
    ((True, True), False, True),
    ((True, True), True, False),
    ((True, True), False, False),
]


@pytest.mark.parametrize("packed", [False, True], ids=["split", "packed"])
@pytest.mark.parametrize("needs", NEEDS, ids=[str(i) for i in range(len(NEEDS))])
def test_requires_grad_combinations(needs, packed):
    (need_gate, need_up), need_w, need_b = needs
    if packed and need_gate != need_up:
        pytest.skip("one packed input")
    linear = nn.Linear(IN, OUT, bias=True).to(torch.bfloat16)
    linear.weight.requires_grad_(need_w)
    linear.bias.requires_grad_(need_b)
    inputs = _inputs(packed, (3, 7), torch.bfloat16, "cpu")
    dy = torch.randn(3, 7, OUT, dtype=torch.bfloat16)
    flags = (need_gate,) if packed else (need_gate, need_up)
    want = _run(False, packed, "silu", linear, inputs, dy, needs=flags)
    got = _run(True, packed, "silu", linear, inputs, dy, needs=flags)
    _assert_identical(got, want)


def _saved_bytes(fn, module):
    """Bytes of distinct storages autograd saves for backward while fn runs (the module's
    parameters, saved as themselves or as views, excluded)."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


@pytest.mark.parametrize(
    "backend", ["eager", "aot_eager", pytest.param("inductor", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("packed", [False, True], ids=["split", "packed"])
def test_product_is_not_saved(packed, backend):
    """The MLP saves x, gate and up (or gate_up); the unfused path also the product h. Also
    under torch.compile, whose CSE must not merge the backward's recomputation with the
    forward's product (that would make it saved again)."""
    tokens, hidden, inter = 64, 32, 96
    config = (Phi3Config if packed else LlamaConfig)(
        hidden_size=hidden, intermediate_size=inter, num_attention_heads=4
    )
    x = torch.randn(2, tokens // 2, hidden, requires_grad=True)
    sizes = {}
    for fuse in (False, True):
        torch._dynamo.reset()
        mlp = (tigon.nn.Phi3SwiGLUMLP if packed else tigon.nn.SwiGLUMLP)(
            config, fuse_down_proj=fuse
        )
        model = mlp if backend == "eager" else torch.compile(mlp, backend=backend, fullgraph=True)
        model(x)  # compiles outside the hooks
        sizes[fuse] = _saved_bytes(lambda model=model: model(x), mlp)
    h_bytes = tokens * inter * 4
    assert sizes[False] - sizes[True] == h_bytes
    assert sizes[True] == (tokens * hidden + 2 * tokens * inter) * 4  # x, gate, up


def _is_fused(y):
    return y.grad_fn is not None and "DownProj" in y.grad_fn.name()


def test_fallbacks():
    linear = nn.Linear(IN, OUT)
    gate, up = (torch.randn(5, IN, requires_grad=True) for _ in range(2))
    assert _is_fused(tigon.nn.glu_down_proj("silu", gate, up, linear))
    with torch.no_grad():
        y = tigon.nn.glu_down_proj("silu", gate, up, linear)
        assert y.grad_fn is None and torch.equal(y, linear(tigon.ops.swiglu(gate, up)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = tigon.nn.glu_down_proj("silu", gate, up, linear)
        assert not _is_fused(y) and y.dtype == torch.bfloat16
    # nothing requires grad: the plain path
    frozen = nn.Linear(IN, OUT).requires_grad_(False)
    assert not _is_fused(tigon.nn.glu_down_proj("silu", gate.detach(), up.detach(), frozen))

    class LoraLike(nn.Linear):
        pass

    assert not _is_fused(tigon.nn.glu_down_proj("silu", gate, up, LoraLike(IN, OUT)))
    calls = []
    hooked = nn.Linear(IN, OUT)
    hooked.register_forward_hook(lambda *a: calls.append(1))
    assert not _is_fused(tigon.nn.glu_down_proj("silu", gate, up, hooked)) and calls
    patched = nn.Linear(IN, OUT)
    patched.forward = lambda h: nn.Linear.forward(patched, h) * 2  # accelerate-style
    y = tigon.nn.glu_down_proj("silu", gate, up, patched)
    assert not _is_fused(y)
    torch.testing.assert_close(y, 2 * nn.Linear.forward(patched, tigon.ops.swiglu(gate, up)))
    handle = nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert not _is_fused(tigon.nn.glu_down_proj("silu", gate, up, linear))
    finally:
        handle.remove()
    transposed = nn.Linear(IN, OUT)
    transposed.weight = nn.Parameter(torch.randn(IN, OUT).t())
    assert not _is_fused(tigon.nn.glu_down_proj("silu", gate, up, transposed))
    with pytest.raises(ValueError, match="argument 'b'"):
        tigon.nn.glu_down_proj("silu", gate, up[:, :-1], linear)
    with pytest.raises(ValueError, match="activation"):
        tigon.nn.glu_down_proj("gelu", gate, up, linear)


def test_lora_wrapped_down_proj_falls_back():
    peft = pytest.importorskip("peft")
    config = LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=4)
    mlp = tigon.nn.SwiGLUMLP(config)
    lora = peft.inject_adapter_in_model(
        peft.LoraConfig(r=4, target_modules=["down_proj"], init_lora_weights=False), mlp
    )
    x = torch.randn(2, 5, 32, requires_grad=True)
    y = lora(x)
    assert not _is_fused(y)
    ref = lora.down_proj(tigon.ops.swiglu(lora.gate_proj(x), lora.up_proj(x)))
    assert torch.equal(y, ref)
    y.sum().backward()
    assert lora.down_proj.lora_A["default"].weight.grad is not None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("packed", [False, True], ids=["split", "packed"])
def test_compile_fullgraph(packed, device):
    torch._dynamo.reset()
    config = (Phi3Config if packed else LlamaConfig)(
        hidden_size=32, intermediate_size=48, num_attention_heads=4
    )
    mlp = (tigon.nn.Phi3SwiGLUMLP if packed else tigon.nn.SwiGLUMLP)(config).to(device)
    x = torch.randn(2, 5, 32, device=device)
    results = []
    for model in (mlp, torch.compile(mlp, backend="aot_eager", fullgraph=True)):
        mlp.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        y = model(xi)
        y.square().sum().backward()
        results.append([y.detach(), xi.grad, *(p.grad for p in mlp.parameters())])
    _assert_identical(results[1], results[0])


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compile_inductor(device):
    torch._dynamo.reset()
    config = LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=4)
    mlp = tigon.nn.SwiGLUMLP(config).to(device)
    x = torch.randn(2, 5, 32, device=device)
    results = []
    for model in (mlp, torch.compile(mlp, fullgraph=True)):
        mlp.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        model(xi).square().sum().backward()
        results.append([xi.grad, *(p.grad for p in mlp.parameters())])
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)


HF_CASES = [
    ("llama", LlamaConfig, LlamaMLP, {}),
    ("llama", LlamaConfig, LlamaMLP, {"mlp_bias": True}),
    ("gemma", GemmaConfig, GemmaMLP, {}),
    ("phi3", Phi3Config, Phi3MLP, {}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", HF_CASES, ids=["llama", "llama_bias", "gemma", "phi3"])
def test_patched_hf_mlp(case, dtype, device):
    """The patched HF class: fused and unfused bitwise equal; bf16 bitwise equal to HF (CPU)."""
    family, config_cls, hf_cls, extra = case
    config = config_cls(hidden_size=48, intermediate_size=72, num_attention_heads=4, **extra)
    hf = hf_cls(config).to(device=device, dtype=dtype)
    x = torch.randn(3, 11, 48, dtype=dtype, device=device)
    dy = torch.randn_like(x)
    results = {}
    for name, fuse in (("hf", None), ("plain", False), ("fused", True)):
        model = copy.deepcopy(hf)
        if fuse is not None:
            model.__class__ = tm.tigon_class(FAMILIES[family])
            model.tigon_fuse_down_proj = fuse
        xi = x.clone().requires_grad_()
        y = model(xi)
        assert _is_fused(y) == bool(fuse)
        y.backward(dy)
        results[name] = [y.detach(), xi.grad, *(p.grad for p in model.parameters())]
    _assert_identical(results["fused"], results["plain"])
    if dtype == torch.bfloat16 and device == "cpu":
        _assert_identical(results["fused"], results["hf"])
