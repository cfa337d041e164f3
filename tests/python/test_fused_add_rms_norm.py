"""Fused residual add + RMSNorm: parity with Hugging Face's unfused ``residual + hidden_states``
followed by its RMSNorm modules, bit-identity with tigon's own unfused add and rms_norm (forward
and backward), opcheck, gradcheck, torch.compile, the module, and argument errors."""

from __future__ import annotations

import re

import pytest
import torch
from helpers import (
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


def _pair(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """An attention/MLP output and a larger residual stream, as in a decoder layer."""
    return torch.randn(shape).to(dtype), (4.0 * torch.randn(shape)).to(dtype)


# ---------------------------------------------------------------------- parity, forward


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(("family", "x_dtype", "w_dtype"), HF_CASES)
def test_forward_matches_hf_add_then_norm(
    family: Family, x_dtype: torch.dtype, w_dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    hf = hf_module(family, random_weight(family, shape[-1], w_dtype), EPS, "cpu", w_dtype)
    x, residual = _pair(shape, x_dtype)
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


@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_backward_is_the_unfused_backward_bit_for_bit(
    dtype: torch.dtype, mode: str, affine: bool, in_place: bool
) -> None:
    shape = (3, 17, 96)
    x0, r0 = _pair(shape, dtype)
    w0 = (1 + 0.5 * torch.randn(96)).to(dtype) if affine else None
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
        dy, dh = torch.randn(shape).to(y.dtype), torch.randn(shape).to(dtype)
        torch.autograd.backward([y, h], [dy, dh])
        grads.append([x.grad, r.grad] + ([w.grad] if affine else []))
    for got, want in zip(*grads, strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize(("family", "x_dtype", "w_dtype"), HF_CASES)
def test_backward_at_least_as_accurate_as_hf(
    family: Family, x_dtype: torch.dtype, w_dtype: torch.dtype
) -> None:
    shape = (4, 33, 128)
    hf = hf_module(family, random_weight(family, shape[-1], w_dtype), EPS, "cpu", w_dtype)
    x0, r0 = _pair(shape, x_dtype)
    x_hf, r_hf = x0.clone().requires_grad_(), r0.clone().requires_grad_()
    x, r = x0.clone().requires_grad_(), r0.clone().requires_grad_()
    w = hf.weight.detach().clone().requires_grad_()
    h_hf = r_hf + x_hf
    y_hf = hf(h_hf)
    y, h = tigon.ops.fused_add_rms_norm(x, r, w, EPS, family.offset, family.casting_mode)
    dy, dh = torch.randn(shape).to(y.dtype), torch.randn(shape).to(x_dtype)
    torch.autograd.backward([y_hf, h_hf], [dy, dh])
    torch.autograd.backward([y, h], [dy, dh])

    h64 = (x0.double() + r0.double()).requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y64 = rms_norm_float64(h64, w64, EPS, family.offset)
    torch.autograd.backward([y64, h64], [dy.double(), dh.double()])
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


@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_fwd(dtype: torch.dtype, mode: str, affine: bool, in_place: bool) -> None:
    x = torch.randn(3, 5, 32, dtype=dtype, requires_grad=True)
    r = torch.randn(3, 5, 32, dtype=dtype, requires_grad=True)
    w = (1 + 0.5 * torch.randn(32)).to(dtype).requires_grad_() if affine else None
    offset = 1.0 if affine and mode == "gemma" else 0.0
    torch.library.opcheck(
        OPS.fused_add_rms_norm_fwd.default, (x, r, w, EPS, offset, mode, in_place)
    )


@pytest.mark.parametrize("op_name", ["fused_add_rms_norm_bwd", "fused_add_rms_norm_bwd_inplace"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_bwd(dtype: torch.dtype, mode: str, affine: bool, op_name: str) -> None:
    x, r = torch.randn(4, 48, dtype=dtype), torch.randn(4, 48, dtype=dtype)
    w = (1 + 0.5 * torch.randn(48)).to(dtype) if affine else None
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
def test_compile_fullgraph_matches_eager() -> None:
    inputs = (torch.randn(4, 9, 64), torch.randn(4, 9, 64))
    assert_compiled_matches_eager(_Layer(64), inputs, torch.randn(4, 9, 64))


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


def test_row_strided_and_other_layouts() -> None:
    big = torch.randn(6, 80)
    x, r = big[:, :64], torch.randn(64, 6).t()  # a row-strided slice and a transposed view
    y, h = tigon.ops.fused_add_rms_norm(x, r)
    y_ref, h_ref = _unfused(x, r, None, 0.0, "llama")
    assert torch.equal(h, h_ref) and torch.equal(y, y_ref)


def test_zero_rows() -> None:
    x = torch.randn(0, 8, requires_grad=True)
    w = torch.ones(8, requires_grad=True)
    y, h = tigon.ops.fused_add_rms_norm(x, x, w)
    (y.sum() + h.sum()).backward()
    assert y.shape == (0, 8) and torch.equal(w.grad, torch.zeros(8))


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
