"""GroupNorm: parity with torch.nn.functional.group_norm (forward bit for bit on >= 99% of 16-bit
elements and never more than 1 ulp, backward no farther from float64 than torch's autograd) on
the CPU and on CUDA, the operators (opcheck, torch.compile), and tigon.nn.GroupNorm as a drop-in
for torch.nn.GroupNorm."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    DEVICES,
    FLOAT32_EPS,
    LOW_PRECISION,
    assert_bitwise_mostly,
    assert_grad_not_worse,
)

import tigon

OPS = torch.ops.tigon
EPS = 1e-5
# (shape [N, C, *], groups)
SHAPES = [((2, 64, 32, 32), 8), ((3, 6, 37), 3), ((4, 12, 50), 12), ((65, 64), 8), ((2, 8, 9), 1)]
SHAPE_IDS = ["vision", "odd-spatial", "group-per-channel", "2d", "one-group"]
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# (x dtype, parameter dtype or None)
CASES = [
    pytest.param((_DTYPES[x], p and _DTYPES[p]), id=f"{x}-p{p}")
    for x, p in [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("bf16", "fp32"),
                 ("bf16", None)]
]  # fmt: skip


def _inputs(shape, dtypes, device: str, mean: float = 0.3):
    x = (mean + 2.0 * torch.randn(shape)).to(dtypes[0]).to(device)
    if dtypes[1] is None:
        return x, None, None
    channels = shape[1]
    w = (1.0 + 0.3 * torch.randn(channels)).to(dtypes[1]).to(device)
    b = (0.5 * torch.randn(channels)).to(dtypes[1]).to(device)
    return x, w, b


def _float64(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.double()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape_groups", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtypes", CASES)
def test_forward_matches_torch(device: str, shape_groups, dtypes) -> None:
    shape, groups = shape_groups
    x, w, b = _inputs(shape, dtypes, device)
    y, mean, rstd = OPS.group_norm_fwd(x, w, b, groups, EPS)
    assert mean.shape == rstd.shape == (shape[0], groups) and mean.dtype == torch.float32
    if dtypes[1] == torch.float32 and dtypes[0] != torch.float32 and device == "cpu":
        expected = F.group_norm(x.float(), groups, w, b, EPS).to(x.dtype)  # torch's CPU: no mix
    else:
        expected = F.group_norm(x, groups, w, b, EPS)
    assert y.dtype == expected.dtype == x.dtype and y.shape == expected.shape
    # Where y cancels (|y| << its terms |xhat * w| + |b|) the float32 forms differ by rounding.
    r = rstd.double().repeat_interleave(shape[1] // groups, 1).view(shape[0], shape[1], -1)
    m = mean.double().repeat_interleave(shape[1] // groups, 1).view(shape[0], shape[1], -1)
    x3 = x.double().view(shape[0], shape[1], -1)
    w64 = 1.0 if w is None else w.double().abs().view(1, -1, 1)
    b64 = 0.0 if b is None else b.double().abs().view(1, -1, 1)
    terms = ((x3.abs() + m.abs()) * r * w64 + b64).view(shape)
    if dtypes[0] in LOW_PRECISION:
        cancelled = (y.double() - expected.double()).abs() <= 32 * FLOAT32_EPS * terms
        assert_bitwise_mostly(torch.where(cancelled, expected, y), expected)
    else:
        exact = F.group_norm(x.double(), groups, _float64(w), _float64(b), EPS)
        assert ((y.double() - exact).abs() <= 16 * FLOAT32_EPS * terms).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape_groups", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtypes", CASES)
def test_backward_no_farther_from_float64_than_torch(device: str, shape_groups, dtypes) -> None:
    shape, groups = shape_groups
    x, w, b = _inputs(shape, dtypes, device)
    dy = torch.randn(shape).to(dtypes[0]).to(device)

    def grads(fn, dtype):
        leaves = [t if t is None else t.detach().clone() for t in (x, w, b)]
        if dtype is not None:
            leaves = [t if t is None else t.to(dtype) for t in leaves]
        for t in leaves:
            if t is not None:
                t.requires_grad_()
        y = fn(*leaves)
        y.backward(dy.to(y.dtype))
        return [None if t is None else t.grad for t in leaves]

    ours = grads(lambda x_, w_, b_: tigon.ops.group_norm(x_, groups, w_, b_, EPS), None)
    exact = grads(lambda x_, w_, b_: F.group_norm(x_, groups, w_, b_, EPS), torch.float64)
    mixed = dtypes[1] is not None and dtypes[1] != dtypes[0]
    theirs = grads(
        lambda x_, w_, b_: F.group_norm(x_.float() if mixed else x_, groups, w_, b_, EPS).to(
            x_.dtype
        ),
        None,
    )
    spatial = x[0, 0].numel()
    for i, name in enumerate(("dx", "dw", "db")):
        g, ref = ours[i], exact[i]
        if ref is None:
            assert g is None
            continue
        terms = shape[1] // groups * spatial if name == "dx" else shape[0] * spatial
        scale = (dy.double().norm() * (1.0 if w is None else w.double().abs().max())).item()
        scale *= terms**0.5
        peer = theirs[i]
        assert g.dtype == peer.dtype == (x.dtype if i == 0 else w.dtype) and g.shape == peer.shape
        assert_grad_not_worse(g, peer, ref, scale, f"{name} {shape}")


@pytest.mark.parametrize("device", DEVICES)
def test_channels_last_and_batch_slices(device: str) -> None:
    x = torch.randn(4, 16, 8, 8, device=device).to(torch.bfloat16)
    w = torch.randn(16, device=device)
    b = torch.randn(16, device=device)
    reference = tigon.ops.group_norm(x, 4, w, b)
    nhwc = x.to(memory_format=torch.channels_last)
    assert torch.equal(tigon.ops.group_norm(nhwc, 4, w, b), reference)
    big = torch.randn(8, 16, 8, 8, device=device).to(torch.bfloat16)
    assert torch.equal(
        tigon.ops.group_norm(big[::2], 4, w, b),
        tigon.ops.group_norm(big[::2].contiguous(), 4, w, b),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_shared_gradient_is_not_overwritten(device: str) -> None:
    """y = x + group_norm(x): the incoming gradient feeds both branches; the in-place backward
    must not write dx over it."""
    x = torch.randn(3, 8, 20, device=device, requires_grad=True)
    norm = tigon.nn.GroupNorm(4, 8).to(device)
    ref = torch.nn.GroupNorm(4, 8).to(device)
    (x + norm(x)).sum().backward()
    ours = x.grad.clone()
    x.grad = None
    (x + ref(x)).sum().backward()
    torch.testing.assert_close(ours, x.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtypes", CASES)
def test_opcheck(device: str, dtypes) -> None:
    x, w, b = _inputs((3, 8, 10), dtypes, device)
    if w is not None:
        w.requires_grad_()
    torch.library.opcheck(OPS.group_norm_fwd.default, (x.requires_grad_(), w, b, 4, EPS))
    _, mean, rstd = OPS.group_norm_fwd(x.detach(), w, b, 4, EPS)
    dy = torch.randn(3, 8, 10).to(dtypes[0]).to(device)
    wd = None if w is None else w.detach()
    torch.library.opcheck(OPS.group_norm_bwd.default, (dy, x.detach(), wd, b, mean, rstd))
    torch.library.opcheck(
        OPS.group_norm_bwd_inplace.default, (dy.clone(), x.detach(), wd, b, mean, rstd)
    )


def test_gradcheck_float64() -> None:
    x = torch.randn(2, 6, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    # float32 math inside: a loose gradcheck against float64 finite differences
    torch.autograd.gradcheck(
        lambda x_, w_, b_: tigon.ops.group_norm(x_.float(), 3, w_.float(), b_.float()).double(),
        (x, w, b),
        eps=1e-3,
        atol=2e-3,
        rtol=2e-3,
    )


def test_errors_name_the_argument() -> None:
    x = torch.randn(2, 8, 4)
    with pytest.raises(ValueError, match="argument 'groups'"):
        tigon.ops.group_norm(x, 3)
    with pytest.raises(TypeError, match="argument 'weight'"):
        tigon.ops.group_norm(x, 4, torch.ones(8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="argument 'bias'"):
        tigon.ops.group_norm(x, 4, None, torch.zeros(9))
    with pytest.raises(ValueError, match="argument 'eps'"):
        tigon.ops.group_norm(x, 4, None, None, -1.0)
    with pytest.raises(ValueError, match="argument 'x'"):
        tigon.ops.group_norm(torch.randn(8), 4)
    with pytest.raises(ValueError, match="num_groups must divide"):
        tigon.nn.GroupNorm(3, 8)


@pytest.mark.parametrize("device", DEVICES)
def test_module_is_a_drop_in(device: str) -> None:
    torch.manual_seed(0)
    ref = torch.nn.GroupNorm(4, 16, eps=1e-6).to(device)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours = tigon.nn.GroupNorm(4, 16, eps=1e-6).to(device)
    ours.load_state_dict(ref.state_dict())
    assert ref.load_state_dict(ours.state_dict()) is not None
    x = torch.randn(2, 16, 7, 7, device=device)
    torch.testing.assert_close(ours(x), ref(x), rtol=2e-6, atol=2e-6)
    assert repr(ours).endswith("(4, 16, eps=1e-06, affine=True)")
    assert tigon.nn.GroupNorm(2, 4, affine=False).weight is None
    assert torch.equal(tigon.nn.functional.group_norm(x, 4, ref.weight, ref.bias, 1e-6), ours(x))


@pytest.mark.slow
def test_compile_fullgraph_matches_eager() -> None:
    torch._dynamo.reset()
    model = torch.nn.Sequential(
        torch.nn.Conv1d(8, 8, 3, padding=1), tigon.nn.GroupNorm(2, 8), torch.nn.SiLU()
    )
    x = torch.randn(4, 8, 33)
    dy = torch.randn(4, 8, 33)
    y_eager = model(x)
    y_eager.backward(dy.clone())
    grads_eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y = torch.compile(model, fullgraph=True)(x)
    y.backward(dy.clone())
    torch.testing.assert_close(y, y_eager)
    for p, g in zip(model.parameters(), grads_eager, strict=True):
        torch.testing.assert_close(p.grad, g)
