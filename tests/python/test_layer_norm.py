"""LayerNorm: parity with torch.nn.functional.layer_norm on the CPU and on CUDA (forward bit for
bit on >= 99% of 16-bit elements and never more than 1 ulp, backward no farther from float64
than torch's autograd), the operators (opcheck, torch.compile, CUDA graphs), and
tigon.nn.LayerNorm as a drop-in for torch.nn.LayerNorm."""

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
    ulp_distance,
)

import tigon

OPS = torch.ops.tigon
EPS = 1e-5
SHAPES = [(2, 128, 512), (5, 123, 123), (3, 7, 4097), (6, 1), (3, 127)]
SHAPE_IDS = ["2x128x512", "5x123x123", "3x7x4097", "hidden1", "hidden127"]
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# (x dtype, weight dtype or None, bias dtype or None): the combinations torch's CPU kernel takes.
CASES = [
    pytest.param((_DTYPES[x], w and _DTYPES[w], b and _DTYPES[b]), id=f"{x}-w{w}-b{b}")
    for x, w, b in [
        ("bf16", "bf16", "bf16"),
        ("fp16", "fp16", "fp16"),
        ("fp32", "fp32", "fp32"),
        ("bf16", "fp32", "fp32"),
        ("fp16", "fp32", "fp32"),
        ("bf16", None, None),
        ("bf16", "bf16", None),
        ("fp16", None, "fp32"),
        ("fp32", None, "fp32"),
    ]
]


def _inputs(
    shape: tuple[int, ...], dtype: torch.dtype, mean: float = 0.3, device: str = "cpu"
) -> torch.Tensor:
    return (mean + 2.0 * torch.randn(shape)).to(device=device, dtype=dtype)


def _parameters(
    hidden: int, w_dtype: torch.dtype | None, b_dtype: torch.dtype | None, device: str = "cpu"
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    w = None if w_dtype is None else (1.0 + 0.3 * torch.randn(hidden)).to(device, w_dtype)
    b = None if b_dtype is None else (0.5 * torch.randn(hidden)).to(device, b_dtype)
    return w, b


def _case_inputs(
    shape: tuple[int, ...], dtypes: tuple, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """x and the parameters of a CASES entry (x dtype, weight dtype or None, bias dtype or None)."""
    return (
        _inputs(shape, dtypes[0], device=device),
        *_parameters(shape[-1], dtypes[1], dtypes[2], device),
    )


def _float64(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.double()


def _torch_layer_norm(
    x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None
) -> torch.Tensor:
    """F.layer_norm on x's device, or on the CPU for a dtype mix torch's CUDA kernel rejects."""
    try:
        return F.layer_norm(x, x.shape[-1:], w, b, EPS)
    except RuntimeError:
        if not x.is_cuda:
            raise
        cpu = [None if t is None else t.cpu() for t in (w, b)]
        return F.layer_norm(x.cpu(), x.shape[-1:], *cpu, EPS).to(x.device)


# ---------------------------------------------------------------------------------- forward


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtypes", CASES)
def test_forward_matches_torch(shape: tuple[int, ...], dtypes: tuple, device: str) -> None:
    x_dtype = dtypes[0]
    x, w, b = _case_inputs(shape, dtypes, device)
    y, mean, rstd = OPS.layer_norm_fwd(x, w, b, EPS)
    expected = _torch_layer_norm(x, w, b)
    assert y.dtype == expected.dtype == x_dtype and y.shape == expected.shape
    # The float32 rounding of the terms of torch's 16-bit CPU formula, (x*rstd - rstd*mean)*w + b
    # (its sums in another order add a few more units; on CUDA its Welford statistics and fused
    # multiply-adds): where y cancels (|y| << its terms), the two float32 results may differ by
    # that much, which can be 2 ulps of a tiny y (a few elements in 100,000; neither is the closer
    # to float64).
    r, m = rstd.double().unsqueeze(-1), mean.double().unsqueeze(-1)
    w64 = 1.0 if w is None else w.double().abs()
    b64 = 0.0 if b is None else b.double().abs()
    terms = (x.double().abs() * r + m.abs() * r) * w64 + b64
    if x_dtype in LOW_PRECISION:
        cancelled = (y.double() - expected.double()).abs() <= 32 * FLOAT32_EPS * terms
        assert_bitwise_mostly(torch.where(cancelled, expected, y), expected)
        if shape[-1] > 1:  # hidden 1: torch's noise where y is exactly b (test below)
            assert (ulp_distance(y, expected) == 0).double().mean() >= 0.99
    else:
        exact = F.layer_norm(x.double(), shape[-1:], _float64(w), _float64(b), EPS)
        assert ((y.double() - exact).abs() <= 16 * FLOAT32_EPS * terms).all()
        assert ((y.double() - expected.double()).abs() <= 32 * FLOAT32_EPS * terms).all()


def test_hidden_one_is_exactly_the_bias() -> None:
    """x - mean is exactly 0 for one element: y is b (0 without a bias). torch's 16-bit CPU
    kernel computes x*rstd - rstd*mean with rstd = 1/sqrt(eps) and returns rounding noise."""
    x = _inputs((7, 1), torch.bfloat16)
    b = torch.randn(1).to(torch.bfloat16)
    assert torch.equal(tigon.ops.layer_norm(x, None, b), b.expand(7, 1))
    assert torch.equal(tigon.ops.layer_norm(x), torch.zeros_like(x))


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_statistics_are_float32_like_torch(x_dtype: torch.dtype) -> None:
    x = _inputs((4, 9, 300), x_dtype, mean=50.0)
    w, b = _parameters(300, torch.float32, torch.float32)
    y, mean, rstd = OPS.layer_norm_fwd(x, w, b, EPS)
    _, torch_mean, torch_rstd = torch.native_layer_norm(x, [300], w, b, EPS)
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == rstd.shape == (4, 9)
    torch.testing.assert_close(mean, torch_mean.view(4, 9), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd, torch_rstd.view(4, 9), rtol=1e-5, atol=0)


def test_row_strided_input_is_read_in_place() -> None:
    big = _inputs((6, 200), torch.bfloat16)
    x = big[:, :150]
    w, b = _parameters(150, torch.bfloat16, torch.bfloat16)
    torch.testing.assert_close(
        tigon.ops.layer_norm(x, w, b), tigon.ops.layer_norm(x.contiguous(), w, b), rtol=0, atol=0
    )


# --------------------------------------------------------------------------------- backward


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtypes", CASES)
def test_backward_no_farther_from_float64_than_torch(
    shape: tuple[int, ...], dtypes: tuple, device: str
) -> None:
    x_dtype = dtypes[0]
    x, w, b = _case_inputs(shape, dtypes, device)
    dy = torch.randn(shape).to(device=device, dtype=x_dtype)

    def grads(fn, dtype: torch.dtype | None) -> list[torch.Tensor | None]:
        leaves = [t if t is None else t.detach().clone() for t in (x, w, b)]
        if dtype is not None:
            leaves = [t if t is None else t.to(dtype) for t in leaves]
        for t in leaves:
            if t is not None:
                t.requires_grad_()
        y = fn(*leaves)
        y.backward(dy.to(y.dtype))
        return [None if t is None else t.grad for t in leaves]

    ours = grads(lambda x_, w_, b_: tigon.ops.layer_norm(x_, w_, b_, EPS), None)
    exact = grads(lambda x_, w_, b_: F.layer_norm(x_, shape[-1:], w_, b_, EPS), torch.float64)
    exact = [None if t is None else t.cpu() for t in exact]
    try:
        theirs = grads(lambda x_, w_, b_: F.layer_norm(x_, shape[-1:], w_, b_, EPS), None)
    except RuntimeError as e:
        # torch's CPU backward rejects a float32 bias without a weight for 16-bit x (its CUDA
        # kernels may reject other mixes): measure against float64 rounded once to each
        # gradient's dtype, with a 2x margin.
        assert "expected scalar type" in str(e) or device == "cuda", str(e)
        theirs = None
    rows = x.numel() // shape[-1]
    for i, name in enumerate(("dx", "dw", "db")):
        g, ref = ours[i], exact[i]
        if ref is None:
            assert g is None
            continue
        # The terms each gradient sums: a row's hidden products for dx, the rows for dw, db.
        terms = shape[-1] if name == "dx" else rows
        scale = (dy.double().norm() * (1.0 if w is None else w.double().abs().max())).item()
        scale *= terms**0.5
        if theirs is None:
            err = (g.double().cpu() - ref).norm().item()
            rounding = (ref.to(g.dtype).double() - ref).norm().item()
            assert err <= 2 * rounding + 8 * FLOAT32_EPS * scale, f"{name} {shape}"
            continue
        peer = theirs[i]
        assert g.dtype == peer.dtype and g.shape == peer.shape
        assert_grad_not_worse(g, peer, ref, scale, f"{name} {shape}")


# ---------------------------------------------------------------------------------- operators


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtypes", CASES)
def test_opcheck(dtypes: tuple, device: str) -> None:
    x_dtype = dtypes[0]
    x, w, b = _case_inputs((3, 5, 40), dtypes, device)
    if w is not None:
        w.requires_grad_()
    torch.library.opcheck(OPS.layer_norm_fwd.default, (x.requires_grad_(), w, b, EPS))
    _, mean, rstd = OPS.layer_norm_fwd(x.detach(), w, b, EPS)
    dy = torch.randn(3, 5, 40).to(device=device, dtype=x_dtype)
    torch.library.opcheck(
        OPS.layer_norm_bwd.default,
        (dy, x.detach(), None if w is None else w.detach(), b, mean, rstd),
    )
    torch.library.opcheck(
        OPS.layer_norm_bwd_inplace.default,
        (dy.clone(), x.detach(), None if w is None else w.detach(), b, mean, rstd),
    )


def test_errors_name_the_argument() -> None:
    x = _inputs((2, 8), torch.float32)
    with pytest.raises(TypeError, match="argument 'weight'"):
        tigon.ops.layer_norm(x, torch.ones(8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="argument 'bias'"):
        tigon.ops.layer_norm(x, None, torch.zeros(9))
    with pytest.raises(ValueError, match="argument 'eps'"):
        tigon.ops.layer_norm(x, None, None, -1.0)


class _Block(torch.nn.Module):
    """Linear -> LayerNorm -> Linear -> LayerNorm without bias -> LayerNorm without affine."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(hidden, hidden)
        self.norm1 = tigon.nn.LayerNorm(hidden)
        self.down = torch.nn.Linear(hidden, hidden)
        self.norm2 = tigon.nn.LayerNorm(hidden, bias=False)
        self.norm3 = tigon.nn.LayerNorm(hidden, elementwise_affine=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm3(self.norm2(self.down(self.norm1(self.up(x)))) + x)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device: str) -> None:
    torch._dynamo.reset()
    model = _Block(64).to(device)
    x = torch.randn(4, 9, 64, device=device)
    dy = torch.randn(4, 9, 64, device=device)
    y_eager = model(x)
    y_eager.backward(dy.clone())
    grads_eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y = torch.compile(model, fullgraph=True)(x)
    y.backward(dy.clone())
    torch.testing.assert_close(y, y_eager)
    for p, g in zip(model.parameters(), grads_eager, strict=True):
        torch.testing.assert_close(p.grad, g)


# ------------------------------------------------------------------------------------- CUDA

# Shapes past the small ones above: every CUDA kernel (the register kernels with several rows a
# block, 1, 2 and 4 packs a thread, the streaming ones past 16384 16-bit elements a row).
CUDA_SHAPES = [(4096, 1024), (1024, 4096), (257, 8192), (64, 16384), (33, 32768), (5, 65537)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_cuda_matches_torch_layer_norm_module(shape: tuple[int, int], dtype: torch.dtype) -> None:
    """torch.nn.LayerNorm on CUDA: the forward bit for bit on >= 99% of elements and never more
    than 1 ulp away; the backward no farther from a float64 reference than torch's autograd."""
    hidden = shape[-1]
    reference = torch.nn.LayerNorm(hidden, device="cuda", dtype=dtype)
    with torch.no_grad():
        reference.weight.normal_(1.0, 0.3)
        reference.bias.normal_(0.0, 0.5)
    ours = tigon.nn.LayerNorm(hidden, device="cuda", dtype=dtype)
    ours.load_state_dict(reference.state_dict())
    exact = torch.nn.LayerNorm(hidden, device="cuda", dtype=torch.float64)
    exact.load_state_dict(reference.state_dict())
    x = _inputs(shape, dtype, device="cuda")
    dy = torch.randn(shape, device="cuda").to(dtype)

    def run(module: torch.nn.Module, x_in: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x_in = x_in.detach().clone().requires_grad_()
        y = module(x_in)
        y.backward(dy.to(y.dtype))
        grads = (x_in.grad, module.weight.grad, module.bias.grad)
        module.zero_grad()
        return (y.detach(), *grads)

    y, *ours_grads = run(ours, x)
    y_ref, *theirs = run(reference, x)
    _, *exact_grads = run(exact, x.double())
    exact_grads = [g.cpu() for g in exact_grads]
    # Where y cancels (|y| far below its terms), both are within float32 rounding of those terms
    # (torch's CUDA kernel: Welford statistics, fused multiply-adds), which can be 2 ulps of a
    # tiny y: those few elements are compared at that tolerance, the rest bit for bit or 1 ulp.
    x64 = x.double()
    r = (x64.var(-1, correction=0, keepdim=True) + EPS).rsqrt()
    terms = (x64.abs() * r + x64.mean(-1, keepdim=True).abs() * r) * reference.weight.double().abs()
    terms = terms + reference.bias.double().abs()
    cancelled = (y.double() - y_ref.double()).abs() <= 32 * FLOAT32_EPS * terms
    assert_bitwise_mostly(torch.where(cancelled, y_ref, y), y_ref, max_ulp=1, min_exact=0.99)
    assert (ulp_distance(y.cpu(), y_ref.cpu()) == 0).double().mean() >= 0.99
    rows = shape[0]
    for name, g, peer, ref in zip(("dx", "dw", "db"), ours_grads, theirs, exact_grads, strict=True):
        assert g.dtype == peer.dtype and g.shape == peer.shape
        terms = hidden if name == "dx" else rows
        scale = (dy.double().norm() * reference.weight.double().abs().max()).item() * terms**0.5
        assert_grad_not_worse(g, peer, ref, scale, f"{name} {shape}")


@pytest.mark.gpu
def test_cuda_matches_cpu_backend() -> None:
    """The same inputs on both backends: y identical on >= 99% of elements (the statistics'
    sums have another order), mean and rstd within float32 sum rounding."""
    x, w, b = _case_inputs((64, 3000), (torch.bfloat16, torch.bfloat16, torch.bfloat16))
    y_cpu, mean_cpu, rstd_cpu = OPS.layer_norm_fwd(x, w, b, EPS)
    y, mean, rstd = OPS.layer_norm_fwd(x.cuda(), w.cuda(), b.cuda(), EPS)
    assert_bitwise_mostly(y.cpu(), y_cpu, max_ulp=1, min_exact=0.99)
    torch.testing.assert_close(mean.cpu(), mean_cpu, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.cpu(), rstd_cpu, rtol=1e-5, atol=0)


@pytest.mark.gpu
def test_cuda_graph_replay_matches_eager() -> None:
    hidden = 2048
    x = _inputs((512, hidden), torch.bfloat16, device="cuda").requires_grad_()
    w, b = _parameters(hidden, torch.bfloat16, torch.bfloat16, "cuda")
    w.requires_grad_()
    b.requires_grad_()
    dy = torch.randn(512, hidden, device="cuda").to(torch.bfloat16)

    def step() -> tuple[torch.Tensor, ...]:
        for t in (x, w, b):
            t.grad = None
        y = tigon.ops.layer_norm(x, w, b, EPS)
        y.backward(dy)
        return y.detach(), x.grad, w.grad, b.grad

    eager = [t.clone() for t in step()]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, eager, strict=True):
        assert torch.equal(got, want)


@pytest.mark.gpu
def test_cuda_runs_are_bitwise_reproducible() -> None:
    x = _inputs((3000, 1024), torch.bfloat16, device="cuda").requires_grad_()
    w, b = _parameters(1024, torch.float32, torch.float32, "cuda")
    w.requires_grad_()
    b.requires_grad_()
    dy = torch.randn(3000, 1024, device="cuda").to(torch.bfloat16)
    results = []
    for _ in range(2):
        for t in (x, w, b):
            t.grad = None
        y = tigon.ops.layer_norm(x, w, b, EPS)
        y.backward(dy)
        results.append((y.detach().clone(), x.grad.clone(), w.grad.clone(), b.grad.clone()))
    for a, b_ in zip(*results, strict=True):
        assert torch.equal(a, b_)


# ------------------------------------------------------------------------------------ module


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"bias": False}, {"elementwise_affine": False}, {"eps": 1e-6}],
    ids=["default", "no_bias", "no_affine", "eps"],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_module_is_a_drop_in(kwargs: dict, dtype: torch.dtype) -> None:
    reference = torch.nn.LayerNorm(96, dtype=dtype, **kwargs)
    if reference.weight is not None:
        with torch.no_grad():
            reference.weight.normal_(1.0, 0.3)
            if reference.bias is not None:
                reference.bias.normal_(0.0, 0.5)
    ours = tigon.nn.LayerNorm((96,), dtype=dtype, **kwargs)
    ours.load_state_dict(reference.state_dict())
    assert reference.load_state_dict(ours.state_dict()) is not None
    assert ours.normalized_shape == reference.normalized_shape
    assert ours.eps == reference.eps and repr(ours) == repr(reference)
    x = _inputs((3, 17, 96), dtype).requires_grad_()
    y, expected = ours(x), reference(x)
    if dtype in LOW_PRECISION:
        assert_bitwise_mostly(y, expected, max_ulp=1, min_exact=0.99)
    else:
        torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    y.float().square().sum().backward()
    assert (ours.weight is None) == (reference.weight is None)
    if ours.weight is not None:
        assert ours.weight.grad is not None and ours.weight.grad.dtype == dtype
    if ours.bias is not None:
        assert ours.bias.grad is not None


def test_module_rejects_more_than_the_last_dimension() -> None:
    with pytest.raises(ValueError, match="last dimension only"):
        tigon.nn.LayerNorm((4, 8))
    with pytest.raises(ValueError, match="last dimension is 8"):
        tigon.nn.LayerNorm(8)(torch.randn(2, 9))


def test_functional_drop_in() -> None:
    x = _inputs((5, 33), torch.bfloat16)
    w, b = _parameters(33, torch.bfloat16, torch.bfloat16)
    torch.testing.assert_close(
        tigon.nn.functional.layer_norm(x, (33,), w, b), tigon.ops.layer_norm(x, w, b)
    )
    with pytest.raises(ValueError, match="normalized_shape"):
        tigon.nn.functional.layer_norm(x, (5, 33), w, b)
