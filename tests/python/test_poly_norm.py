"""PolyNorm: against float64 (the spec's powers rounded to x's dtype, the rest exact) and against
the peer's test reference (naive PyTorch PolyCom in x's dtype, with the peer's tolerances) on
every device, CUDA against the CPU backend (the same formulas, row sums in another fixed order),
opcheck, gradcheck, torch.compile, the module, and argument errors."""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICES, LOW_PRECISION, assert_compiled_matches_eager

import tigon

OPS = torch.ops.tigon
SHAPES = [(2, 128, 512), (8, 64, 1024), (5, 123, 123), (5, 1)]  # the peer's, + hidden 1
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
EPS = 1e-6
# The peer's forward tolerances against its reference: fp32 (3e-4, 1e-6), bf16 (6e-1, 5e-2).
PEER_TOL = {
    torch.float32: {"atol": 3e-4, "rtol": 1e-6},
    torch.bfloat16: {"atol": 6e-1, "rtol": 5e-2},
    torch.float16: {"atol": 6e-1, "rtol": 5e-2},
}


def _params(dtype: torch.dtype, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.tensor([0.4, -0.3, 0.9], dtype=dtype, device=device)
    return weight, torch.tensor(0.25, dtype=dtype, device=device)


def _peer_reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = EPS
) -> torch.Tensor:
    """The peer's test reference (naive PolyCom), every operation in x's dtype."""

    def norm(u: torch.Tensor) -> torch.Tensor:
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)

    w, b = weight.to(x.dtype), bias.to(x.dtype)
    return w[0] * norm(x**3) + w[1] * norm(x**2) + w[2] * norm(x) + b


def _float64(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = EPS
) -> torch.Tensor:
    """The spec in float64 after its one rounding step before the norms: the powers in x's dtype.

    Differentiable in x (a float64 leaf passed as ``x``): the rounding passes the gradient through.
    """
    dtype = x.dtype if x.dtype != torch.float64 else torch.float32
    return _float64_of(x.double(), weight.double(), bias.double(), dtype, eps)


def _float64_of(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, eps: float
) -> torch.Tensor:
    def rounded(u: torch.Tensor) -> torch.Tensor:
        # The value rounded as the kernel rounds (float32 first: exact for 16-bit powers), the
        # gradient of u.
        return u + (u.detach().float().to(dtype).double() - u.detach())

    def norm(u: torch.Tensor) -> torch.Tensor:
        return u / torch.sqrt(u.pow(2).mean(-1, keepdim=True) + eps)

    return w[0] * norm(rounded(x**3)) + w[1] * norm(rounded(x * x)) + w[2] * norm(x) + b


def _scale(x: torch.Tensor) -> float:
    """Size of the largest normalized term: the floor of the float32 error of y."""
    x = x.double()
    terms = [u / torch.sqrt(u.pow(2).mean(-1, keepdim=True) + EPS) for u in (x, x * x, x**3)]
    return max(1.0, max(t.abs().max().item() for t in terms))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_references(
    shape: tuple[int, ...], dtype: torch.dtype, device: str
) -> None:
    x = torch.randn(shape).to(dtype).to(device)
    weight, bias = _params(dtype, device)
    y = tigon.ops.poly_norm(x, weight, bias)
    assert y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y, _peer_reference(x, weight, bias), **PEER_TOL[dtype])
    y64 = _float64(x, weight, bias)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(y.double(), y64, rtol=eps, atol=2e-6 * _scale(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("param_dtype", [torch.float32, None], ids=["fp32_params", "x_params"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_against_float64(
    dtype: torch.dtype, param_dtype: torch.dtype | None, device: str
) -> None:
    shape = (4, 16, 512)
    x0 = torch.randn(shape).to(dtype).to(device)
    w0, b0 = _params(param_dtype or dtype, device)
    x, w, b = (t.clone().requires_grad_() for t in (x0, w0, b0))
    dy = torch.randn(shape).to(dtype).to(device)
    tigon.ops.poly_norm(x, w, b).backward(dy)

    x64, w64, b64 = (t.double().requires_grad_() for t in (x0, w0, b0))
    _float64_of(x64, w64, b64, dtype, EPS).backward(dy.double())
    scale = x64.grad.abs().max().item()
    if dtype == torch.float32:
        tol = {"rtol": 1e-5, "atol": 1e-5 * scale}
    else:
        tol = {"rtol": 2 * torch.finfo(dtype).eps, "atol": 1e-5 * scale}
    torch.testing.assert_close(x.grad.double(), x64.grad, **tol)
    for p, p_ref in ((w, w64), (b, b64)):
        assert p.grad.dtype == p.dtype and p.grad.shape == p.shape
        rtol = 1e-5 if p.grad.dtype == torch.float32 else 2 * torch.finfo(p.dtype).eps
        torch.testing.assert_close(
            p.grad.double(), p_ref.grad, rtol=rtol, atol=1e-5 * p_ref.grad.abs().max().item()
        )


def test_backward_matches_peer_reference_float32() -> None:
    """The peer's functional tolerances (1e-4, 1e-6) on its reference's autograd, float32."""
    x = torch.randn(8, 64, 1024, requires_grad=True)
    w, b = (p.requires_grad_() for p in _params(torch.float32))
    dy = torch.randn_like(x)
    tigon.ops.poly_norm(x, w, b).backward(dy)
    grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    _peer_reference(x, w, b).backward(dy)
    for g, t in zip(grads, (x, w, b), strict=True):
        torch.testing.assert_close(
            g, t.grad, atol=1e-4 * max(1.0, t.grad.abs().max().item()), rtol=1e-4
        )


@pytest.mark.parametrize("device", DEVICES)
def test_backward_is_deterministic(device: str) -> None:
    x = torch.randn(4096, 256, device=device, requires_grad=True)
    params = [p.requires_grad_() for p in _params(torch.float32, device)]
    dy = torch.randn(4096, 256, device=device)
    grads = []
    for _ in range(2):
        for t in (x, *params):
            t.grad = None
        tigon.ops.poly_norm(x, *params).backward(dy)
        grads.append([t.grad.clone() for t in (x, *params)])
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck(dtype: torch.dtype) -> None:
    x = torch.randn(3, 5, 32, dtype=dtype, requires_grad=True)
    params = [p.requires_grad_() for p in _params(dtype)]
    torch.library.opcheck(OPS.poly_norm_fwd.default, (x, *params, EPS))
    plain = [p.detach() for p in params]
    torch.library.opcheck(OPS.poly_norm_bwd.default, (torch.randn_like(x), x.detach(), *plain, EPS))


def test_gradcheck() -> None:
    """Float64 gradcheck around the float32 kernel (tigon has no float64 kernels)."""
    x = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    params = [p.double().requires_grad_() for p in _params(torch.float32)]

    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return tigon.ops.poly_norm(x.float(), w.float(), b.float(), 1e-3).double()

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-3, atol=5e-3, rtol=5e-3)


@pytest.mark.slow
def test_compile_fullgraph_matches_eager() -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 64), tigon.nn.PolyNorm(), torch.nn.Linear(64, 8)
    )
    assert_compiled_matches_eager(model, (torch.randn(4, 9, 64),), torch.randn(4, 9, 8))


def test_module() -> None:
    m = tigon.nn.PolyNorm()
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    assert torch.equal(m.weight, torch.full((3,), 1.0 / 3.0)) and m.bias.item() == 1.0
    assert m.bias.shape == () and repr(tigon.nn.PolyNorm(eps=1e-5)) == "PolyNorm(eps=1e-05)"
    x = torch.randn(2, 3, 32)
    torch.testing.assert_close(
        m(x), _peer_reference(x, m.weight, m.bias), **PEER_TOL[torch.float32]
    )
    with pytest.raises(ValueError, match="eps"):
        tigon.nn.PolyNorm(eps=-1.0)


@pytest.mark.parametrize("device", DEVICES)
def test_row_strided_input_zero_row_and_zero_rows(device: str) -> None:
    weight, bias = _params(torch.float32, device)
    x = torch.randn(6, 80, device=device)[:, :64]
    torch.testing.assert_close(
        tigon.ops.poly_norm(x, weight, bias), _float64(x, weight, bias).float()
    )
    assert torch.equal(
        tigon.ops.poly_norm(torch.zeros(2, 8, device=device), weight, bias),
        torch.full((2, 8), 0.25, device=device),
    )
    x0 = torch.randn(0, 64, device=device, requires_grad=True)
    params = [p.requires_grad_() for p in (weight, bias)]
    tigon.ops.poly_norm(x0, *params).sum().backward()
    assert all(not p.grad.any() for p in params)


def _forward_backward(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, dy: torch.Tensor
) -> list[torch.Tensor]:
    """y, dx, dweight, dbias of tigon's PolyNorm on x's device."""
    x, w, b = (t.detach().clone().requires_grad_() for t in (x, weight, bias))
    y = tigon.ops.poly_norm(x, w, b)
    y.backward(dy)
    return [y.detach(), x.grad, w.grad, b.grad]


@pytest.mark.gpu
@pytest.mark.parametrize("param_dtype", [torch.float32, None], ids=["fp32_params", "x_params"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 8, 4096), (3, 7, 1023), (2, 16384), (2, 3, 80)], ids=str)
def test_cuda_matches_cpu(
    shape: tuple[int, ...], dtype: torch.dtype, param_dtype: torch.dtype | None
) -> None:
    """The same formulas, only the float32 row sums' order differs: y and dx within a rounding of
    x's dtype plus float32 error of the terms (mostly bit for bit in 16 bits); dweight and dbias
    within a few float32 roundings."""
    x = torch.randn(shape).to(dtype)
    w, b = _params(param_dtype or dtype)
    dy = torch.randn(shape).to(dtype)
    cpu = _forward_backward(x, w, b, dy)
    cuda = [t.cpu() for t in _forward_backward(x.cuda(), w.cuda(), b.cuda(), dy.cuda())]
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(cuda[0], cpu[0], rtol=eps, atol=1e-5 * _scale(x))
    if dtype in LOW_PRECISION:
        exact = (cuda[0] == cpu[0]).double().mean().item()
        assert exact >= 0.9, f"y bitwise equal to the CPU's on only {exact:.2%}"
    dx_scale = max(1.0, cpu[1].abs().max().item())
    torch.testing.assert_close(cuda[1], cpu[1], rtol=eps, atol=1e-5 * dx_scale)
    for name, got, want in zip(["dweight", "dbias"], cuda[2:], cpu[2:], strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        rtol = 1e-5 if want.dtype == torch.float32 else 2 * torch.finfo(want.dtype).eps
        torch.testing.assert_close(
            got, want, rtol=rtol, atol=1e-5 * max(1.0, want.abs().max().item()), msg=name
        )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
def test_cuda_parity_with_peer_reference(dtype: torch.dtype) -> None:
    """On CUDA in bf16/fp16, against the peer's reference (every operation in x's dtype) with the
    peer's forward tolerances, and its float32 autograd for the gradients."""
    shape = (8, 64, 2048)
    x0 = torch.randn(shape, device="cuda").to(dtype)
    w0, b0 = _params(dtype, "cuda")
    dy = torch.randn(shape, device="cuda").to(dtype)
    got = _forward_backward(x0, w0, b0, dy)
    torch.testing.assert_close(got[0], _peer_reference(x0, w0, b0), **PEER_TOL[dtype])
    x, w, b = (t.detach().float().requires_grad_() for t in (x0, w0, b0))
    _peer_reference(x, w, b).backward(dy.float())
    for g, t in zip(got[1:], (x, w, b), strict=True):
        scale = max(1.0, t.grad.abs().max().item())
        torch.testing.assert_close(g.float(), t.grad, rtol=2e-2, atol=2e-2 * scale)


@pytest.mark.parametrize(
    ("args", "error", "names"),
    [
        (lambda: (torch.randn(2, 8), torch.ones(4), torch.ones(()), EPS), ValueError, "weight"),
        (
            lambda: (torch.randn(2, 8), torch.ones(3, dtype=torch.float16), torch.ones(()), EPS),
            TypeError,
            "weight",
        ),
        (lambda: (torch.randn(2, 8), torch.ones(3), torch.ones(2), EPS), ValueError, "bias"),
        (lambda: (torch.randn(2, 8), torch.ones(3), torch.ones(()), -1.0), ValueError, "eps"),
        (lambda: (torch.randn(2, 0), torch.ones(3), torch.ones(()), EPS), ValueError, "x"),
    ],
    ids=["weight_shape", "weight_dtype", "bias_numel", "eps", "hidden_0"],
)
def test_errors_name_the_argument(args: object, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=rf"tigon::poly_norm_fwd: argument '{names}'"):
        OPS.poly_norm_fwd(*args())  # type: ignore[operator]
