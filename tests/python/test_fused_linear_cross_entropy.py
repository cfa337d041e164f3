"""tigon.ops.fused_linear_cross_entropy vs the unfused PyTorch path (matmul, float32 logits,
F.cross_entropy): loss and gradients of hidden, weight and bias for every option, chunk sizes,
float32 vs weight-dtype dW accumulation, HF num_items_in_batch, upstream scaling, reduction none
with any upstream gradient, the token scale (and use_token_scaling) in every reduction, no-grad,
opcheck, torch.compile and the nn module."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES

import tigon

OPS = torch.ops.tigon


def unfused(h, w, t, b=None, ce_weight=None, ignore_index=-100, reduction="mean",
            label_smoothing=0.0, lse_square_scale=0.0, softcap=None, token_scale=None,
            use_token_scaling=False):  # fmt: skip
    """Per-token F.cross_entropy (reduction none) and z-loss, times the token scale (a constant),
    then reduced: the mean divides by the class-weight sum and the count of non-ignored tokens as
    without a scale."""
    logits = F.linear(h, w, b).float()
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    valid = t != ignore_index
    scale = torch.ones(t.shape, device=h.device) if token_scale is None else token_scale.float()
    if use_token_scaling:
        prob = torch.softmax(logits.detach(), -1).gather(-1, t.clamp(min=0)[:, None])[:, 0]
        scale = scale * prob
    scale = scale.detach()
    ce = F.cross_entropy(logits, t, ce_weight, ignore_index=ignore_index, reduction="none",
                         label_smoothing=label_smoothing)  # fmt: skip
    z = lse_square_scale * torch.logsumexp(logits, -1).pow(2) * valid
    ce, z = ce * scale, z * scale
    if reduction == "none":
        return ce + z
    if reduction == "sum":
        return ce.sum() + z.sum()
    w_y = torch.ones_like(ce) if ce_weight is None else ce_weight[t.clamp(min=0)]
    return ce.sum() / (w_y * valid).sum() + z.sum() / valid.sum()


def _problem(n, h, v, dtype, device, bias=False):
    x = torch.randn(n, h, device=device).to(dtype)
    w = (torch.randn(v, h, device=device) / h**0.5).to(dtype)
    b = torch.randn(v, device=device).to(dtype) if bias else None
    t = torch.randint(0, v, (n,), device=device)
    t[::7] = -100
    return x, w, b, t


OPTIONS = {
    "plain": {},
    "all": {"label_smoothing": 0.1, "lse_square_scale": 1e-3, "softcap": 10.0, "ce_weight": True},
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("chunk", [None, 5])
def test_matches_unfused(chunk, name, bias, reduction, dtype, device):
    opts = dict(OPTIONS[name])
    x, w, b, t = _problem(29, 24, 53, dtype, device, bias)
    if opts.pop("ce_weight", False):
        opts["ce_weight"] = torch.rand(53, device=device) + 0.5
    leaves = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    if b is not None:
        leaves.append(b.clone().requires_grad_())
    refs = [p.detach().clone().requires_grad_() for p in leaves]
    got = tigon.ops.fused_linear_cross_entropy(
        leaves[0], leaves[1], t, leaves[2] if bias else None, reduction=reduction,
        chunk_size=chunk, **opts,
    )  # fmt: skip
    want = unfused(refs[0], refs[1], t, refs[2] if bias else None, reduction=reduction, **opts)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(got, want, **tol)
    (2.5 * got).backward()
    (2.5 * want).backward()
    for p, r in zip(leaves, refs, strict=True):
        torch.testing.assert_close(p.grad, r.grad, **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_weight_dtype_accumulation_and_chunks(device):
    x, w, _, t = _problem(40, 16, 37, torch.bfloat16, device)
    grads = {}
    for accum, chunk in [(None, None), (None, 3), (torch.bfloat16, 3)]:
        wl = w.clone().requires_grad_()
        tigon.ops.fused_linear_cross_entropy(
            x, wl, t, chunk_size=chunk, accum_dtype=accum
        ).backward()
        grads[(accum, chunk)] = wl.grad.float()
    ref = w.float().requires_grad_()
    unfused(x.float(), ref, t).backward()
    for g in grads.values():
        torch.testing.assert_close(g, ref.grad, rtol=3e-2, atol=3e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_num_items_in_batch_and_frozen_weight(device):
    x, w, _, t = _problem(20, 8, 30, torch.float32, device)
    n = (t != -100).sum()
    xl = x.clone().requires_grad_()
    loss = tigon.ops.fused_linear_cross_entropy(xl, w, t, reduction="sum", num_items_in_batch=n)
    xr = x.clone().requires_grad_()
    want = unfused(xr, w, t, reduction="sum") / n
    torch.testing.assert_close(loss, want)
    loss.backward()
    want.backward()
    torch.testing.assert_close(xl.grad, xr.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_reduction_none(device):
    x, w, b, t = _problem(12, 8, 19, torch.float32, device, bias=True)
    with torch.no_grad():
        got = tigon.ops.fused_linear_cross_entropy(x, w, t, b, reduction="none", chunk_size=5)
    torch.testing.assert_close(got, unfused(x, w, t, b, reduction="none"))


SCALES = ["none", "tensor", "prob", "both"]


def _token_scale(kind, n, device):
    """(token_scale, use_token_scaling) for a kind of SCALES; the tensor has a negative entry."""
    scale = None
    if kind in ("tensor", "both"):
        scale = torch.rand(n, device=device) * 2
        scale[1] = -0.5
    return scale, kind in ("prob", "both")


def _leaves(x, w, b):
    leaves = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    if b is not None:
        leaves.append(b.clone().requires_grad_())
    return leaves, [p.detach().clone().requires_grad_() for p in leaves]


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("scale_kind", SCALES)
def test_reduction_none_backward_matches_unfused(scale_kind, name, bias, dtype, device):
    """loss.backward(g) for a random per-token g (a zero included), and a mask-weighted mean."""
    opts = dict(OPTIONS[name])
    n = 29
    x, w, b, t = _problem(n, 24, 53, dtype, device, bias)
    if opts.pop("ce_weight", False):
        opts["ce_weight"] = torch.rand(53, device=device) + 0.5
    scale, by_prob = _token_scale(scale_kind, n, device)
    g = torch.randn(n, device=device)
    g[4] = 0.0
    mask = (torch.rand(n, device=device) > 0.3).float()
    for upstream in ("g", "masked_mean"):
        leaves, refs = _leaves(x, w, b)
        got = tigon.ops.fused_linear_cross_entropy(
            leaves[0], leaves[1], t, leaves[2] if bias else None, reduction="none",
            chunk_size=5, token_scale=scale, use_token_scaling=by_prob, **opts,
        )  # fmt: skip
        want = unfused(refs[0], refs[1], t, refs[2] if bias else None, reduction="none",
                       token_scale=scale, use_token_scaling=by_prob, **opts)  # fmt: skip
        torch.testing.assert_close(got, want, **_tol(dtype))
        if upstream == "g":
            got.backward(g)
            want.backward(g)
        else:
            ((got * mask).sum() / mask.sum()).backward()
            ((want * mask).sum() / mask.sum()).backward()
        for p, r in zip(leaves, refs, strict=True):
            torch.testing.assert_close(p.grad, r.grad, **_tol(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("scale_kind", SCALES[1:])
def test_token_scale_mean_and_sum(scale_kind, reduction, dtype, device):
    """Each token's loss and gradient times its scale; the mean's denominator is unchanged."""
    n = 29
    x, w, b, t = _problem(n, 24, 53, dtype, device, bias=True)
    opts = {"label_smoothing": 0.1, "lse_square_scale": 1e-3, "softcap": 10.0}
    scale, by_prob = _token_scale(scale_kind, n, device)
    leaves, refs = _leaves(x, w, b)
    got = tigon.ops.fused_linear_cross_entropy(
        *leaves[:2], t, leaves[2], reduction=reduction, chunk_size=7, token_scale=scale,
        use_token_scaling=by_prob, **opts,
    )  # fmt: skip
    want = unfused(*refs[:2], t, refs[2], reduction=reduction, token_scale=scale,
                   use_token_scaling=by_prob, **opts)  # fmt: skip
    torch.testing.assert_close(got, want, **_tol(dtype))
    (2.5 * got).backward()
    (2.5 * want).backward()
    for p, r in zip(leaves, refs, strict=True):
        torch.testing.assert_close(p.grad, r.grad, **_tol(dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_token_scale_is_a_constant(device):
    """A token scale that requires grad gets none (it is treated as detached)."""
    x, w, _, t = _problem(10, 8, 17, torch.float32, device)
    scale = torch.rand(10, device=device).requires_grad_()
    xl = x.clone().requires_grad_()
    tigon.ops.fused_linear_cross_entropy(xl, w, t, token_scale=scale).backward()
    assert scale.grad is None
    xr = x.clone().requires_grad_()
    unfused(xr, w, t, token_scale=scale).backward()
    torch.testing.assert_close(xl.grad, xr.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_nn_module(device):
    x, w, b, t = _problem(14, 8, 19, torch.float32, device, bias=True)
    scale = torch.rand(14, device=device)
    module = tigon.nn.FusedLinearCrossEntropyLoss(
        reduction="none", label_smoothing=0.1, use_token_scaling=True, chunk_size=4
    )
    leaves, refs = _leaves(x, w, b)
    got = module(leaves[1], leaves[0], t, leaves[2], token_scale=scale)
    want = unfused(refs[0], refs[1], t, refs[2], reduction="none", label_smoothing=0.1,
                   token_scale=scale, use_token_scaling=True)  # fmt: skip
    torch.testing.assert_close(got, want)
    g = torch.randn(14, device=device)
    got.backward(g)
    want.backward(g)
    for p, r in zip(leaves, refs, strict=True):
        torch.testing.assert_close(p.grad, r.grad)
    loss, z_loss = tigon.nn.FusedLinearCrossEntropyLoss(lse_square_scale=1e-2, return_z_loss=True)(
        w, x, t
    )
    assert loss.shape == () and z_loss.shape == ()
    with pytest.raises(ValueError, match="reduction"):
        tigon.nn.FusedLinearCrossEntropyLoss(reduction="avg")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_opcheck(reduction, device):
    x, w, b, t = _problem(9, 8, 13, torch.float32, device, bias=True)
    scale = torch.rand(9, device=device)
    options = (-100, reduction, 0.1, 1e-3, 0.0, True, 4)
    grads = (reduction != "none",) * 3
    fwd_args = (x, w, t, b, None, None, scale, *options, *grads, True)
    torch.library.opcheck(OPS.fused_linear_cross_entropy_fwd.default, fwd_args)
    up = torch.randn(9 if reduction == "none" else (), device=device)
    bwd_args = (up, x, w, t, b, None, None, scale, *options, True, True, True, True)
    torch.library.opcheck(OPS.fused_linear_cross_entropy_bwd.default, bwd_args)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    torch._dynamo.reset()
    x, w, _, t = _problem(16, 8, 21, torch.float32, device)

    def f(h, weight):
        return tigon.ops.fused_linear_cross_entropy(h * 1.0, weight, t, softcap=20.0) * 3.0

    h1, w1 = x.clone().requires_grad_(), w.clone().requires_grad_()
    f(h1, w1).backward()
    h2, w2 = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = torch.compile(f, fullgraph=True)(h2, w2)
    out.backward()
    torch.testing.assert_close(h2.grad, h1.grad)
    torch.testing.assert_close(w2.grad, w1.grad)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_reduction_none(device):
    torch._dynamo.reset()
    x, w, b, t = _problem(16, 8, 21, torch.float32, device, bias=True)
    scale = torch.rand(16, device=device)
    g = torch.randn(16, device=device)

    def f(h, weight, bias):
        loss = tigon.ops.fused_linear_cross_entropy(
            h * 1.0, weight, t, bias, reduction="none", token_scale=scale, use_token_scaling=True
        )
        return (loss * g).sum()

    eager, compiled = _leaves(x, w, b)
    f(*eager).backward()
    torch.compile(f, fullgraph=True)(*compiled).backward()
    for p, r in zip(compiled, eager, strict=True):
        torch.testing.assert_close(p.grad, r.grad)


def _record_outputs(monkeypatch, op_name):
    """Replaces torch.ops.tigon.<op_name> by a wrapper that records its outputs' data pointers
    (not the tensors: a reference held here would itself force autograd to copy)."""
    real = getattr(OPS, op_name)
    pointers = []

    def wrapper(*args):
        out = real(*args)
        pointers[:] = [t.data_ptr() for t in out]
        return out

    monkeypatch.setattr(OPS, op_name, wrapper)
    return pointers


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("retain_graph", [False, True], ids=["plain", "retain_graph"])
@pytest.mark.parametrize("op", ["flce_fp32", "flce_weight_dtype", "ce"])
def test_grad_is_the_forward_gradient_not_a_copy(monkeypatch, op, retain_graph, device):
    """The leaf's .grad is the buffer the forward wrote (autograd clones a gradient that anything
    else still references: a second gradient-sized buffer at the peak); a second backward through
    the same graph is refused (the gradients were handed over and scaled in place)."""
    x, w, _, t = _problem(24, 16, 41, torch.bfloat16, device)
    if op == "ce":
        pointers = _record_outputs(monkeypatch, "cross_entropy_fwd")
        leaves = [(x @ w.T).requires_grad_()]
        loss = tigon.ops.cross_entropy(leaves[0], t)
        produced = [pointers[3]]
    else:
        pointers = _record_outputs(monkeypatch, "fused_linear_cross_entropy_fwd")
        leaves = [x.requires_grad_(), w.requires_grad_()]
        accum = None if op == "flce_fp32" else torch.bfloat16
        loss = tigon.ops.fused_linear_cross_entropy(*leaves, t, chunk_size=5, accum_dtype=accum)
        produced = pointers[2:4]
    (3.0 * loss).backward(retain_graph=retain_graph)
    assert [p.grad.data_ptr() for p in leaves] == produced
    if retain_graph:
        with pytest.raises(RuntimeError, match="already used by a backward"):
            loss.backward()


def _exact_problem(v, device, chunk=64, chunks=4):
    """Each chunk's hidden rows are a signed permutation of the unit vectors (H = chunk): every
    logit is one product (exact whatever the GEMM), and every element of a chunk's dW product
    dL_c^T @ h_c is one gradient value: exact too, so a float32 accumulation across chunks is
    known bit for bit whatever the GEMM's order of summation."""
    gen = torch.Generator().manual_seed(v)
    eye = torch.eye(chunk)
    x = torch.cat([eye[torch.randperm(chunk, generator=gen)] for _ in range(chunks)])
    x = (x * (torch.randint(0, 2, (x.shape[0], 1), generator=gen) * 2 - 1)).bfloat16()
    w = (torch.randn(v, chunk, generator=gen) * 2).bfloat16()
    t = torch.randint(0, v, (x.shape[0],), generator=gen)
    return x.to(device), w.to(device), t.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("v", [1001, 1000], ids=["odd_V", "even_V"])
def test_fp32_accumulated_dw_is_the_float32_sum_rounded_once(v, device):
    chunk = 64
    x, w, t = _exact_problem(v, device, chunk)
    logits = (x.float() @ w.float().T).bfloat16().requires_grad_()  # exact
    tigon.ops.cross_entropy(logits, t, in_place=True).backward()  # dL, the kernel FLCE runs
    dl = logits.grad.double()
    acc = torch.zeros(w.shape, dtype=torch.float32, device=device)
    for r0 in range(0, x.shape[0], chunk):  # chunk by chunk, in float32
        acc += (dl[r0 : r0 + chunk].T @ x[r0 : r0 + chunk].double()).float()  # exact product
    grads = {}
    for accum in (None, torch.bfloat16):
        wl = w.clone().requires_grad_()
        tigon.ops.fused_linear_cross_entropy(
            x, wl, t, chunk_size=chunk, accum_dtype=accum
        ).backward()
        grads[accum] = wl.grad
    want = acc.bfloat16()
    assert torch.equal(grads[None].view(torch.int16), want.view(torch.int16))
    assert not torch.equal(grads[torch.bfloat16], want), "one rounding per chunk differs"


def _mib(t_or_bytes):
    n = (
        t_or_bytes
        if isinstance(t_or_bytes, int)
        else t_or_bytes.numel() * t_or_bytes.element_size()
    )
    return n / 2**20


@pytest.mark.gpu
@pytest.mark.parametrize("accum", [None, torch.bfloat16], ids=["dw_fp32", "dw_bf16"])
def test_peak_memory_within_the_budget(accum):
    """Peak over forward + backward (returned gradients included) at 2048 x 1024 x 32000 bf16,
    256-row chunks: dX + dW + chunk logits + cuBLAS workspace (+ float32 accumulators of half
    of dW's rows with float32 accumulation), plus 3 MiB (per-row terms, allocator rounding). A copy of the
    gradients (autograd cloning them) or a float32 dW next to a bf16 one does not fit."""
    n, h, v, chunk = 2048, 1024, 32000, 256
    x = torch.randn(n, h, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(v, h, device="cuda") / h**0.5).bfloat16().requires_grad_()
    t = torch.randint(0, v, (n,), device="cuda")
    # + 3 MiB: the per-row terms and the caching allocator's rounding of each block
    budget = _mib(x) + _mib(w) + _mib(chunk * v * 2) + 32 + 3
    if accum is None:
        budget += _mib((v + 1) // 2 * h * 4)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    loss = tigon.ops.fused_linear_cross_entropy(x, w, t, chunk_size=chunk, accum_dtype=accum)
    loss.backward()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    assert peak <= budget, f"peak {peak:.1f} MiB > budget {budget:.1f} MiB"
