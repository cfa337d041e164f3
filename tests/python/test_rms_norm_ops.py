"""RMSNorm operators: registration (opcheck), gradients (gradcheck), torch.compile, layouts,
in-place backward, empty inputs and argument errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from helpers import DEVICES, assert_bitwise_mostly

import tigon

OPS = torch.ops.tigon
MODES = ["llama", "gemma", "none"]
EPS = 1e-6


def _weight(hidden: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    return (1 + 0.5 * torch.randn(hidden)).to(device=device, dtype=dtype)


# ---------------------------------------------------------------------------------- opcheck


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_fwd(
    dtype: torch.dtype, mode: str, affine: bool, in_place: bool, device: str
) -> None:
    x = torch.randn(3, 5, 32, device=device, dtype=dtype, requires_grad=True)
    w = _weight(32, device, dtype).requires_grad_() if affine else None
    offset = 1.0 if affine and mode == "gemma" else 0.0
    torch.library.opcheck(OPS.rms_norm_fwd.default, (x, w, EPS, offset, mode, in_place))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", ["rms_norm_bwd", "rms_norm_bwd_inplace"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_bwd(
    dtype: torch.dtype, mode: str, affine: bool, op_name: str, device: str
) -> None:
    x = torch.randn(4, 48, device=device, dtype=dtype)
    w = _weight(48, device, dtype) if affine else None
    _, rstd = OPS.rms_norm_fwd(x, w, EPS, 0.0, mode)
    dy = torch.randn_like(x)
    op = getattr(OPS, op_name).default
    torch.library.opcheck(op, (dy, x, w, rstd, 0.0, mode))


# -------------------------------------------------------------------------------- gradcheck


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("mode", MODES)
def test_gradcheck(mode: str, affine: bool) -> None:
    """Analytical vs numerical gradients, for x and the weight.

    tigon has no float64 kernels: gradcheck runs in float64 around the float32 kernel (inputs
    rounded to float32, outputs widened back), with tolerances sized for float32 arithmetic.
    """
    x64 = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    w64 = (1 + 0.5 * torch.randn(16, dtype=torch.float64)).requires_grad_() if affine else None
    offset = 1.0 if affine and mode == "gemma" else 0.0

    def f(x: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
        return tigon.ops.rms_norm(
            x.float(), None if w is None else w.float(), EPS, offset, mode
        ).double()

    assert torch.autograd.gradcheck(f, (x64, w64), eps=1e-3, atol=2e-3, rtol=2e-3)


# ---------------------------------------------------------------------------- torch.compile


class _Block(torch.nn.Module):
    """Linear -> Llama norm (in-place backward) -> Linear -> Gemma norm -> plain norm."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(hidden, hidden)
        self.norm1 = tigon.nn.RMSNorm(hidden)
        self.down = torch.nn.Linear(hidden, hidden)
        self.norm2 = tigon.nn.RMSNorm(
            hidden, offset=1.0, casting_mode="gemma", init="zeros", in_place=False
        )
        self.norm3 = tigon.nn.RMSNorm(hidden, casting_mode="none", elementwise_affine=False)
        with torch.no_grad():
            self.norm2.weight.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(self.up(x))
        return self.norm3(self.norm2(self.down(h)) + x)


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

    compiled = torch.compile(model, fullgraph=True)
    y = compiled(x)
    y.backward(dy.clone())
    torch.testing.assert_close(y, y_eager)
    for p, g in zip(model.parameters(), grads_eager, strict=True):
        torch.testing.assert_close(p.grad, g)


# ------------------------------------------------------------------------------- in place


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_in_place_backward_reuses_an_unshared_dy(
    dtype: torch.dtype, affine: bool, device: str
) -> None:
    """dx is written into the incoming gradient when nothing else holds it (here the fresh
    gradient of ``y * 1``), never into the caller's buffer; results are identical."""
    x = torch.randn(6, 40, device=device, dtype=dtype)
    w = _weight(40, device, dtype) if affine else None
    dy = torch.randn(6, 40, device=device, dtype=dtype)

    def run(in_place: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
        xr = x.clone().requires_grad_()
        wr = w.clone().requires_grad_() if w is not None else None
        buffer = dy.clone()
        seen: list[int] = []
        y = tigon.ops.rms_norm(xr, wr, EPS, 0.0, "llama", in_place=in_place)
        y.register_hook(lambda g: seen.append(g.data_ptr()))  # the pointer only: no reference
        (y * 1).backward(buffer)
        reused = seen[0] == xr.grad.data_ptr()
        return buffer, xr.grad, None if wr is None else wr.grad, reused

    buffer, dx, dw, reused = run(True)
    ref_buffer, ref_dx, ref_dw, ref_reused = run(False)
    assert torch.equal(buffer, dy) and torch.equal(ref_buffer, dy), "the caller's dy is kept"
    assert reused and not ref_reused, "in place: x.grad is the incoming gradient's buffer"
    assert torch.equal(dx, ref_dx)
    if affine:
        assert torch.equal(dw, ref_dw)


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_falls_back_when_it_cannot_write_dy(device: str) -> None:
    # bf16 activations with a float32 weight: dy is float32, dx bf16 -> out of place.
    x = torch.randn(4, 16, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = _weight(16, device, torch.float32).requires_grad_()
    dy = torch.randn(4, 16, device=device)
    buffer = dy.clone()
    tigon.ops.rms_norm(x, w, in_place=True).backward(buffer)
    assert torch.equal(buffer, dy) and x.grad.dtype == torch.bfloat16
    # An expanded (non-contiguous) dy, as from y.sum().backward().
    x2 = torch.randn(4, 16, device=device, requires_grad=True)
    tigon.ops.rms_norm(x2, in_place=True).sum().backward()
    x3 = x2.detach().clone().requires_grad_()
    tigon.ops.rms_norm(x3).backward(torch.ones(4, 16, device=device))
    assert torch.equal(x2.grad, x3.grad)


def test_in_place_keeps_dy_when_it_is_part_of_a_graph() -> None:
    """Double backward: dy requires grad, so it must not be overwritten."""
    x = torch.randn(3, 8, requires_grad=True)
    dy = torch.randn(3, 8, requires_grad=True)
    saved = dy.detach().clone()
    (dx,) = torch.autograd.grad(tigon.ops.rms_norm(x, in_place=True), x, dy, create_graph=True)
    assert torch.equal(dy.detach(), saved)
    (dx_ref,) = torch.autograd.grad(tigon.ops.rms_norm(x), x, saved)
    assert torch.equal(dx.detach(), dx_ref)


# -------------------------------------------------------------------------------- layouts


def _copies(fn: Callable[[], object]) -> list[str]:
    """Names of the copy ops `fn()` dispatches (the profiler sees the C++ side's calls too)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    copies = ("aten::copy_", "aten::clone", "aten::contiguous")
    return [e.name for e in prof.events() if e.name in copies]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
def test_row_strided_input_needs_no_copy(mode: str, device: str) -> None:
    hidden = 96
    big = torch.randn(4, 10, hidden + 32, device=device, dtype=torch.bfloat16)
    x = big[..., :hidden]
    assert not x.is_contiguous()
    w = _weight(hidden, device, torch.bfloat16)

    y, rstd = OPS.rms_norm_fwd(x, w, EPS, 0.0, mode)
    y_ref, rstd_ref = OPS.rms_norm_fwd(x.contiguous(), w, EPS, 0.0, mode)
    assert torch.equal(y, y_ref) and torch.equal(rstd, rstd_ref)
    assert y.is_contiguous()
    if device == "cpu":
        assert _copies(lambda: OPS.rms_norm_fwd(x, w, EPS, 0.0, mode)) == []

    dy_big = torch.randn(4, 10, hidden + 8, device=device, dtype=torch.bfloat16)
    dy = dy_big[..., :hidden]
    dx, dw = OPS.rms_norm_bwd(dy, x, w, rstd, 0.0, mode)
    dx_ref, dw_ref = OPS.rms_norm_bwd(dy.contiguous(), x.contiguous(), w, rstd, 0.0, mode)
    assert torch.equal(dx, dx_ref) and torch.equal(dw, dw_ref)
    if device == "cpu":
        assert _copies(lambda: OPS.rms_norm_bwd(dy, x, w, rstd, 0.0, mode)) == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "make_view",
    [
        lambda t: t.transpose(0, 1),  # leading dims that do not collapse
        lambda t: t[..., ::2],  # last dim not unit stride
        lambda t: t[:, :1].expand(t.shape[0], 5, t.shape[2]),  # overlapping rows
    ],
    ids=["transposed", "strided_last_dim", "expanded"],
)
def test_other_layouts_are_copied_and_correct(make_view: object, device: str) -> None:
    x = make_view(torch.randn(6, 5, 64, device=device))  # type: ignore[operator]
    w = _weight(x.shape[-1], device, torch.float32)
    xg, wg = x.detach().clone().requires_grad_(), w.clone().requires_grad_()
    xc, wc = x.contiguous().requires_grad_(), w.clone().requires_grad_()
    dy = torch.randn(x.shape, device=device)
    y = tigon.ops.rms_norm(xg, wg)
    y.backward(dy)
    y_ref = tigon.ops.rms_norm(xc, wc)
    y_ref.backward(dy)
    assert torch.equal(y, y_ref)
    assert torch.equal(xg.grad, xc.grad) and torch.equal(wg.grad, wc.grad)


# ------------------------------------------------------------------------------- QK-norm views

# Qwen3's q_norm / k_norm: RMSNorm over head_dim of q_proj(x).view(B, T, heads, D), before the
# transpose to [B, heads, T, D]. B, T, heads, D = 2, 24, 4, 128.
QK = (2, 24, 4, 128)


def _head_views() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Views of a [B, T, heads, D] tensor q's values, each over its own buffer."""
    b, t, h, d = QK

    def padded_heads(q: torch.Tensor) -> torch.Tensor:  # each head row followed by padding
        big = torch.zeros(b, t, h, d + 32, device=q.device, dtype=q.dtype)
        big[..., :d] = q
        return big[..., :d]

    def fused_qkv(q: torch.Tensor) -> torch.Tensor:  # q's part of a fused QKV projection
        qkv = torch.zeros(b, t, 3 * h * d, device=q.device, dtype=q.dtype)
        qkv[..., : h * d] = q.reshape(b, t, h * d)
        return qkv[..., : h * d].view(b, t, h, d)

    def of_bhtd(q: torch.Tensor) -> torch.Tensor:  # over a [B, heads, T, D] buffer
        return q.transpose(1, 2).contiguous().transpose(1, 2)

    return {
        "BTHD": lambda q: q.clone(),
        "BTHD_padded_heads": padded_heads,
        "BTHD_fused_qkv": fused_qkv,
        "BTHD_of_BHTD": of_bhtd,
        "BHTD": lambda q: q.clone().transpose(1, 2),  # q.transpose(1, 2): [B, heads, T, D]
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("view", list(_head_views()))
def test_qk_norm_head_views(view: str, device: str) -> None:
    """Every view of q's values (shape [B, T, heads, D], or [B, heads, T, D] for q.transpose(1, 2))
    gives the bits of the contiguous q (y, rstd, dx, dw) and of HF's Qwen3RMSNorm on the same view
    (>= 99% bitwise, <= 1 ulp). Views whose rows are one stride apart (the contiguous
    q_proj(x).view(...) HF normalizes, per-head padding) are read in place; the others (rows at
    two or three strides) are copied first: docs/ops/rms_norm.md, "QK-norm"."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    torch.manual_seed(5)
    q = (2 * torch.randn(QK)).to(device=device, dtype=torch.bfloat16)
    x = _head_views()[view](q)
    # as_q: a [B, heads, T, D] result in q's [B, T, heads, D] shape (others as they are).
    as_q = (lambda t: t.transpose(1, 2)) if view == "BHTD" else (lambda t: t)
    assert torch.equal(as_q(x), q)
    w = _weight(QK[-1], device, torch.bfloat16)
    dy_q = torch.randn(QK).to(device=device, dtype=torch.bfloat16)
    dy = as_q(dy_q)  # the same values at x's shape

    y, rstd = OPS.rms_norm_fwd(x, w, EPS, 0.0, "llama")
    y_ref, rstd_ref = OPS.rms_norm_fwd(q, w, EPS, 0.0, "llama")
    assert torch.equal(as_q(y), y_ref)
    assert torch.equal(rstd.transpose(1, 2) if view == "BHTD" else rstd, rstd_ref)
    dx, dw = OPS.rms_norm_bwd(dy, x, w, rstd, 0.0, "llama")
    dx_ref, dw_ref = OPS.rms_norm_bwd(dy_q, q, w, rstd_ref, 0.0, "llama")
    assert torch.equal(as_q(dx), dx_ref)
    # dW sums rows in x's row order: the same bits where that is q's order.
    if view == "BHTD":
        torch.testing.assert_close(dw, dw_ref)
    else:
        assert torch.equal(dw, dw_ref)

    hf = Qwen3RMSNorm(QK[-1], eps=EPS).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        hf.weight.copy_(w)
        assert_bitwise_mostly(y, hf(x))
    if device == "cpu" and view in ("BTHD", "BTHD_padded_heads"):
        assert _copies(lambda: OPS.rms_norm_fwd(x, w, EPS, 0.0, "llama")) == []
        assert _copies(lambda: OPS.rms_norm_bwd(dy, x, w, rstd, 0.0, "llama")) == []


# ---------------------------------------------------------------------------- empty inputs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 16), (2, 0, 16)], ids=["0x16", "2x0x16"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
def test_zero_rows(shape: tuple[int, ...], affine: bool, device: str) -> None:
    x = torch.randn(shape, device=device, requires_grad=True)
    w = _weight(16, device, torch.float32).requires_grad_() if affine else None
    y, rstd = OPS.rms_norm_fwd(x, w, EPS, 0.0, "llama")
    assert y.shape == shape and rstd.shape == shape[:-1]
    tigon.ops.rms_norm(x, w).sum().backward()
    assert x.grad.shape == shape
    if affine:
        assert torch.equal(w.grad, torch.zeros_like(w))
        dy = torch.ones(shape, device=device)
        _, dw = OPS.rms_norm_bwd(dy, x.detach(), w.detach(), rstd, 0.0, "llama")
        assert torch.equal(dw, torch.zeros_like(dw))
        dw = OPS.rms_norm_bwd_inplace(dy, x.detach(), w.detach(), rstd, 0.0, "llama")
        assert torch.equal(dw, torch.zeros_like(dw))


def test_no_weight_returns_empty_weight_grad() -> None:
    x = torch.randn(2, 8)
    _, rstd = OPS.rms_norm_fwd(x, None, EPS, 0.0, "llama")
    dx, dw = OPS.rms_norm_bwd(torch.ones_like(x), x, None, rstd, 0.0, "llama")
    assert dx.shape == x.shape and dw.shape == (0,)


# --------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "error", "names"),
    [
        (lambda: tigon.ops.rms_norm(torch.randn(2, 0)), ValueError, "'x'"),
        (lambda: tigon.ops.rms_norm(torch.randn(())), ValueError, "'x'"),
        (lambda: tigon.ops.rms_norm(torch.randn(2, 8), eps=-1.0), ValueError, "'eps'"),
        (lambda: tigon.ops.rms_norm(torch.randn(2, 8), eps=float("nan")), ValueError, "'eps'"),
        (lambda: tigon.ops.rms_norm(torch.randn(2, 8), torch.ones(7)), ValueError, "'weight'"),
        (lambda: tigon.ops.rms_norm(torch.randn(2, 8), torch.ones(2, 4)), ValueError, "'weight'"),
        (lambda: tigon.ops.rms_norm(torch.ones(2, 8, dtype=torch.int32)), TypeError, "'x'"),
        (lambda: tigon.ops.rms_norm(torch.randn(2, 8, dtype=torch.float64)), TypeError, "'x'"),
        (
            lambda: tigon.ops.rms_norm(torch.randn(2, 8), torch.ones(8, dtype=torch.int64)),
            TypeError,
            "'weight'",
        ),
        (lambda: tigon.ops.rms_norm(torch.randn(2, 8), offset=1.0), ValueError, "'offset'"),
        (
            lambda: tigon.ops.rms_norm(torch.randn(2, 8), casting_mode="fp32"),
            ValueError,
            "casting_mode",
        ),
        (lambda: tigon.ops.rms_norm(torch.randn(2, 8), casting_mode=1), TypeError, "casting_mode"),
        (
            lambda: OPS.rms_norm_fwd(torch.randn(2, 8), None, EPS, 0.0, "Llama"),
            ValueError,
            "casting_mode",
        ),
        (
            lambda: OPS.rms_norm_bwd(
                torch.randn(2, 8, dtype=torch.bfloat16),
                torch.randn(2, 8),
                None,
                torch.ones(2),
                0.0,
                "llama",
            ),
            TypeError,
            "'dy'",
        ),
        (
            lambda: OPS.rms_norm_bwd(
                torch.randn(2, 8), torch.randn(2, 8), None, torch.ones(3), 0.0, "llama"
            ),
            ValueError,
            "'rstd'",
        ),
        (
            lambda: OPS.rms_norm_bwd_inplace(
                torch.randn(2, 8),
                torch.randn(2, 8, dtype=torch.bfloat16),
                torch.ones(8),
                torch.ones(2),
                0.0,
                "llama",
            ),
            TypeError,
            "'dy'",
        ),
        (
            lambda: OPS.rms_norm_bwd_inplace(
                torch.randn(8, 2).t(), torch.randn(2, 8), None, torch.ones(2), 0.0, "llama"
            ),
            ValueError,
            "'dy'",
        ),
    ],
    ids=[
        "hidden0",
        "scalar_x",
        "eps_negative",
        "eps_nan",
        "weight_length",
        "weight_2d",
        "x_int",
        "x_float64",
        "weight_int",
        "offset_without_weight",
        "casting_mode_value",
        "casting_mode_type",
        "op_casting_mode",
        "bwd_dy_dtype",
        "bwd_rstd_shape",
        "inplace_dy_dtype",
        "inplace_dy_layout",
    ],
)
def test_errors_name_the_argument(call: object, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=names):
        call()  # type: ignore[operator]


@pytest.mark.gpu
def test_device_mismatch_names_the_argument() -> None:
    with pytest.raises(ValueError, match="'weight'"):
        tigon.ops.rms_norm(torch.randn(2, 8, device="cuda"), torch.ones(8))
    with pytest.raises(ValueError, match="'weight'"):
        tigon.ops.rms_norm(torch.randn(2, 8), torch.ones(8, device="cuda"))


# ---------------------------------------------------------------------------------- CUDA


@pytest.mark.gpu
def test_cuda_runs_on_the_current_stream() -> None:
    assert tigon.has_cuda_kernels()
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = _weight(1024, "cuda", torch.bfloat16).requires_grad_()
    y_ref = tigon.ops.rms_norm(x, w)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y = tigon.ops.rms_norm(x, w)
        dx, dw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
    torch.cuda.current_stream().wait_stream(stream)
    dx_ref, dw_ref = torch.autograd.grad(y_ref, (x, w), torch.ones_like(y_ref))
    assert torch.equal(y, y_ref) and torch.equal(dx, dx_ref) and torch.equal(dw, dw_ref)


@pytest.mark.gpu
def test_cuda_matches_cpu_backend() -> None:
    for mode in MODES:
        x = torch.randn(33, 4097, dtype=torch.bfloat16)
        w = _weight(4097, "cpu", torch.bfloat16)
        y_cpu, rstd_cpu = OPS.rms_norm_fwd(x, w, EPS, 0.0, mode)
        y, rstd = OPS.rms_norm_fwd(x.cuda(), w.cuda(), EPS, 0.0, mode)
        # Same formulas; the float32 sums of 4097 squares run in another order on each backend,
        # which moves rstd by a few ulps (4 were seen: 2.4e-7 relative), rarely y by one.
        assert_bitwise_mostly(y.cpu(), y_cpu, max_ulp=2)
        torch.testing.assert_close(rstd.cpu(), rstd_cpu, rtol=2**-19, atol=0)
