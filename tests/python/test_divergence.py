"""Distillation losses kl_div, jsd, tvd on every device: parity with torch.nn.functional.kl_div
(float64 and float32) and with float64 references of the peer's JSD and TVD, gradients, CUDA vs
the CPU backend (Llama 3's vocabulary included), the operators (opcheck, gradcheck in float32: the
core has no float64, torch.compile(fullgraph=True)), the modules and bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, ulp_distance

import tigon

OPS = torch.ops.tigon
REDUCTIONS = ("batchmean", "mean", "sum", "none")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# Loss and gradient tolerances by dtype (the peer's, for 16-bit: one rounding of the gradient).
TOL = {
    torch.float64: dict(atol=1e-12, rtol=1e-10),
    torch.float32: dict(atol=1e-7, rtol=1e-5),
    torch.bfloat16: dict(atol=1e-7, rtol=1e-2),
    torch.float16: dict(atol=1e-6, rtol=2e-3),
}


def _log_probs(shape: tuple[int, ...], dtype: torch.dtype, device="cpu") -> torch.Tensor:
    return torch.log_softmax(torch.randn(shape, dtype=torch.float64) * 2, -1).to(device, dtype)


def _probs(shape: tuple[int, ...], dtype: torch.dtype, device="cpu") -> torch.Tensor:
    return torch.softmax(torch.randn(shape, dtype=torch.float64) * 2, -1).to(device, dtype)


def _labels(rows: int, device="cpu") -> torch.Tensor:
    labels = torch.randint(0, 10, (rows,))
    labels[::3] = -100
    return labels.to(device)


def _reduce(loss: torch.Tensor, reduction: str, denominator: float) -> torch.Tensor:
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / denominator if denominator else total * 0


# ------------------------------------------------------------------------------ references


def jsd_reference(log_q, log_p, labels=None, beta=0.5, ignore_index=-100):
    """The peer's generalized JSD in float64 (its test reference, with beta 0 and 1 as the
    forward and reverse KL)."""
    x, y = log_q.double(), log_p.double()
    q, p = x.exp(), y.exp()
    if beta == 0.0:
        per = p * (y - x)
    elif beta == 1.0:
        per = q * (x - y)
    else:
        m = beta * p + (1 - beta) * q
        per = beta * p * (y - m.log()) + (1 - beta) * q * (x - m.log())
    rows = per.reshape(-1, per.shape[-1]).sum(-1)
    if labels is not None:
        keep = labels.reshape(-1) != ignore_index
        rows = rows[keep]
        n = int(keep.sum())
    else:
        n = rows.numel()
    return rows.sum() / n if n else rows.sum() * 0


def tvd_reference(p, q, labels=None, reduction="batchmean", ignore_index=-100):
    per = 0.5 * (p.double() - q.double()).abs()
    flat = per.reshape(-1, per.shape[-1])
    n = flat.shape[0]
    if labels is not None:
        keep = labels.reshape(-1) != ignore_index
        flat = flat * keep[:, None]
        n = int(keep.sum())
    if reduction == "none":
        return flat.reshape(per.shape)
    denominator = {"batchmean": n, "mean": n * per.shape[-1], "sum": 1}[reduction]
    return _reduce(flat, reduction, denominator)


# ------------------------------------------------------------------------------------ kl_div


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("log_target", [False, True], ids=["prob", "logtarget"])
@pytest.mark.parametrize("dtype", [torch.float32], ids=["fp32"])
@pytest.mark.parametrize("device", DEVICES)
def test_kl_div_matches_torch(reduction: str, log_target: bool, dtype, device) -> None:
    """float32 vs torch's float32 (on the same device), and vs torch's float64 on the same
    values."""
    shape = (3, 5, 67)
    x = _log_probs(shape, dtype, device)
    t = _log_probs(shape, dtype, device) if log_target else _probs(shape, dtype, device)
    if not log_target:
        t[0, 0, :4] = 0  # xlogy(0, 0) = 0
    upstream = (
        torch.randn(shape, dtype=dtype) if reduction == "none" else torch.tensor(1.7, dtype=dtype)
    ).to(device)
    results = []
    for fn in (F.kl_div, tigon.nn.functional.kl_div):
        xi = x.clone().requires_grad_()
        loss = fn(xi, t, reduction=reduction, log_target=log_target)
        (loss * upstream).sum().backward()
        results.append((loss, xi.grad))
    x64 = x.double().requires_grad_()
    loss64 = F.kl_div(x64, t.double(), reduction=reduction, log_target=log_target)
    (loss64 * upstream.double()).sum().backward()
    (ref, ref_grad), (got, grad) = results
    assert got.dtype == ref.dtype and got.shape == ref.shape
    tol = dict(atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got, ref, **tol)
    torch.testing.assert_close(grad, ref_grad, **tol)
    torch.testing.assert_close(got.double(), loss64.detach(), **tol)
    torch.testing.assert_close(grad.double(), x64.grad, **tol)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("device", DEVICES)
def test_kl_div_16_bit_is_the_float64_value_rounded(reduction: str, dtype, device) -> None:
    x, t = _log_probs((4, 300), dtype, device), _probs((4, 300), dtype, device)
    ref = F.kl_div(x.double(), t.double(), reduction=reduction)
    got = tigon.ops.kl_div(x, t, reduction=reduction)
    expected_dtype = dtype if reduction == "none" else torch.float32
    assert got.dtype == expected_dtype
    torch.testing.assert_close(got.double(), ref, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_kl_div_batchmean_divides_by_the_first_dimension(device) -> None:
    x, t = _log_probs((2, 3, 10), torch.float32, device), _probs((2, 3, 10), torch.float32, device)
    got = tigon.ops.kl_div(x, t, reduction="batchmean")
    ref = (t.double() * (t.double().log() - x.double())).sum() / 2
    torch.testing.assert_close(got.double(), ref, atol=1e-7, rtol=1e-6)


def test_kl_div_module_is_a_drop_in() -> None:
    x, t = _log_probs((6, 40), torch.float32), _log_probs((6, 40), torch.float32)
    ours = tigon.nn.KLDivLoss(reduction="batchmean", log_target=True)
    theirs = torch.nn.KLDivLoss(reduction="batchmean", log_target=True)
    assert isinstance(ours, torch.nn.KLDivLoss)
    torch.testing.assert_close(ours(x, t), theirs(x, t))
    legacy = tigon.nn.KLDivLoss(size_average=False)
    assert legacy.reduction == "sum"
    torch.testing.assert_close(legacy(x, t.exp()), F.kl_div(x, t.exp(), reduction="sum"))


@pytest.mark.parametrize("device", DEVICES)
def test_kl_div_promotes_like_torch(device) -> None:
    x, t = _log_probs((3, 20), torch.bfloat16, device), _probs((3, 20), torch.float32, device)
    got = tigon.nn.functional.kl_div(x, t, reduction="sum")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, F.kl_div(x, t, reduction="sum"))


# --------------------------------------------------------------------------------------- jsd


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("with_labels", [False, True], ids=["all", "ignored"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("device", DEVICES)
def test_jsd_matches_the_float64_reference(beta: float, with_labels: bool, dtype, device) -> None:
    rows, vocab = 12, 301
    log_q = _log_probs((rows, vocab), dtype, device)
    log_p = _log_probs((rows, vocab), dtype, device)
    labels = _labels(rows, device) if with_labels else None
    x = log_q.double().requires_grad_()
    ref = jsd_reference(x, log_p, labels, beta)
    ref.backward(torch.tensor(2.0, dtype=torch.float64, device=device))
    xi = log_q.clone().requires_grad_()
    loss = tigon.ops.jsd(xi, log_p, labels, beta=beta)
    assert loss.dtype == torch.float32
    (loss * 2).backward()
    torch.testing.assert_close(loss.double(), ref.detach(), **TOL[dtype])
    torch.testing.assert_close(xi.grad.double(), x.grad, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_jsd_all_rows_ignored_is_zero(device) -> None:
    log_q = _log_probs((4, 16), torch.float32, device).requires_grad_()
    labels = torch.full((4,), -100, device=device)
    loss = tigon.ops.jsd(log_q, _log_probs((4, 16), torch.float32, device), labels)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(log_q.grad, torch.zeros_like(log_q))


def test_jsd_module_has_the_peer_signature() -> None:
    log_q, log_p = _log_probs((5, 33), torch.bfloat16), _log_probs((5, 33), torch.bfloat16)
    labels = _labels(5)
    module = tigon.nn.JSD(beta=0.3, ignore_index=-100)
    loss = module(log_q, log_p, shift_labels=labels)
    assert loss.dtype == torch.bfloat16
    ref = jsd_reference(log_q, log_p, labels, 0.3)
    torch.testing.assert_close(loss.double(), ref, **TOL[torch.bfloat16])


# --------------------------------------------------------------------------------------- tvd


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("with_labels", [False, True], ids=["all", "ignored"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("device", DEVICES)
def test_tvd_matches_the_float64_reference(
    reduction: str, with_labels: bool, dtype, device
) -> None:
    rows, vocab = 9, 130
    p, q = _probs((rows, vocab), dtype, device), _probs((rows, vocab), dtype, device)
    labels = _labels(rows, device) if with_labels else None
    x = p.double().requires_grad_()
    ref = tvd_reference(x, q, labels, reduction)
    upstream = torch.randn(ref.shape, dtype=torch.float64).to(device)
    (ref * upstream).sum().backward()
    pi = p.clone().requires_grad_()
    loss = tigon.nn.TVDLoss(reduction=reduction)(pi, q, labels)
    assert loss.dtype == torch.float32
    (loss * upstream.float()).sum().backward()
    torch.testing.assert_close(loss.double(), ref.detach(), **TOL[dtype])
    torch.testing.assert_close(pi.grad.double(), x.grad, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_tvd_equal_elements_take_minus_half(device) -> None:
    p = torch.full((1, 4), 0.25, device=device, requires_grad=True)
    tigon.ops.tvd(p, p.detach().clone(), reduction="sum").backward()
    assert torch.equal(p.grad, torch.full((1, 4), -0.5, device=device))


# --------------------------------------------------------------------------------- operators


def _op_cases():
    x, t = _log_probs((4, 24), torch.float32), _log_probs((4, 24), torch.float32)
    p, q = _probs((4, 24), torch.float32), _probs((4, 24), torch.float32)
    labels = torch.tensor([1, -100, 3, 4])
    yield OPS.kl_div_fwd.default, (x, t.exp(), "batchmean", False, False)
    yield OPS.kl_div_fwd.default, (x, t, "none", True, False)
    yield OPS.jsd_fwd.default, (x, t, labels, 0.4, -100, True)
    yield OPS.jsd_fwd.default, (x, t, None, 0.0, -100, False)
    yield OPS.tvd_fwd.default, (p, q, labels, "mean", -100, True)
    yield OPS.tvd_fwd.default, (p, q, None, "none", -100, False)


@pytest.mark.parametrize("case", list(range(6)))
def test_opcheck_forward(case: int) -> None:
    op, args = list(_op_cases())[case]
    args = (args[0].clone().requires_grad_(), *args[1:])
    torch.library.opcheck(op, args)


def test_opcheck_backward() -> None:
    x, t = _log_probs((3, 16), torch.float32), _log_probs((3, 16), torch.float32)
    labels = torch.tensor([0, -100, 2])
    g = torch.tensor(1.5)
    torch.library.opcheck(OPS.kl_div_bwd.default, (g, x, t, "sum", True))
    torch.library.opcheck(OPS.kl_div_bwd.default, (torch.randn(3, 16), x, t, "none", True))
    torch.library.opcheck(OPS.jsd_bwd.default, (g, x, t, labels, 0.5, -100))
    torch.library.opcheck(OPS.tvd_bwd.default, (g, x.exp(), t.exp(), labels, "batchmean", -100))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradcheck(reduction: str) -> None:
    """The core takes float32/float16/bfloat16 (no float64): gradcheck in float32 with
    finite-difference tolerances for float32."""
    tol = dict(eps=1e-3, atol=2e-3, rtol=2e-2)
    x = _log_probs((3, 7), torch.float32).requires_grad_()
    t = _log_probs((3, 7), torch.float32)
    labels = torch.tensor([0, -100, 2])
    assert torch.autograd.gradcheck(
        lambda a: tigon.ops.kl_div(a, t, reduction=reduction, log_target=True), (x,), **tol
    )
    # jsd and tvd through the recompute path (compute_grad=False: jsd_bwd, tvd_bwd): the fused
    # gradient is consumed by its one backward, and gradcheck runs several through one graph.
    assert torch.autograd.gradcheck(
        lambda a: OPS.jsd_fwd(a, t, labels, 0.3, -100, False)[0], (x,), **tol
    )
    # TVD's gradient is piecewise constant: checked away from the kinks (|p - q| >> eps).
    p = torch.tensor([[0.1, 0.5, 0.4], [0.7, 0.1, 0.2]], requires_grad=True)
    q = torch.tensor([[0.3, 0.3, 0.35], [0.2, 0.5, 0.3]])
    assert torch.autograd.gradcheck(
        lambda a: OPS.tvd_fwd(a, q, None, reduction, -100, False)[0], (p,), **tol
    )


class _Student(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(16, 40)

    def forward(self, h, teacher_log_p, teacher_p, labels):
        log_q = torch.log_softmax(self.head(h), -1)
        return (
            tigon.ops.jsd(log_q, teacher_log_p, labels, beta=0.2)
            + tigon.nn.functional.kl_div(log_q, teacher_p, reduction="batchmean")
            + tigon.ops.tvd(log_q.exp(), teacher_p, labels)
        )


@pytest.mark.slow
def test_compile_fullgraph_matches_eager() -> None:
    torch._dynamo.reset()
    model = _Student()
    h = torch.randn(6, 16)
    log_p = _log_probs((6, 40), torch.float32)
    labels = torch.tensor([1, -100, 3, 4, -100, 5])
    loss_eager = model(h, log_p, log_p.exp(), labels)
    loss_eager.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    loss = torch.compile(model, fullgraph=True)(h, log_p, log_p.exp(), labels)
    loss.backward()
    torch.testing.assert_close(loss, loss_eager)
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g)


def test_retain_graph_second_backward_is_refused_for_fused_gradients() -> None:
    x = _log_probs((2, 8), torch.float32).requires_grad_()
    loss = tigon.ops.jsd(x, _log_probs((2, 8), torch.float32))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="already used by a backward"):
        loss.backward()


# ------------------------------------------------------------------------------------ errors


def test_errors_name_the_argument() -> None:
    x = _log_probs((2, 8), torch.float32)
    with pytest.raises(ValueError, match="argument 'reduction'"):
        tigon.ops.kl_div(x, x, reduction="avg")
    with pytest.raises(ValueError, match="argument 'reduction'"):
        OPS.tvd_fwd(x, x, None, "avg", -100, False)
    with pytest.raises(TypeError, match="argument 'target'"):
        tigon.ops.jsd(x, x.bfloat16())
    with pytest.raises(ValueError, match="argument 'target'"):
        tigon.ops.tvd(x, x[:, :7])
    with pytest.raises(ValueError, match="argument 'beta'"):
        tigon.ops.jsd(x, x, beta=1.5)
    with pytest.raises(ValueError, match="argument 'labels'"):
        tigon.ops.jsd(x, x, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="argument 'target'.*does not require grad"):
        tigon.ops.jsd(x.clone().requires_grad_(), x.clone().requires_grad_())
    with pytest.raises(ValueError, match="argument 'beta'"):
        tigon.nn.JSD(beta=-0.1)


# ------------------------------------------------------------------------------- CUDA vs CPU


def _run(op: str, x, t, labels, upstream, **kwargs):
    """Loss and gradient of tigon.ops.<op> for `upstream` (one op, one device)."""
    xi = x.clone().requires_grad_()
    fn = getattr(tigon.ops, op)
    loss = fn(xi, t, **kwargs) if op == "kl_div" else fn(xi, t, labels, **kwargs)
    (loss * upstream).sum().backward()
    return loss.detach(), xi.grad


CUDA_CASES = [
    ("kl_div", dict(reduction="batchmean")),
    ("kl_div", dict(reduction="none", log_target=True)),
    ("kl_div", dict(reduction="mean")),
    ("jsd", dict(beta=0.0)),
    ("jsd", dict(beta=0.5)),
    ("jsd", dict(beta=1.0)),
    ("tvd", dict(reduction="sum")),
    ("tvd", dict(reduction="none")),
]


def _magnitude(op: str, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Per element, what the float32 rounding error of its loss and d/dx is relative to."""
    x, t = x.double(), t.double()
    if op == "tvd":
        return 0.5 * (x.abs() + t.abs())
    if op == "kl_div" and t.min() >= 0:  # probabilities (no log_target)
        return t * (1 + torch.where(t > 0, t.log(), 0).abs() + x.abs())
    return (x.exp() + t.exp()) * (2 + 2 * x.abs() + 2 * t.abs())


def _assert_within(what: str, got, want, mag, dtype) -> None:
    """|got - want| <= 2e-6 * mag (a few float32 ulps of the terms), or one ulp of a 16-bit
    dtype (the float32 values may round to neighbours)."""
    got, want = got.cpu(), want.cpu()
    bad = (got.double() - want.double()).abs() > 2e-6 * mag + 1e-30
    if dtype != torch.float32 and got.dtype == dtype:
        bad &= ulp_distance(got, want) > 1
    if bad.any():
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} elements off, first at {i}: CUDA {got[i].item()!r} vs "
            f"CPU {want[i].item()!r} (bound {2e-6 * mag[i].item():.3g})"
        )


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [128256, 32001, 37])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize(
    "case",
    range(len(CUDA_CASES)),
    ids=[o + "".join(f"-{k}={v}" for k, v in kw.items()) for o, kw in CUDA_CASES],
)
def test_cuda_matches_the_cpu_backend(case: int, dtype, vocab: int) -> None:
    """Same inputs on both backends (some rows ignored for jsd and tvd): the gradient of tvd and
    of plain kl_div bitwise (no exp or log), the rest within a few float32 ulps of their terms
    (the device's expf / logf are not glibc's), or one ulp of a 16-bit dtype."""
    op, kwargs = CUDA_CASES[case]
    rows = 6
    if op == "tvd":
        x, t = _probs((rows, vocab), dtype), _probs((rows, vocab), dtype)
    else:
        x = _log_probs((rows, vocab), dtype)
        plain_kl = op == "kl_div" and not kwargs.get("log_target", False)
        t = _probs((rows, vocab), dtype) if plain_kl else _log_probs((rows, vocab), dtype)
    labels = _labels(rows) if op != "kl_div" else None
    reduction = kwargs.get("reduction", "batchmean")
    upstream = torch.tensor(-1.5) if reduction != "none" else torch.randn(rows, vocab).to(dtype)
    cpu = _run(op, x, t, labels, upstream, **kwargs)
    cuda_labels = labels.cuda() if labels is not None else None
    gpu = _run(op, x.cuda(), t.cuda(), cuda_labels, upstream.cuda(), **kwargs)

    mag = _magnitude(op, x, t)
    counted = rows if labels is None else int((labels != -100).sum())
    if labels is not None:
        mag[labels == -100] = 0
    denominator = {"none": 1, "sum": 1, "mean": counted * vocab, "batchmean": counted}[reduction]
    scale = upstream.double().abs() / denominator if denominator else torch.tensor(0.0)
    if reduction == "none":
        _assert_within("kNone loss", gpu[0], cpu[0], mag, dtype)
    else:
        bound = 1e-5 * float(mag.sum()) / max(denominator, 1) + 1e-7
        assert abs(gpu[0].item() - cpu[0].item()) <= bound, (
            f"reduced loss: CUDA {gpu[0].item()!r} vs CPU {cpu[0].item()!r} (bound {bound:.3g})"
        )
    exact_grad = op == "tvd" or (op == "kl_div" and not kwargs.get("log_target", False))
    if exact_grad:
        assert torch.equal(gpu[1].cpu(), cpu[1]), "gradient bits differ from the CPU backend's"
    else:
        _assert_within("gradient", gpu[1], cpu[1], mag * scale, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cuda_kl_div_matches_torch_at_llama3_vocabulary(reduction: str) -> None:
    """bf16 [4, 128256] against F.kl_div on CUDA in float64 (the loss and the gradient once
    rounded to bf16), and two runs with the same bits."""
    x = _log_probs((4, 128256), torch.bfloat16, "cuda")
    t = _probs((4, 128256), torch.bfloat16, "cuda")
    x64 = x.double().requires_grad_()
    ref = F.kl_div(x64, t.double(), reduction=reduction)
    ref.sum().backward()
    got, grad = _run("kl_div", x, t, None, 1.0, reduction=reduction)
    again, grad_again = _run("kl_div", x, t, None, 1.0, reduction=reduction)
    torch.testing.assert_close(got.double(), ref.detach(), **TOL[torch.bfloat16])
    torch.testing.assert_close(grad.double(), x64.grad, **TOL[torch.bfloat16])
    assert torch.equal(got, again) and torch.equal(grad, grad_again), "run-to-run bits differ"


@pytest.mark.gpu
@pytest.mark.slow
def test_cuda_compile_fullgraph_matches_eager() -> None:
    torch._dynamo.reset()
    model = _Student().cuda()
    h = torch.randn(6, 16, device="cuda")
    log_p = _log_probs((6, 40), torch.float32, "cuda")
    labels = torch.tensor([1, -100, 3, 4, -100, 5], device="cuda")
    loss_eager = model(h, log_p, log_p.exp(), labels)
    loss_eager.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    loss = torch.compile(model, fullgraph=True)(h, log_p, log_p.exp(), labels)
    loss.backward()
    torch.testing.assert_close(loss, loss_eager)
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g)
