"""Gated RMSNorm: bitwise parity with Hugging Face's ``Qwen3NextRMSNormGated`` and
``Qwen3_5RMSNormGated`` (forward), gradients no farther from float64 than HF's own autograd, on
every device (the CUDA ones against HF's module on the GPU); the CUDA backend against the CPU
backend; opcheck, gradcheck, torch.compile, the module, and argument errors."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    DEVICES,
    LOW_PRECISION,
    assert_bitwise_mostly,
    assert_compiled_matches_eager,
    assert_grad_not_worse,
)
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNormGated
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNormGated

import tigon

OPS = torch.ops.tigon
EPS = 1e-6
SHAPES = [(2, 64, 128), (5, 7, 123), (3, 1), (4, 4097)]
SHAPE_IDS = ["2x64x128", "5x7x123", "hidden1", "hidden4097"]
HF_CLASSES = [Qwen3NextRMSNormGated, Qwen3_5RMSNormGated]
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DTYPE_CASES = [
    pytest.param(_DTYPES[x], _DTYPES[w], id=f"{x}-w{w}")
    for x, w in [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("bf16", "fp32")]
]


def _hf(cls: type, hidden: int, w_dtype: torch.dtype) -> torch.nn.Module:
    m = cls(hidden, eps=EPS)
    with torch.no_grad():
        m.weight.copy_(1 + 0.5 * torch.randn(hidden))
    return m.to(w_dtype)


def _inputs(
    shape: tuple[int, ...], dtype: torch.dtype, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        (2 * torch.randn(shape)).to(device=device, dtype=dtype),
        (3 * torch.randn(shape)).to(device=device, dtype=dtype),
    )


def _float64(x: torch.Tensor, gate: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The formula without roundings, in float64."""
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return w * (x * r) * torch.nn.functional.silu(gate)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", HF_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize(("x_dtype", "w_dtype"), DTYPE_CASES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_forward_matches_hf(
    shape: tuple[int, ...], x_dtype: torch.dtype, w_dtype: torch.dtype, cls: type, device: str
) -> None:
    torch.manual_seed(0)
    hf = _hf(cls, shape[-1], w_dtype).to(device)
    x, gate = _inputs(shape, x_dtype, device)
    with torch.no_grad():
        expected = hf(x, gate)
    y = tigon.ops.gated_rms_norm(x, gate, hf.weight.detach(), EPS)
    assert y.dtype == expected.dtype == x_dtype
    if x_dtype in LOW_PRECISION:
        assert_bitwise_mostly(y, expected)  # sum order and exp's last bit: a rare 1-ulp flip
    else:
        torch.testing.assert_close(y, expected, rtol=4e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("x_dtype", "w_dtype"), DTYPE_CASES)
def test_cast_order_is_hf_given_the_same_rstd(
    x_dtype: torch.dtype, w_dtype: torch.dtype, device: str
) -> None:
    """HF's forward line for line with tigon's rstd in place of its own: every rounding point
    matches, so only exp's last float32 bit can flip a rounding (<= 1 ulp). Against the plain HF
    module, a float32 ulp of difference in rstd (another summation order) that meets a rounding
    tie of n can move y by more than 1 ulp through the two later roundings (docs/ops/
    gated_rms_norm.md); the same statistics remove that."""
    torch.manual_seed(2)
    shape = (64, 4096)
    w = (1 + 0.5 * torch.randn(shape[-1])).to(device=device, dtype=w_dtype)
    x, gate = _inputs(shape, x_dtype, device)
    y, rstd = OPS.gated_rms_norm_fwd(x, gate, w, EPS)
    n = (x.float() * rstd.unsqueeze(-1)).to(x_dtype)  # hidden_states * rsqrt(...), .to(input)
    expected = ((w * n) * torch.nn.functional.silu(gate.float())).to(x_dtype)
    r_hf = torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
    assert ((rstd - r_hf).abs() <= 2 * torch.finfo(torch.float32).eps * r_hf).all()
    if x_dtype in LOW_PRECISION:
        assert_bitwise_mostly(y, expected, min_exact=0.999)
    else:
        torch.testing.assert_close(y, expected, rtol=4e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("x_dtype", "w_dtype"), DTYPE_CASES)
def test_backward_at_least_as_accurate_as_hf(
    x_dtype: torch.dtype, w_dtype: torch.dtype, device: str
) -> None:
    torch.manual_seed(1)
    shape = (4, 33, 128)
    hf = _hf(Qwen3NextRMSNormGated, shape[-1], w_dtype).to(device)
    x0, g0 = _inputs(shape, x_dtype, device)
    x_hf, g_hf = x0.clone().requires_grad_(), g0.clone().requires_grad_()
    x, g = x0.clone().requires_grad_(), g0.clone().requires_grad_()
    w = hf.weight.detach().clone().requires_grad_()
    dy = torch.randn(shape).to(device=device, dtype=x_dtype)
    hf(x_hf, g_hf).backward(dy)
    tigon.ops.gated_rms_norm(x, g, w, EPS).backward(dy)

    x64, g64 = x0.cpu().double().requires_grad_(), g0.cpu().double().requires_grad_()
    w64 = w.detach().cpu().double().requires_grad_()
    _float64(x64, g64, w64).backward(dy.cpu().double())
    for got, peer, exact, what in [
        (x.grad, x_hf.grad, x64.grad, "dx"),
        (g.grad, g_hf.grad, g64.grad, "dgate"),
        (w.grad, hf.weight.grad, w64.grad, "dweight"),
    ]:
        assert got.dtype == peer.dtype and got.shape == peer.shape, what
        assert_grad_not_worse(got, peer, exact, exact.norm().item(), what)


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_backward_gives_the_same_bits(device: str) -> None:
    """dx written into dy's buffer (the core reads each dy element before it overwrites it)."""
    x, g = _inputs((8, 96), torch.bfloat16, device)
    w = torch.randn(96, device=device)
    _, rstd = OPS.gated_rms_norm_fwd(x, g, w, EPS)
    dy = torch.randn(8, 96).to(device=device, dtype=torch.bfloat16)
    dx, dgate, dw = OPS.gated_rms_norm_bwd(dy, x, g, w, rstd)
    buffer = dy.clone()
    dgate2, dw2 = OPS.gated_rms_norm_bwd_inplace(buffer, x, g, w, rstd)
    assert torch.equal(buffer, dx) and torch.equal(dgate2, dgate) and torch.equal(dw2, dw)
    with pytest.raises(ValueError, match=r"gated_rms_norm_bwd_inplace: argument 'dy'"):
        OPS.gated_rms_norm_bwd_inplace(
            torch.randn(96, 8, device=device).t(), x.float(), g.float(), w, rstd
        )


@pytest.mark.parametrize("device", DEVICES)
def test_backward_is_deterministic(device: str) -> None:
    x = torch.randn(4096, 128, dtype=torch.bfloat16, device=device, requires_grad=True)
    g = torch.randn(4096, 128, dtype=torch.bfloat16, device=device, requires_grad=True)
    w = torch.randn(128, device=device, requires_grad=True)
    dy = torch.randn(4096, 128, dtype=torch.bfloat16, device=device)
    grads = []
    for _ in range(2):
        for t in (x, g, w):
            t.grad = None
        tigon.ops.gated_rms_norm(x, g, w).backward(dy)
        grads.append([t.grad.clone() for t in (x, g, w)])
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck(dtype: torch.dtype) -> None:
    x = torch.randn(3, 5, 32, dtype=dtype, requires_grad=True)
    g = torch.randn(3, 5, 32, dtype=dtype, requires_grad=True)
    w = torch.randn(32, requires_grad=True)
    for in_place in (False, True):
        torch.library.opcheck(OPS.gated_rms_norm_fwd.default, (x, g, w, EPS, in_place))
    _, rstd = OPS.gated_rms_norm_fwd(x.detach(), g.detach(), w.detach(), EPS)
    plain = (x.detach(), g.detach(), w.detach(), rstd)
    torch.library.opcheck(OPS.gated_rms_norm_bwd.default, (torch.randn_like(x), *plain))
    torch.library.opcheck(OPS.gated_rms_norm_bwd_inplace.default, (torch.randn_like(x), *plain))


def test_gradcheck() -> None:
    """Float64 gradcheck around the float32 kernel (tigon has no float64 kernels)."""
    x = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    w = (1 + 0.3 * torch.randn(16, dtype=torch.float64)).requires_grad_()

    def f(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return tigon.ops.gated_rms_norm(x.float(), g.float(), w.float(), EPS).double()

    assert torch.autograd.gradcheck(f, (x, g, w), eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.slow
def test_compile_fullgraph_matches_eager() -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(64, 128)
            self.norm = tigon.nn.RMSNormGated(64)
            self.out = torch.nn.Linear(64, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h, z = self.proj(x).chunk(2, dim=-1)
            return self.out(self.norm(h, z))

    assert_compiled_matches_eager(Block(), (torch.randn(4, 9, 64),), torch.randn(4, 9, 8))


def test_module_is_a_drop_in() -> None:
    torch.manual_seed(3)
    hf = _hf(Qwen3NextRMSNormGated, 32, torch.float32)
    m = tigon.nn.RMSNormGated(32, eps=EPS)
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    assert torch.equal(m.weight, torch.ones(32)) and m.variance_epsilon == EPS
    assert repr(tigon.nn.RMSNormGated(8)) == "RMSNormGated(8, eps=1e-06, in_place=True)"
    m.load_state_dict(hf.state_dict())
    x, gate = _inputs((4, 64, 32), torch.bfloat16)
    assert_bitwise_mostly(m(hidden_states=x, gate=gate), hf(hidden_states=x, gate=gate))
    with pytest.raises(ValueError, match="hidden_size"):
        tigon.nn.RMSNormGated(0)


@pytest.mark.parametrize("device", DEVICES)
def test_row_strided_input_and_zero_rows(device: str) -> None:
    """Chunks of a projection (Qwen3-Next's z) are row-strided views: no copy needed."""
    w = (1 + 0.3 * torch.randn(64)).to(device)
    both = torch.randn(6, 128, device=device)
    x, gate = both[:, :64], both[:, 64:]
    hf = _hf(Qwen3NextRMSNormGated, 64, torch.float32).to(device)
    with torch.no_grad():
        hf.weight.copy_(w)
        expected = hf(x, gate)
    torch.testing.assert_close(tigon.ops.gated_rms_norm(x, gate, w, EPS), expected)
    w_strided = torch.stack([w, torch.zeros_like(w)], -1)[:, 0]  # a strided weight is copied
    torch.testing.assert_close(tigon.ops.gated_rms_norm(x, gate, w_strided, EPS), expected)
    x0 = torch.randn(0, 64, device=device, requires_grad=True)
    g0 = torch.randn(0, 64, device=device, requires_grad=True)
    w0 = w.clone().requires_grad_()
    tigon.ops.gated_rms_norm(x0, g0, w0).sum().backward()
    assert w0.grad is not None and not w0.grad.any()


@pytest.mark.parametrize(
    ("args", "error", "name"),
    [
        (
            lambda: (torch.randn(2, 8), torch.randn(2, 8, dtype=torch.bfloat16), torch.ones(8)),
            TypeError,
            "gate",
        ),
        (lambda: (torch.randn(2, 8), torch.randn(2, 4), torch.ones(8)), ValueError, "gate"),
        (lambda: (torch.randn(2, 8), torch.randn(2, 8), torch.ones(4)), ValueError, "weight"),
        (lambda: (torch.randn(2, 0), torch.randn(2, 0), torch.ones(0)), ValueError, "x"),
    ],
    ids=["gate_dtype", "gate_shape", "weight_shape", "hidden_0"],
)
def test_errors_name_the_argument(args: object, error: type[Exception], name: str) -> None:
    # x's own checks may come from the workspace query, which the operator calls first.
    op = r"tigon::gated_rms_norm_fwd(_workspace_size)?"
    with pytest.raises(error, match=rf"{op}: argument '{name}'"):
        OPS.gated_rms_norm_fwd(*args(), EPS)  # type: ignore[operator]


def test_negative_eps_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"argument 'eps'"):
        tigon.ops.gated_rms_norm(torch.randn(2, 8), torch.randn(2, 8), torch.ones(8), -1.0)


@pytest.mark.gpu
@pytest.mark.parametrize(("x_dtype", "w_dtype"), DTYPE_CASES)
@pytest.mark.parametrize("shape", [(2, 512, 16, 128), (7, 4097)], ids=["qwen3next_heads", "odd"])
def test_cuda_matches_cpu_backend(
    shape: tuple[int, ...], x_dtype: torch.dtype, w_dtype: torch.dtype
) -> None:
    """The CUDA backend against the CPU backend on the same inputs: only the row sums' order and
    exp's last float32 bit differ, so 16-bit y and dgate are mostly bitwise; a float32 ulp of rstd
    that meets a rounding tie of n moves a rare y up to 3 ulps (docs/ops/gated_rms_norm.md)."""
    torch.manual_seed(4)
    x, gate = _inputs(shape, x_dtype)
    w = (1 + 0.5 * torch.randn(shape[-1])).to(w_dtype)
    dy = torch.randn(shape).to(x_dtype)
    outs = {}
    for device in ("cpu", "cuda"):
        xd, gd, wd = (t.to(device).requires_grad_() for t in (x, gate, w))
        y = tigon.ops.gated_rms_norm(xd, gd, wd, EPS)
        y.backward(dy.to(device))
        outs[device] = [t.detach().cpu() for t in (y, xd.grad, gd.grad)] + [wd.grad.cpu()]
    for got, want, what in zip(outs["cuda"], outs["cpu"], ["y", "dx", "dgate", "dw"], strict=True):
        if x_dtype in LOW_PRECISION and what in ("y", "dgate"):
            assert_bitwise_mostly(got, want, max_ulp=3)
        else:  # sums in another order: dx's row sum (cancels near zero), dw's over rows
            rtol = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[got.dtype]
            atol = (1e-3 if got.dtype != torch.float32 else 1e-5) * want.abs().max().item()
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=what)
