"""RMSNorm numerics: parity with the Hugging Face modules (forward bit for bit, backward at least
as accurate), the eager "none" mode, and the float32 gradient floor."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    DEVICES,
    FAMILIES,
    FLOAT32_EPS,
    LOW_PRECISION,
    Family,
    assert_bitwise_mostly,
    assert_grad_not_worse,
    hf_module,
    random_weight,
    rms_norm_eager,
    rms_norm_float64,
    ulp_distance,
)

import tigon

SHAPES = [(2, 128, 512), (5, 123, 123), (3, 7, 4097), (6, 1), (3, 127)]
SHAPE_IDS = ["2x128x512", "5x123x123", "3x7x4097", "hidden1", "hidden127"]
EPS = 1e-6

# (family, x dtype, weight dtype): every family in each dtype, and Llama's bf16/fp16 activations
# with float32 master weights (HF then returns float32).
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
HF_CASES = [
    pytest.param(
        family, _DTYPES[x], _DTYPES[w], id=f"{family.name}-{x}" + ("" if x == w else f"-w{w}")
    )
    for family in FAMILIES
    for x, w in [
        ("bf16", "bf16"),
        ("fp16", "fp16"),
        ("fp32", "fp32"),
        ("bf16", "fp32"),
        ("fp16", "fp32"),
    ]
    if x == w or family.casting_mode == "llama"
]
# (x dtype, weight dtype or None, offset) for casting_mode="none".
NONE_CASES = [
    pytest.param(
        _DTYPES[x],
        None if w is None else _DTYPES[w],
        offset,
        id=f"{x}-" + ("no_affine" if w is None else f"w{w}-offset{offset:g}"),
    )
    for x, w, offset in [
        ("bf16", "bf16", 0.0),
        ("bf16", "bf16", 1.0),
        ("fp16", "fp16", 0.0),
        ("fp16", "fp16", 1.0),
        ("fp32", "fp32", 0.0),
        ("fp32", "fp32", 1.0),
        ("bf16", "fp32", 0.0),
        ("bf16", None, 0.0),
        ("fp16", None, 0.0),
        ("fp32", None, 0.0),
    ]
]


def _inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    return (2.0 * torch.randn(shape)).to(device=device, dtype=dtype)


def assert_output_matches(
    y: torch.Tensor, expected: torch.Tensor, x_dtype: torch.dtype, family: Family
) -> None:
    """The forward parity criterion against a reference module."""
    assert y.dtype == expected.dtype and y.shape == expected.shape
    if y.dtype in LOW_PRECISION:
        # Llama rounds n = x * rstd to the input dtype before the weight multiply: a 1-ulp
        # difference in n (the float32 sum of squares in another order) can become 2 ulps of y.
        double_rounding = family.casting_mode == "llama"
        assert_bitwise_mostly(y, expected, max_ulp=2 if double_rounding else 1)
    elif x_dtype in LOW_PRECISION:
        # float32 y = n * w with n in x's dtype: one ulp of n is 2^16 float32 ulps (bf16), twice
        # that when the product crosses a power of two.
        assert_bitwise_mostly(y, expected, max_ulp=2**17)
    else:
        torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(("family", "x_dtype", "w_dtype"), HF_CASES)
def test_forward_matches_hf(
    family: Family,
    x_dtype: torch.dtype,
    w_dtype: torch.dtype,
    shape: tuple[int, ...],
    device: str,
) -> None:
    weight = random_weight(family, shape[-1], w_dtype)
    hf = hf_module(family, weight, EPS, device, w_dtype)
    x = _inputs(shape, x_dtype, device)
    with torch.no_grad():
        expected = hf(x)
        y = tigon.ops.rms_norm(x, hf.weight, EPS, family.offset, family.casting_mode)
    assert_output_matches(y, expected, x_dtype, family)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(("family", "x_dtype", "w_dtype"), HF_CASES)
def test_backward_at_least_as_accurate_as_hf(
    family: Family,
    x_dtype: torch.dtype,
    w_dtype: torch.dtype,
    shape: tuple[int, ...],
    device: str,
) -> None:
    weight = random_weight(family, shape[-1], w_dtype)
    hf = hf_module(family, weight, EPS, device, w_dtype)
    x_hf = _inputs(shape, x_dtype, device).requires_grad_()
    x = x_hf.detach().clone().requires_grad_()
    w = hf.weight.detach().clone().requires_grad_()
    x64 = x_hf.detach().double().cpu().requires_grad_()
    w64 = w.detach().double().cpu().requires_grad_()

    y_hf = hf(x_hf)
    y = tigon.ops.rms_norm(x, w, EPS, family.offset, family.casting_mode)
    dy = torch.randn(shape).to(device=device, dtype=y.dtype)
    y_hf.backward(dy)
    y.backward(dy)
    dy64 = dy.double().cpu()
    rms_norm_float64(x64, w64, EPS, family.offset).backward(dy64)
    dx_exact, dw_exact = x64.grad, w64.grad
    dw_exact_hf = dw_exact
    if family.casting_mode == "llama":
        # Llama multiplies the weight by n = round(x * rstd) (x's dtype; the rounding passes the
        # gradient through unchanged), so dw = sum(dy * n) with each implementation's own n:
        # one float32 ulp of rstd can flip a rounding of n, and either n is right.
        _, rstd = torch.ops.tigon.rms_norm_fwd(x.detach(), w.detach(), EPS, 0.0, "llama")
        xf = x.detach().float()
        n_tigon = (xf * rstd.unsqueeze(-1)).to(x_dtype)
        n_hf = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x_dtype)
        dw_exact = (dy64 * n_tigon.double().cpu()).reshape(-1, shape[-1]).sum(0)
        dw_exact_hf = (dy64 * n_hf.double().cpu()).reshape(-1, shape[-1]).sum(0)

    rstd64 = torch.rsqrt(x64.detach().pow(2).mean(-1, keepdim=True) + EPS)
    xhat64 = x64.detach() * rstd64
    dx_scale = (rstd64 * dy64 * (family.offset + w64.detach())).norm().item()
    dw_scale = (dy64 * xhat64).abs().reshape(-1, shape[-1]).sum(0).norm().item()
    assert x.grad.dtype == x_dtype and w.grad.dtype == w_dtype
    assert_grad_not_worse(x.grad, x_hf.grad, dx_exact, dx_scale, "dx")
    assert_grad_not_worse(w.grad, hf.weight.grad, dw_exact, dw_scale, "dw", peer_exact=dw_exact_hf)


def test_gemma_weights_need_the_float32_offset() -> None:
    """The Gemma data above discriminates: adding 1 in bf16 would break the forward parity."""
    family = FAMILIES[1]
    weight = random_weight(family, 512, torch.bfloat16)
    assert ((weight + 1).float() != weight.float() + 1).float().mean() > 0.5
    x = _inputs((4, 512), torch.bfloat16, "cpu")
    hf = hf_module(family, weight, EPS, "cpu", torch.bfloat16)
    with torch.no_grad():
        expected = hf(x)
        xf = x.float()
        bf16_offset = (
            xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * (weight + 1).float()
        )
    assert (bf16_offset.bfloat16() != expected).float().mean() > 0.05
    y = tigon.ops.rms_norm(x, weight, EPS, 1.0, "gemma")
    assert_bitwise_mostly(y, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(("x_dtype", "w_dtype", "offset"), NONE_CASES)
def test_none_mode_matches_eager(
    x_dtype: torch.dtype,
    w_dtype: torch.dtype | None,
    offset: float,
    shape: tuple[int, ...],
    device: str,
) -> None:
    x = _inputs(shape, x_dtype, device)
    w = None if w_dtype is None else (0.5 * torch.randn(shape[-1])).to(device=device, dtype=w_dtype)
    y, rstd = torch.ops.tigon.rms_norm_fwd(x, w, EPS, offset, "none")
    expected = rms_norm_eager(x, w, EPS, offset)
    assert y.dtype == expected.dtype
    if x_dtype == torch.float32:
        torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-30)
        return
    # Every value is rounded to x's dtype in this mode, the mean of squares too: where the float32
    # sums (in another order) round to neighbouring values, the whole row shifts by an ulp of
    # rstd. Rows with the same rstd must be bitwise equal; the others differ by that one ulp.
    eager_rstd = torch.rsqrt((x.pow(2).mean(-1) + EPS).float()).to(x_dtype)
    row_ulps = ulp_distance(rstd.to(x_dtype).cpu(), eager_rstd.cpu())
    same = (row_ulps == 0).to(y.device)
    assert int(row_ulps.max()) <= 1
    assert same.double().mean() >= 0.9, f"{same.double().mean():.1%} of the rows have eager's rstd"
    assert torch.equal(y[same], expected[same])


def none_mode_backward_float64(
    dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The backward of casting_mode="none" (include/tigon/ops/rms_norm.h) in float64, around the
    forward's own rounded values: rstd (in x's dtype), s = offset + w and n = round(x * rstd)."""
    r = rstd.double().cpu().unsqueeze(-1)
    x64 = x.detach().double().cpu()
    dy64 = dy.double().cpu()
    m = dy64 if w is None else dy64 * w.detach().double().cpu()
    xhat = x64 * r
    dx = r * (m - xhat * (m * xhat).mean(-1, keepdim=True))
    if w is None:
        return dx, None
    n = xhat.to(x.dtype).double()  # x * r is exact in float64: one rounding, as the forward's
    return dx, (dy64 * n).reshape(-1, x.shape[-1]).sum(0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_none_mode_backward_at_least_as_accurate_as_eager(
    dtype: torch.dtype, shape: tuple[int, ...], affine: bool, device: str
) -> None:
    """Both backwards differentiate a forward whose rstd is rounded to the input dtype (an error
    common to both that dwarfs the rest): each is compared with the float64 evaluation of the
    backward formula around its own forward's rounded values."""
    x_eager = _inputs(shape, dtype, device).requires_grad_()
    w_eager = None
    if affine:
        w_eager = (1 + 0.5 * torch.randn(shape[-1])).to(device=device, dtype=dtype)
        w_eager.requires_grad_()
    x = x_eager.detach().clone().requires_grad_()
    w = w_eager.detach().clone().requires_grad_() if w_eager is not None else None

    y, rstd = torch.ops.tigon.rms_norm_fwd(x, w, EPS, 0.0, "none")
    dy = torch.randn(shape).to(device=device, dtype=y.dtype)
    y.backward(dy)
    rms_norm_eager(x_eager, w_eager, EPS, 0.0).backward(dy)
    dx64, dw64 = none_mode_backward_float64(dy, x, w, rstd)
    eager_rstd = torch.rsqrt((x.detach().pow(2).mean(-1) + EPS).float()).to(dtype)
    dx64_eager, dw64_eager = none_mode_backward_float64(dy, x, w, eager_rstd)

    r = rstd.double().cpu().unsqueeze(-1)
    m = dy.double().cpu() if w is None else dy.double().cpu() * w.detach().double().cpu()
    scale = (r * m).norm().item()
    assert_grad_not_worse(x.grad, x_eager.grad, dx64, scale, "dx", peer_exact=dx64_eager)
    if w is not None:
        dw_scale = (dy.double().cpu() * x.detach().double().cpu() * r).abs()
        dw_scale = dw_scale.reshape(-1, shape[-1]).sum(0).norm().item()
        assert_grad_not_worse(w.grad, w_eager.grad, dw64, dw_scale, "dw", peer_exact=dw64_eager)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("casting_mode", ["llama", "gemma", "none"])
def test_rstd_output(casting_mode: str, device: str) -> None:
    x = _inputs((3, 5, 64), torch.float32, device)
    _, rstd = torch.ops.tigon.rms_norm_fwd(x, None, EPS, 0.0, casting_mode)
    assert rstd.shape == (3, 5) and rstd.dtype == torch.float32
    expected = torch.rsqrt(x.double().pow(2).mean(-1) + EPS)
    torch.testing.assert_close(rstd.double(), expected, rtol=4 * FLOAT32_EPS, atol=0.0)
