"""tigon.transformers: the ``fused_add_norm`` flag (residual add + RMSNorm in the decoder layers).

The fused layer must give the bits of the unfused one (HF's ``residual + h`` followed by tigon's
RMSNorm): forward outputs and the gradient of every parameter, in float32 and bfloat16, for every
family it patches, patched before construction and on an instance.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from convergence_utils import FAMILIES, build_model, only
from helpers import DEVICES, restore_transformers, token_ids
from torch import nn

import tigon
import tigon.transformers as tt
from tigon.transformers import _ops
from tigon.transformers import add_norm as ta

transformers = pytest.importorskip("transformers")

PATCHED = [f for f in FAMILIES if tt.FAMILIES[f].add_norm is not None]
#: Families whose layers have no residual add followed by a norm (docs/transformers.md).
NOT_PATCHED = {"olmo2", "olmo3", "exaone4"}


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # two CUDA runs must agree
    try:
        yield from restore_transformers()
    finally:
        torch.use_deterministic_algorithms(deterministic)


@pytest.fixture
def fused_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of the fused op by the patched layers."""
    calls: list[int] = []
    real = _ops.fused_add_rms_norm

    def counting(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(_ops, "fused_add_rms_norm", counting)
    return calls


def _run(model: nn.Module, device: str) -> dict[str, torch.Tensor]:
    """Training loss (and logits with the unfused loss), eval logits and every parameter gradient."""
    ids = token_ids().to(device)
    model.train()
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    got = {"loss": out.loss.detach()}
    if out.logits is not None:  # None with the fused linear cross-entropy
        got["logits"] = out.logits.detach()
    got.update({f"{n}.grad": p.grad for n, p in model.named_parameters() if p.grad is not None})
    model.eval()
    with torch.no_grad():
        got["eval logits"] = model(input_ids=ids).logits
    return got


def _assert_bitwise(want: dict[str, torch.Tensor], got: dict[str, torch.Tensor], what: str) -> None:
    assert want.keys() == got.keys(), f"{what}: {sorted(want.keys() ^ got.keys())}"
    for name, w in want.items():
        g = got[name]
        if not torch.equal(w, g):
            diff = (g.float() - w.float()).abs()
            pytest.fail(
                f"{what}: {name} differs on {int((diff > 0).sum())} of {w.numel()} elements, "
                f"max {diff.max().item():.3g} (expected bitwise equality with the unfused path)"
            )


def _flags(family: str, fused: bool) -> dict[str, bool]:
    return {"fused_add_norm": fused, "cross_entropy": True}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("how", ["classes", "instance"])
@pytest.mark.parametrize("family", PATCHED)
def test_fused_add_norm_is_bitwise_the_unfused_layer(
    family: str, how: str, dtype: torch.dtype, fused_calls: list[int]
) -> None:
    """Every other kernel on in both runs; only the add + norm differs."""
    runs = []
    for fused in (False, True):
        model = build_model(family, tigon=how, kernels=_flags(family, fused), dtype=dtype)
        fused_calls.clear()
        runs.append(_run(model, "cpu"))
        layers = model.config.num_hidden_layers
        # one call per layer in the training forward and one in the eval forward
        assert len(fused_calls) == (2 * layers if fused else 0), f"{family}: {len(fused_calls)}"
        tt.revert_patches(family)
    _assert_bitwise(runs[0], runs[1], f"{family} {how} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("family", ["llama", "gemma2", "phi3", "granite", "glm4", "lfm2"])
def test_fused_add_norm_is_bitwise_the_unfused_layer_cuda(
    family: str, dtype: torch.dtype, fused_calls: list[int]
) -> None:
    """On the GPU: the CUDA fused kernel in a whole model vs HF's add + tigon's CUDA RMSNorm."""
    if not tigon.has_cuda_kernels():
        pytest.fail("a CUDA device is present but tigon was built without its CUDA kernels")
    runs = []
    for fused in (False, True):
        model = build_model(
            family, tigon="instance", kernels=_flags(family, fused), dtype=dtype, device="cuda"
        )
        fused_calls.clear()
        runs.append(_run(model, "cuda"))
        assert len(fused_calls) == (2 * model.config.num_hidden_layers if fused else 0)
    _assert_bitwise(runs[0], runs[1], f"{family} cuda {dtype}")


def test_flag_exists_only_where_there_is_an_add_then_norm() -> None:
    assert set(FAMILIES) - set(PATCHED) == NOT_PATCHED
    for family in NOT_PATCHED:
        assert "fused_add_norm" not in tt.kernel_flags(family)
        with pytest.raises(TypeError, match="unexpected keyword argument 'fused_add_norm'"):
            tt.apply_tigon_kernel(family, fused_add_norm=True)
    for family in PATCHED:
        assert tt.kernel_flags(family)["fused_add_norm"] is True


def test_needs_tigon_rms_norm() -> None:
    with pytest.raises(ValueError, match="fused_add_norm=True needs rms_norm=True"):
        tt.apply_tigon_kernel_to_llama(rms_norm=False, fused_add_norm=True)
    done = tt.apply_tigon_kernel_to_llama(**only("llama", "rms_norm", "rope"))
    assert not any("fused_add" in v for v in done.values())
    model = build_model("llama", tigon="instance", kernels={"rms_norm": False})
    assert not any("fused_add" in v for v in tt.patched_modules(model).values())


def test_reported_and_keeps_hf_names(fused_calls: list[int]) -> None:
    model = build_model("llama", tigon="instance")
    layer = model.model.layers[0]
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    assert isinstance(layer, LlamaDecoderLayer) and isinstance(layer, ta.TigonAddNormLayer)
    assert type(layer).__name__ == "LlamaDecoderLayer"  # _no_split_modules, save_pretrained
    report = tt.patched_modules(model)
    assert report["model.layers.1"] == (
        "tigon.ops.fused_add_rms_norm(LlamaDecoderLayer: residual add + post_attention_layernorm)"
    )
    restored = pickle.loads(pickle.dumps(model))
    assert type(restored.model.layers[0]) is type(layer)


def test_hooked_norm_takes_the_unfused_path(fused_calls: list[int]) -> None:
    """A hook on the norm must see its input: the layer adds, then calls the norm module."""
    ref = _run(build_model("qwen3", tigon="instance", kernels={"fused_add_norm": False}), "cpu")
    model = build_model("qwen3", tigon="instance")
    fused_calls.clear()  # the parity probe's calls
    seen: list[torch.Tensor] = []
    model.model.layers[0].post_attention_layernorm.register_forward_hook(
        lambda m, args, out: seen.append(args[0])
    )
    got = _run(model, "cpu")
    assert len(seen) == 2 and len(fused_calls) == 2  # layer 0 unfused, layer 1 fused (x2 runs)
    _assert_bitwise(ref, got, "qwen3 with a hooked norm")


def test_global_and_backward_hooks_take_the_unfused_path(fused_calls: list[int]) -> None:
    model = build_model("llama", tigon="instance")
    norm = model.model.layers[1].post_attention_layernorm
    grads: list[torch.Tensor] = []
    handle = norm.register_full_backward_hook(lambda m, gin, gout: grads.append(gout[0]))
    fused_calls.clear()
    _run(model, "cpu")
    assert len(fused_calls) == 2 and len(grads) == 1  # layer 0 fused (train, eval), layer 1 not
    handle.remove()
    seen: list[str] = []
    handle = nn.modules.module.register_module_forward_hook(
        lambda m, args, out: seen.append(type(m).__name__)
    )
    try:
        fused_calls.clear()
        _run(model, "cpu")
    finally:
        handle.remove()
    assert not fused_calls and seen.count("TigonLlamaRMSNorm") == 2 * 5  # 2 per layer + final


def test_gradient_checkpointing(fused_calls: list[int]) -> None:
    runs = []
    for fused in (False, True):
        model = build_model("mistral", tigon="instance", kernels={"fused_add_norm": fused})
        model.gradient_checkpointing_enable()
        fused_calls.clear()  # the parity probe's calls
        runs.append(_run(model, "cpu"))
    assert len(fused_calls) == 3 * 2  # forward, recomputed forward, eval forward; two layers
    _assert_bitwise(runs[0], runs[1], "mistral with gradient checkpointing")


def test_peft_modules_to_save_norm_falls_back() -> None:
    """A PEFT wrapper around the norm is not a tigon RMSNorm: the layer adds, then calls it."""
    peft = pytest.importorskip("peft")
    runs = []
    for fused in (False, True):
        model = build_model("llama", tigon="instance", kernels={"fused_add_norm": fused})
        config = peft.LoraConfig(
            target_modules=["q_proj", "v_proj"],
            modules_to_save=["post_attention_layernorm"],
            r=4,
        )
        runs.append(_run(peft.get_peft_model(model, config), "cpu"))
    _assert_bitwise(runs[0], runs[1], "llama LoRA with the norm in modules_to_save")


def test_positional_arguments_reach_the_attention() -> None:
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    cls = ta.tigon_class(tt.FAMILIES["llama"])
    assert cls.tigon_positional[:2] == ("attention_mask", "position_ids")
    assert issubclass(cls, LlamaDecoderLayer)


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "lfm2", "falcon_h1"])
def test_generation_with_kv_cache(family: str) -> None:
    """Greedy decoding (prefill, then one token at a time through the cache) is unchanged."""
    outs = []
    for fused in (False, True):
        model = build_model(family, tigon="instance", kernels={"fused_add_norm": fused}).eval()
        prompt = token_ids(batch=1, seq=6)
        with torch.no_grad():
            outs.append(model.generate(prompt, max_new_tokens=6, do_sample=False, use_cache=True))
    assert torch.equal(outs[0], outs[1]), f"{family}: {outs[0].tolist()} vs {outs[1].tolist()}"


def test_changed_layer_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.models.llama import modeling_llama

    hf_forward = modeling_llama.LlamaDecoderLayer.forward

    def changed(self: Any, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return hf_forward(self, hidden_states * 0.5, *args, **kwargs)

    changed.__signature__ = __import__("inspect").signature(hf_forward)  # type: ignore[attr-defined]
    monkeypatch.setattr(modeling_llama.LlamaDecoderLayer, "forward", changed)
    ta._VERIFIED.clear()
    with pytest.raises(RuntimeError, match="LlamaDecoderLayer's forward no longer matches"):
        tt.apply_tigon_kernel_to_llama(**only("llama", "rms_norm", "fused_add_norm"))


@pytest.mark.parametrize("device", DEVICES)
def test_add_then_norm_fallbacks(device: str) -> None:
    """The helper itself: fused for a tigon RMSNorm and equal addends, else HF's add + norm."""
    if device == "cuda" and not tigon.has_cuda_kernels():
        pytest.fail("a CUDA device is present but tigon was built without its CUDA kernels")
    norm = tigon.nn.RMSNorm(32).to(device)
    x = torch.randn(3, 32, device=device)
    r = torch.randn(3, 32, device=device)
    y, h = ta.add_then_norm(norm, x, r)
    assert torch.equal(h, r + x) and torch.equal(y, norm(r + x))
    # mixed dtypes (autocast): promoted add, then the norm, as HF
    y, h = ta.add_then_norm(norm, x.bfloat16(), r)
    assert h.dtype == torch.float32 and torch.equal(h, r + x.bfloat16())
