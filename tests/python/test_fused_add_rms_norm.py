"""Fused residual add + RMSNorm: parity with Hugging Face's unfused ``residual + hidden_states``
followed by its RMSNorm modules, bit-identity with tigon's own unfused add and rms_norm (forward
and backward), opcheck, gradcheck, torch.compile, the module, and argument errors; on the CPU and,
with the `gpu` marker, on CUDA (plus the CPU backend as the CUDA oracle, streams, CUDA graphs)."""

from __future__ import annotations

import re

import pytest
import torch
from helpers import (
    DEVICES,
    FAMILIES,
    FAMILY_IDS,
    LOW_PRECISION,
    Family,
    assert_bitwise_mostly,
    assert_compiled_matches_eager,
    assert_grad_not_worse,
    hf_module,
    random_weight,
    rms_norm_float64,
)

import tigon

OPS = torch.ops.tigon
MODES = ["llama", "gemma", "none"]
EPS = 1e-6
SHAPES = [(2, 64, 256), (5, 123, 123), (3, 1), (4, 4097)]
SHAPE_IDS = ["2x64x256", "5x123x123", "hidden1", "hidden4097"]
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
HF_CASES = [
    pytest.param(family, _DTYPES[x], _DTYPES[w], id=f"{family.name}-{x}-w{w}")
    for family in FAMILIES
    for x, w in [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("bf16", "fp32")]
    if x == w or family.casting_mode == "llama"
]


def _pair(
    shape: tuple[int, ...], dtype: torch.dtype, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """An attention/MLP output and a larger residual stream, as in a decoder layer."""
    x, residual = torch.randn(shape).to(dtype), (4.0 * torch.randn(shape)).to(dtype)
    return x.to(device), residual.to(device)


# ---------------------------------------------------------------------- parity, forward


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(("family", "x_dtype", "w_dtype"), HF_CASES)
def test_forward_matches_hf_add_then_norm(
    family: Family, x_dtype: torch.dtype, w_dtype: torch.dtype, shape: tuple[int, ...], device: str
) -> None:
    hf = hf_module(family, random_weight(family, shape[-1], w_dtype), EPS, device, w_dtype)
    x, residual = _pair(shape, x_dtype, device)
    with torch.no_grad():
        h_hf = residual + x  # HF: hidden_states = residual + hidden_states
        y_hf = hf(h_hf)
        y, h = tigon.ops.fused_add_rms_norm(
            x, residual, hf.weight, EPS, family.offset, family.casting_mode
        )
        y_unfused = tigon.ops.rms_norm(h_hf, hf.weight, EPS, family.offset, family.casting_mode)
    assert h.dtype == x_dtype and torch.equal(h, h_hf)
    assert torch.equal(y, y_unfused)  # the fused op is tigon's add-then-norm, bit for bit
    if y.dtype in LOW_PRECISION:
        # HF's mean sums the squares in another order (on CUDA too): rstd may differ in its last
        # bits, which moves the odd y by one or two ulps.
        assert_bitwise_mostly(y, y_hf, max_ulp=2 if family.casting_mode == "llama" else 1)
    elif x_dtype in LOW_PRECISION:
        assert_bitwise_mostly(y, y_hf, max_ulp=2**17)  # float32 y of a 16-bit n (test_rms_norm)
    else:
        torch.testing.assert_close(y, y_hf, rtol=1e-6, atol=1e-30)


# --------------------------------------------------------------------- parity, backward


def _unfused(
    x: torch.Tensor, r: torch.Tensor, w: torch.Tensor | None, offset: float, mode: str
) -> tuple[torch.Tensor, torch.Tensor]:
    h = x + r
    return tigon.ops.rms_norm(h, w, EPS, offset, mode), h


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("hidden", [96, 4096, 32768], ids=["H96", "H4096", "H32768"])
def test_backward_is_the_unfused_backward_bit_for_bit(
    hidden: int, dtype: torch.dtype, mode: str, affine: bool, in_place: bool, device: str
) -> None:
    """Forward and backward of the fused op equal tigon's add then rms_norm bit for bit (on CUDA:
    the same row kernels, register, light, two-pass and cluster, with the add compiled in)."""
    if hidden > 96 and device == "cpu":
        pytest.skip("long rows exercise the CUDA kernels; the CPU backend is covered at H96")
    shape = (3, 17, hidden)
    x0, r0 = _pair(shape, dtype, device)
    w0 = (1 + 0.5 * torch.randn(hidden)).to(device=device, dtype=dtype) if affine else None
    offset = 1.0 if affine and mode == "gemma" else 0.0
    grads = []
    for fused in (True, False):
        x, r = x0.clone().requires_grad_(), r0.clone().requires_grad_()
        w = w0.clone().requires_grad_() if affine else None
        if fused:
            y, h = tigon.ops.fused_add_rms_norm(x, r, w, EPS, offset, mode, in_place=in_place)
        else:
            y, h = _unfused(x, r, w, offset, mode)
        torch.manual_seed(1)
        dy = torch.randn(shape).to(device=device, dtype=y.dtype)
        dh = torch.randn(shape).to(device=device, dtype=dtype)
        torch.autograd.backward([y, h], [dy, dh])
        grads.append([y.detach(), h.detach(), x.grad, r.grad] + ([w.grad] if affine else []))
    for got, want in zip(*grads, strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("family", "x_dtype", "w_dtype"), HF_CASES)
def test_backward_at_least_as_accurate_as_hf(
    family: Family, x_dtype: torch.dtype, w_dtype: torch.dtype, device: str
) -> None:
    shape = (4, 33, 128)
    hf = hf_module(family, random_weight(family, shape[-1], w_dtype), EPS, device, w_dtype)
    x0, r0 = _pair(shape, x_dtype, device)
    x_hf, r_hf = x0.clone().requires_grad_(), r0.clone().requires_grad_()
    x, r = x0.clone().requires_grad_(), r0.clone().requires_grad_()
    w = hf.weight.detach().clone().requires_grad_()
    h_hf = r_hf + x_hf
    y_hf = hf(h_hf)
    y, h = tigon.ops.fused_add_rms_norm(x, r, w, EPS, family.offset, family.casting_mode)
    dy = torch.randn(shape).to(device=device, dtype=y.dtype)
    dh = torch.randn(shape).to(device=device, dtype=x_dtype)
    torch.autograd.backward([y_hf, h_hf], [dy, dh])
    torch.autograd.backward([y, h], [dy, dh])

    h64 = (x0.double() + r0.double()).cpu().requires_grad_()
    w64 = w.detach().double().cpu().requires_grad_()
    y64 = rms_norm_float64(h64, w64, EPS, family.offset)
    torch.autograd.backward([y64, h64], [dy.double().cpu(), dh.double().cpu()])
    scale = h64.grad.norm().item()
    assert torch.equal(x.grad, r.grad)
    assert_grad_not_worse(x.grad, x_hf.grad, h64.grad, scale, "dx")
    assert_grad_not_worse(r.grad, r_hf.grad, h64.grad, scale, "dresidual")
    assert w.grad.dtype == w_dtype


@pytest.mark.parametrize("used", ["y", "h"])
def test_one_output_used(used: str) -> None:
    """An unused output contributes no gradient (a zero one), as in the unfused graph."""
    x0, r0 = _pair((4, 32), torch.float32)
    w0 = 1 + 0.5 * torch.randn(32)
    grads = []
    for fused in (True, False):
        x, r, w = (t.clone().requires_grad_() for t in (x0, r0, w0))
        y, h = (
            tigon.ops.fused_add_rms_norm(x, r, w, EPS) if fused else _unfused(x, r, w, 0.0, "llama")
        )
        (y if used == "y" else h).sum().backward()
        grads.append([x.grad, r.grad, w.grad])
    for got, want in zip(*grads, strict=True):
        if want is None:
            assert got is None or not got.any()
        else:
            assert torch.equal(got, want)


# ---------------------------------------------------------------- opcheck and gradcheck


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_fwd(
    dtype: torch.dtype, mode: str, affine: bool, in_place: bool, device: str
) -> None:
    x = torch.randn(3, 5, 32, device=device, dtype=dtype, requires_grad=True)
    r = torch.randn(3, 5, 32, device=device, dtype=dtype, requires_grad=True)
    w = (1 + 0.5 * torch.randn(32)).to(device, dtype).requires_grad_() if affine else None
    offset = 1.0 if affine and mode == "gemma" else 0.0
    torch.library.opcheck(
        OPS.fused_add_rms_norm_fwd.default, (x, r, w, EPS, offset, mode, in_place)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", ["fused_add_rms_norm_bwd", "fused_add_rms_norm_bwd_inplace"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_bwd(
    dtype: torch.dtype, mode: str, affine: bool, op_name: str, device: str
) -> None:
    x = torch.randn(4, 48, device=device, dtype=dtype)
    r = torch.randn(4, 48, device=device, dtype=dtype)
    w = (1 + 0.5 * torch.randn(48)).to(device, dtype) if affine else None
    y, h, rstd = OPS.fused_add_rms_norm_fwd(x, r, w, EPS, 0.0, mode)
    dy, dh = torch.randn_like(y), torch.randn_like(h)
    if op_name == "fused_add_rms_norm_bwd":
        args = (dy, dh, h, w, rstd, 0.0, mode)
    else:
        args = (dh, dy, h, w, rstd, 0.0, mode)
    torch.library.opcheck(getattr(OPS, op_name).default, args)


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
def test_gradcheck(mode: str, affine: bool) -> None:
    """Float64 gradcheck around the float32 kernel (tigon has no float64 kernels), both outputs."""
    x64 = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    r64 = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    w64 = (1 + 0.5 * torch.randn(16, dtype=torch.float64)).requires_grad_() if affine else None
    offset = 1.0 if affine and mode == "gemma" else 0.0

    def f(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        y, h = tigon.ops.fused_add_rms_norm(
            x.float(), r.float(), None if w is None else w.float(), EPS, offset, mode
        )
        return y.double(), h.double()

    assert torch.autograd.gradcheck(f, (x64, r64, w64), eps=1e-3, atol=2e-3, rtol=2e-3)


# ------------------------------------------------------------------------- torch.compile


class _Layer(torch.nn.Module):
    """Two residual branches, each followed by a fused add + norm (a decoder layer's shape)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.attn = torch.nn.Linear(hidden, hidden)
        self.mlp = torch.nn.Linear(hidden, hidden)
        self.norm1 = tigon.nn.FusedAddRMSNorm(hidden)
        self.norm2 = tigon.nn.FusedAddRMSNorm(
            hidden, offset=1.0, casting_mode="gemma", init="zeros", in_place=False
        )

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y, residual = self.norm1(self.attn(x), residual)
        y, residual = self.norm2(self.mlp(y), residual)
        return y + residual


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device: str) -> None:
    inputs = (torch.randn(4, 9, 64, device=device), torch.randn(4, 9, 64, device=device))
    assert_compiled_matches_eager(
        _Layer(64).to(device), inputs, torch.randn(4, 9, 64, device=device)
    )


# -------------------------------------------------------------------------------- module


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_module_loads_the_hf_norm_weight(family: Family) -> None:
    hidden = 48
    hf = hf_module(family, random_weight(family, hidden, torch.float32), EPS, "cpu", torch.bfloat16)
    fused = tigon.nn.FusedAddRMSNorm(
        hidden, EPS, family.offset, family.casting_mode, init=family.init, dtype=torch.bfloat16
    )
    fused.load_state_dict(hf.state_dict())
    x, residual = _pair((3, 7, hidden), torch.bfloat16)
    with torch.no_grad():
        y, h = fused(x, residual)
        assert torch.equal(h, residual + x)
        assert_bitwise_mostly(y, hf(residual + x), max_ulp=2)
    assert repr(fused).startswith("FusedAddRMSNorm((48,), eps=1e-06")


@pytest.mark.parametrize("device", DEVICES)
def test_row_strided_and_other_layouts(device: str) -> None:
    big = torch.randn(6, 80, device=device)
    x, r = big[:, :64], torch.randn(64, 6, device=device).t()  # row-strided; transposed
    y, h = tigon.ops.fused_add_rms_norm(x, r)
    y_ref, h_ref = _unfused(x, r, None, 0.0, "llama")
    assert torch.equal(h, h_ref) and torch.equal(y, y_ref)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_rows(device: str) -> None:
    x = torch.randn(0, 8, device=device, requires_grad=True)
    w = torch.ones(8, device=device, requires_grad=True)
    y, h = tigon.ops.fused_add_rms_norm(x, x, w)
    (y.sum() + h.sum()).backward()
    assert y.shape == (0, 8) and torch.equal(w.grad, torch.zeros(8, device=device))


# -------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "error", "names"),
    [
        (
            lambda: OPS.fused_add_rms_norm_fwd(
                torch.randn(2, 8), torch.randn(2, 8, dtype=torch.float16), None, EPS, 0.0, "llama"
            ),
            TypeError,
            "argument 'residual': expected dtype float32 (x's dtype)",
        ),
        (
            lambda: OPS.fused_add_rms_norm_fwd(
                torch.randn(2, 8), torch.randn(2, 4), None, EPS, 0.0, "llama"
            ),
            ValueError,
            "argument 'residual': expected shape [2, 8] (x's shape)",
        ),
        (
            lambda: OPS.fused_add_rms_norm_fwd(
                torch.randn(2, 8), torch.randn(2, 8), torch.ones(4), EPS, 0.0, "llama"
            ),
            ValueError,
            "argument 'weight'",
        ),
        (
            lambda: OPS.fused_add_rms_norm_fwd(
                torch.randn(2, 8), torch.randn(2, 8), None, -1.0, 0.0, "llama"
            ),
            ValueError,
            "argument 'eps'",
        ),
        (
            lambda: tigon.ops.fused_add_rms_norm(
                torch.randn(2, 8), torch.randn(2, 8), casting_mode="llama3"
            ),
            ValueError,
            "argument 'casting_mode'",
        ),
        (
            lambda: OPS.fused_add_rms_norm_bwd(
                torch.randn(2, 8),
                torch.randn(2, 8, dtype=torch.bfloat16),
                torch.randn(2, 8),
                None,
                torch.ones(2),
                0.0,
                "llama",
            ),
            TypeError,
            "argument 'dh': expected dtype float32 (h's dtype)",
        ),
    ],
    ids=["residual_dtype", "residual_shape", "weight_shape", "eps", "casting_mode", "dh_dtype"],
)
def test_errors_name_the_argument(call: object, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=rf"tigon::fused_add_rms_norm\w*: {re.escape(names)}"):
        call()  # type: ignore[operator]


# ---------------------------------------------------------------------------------- CUDA


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_cuda_matches_cpu_backend(dtype: torch.dtype, mode: str) -> None:
    """The CPU backend is the oracle: h and dx's add bit for bit; y, rstd, dx and dw differ only
    through the order of the float32 row sums (a few float32 ulps of rstd, rarely y by one)."""
    x, r = _pair((33, 4097), dtype)
    w = (1 + 0.5 * torch.randn(4097)).to(dtype)
    offset = 1.0 if mode == "gemma" else 0.0
    y_cpu, h_cpu, rstd_cpu = OPS.fused_add_rms_norm_fwd(x, r, w, EPS, offset, mode)
    y, h, rstd = OPS.fused_add_rms_norm_fwd(x.cuda(), r.cuda(), w.cuda(), EPS, offset, mode)
    assert torch.equal(h.cpu(), h_cpu)
    if y.dtype in LOW_PRECISION:
        assert_bitwise_mostly(y.cpu(), y_cpu, max_ulp=2)
    else:
        torch.testing.assert_close(y.cpu(), y_cpu, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        rstd.cpu(), rstd_cpu, rtol=2**-19 if mode != "none" else 2**-7, atol=0
    )

    dy, dh = torch.randn_like(y_cpu), torch.randn_like(h_cpu)
    dx_cpu, dw_cpu = OPS.fused_add_rms_norm_bwd(dy, dh, h_cpu, w, rstd_cpu, offset, mode)
    dx, dw = OPS.fused_add_rms_norm_bwd(
        dy.cuda(), dh.cuda(), h_cpu.cuda(), w.cuda(), rstd_cpu.cuda(), offset, mode
    )
    # dx = round(dh + round(g)): with the same g both backends give the same bits; g's row sum
    # runs in another order, so allow the odd element one or two ulps.
    if dtype in LOW_PRECISION:
        assert_bitwise_mostly(dx.cpu(), dx_cpu, max_ulp=2, min_exact=0.98)
        assert_bitwise_mostly(dw.cpu(), dw_cpu, max_ulp=2, min_exact=0.9)
    else:
        torch.testing.assert_close(dx.cpu(), dx_cpu, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dw.cpu(), dw_cpu, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_cuda_runs_on_the_current_stream() -> None:
    x, r = _pair((64, 1024), torch.bfloat16, "cuda")
    x.requires_grad_()
    w = (1 + 0.5 * torch.randn(1024, device="cuda")).to(torch.bfloat16).requires_grad_()
    y_ref, h_ref = tigon.ops.fused_add_rms_norm(x, r, w)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y, h = tigon.ops.fused_add_rms_norm(x, r, w)
        dx, dw = torch.autograd.grad([y, h], (x, w), [torch.ones_like(y), torch.ones_like(h)])
    torch.cuda.current_stream().wait_stream(stream)
    dx_ref, dw_ref = torch.autograd.grad(
        [y_ref, h_ref], (x, w), [torch.ones_like(y_ref), torch.ones_like(h_ref)]
    )
    assert torch.equal(y, y_ref) and torch.equal(h, h_ref)
    assert torch.equal(dx, dx_ref) and torch.equal(dw, dw_ref)


@pytest.mark.gpu
def test_cuda_graph_replay_matches_eager() -> None:
    """Forward and backward captured in a CUDA graph (no allocation or sync inside the op) and
    replayed on new inputs give eager's bits."""
    shape, hidden = (16, 2048), 2048
    w = (1 + 0.5 * torch.randn(hidden, device="cuda")).to(torch.bfloat16)
    x_static, r_static = _pair(shape, torch.bfloat16, "cuda")
    dy_static = torch.randn(shape, device="cuda").to(torch.bfloat16)
    dh_static = torch.randn(shape, device="cuda").to(torch.bfloat16)

    def step() -> tuple[torch.Tensor, ...]:
        y, h, rstd = OPS.fused_add_rms_norm_fwd(x_static, r_static, w, EPS, 0.0, "llama")
        dx, dw = OPS.fused_add_rms_norm_bwd(dy_static, dh_static, h, w, rstd, 0.0, "llama")
        return y, h, rstd, dx, dw

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture, as torch.cuda.graph requires
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()

    x_new, r_new = _pair(shape, torch.bfloat16, "cuda")
    x_static.copy_(x_new)
    r_static.copy_(r_new)
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, step(), strict=True):
        assert torch.equal(got, want)
