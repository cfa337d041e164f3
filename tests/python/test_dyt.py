"""DyT: against float64 and the reference formula ``gamma * tanh(alpha * x) + beta`` (the peer's
test reference, in float32 as its kernel computes) on every device, CUDA against the CPU backend
(CUDA's tanhf vs tigon's tanh_f32: within float32 ulps), opcheck, gradcheck, torch.compile, the
module, and argument errors."""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICES, LOW_PRECISION, assert_bitwise_mostly, assert_compiled_matches_eager

import tigon

OPS = torch.ops.tigon
SHAPES = [(2, 8, 4096), (4, 16, 2048), (1, 1, 1023), (3, 7, 256), (5, 1)]  # the peer's, + hidden 1
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _params(
    hidden: int, dtype: torch.dtype, beta: bool, device: str = "cpu"
) -> list[torch.Tensor | None]:
    alpha = torch.tensor([0.7], dtype=dtype)
    gamma = (1 + 0.3 * torch.randn(hidden)).to(dtype)
    params = [alpha, gamma, (0.3 * torch.randn(hidden)).to(dtype) if beta else None]
    return [None if p is None else p.to(device) for p in params]


def _reference(
    x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None
) -> torch.Tensor:
    """``gamma * tanh(alpha * x) + beta`` in float32, then x's dtype: the peer's kernel."""
    y = gamma.float() * torch.tanh(alpha.float() * x.float())
    return (y if beta is None else y + beta.float()).to(x.dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "no_beta"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_reference(
    shape: tuple[int, ...], dtype: torch.dtype, beta: bool, device: str
) -> None:
    x = (2 * torch.randn(shape)).to(dtype).to(device)
    alpha, gamma, b = _params(shape[-1], dtype, beta, device)
    y = tigon.ops.dyt(x, alpha, gamma, b)
    expected = _reference(x, alpha, gamma, b)
    if dtype in LOW_PRECISION:
        assert_bitwise_mostly(y, expected)  # tanh_f32 vs torch's tanh: a rare 1-ulp flip
    else:
        torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)
    x64 = x.double()
    y64 = gamma.double() * torch.tanh(alpha.double() * x64) + (0 if b is None else b.double())
    torch.testing.assert_close(y.double(), y64, rtol=2 * torch.finfo(dtype).eps, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("param_dtype", [torch.float32, None], ids=["fp32_params", "x_params"])
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "no_beta"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_against_float64(
    dtype: torch.dtype, beta: bool, param_dtype: torch.dtype | None, device: str
) -> None:
    """Gradients no farther from float64 than the float32 reference's autograd (the peer's
    tolerances: (1e-5, 1e-5), alpha (1e-5, 1e-3) in float32)."""
    shape = (4, 16, 512)
    x0 = (2 * torch.randn(shape)).to(dtype).to(device)
    params0 = _params(shape[-1], param_dtype or dtype, beta, device)
    x = x0.clone().requires_grad_()
    params = [None if p is None else p.clone().requires_grad_() for p in params0]
    y = tigon.ops.dyt(x, *params)
    dy = torch.randn(shape).to(dtype).to(device)
    y.backward(dy)

    x64 = x0.double().requires_grad_()
    p64 = [None if p is None else p.double().requires_grad_() for p in params0]
    y64 = p64[1] * torch.tanh(p64[0] * x64) + (0 if p64[2] is None else p64[2])
    y64.backward(dy.double())
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(x.grad.double(), x64.grad, **tol)
    for p, p_ref in zip(params, p64, strict=True):
        if p is None:
            continue
        assert p.grad.dtype == p.dtype and p.grad.shape == p.shape
        rtol = 1e-3 if p.grad.dtype == torch.float32 else 2e-2
        scale = p_ref.grad.abs().max().item()
        torch.testing.assert_close(p.grad.double(), p_ref.grad, rtol=rtol, atol=1e-5 * scale)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_is_deterministic(device: str) -> None:
    x = torch.randn(4096, 256, device=device, requires_grad=True)
    params = [
        p.requires_grad_() for p in _params(256, torch.float32, True, device) if p is not None
    ]
    dy = torch.randn(4096, 256, device=device)
    grads = []
    for _ in range(2):
        for t in (x, *params):
            t.grad = None
        tigon.ops.dyt(x, *params).backward(dy)
        grads.append([t.grad.clone() for t in (x, *params)])
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("beta", [True, False], ids=["beta", "no_beta"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck(dtype: torch.dtype, beta: bool) -> None:
    x = torch.randn(3, 5, 32, dtype=dtype, requires_grad=True)
    params = [None if p is None else p.requires_grad_() for p in _params(32, dtype, beta)]
    torch.library.opcheck(OPS.dyt_fwd.default, (x, *params))
    plain = [None if p is None else p.detach() for p in params]
    torch.library.opcheck(OPS.dyt_bwd.default, (torch.randn_like(x), x.detach(), *plain))


@pytest.mark.parametrize("beta", [True, False], ids=["beta", "no_beta"])
def test_gradcheck(beta: bool) -> None:
    """Float64 gradcheck around the float32 kernel (tigon has no float64 kernels)."""
    x = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    params = [
        None if p is None else p.double().requires_grad_() for p in _params(16, torch.float32, beta)
    ]

    def f(x: torch.Tensor, *ps: torch.Tensor | None) -> torch.Tensor:
        return tigon.ops.dyt(x.float(), *(None if p is None else p.float() for p in ps)).double()

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.slow
def test_compile_fullgraph_matches_eager() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), tigon.nn.DyT(64), torch.nn.Linear(64, 8))
    assert_compiled_matches_eager(model, (torch.randn(4, 9, 64),), torch.randn(4, 9, 8))


def test_module() -> None:
    m = tigon.nn.DyT(32)
    assert [n for n, _ in m.named_parameters()] == ["alpha", "gamma", "beta"]
    assert m.alpha.item() == 0.5 and torch.equal(m.gamma, torch.ones(32))
    assert tigon.nn.DyT(32, beta=False).beta is None
    assert repr(tigon.nn.DyT(8, init_alpha=0.25)) == "DyT(8, init_alpha=0.25, beta=True)"
    x = torch.randn(2, 3, 32)
    torch.testing.assert_close(m(x), _reference(x, m.alpha, m.gamma, m.beta))
    with pytest.raises(ValueError, match="hidden_size"):
        tigon.nn.DyT(0)


@pytest.mark.parametrize("device", DEVICES)
def test_row_strided_input_and_zero_rows(device: str) -> None:
    alpha, gamma, beta = _params(64, torch.float32, True, device)
    x = torch.randn(6, 80, device=device)[:, :64]
    torch.testing.assert_close(
        tigon.ops.dyt(x, alpha, gamma, beta), _reference(x, alpha, gamma, beta)
    )
    x0 = torch.randn(0, 64, device=device, requires_grad=True)
    params = [p.requires_grad_() for p in (alpha, gamma, beta)]
    tigon.ops.dyt(x0, *params).sum().backward()
    assert all(not p.grad.any() for p in params)


def _forward_backward(
    x: torch.Tensor, params: list[torch.Tensor | None], dy: torch.Tensor
) -> list[torch.Tensor]:
    """y, then the gradients of x and of each parameter, for tigon's DyT on x's device."""
    x = x.detach().clone().requires_grad_()
    ps = [None if p is None else p.detach().clone().requires_grad_() for p in params]
    y = tigon.ops.dyt(x, *ps)
    y.backward(dy)
    return [y.detach(), x.grad] + [p.grad for p in ps if p is not None]


@pytest.mark.gpu
@pytest.mark.parametrize("param_dtype", [torch.float32, None], ids=["fp32_params", "x_params"])
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "no_beta"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 8, 4096), (3, 7, 1023), (4096, 64), (2, 3, 80)], ids=str)
def test_cuda_matches_cpu(
    shape: tuple[int, ...], dtype: torch.dtype, beta: bool, param_dtype: torch.dtype | None
) -> None:
    """y and dx: CUDA's tanhf vs the host's tanh_f32 (float32 ulps apart), then one rounding, so
    mostly bit for bit in 16 bits; dalpha, dgamma, dbeta (float32 sums in another fixed order)
    within a few float32 roundings of the terms' size."""
    x = (2 * torch.randn(shape)).to(dtype)
    params = _params(shape[-1], param_dtype or dtype, beta)
    dy = torch.randn(shape).to(dtype)
    cpu = _forward_backward(x, params, dy)
    cuda = _forward_backward(x.cuda(), [None if p is None else p.cuda() for p in params], dy.cuda())
    for got, want in zip(cuda[:2], cpu[:2], strict=True):
        if dtype in LOW_PRECISION:
            assert_bitwise_mostly(got, want)
        else:
            # 3 float32 ulps of t, times up to |alpha dy gamma| ~ 5 (dx near |t| = 1).
            torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-5)
    t = torch.tanh(params[0].double() * x.double())
    g = dy.double()
    u = (1 - t * t) * g * params[1].double()
    scales = [(x.double() * u).abs().sum(), (g * t).abs().flatten(0, -2).sum(0)]
    if beta:
        scales.append(g.abs().flatten(0, -2).sum(0))
    for name, got, want, scale in zip(["dalpha", "dgamma", "dbeta"], cuda[2:], cpu[2:], scales):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        err = (got.cpu().double() - want.double()).abs()
        tol = 2 * torch.finfo(want.dtype).eps * want.double().abs() + 1e-5 * scale
        assert bool((err <= tol).all()), f"{name}: max error {err.max().item():.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "no_beta"])
@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
def test_cuda_parity_with_peer_reference(dtype: torch.dtype, beta: bool) -> None:
    """On CUDA in bf16/fp16, against the peer's reference (float32 math, one rounding) and its
    autograd: the peer's tolerances for its own kernel."""
    shape = (8, 64, 2048)
    x0 = (2 * torch.randn(shape, device="cuda")).to(dtype)
    params0 = _params(shape[-1], dtype, beta, "cuda")
    dy = torch.randn(shape, device="cuda").to(dtype)
    got = _forward_backward(x0, params0, dy)
    assert_bitwise_mostly(got[0], _reference(x0, *params0))
    x = x0.detach().clone().requires_grad_()
    ps = [None if p is None else p.detach().clone().float().requires_grad_() for p in params0]
    scaled = ps[1] * torch.tanh(ps[0] * x.float())
    y = scaled if ps[2] is None else scaled + ps[2]
    y.backward(dy.float())
    torch.testing.assert_close(got[1].float(), x.grad.float(), rtol=2e-2, atol=2e-2)
    for g, p in zip(got[2:], [p for p in ps if p is not None], strict=True):
        scale = p.grad.abs().max().item()
        torch.testing.assert_close(g.float(), p.grad, rtol=2e-2, atol=1e-3 * scale)


@pytest.mark.parametrize(
    ("args", "error", "names"),
    [
        (lambda: (torch.randn(2, 8), torch.ones(2), torch.ones(8), None), ValueError, "alpha"),
        (
            lambda: (torch.randn(2, 8), torch.ones(1, dtype=torch.float16), torch.ones(8), None),
            TypeError,
            "alpha",
        ),
        (lambda: (torch.randn(2, 8), torch.ones(1), torch.ones(4), None), ValueError, "gamma"),
        (
            lambda: (torch.randn(2, 8), torch.ones(1), torch.ones(8), torch.ones(3)),
            ValueError,
            "beta",
        ),
        (lambda: (torch.randn(2, 0), torch.ones(1), torch.ones(0), None), ValueError, "x"),
    ],
    ids=["alpha_numel", "alpha_dtype", "gamma_shape", "beta_shape", "hidden_0"],
)
def test_errors_name_the_argument(args: object, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=rf"tigon::dyt_fwd: argument '{names}'"):
        OPS.dyt_fwd(*args())  # type: ignore[operator]
