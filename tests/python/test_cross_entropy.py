"""tigon.ops.cross_entropy vs torch.nn.functional.cross_entropy on float32-upcast logits (what HF
computes) and vs float64: every option, reductions with non-uniform upstream gradients, class
weights with smoothing, all-ignored batches, the confident true class, in place, the HF
num_items_in_batch divisor, opcheck and torch.compile."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, ulp_distance

import tigon

OPS = torch.ops.tigon
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def reference(logits, target, weight=None, ignore_index=-100, reduction="mean",
              label_smoothing=0.0, lse_square_scale=0.0, softcap=None, dtype=torch.float64):  # fmt: skip
    """F.cross_entropy on upcast logits (+ z-loss, softcap); all-ignored mean gives 0."""
    x = logits.to(dtype)
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    w = None if weight is None else weight.to(dtype)
    ce = F.cross_entropy(x, target, w, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=label_smoothing)  # fmt: skip
    valid = target != ignore_index
    z = lse_square_scale * torch.logsumexp(x, -1).pow(2) * valid
    if reduction == "mean":
        n = valid.sum()
        ce = torch.where(n > 0, ce, torch.zeros_like(ce))
        z = z.sum() / n.clamp(min=1)
    elif reduction == "sum":
        z = z.sum()
    return ce + z


def _problem(n, v, dtype, device, ignore_index=-100, scale=3.0):
    logits = (scale * torch.randn(n, v)).to(device=device, dtype=dtype)
    target = torch.randint(0, v, (n,), device=device)
    target[::5] = ignore_index
    return logits, target


OPTIONS = {
    "plain": {},
    "weight": {"weight": True},
    "weight_smoothing": {"weight": True, "label_smoothing": 0.1},
    "smoothing": {"label_smoothing": 0.2},
    "zloss": {"lse_square_scale": 1e-3},
    "softcap": {"softcap": 5.0},
    "all": {
        "weight": True,
        "label_smoothing": 0.1,
        "lse_square_scale": 1e-4,
        "softcap": 8.0,
        "ignore_index": 3,
    },  # fmt: skip
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_matches_reference(name, reduction, dtype, device):
    opts = dict(OPTIONS[name])
    ignore_index = opts.pop("ignore_index", -100)
    logits, target = _problem(37, 301, dtype, device, ignore_index)
    weight = torch.rand(301, device=device) + 0.2 if opts.pop("weight", False) else None
    kw = dict(weight=weight, ignore_index=ignore_index, reduction=reduction, **opts)
    x = logits.clone().requires_grad_()
    loss = tigon.ops.cross_entropy(x, target, **kw)
    x64 = logits.detach().double().requires_grad_()
    want = reference(x64, target, **kw)
    x32 = logits.detach().float().requires_grad_()
    hf = reference(x32, target, dtype=torch.float32, **kw)  # what HF computes
    assert loss.dtype == torch.float32 and loss.shape == want.shape
    torch.testing.assert_close(loss.double(), want, rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(loss, hf, rtol=1e-5, atol=1e-5)
    # Non-uniform upstream gradient (per row for "none").
    g = torch.rand_like(want) + 0.5
    loss.backward(g.float())
    want.backward(g)
    eps = {torch.float32: 1e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}[dtype]
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=2 * eps, atol=eps * 1e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_all_ignored_gives_zero_not_nan(reduction, device):
    logits, target = _problem(8, 50, torch.bfloat16, device)
    target.fill_(-100)
    x = logits.clone().requires_grad_()
    loss = tigon.ops.cross_entropy(x, target, weight=torch.rand(50, device=device),
                                   reduction=reduction, lse_square_scale=1e-3)  # fmt: skip
    assert torch.all(loss == 0)
    loss.sum().backward()
    assert torch.all(x.grad == 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("p_y", [0.9, 0.99, 0.999])
def test_confident_true_class_gradient(p_y, dtype, device):
    """users.md 4: p_y - 1 must be formed in float32 before rounding to the gradient dtype."""
    n, v = 16, 4096
    target = torch.randint(0, v, (n,), device=device)
    logits = torch.zeros(n, v, device=device)
    t = torch.log(torch.tensor(p_y * (v - 1) / (1 - p_y)))
    logits[torch.arange(n), target] = t.item()
    logits = logits.to(dtype)
    x = logits.clone().requires_grad_()
    tigon.ops.cross_entropy(x, target, reduction="sum").backward()
    x64 = logits.double().requires_grad_()
    F.cross_entropy(x64, target, reduction="sum").backward()
    rows = torch.arange(n, device=device)
    got, want = x.grad[rows, target].double(), x64.grad[rows, target]
    ulp = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]
    assert torch.all((got - want).abs() <= want.abs() * (ulp + 1e-5)), (got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_in_place_writes_gradient_into_logits(reduction, device):
    logits, target = _problem(10, 64, torch.bfloat16, device)
    x = logits.clone().requires_grad_()
    tigon.ops.cross_entropy(x, target, reduction=reduction).mul(2.5).backward()
    leaf = logits.clone().requires_grad_()
    buffer = leaf * 1  # a non-leaf whose storage receives the gradient
    loss = tigon.ops.cross_entropy(buffer, target, reduction=reduction, in_place=True)
    assert buffer.data_ptr() == buffer.data_ptr()
    (loss * 2.5).backward()
    torch.testing.assert_close(leaf.grad, x.grad, rtol=0, atol=0)
    assert not torch.equal(buffer.detach(), logits)  # the logits now hold the gradient


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_retain_graph_double_backward(device):
    """With the graph kept for a second backward, the first does not scale the logits' buffer in
    place: both give the out-of-place gradient."""
    logits, target = _problem(10, 64, torch.bfloat16, device)
    x = logits.clone().requires_grad_()
    (tigon.ops.cross_entropy(x * 1, target) * 2.5).backward()
    leaf = logits.clone().requires_grad_()
    loss = tigon.ops.cross_entropy(leaf * 1, target, in_place=True) * 2.5
    for retain_graph in (True, False):
        leaf.grad = None
        loss.backward(retain_graph=retain_graph)
        torch.testing.assert_close(leaf.grad, x.grad, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [32000, 70000], ids=["slice_kernel", "row_kernel"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weights"])
def test_cuda_graph_replay_matches_eager(vocab, weighted):
    """On sm_90 prepare -> rows -> finish run as dependent launches (the rows start before prepare
    ends and wait for its header): captured in a CUDA graph and replayed, loss and gradient are
    bitwise the eager ones, which match the reference."""
    logits, target = _problem(64, vocab, torch.bfloat16, "cuda")
    weight = torch.rand(vocab, device="cuda") + 0.5 if weighted else None
    smoothing = 0.1 if weighted else 0.0

    def step(x):
        x = x.detach().requires_grad_()
        loss = tigon.ops.cross_entropy(x, target, weight=weight, label_smoothing=smoothing)
        loss.backward()
        return loss.detach(), x.grad

    eager = step(logits)
    x = logits.detach().requires_grad_()
    want = reference(x, target, weight, label_smoothing=smoothing, dtype=torch.float32)
    want.backward()
    torch.testing.assert_close(eager[0], want.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(eager[1].float(), x.grad.float(), rtol=1e-2, atol=1e-5)
    static_x = logits.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step(static_x)
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], eager[0])
    assert torch.equal(captured[1], eager[1])


@pytest.mark.parametrize("device", DEVICES)
def test_num_items_in_batch_matches_hf_gradient_accumulation(device):
    """users.md 7: sum-reduction divided by the global token count, GA=1 and GA=2."""
    logits, target = _problem(24, 40, torch.float32, device)
    n_items = (target != -100).sum()
    full = tigon.ops.cross_entropy(logits, target, reduction="sum", num_items_in_batch=n_items)
    want = F.cross_entropy(logits, target, reduction="sum") / n_items
    torch.testing.assert_close(full, want)
    parts = [
        tigon.ops.cross_entropy(lg, tg, reduction="sum", num_items_in_batch=n_items)
        for lg, tg in zip(logits.chunk(2), target.chunk(2), strict=True)
    ]
    torch.testing.assert_close(sum(parts), want)
    # A python number works too, and the mean equals the sum over the count.
    mean = tigon.ops.cross_entropy(logits, target)
    by_int = tigon.ops.cross_entropy(
        logits, target, reduction="sum", num_items_in_batch=int(n_items)
    )
    torch.testing.assert_close(mean, by_int)


@pytest.mark.parametrize("device", DEVICES)
def test_return_z_loss_module_and_shapes(device):
    logits, target = _problem(12, 30, torch.float32, device)
    module = tigon.nn.CrossEntropyLoss(lse_square_scale=1e-2, return_z_loss=True)
    loss, z = module(logits.view(3, 4, 30), target.view(3, 4))
    valid = target != -100
    want_z = 1e-2 * (torch.logsumexp(logits, -1).pow(2) * valid).sum() / valid.sum()
    torch.testing.assert_close(z, want_z)
    torch.testing.assert_close(loss, F.cross_entropy(logits, target) + want_z)
    none = tigon.ops.cross_entropy(logits.view(3, 4, 30), target.view(3, 4), reduction="none")
    assert none.shape == (3, 4)


# torch's dtype contract: tigon.nn.CrossEntropyLoss and tigon.nn.functional.cross_entropy return
# the logits' dtype, the float32 loss rounded once; tigon.ops.cross_entropy and HF's loss path stay
# float32 (docs/ops/cross_entropy.md, "Output dtype").
DROP_IN = {
    "plain": {},
    "weight": {"weight": True},
    "smoothing": {"label_smoothing": 0.2},
    "weight_smoothing": {"weight": True, "label_smoothing": 0.1},
    "ignore_index": {"ignore_index": 3},
}


def _drop_in(form, logits, target, weight, ignore_index, reduction, label_smoothing):
    if form == "module":
        module = tigon.nn.CrossEntropyLoss(
            weight, ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing
        )
        return module(logits, target)
    return tigon.nn.functional.cross_entropy(logits, target, weight, ignore_index=ignore_index,
                                             reduction=reduction, label_smoothing=label_smoothing)  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["module", "functional"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(DROP_IN))
def test_drop_in_returns_torch_dtype_and_value(name, reduction, dtype, form, device):
    opts = dict(DROP_IN[name])
    ignore_index = opts.pop("ignore_index", -100)
    smoothing = opts.pop("label_smoothing", 0.0)
    logits, target = _problem(37, 301, dtype, device, ignore_index)
    weight = torch.rand(301, device=device) + 0.2 if opts.pop("weight", False) else None
    args = (weight, ignore_index, reduction, smoothing)
    x = logits.clone().requires_grad_()
    ours = _drop_in(form, x, target, *args)
    # torch itself, in the input's dtype (torch's weight has the input's dtype).
    torch_weight = None if weight is None else weight.to(dtype)
    native = torch.nn.CrossEntropyLoss(torch_weight, ignore_index=ignore_index,
                                       reduction=reduction, label_smoothing=smoothing)(logits, target)  # fmt: skip
    assert ours.dtype == native.dtype == dtype and ours.shape == native.shape
    # The value: torch's float32 math, rounded once to the input's dtype.
    ref32 = F.cross_entropy(logits.float(), target, weight, ignore_index=ignore_index,
                            reduction=reduction, label_smoothing=smoothing)  # fmt: skip
    ours32 = tigon.ops.cross_entropy(logits, target, weight, ignore_index=ignore_index,
                                     reduction=reduction, label_smoothing=smoothing)  # fmt: skip
    assert ours32.dtype == torch.float32
    assert torch.equal(ours, ours32.to(dtype))  # one rounding of the float32 loss
    torch.testing.assert_close(ours32, ref32, rtol=1e-5, atol=1e-6)
    ref = ref32.to(dtype)
    same32 = ours32 == ref32
    assert torch.equal(ours[same32], ref[same32])  # the same float32 value rounds the same
    if dtype != torch.float32:
        # Float32 values a few float32 ulps apart round to at most adjacent 16-bit values.
        assert int(ulp_distance(ours.detach(), ref).max()) <= 1
        # torch's own low-precision path (log-probabilities rounded first) is close where it is
        # finite (float16 label smoothing sums the classes in float16 and can overflow to inf).
        finite = native.isfinite()
        torch.testing.assert_close(
            ours[finite].float(), native[finite].float(), rtol=2e-2, atol=2e-2
        )
    # Gradients unchanged: the op's, for the same upstream gradient.
    g = (torch.rand_like(ours32) + 0.5).to(dtype)
    ours.backward(g)
    x_op = logits.clone().requires_grad_()
    tigon.ops.cross_entropy(x_op, target, weight, ignore_index=ignore_index, reduction=reduction,
                            label_smoothing=smoothing).backward(g.float())  # fmt: skip
    assert torch.equal(x.grad, x_op.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_drop_in_functional_shapes_and_legacy_arguments(device):
    logits = torch.randn(2, 7, 3, 4, device=device, dtype=torch.bfloat16)  # classes in dim 1
    target = torch.randint(0, 7, (2, 3, 4), device=device)
    for reduction in ["mean", "sum", "none"]:
        ours = tigon.nn.functional.cross_entropy(logits, target, reduction=reduction)
        ref = F.cross_entropy(logits.float(), target, reduction=reduction)
        assert ours.dtype == torch.bfloat16 and ours.shape == ref.shape
        assert int(ulp_distance(ours, ref.to(torch.bfloat16)).max()) <= 1
    x, x64 = logits.clone().requires_grad_(), logits.double().requires_grad_()
    tigon.nn.functional.cross_entropy(x, target).backward()
    F.cross_entropy(x64, target).backward()
    assert x.grad.shape == logits.shape
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1.6e-2, atol=1e-4)
    unbatched = tigon.nn.functional.cross_entropy(
        logits[0, :, 0, 0], target[0, 0, 0], reduction="none"
    )
    assert unbatched.shape == () and unbatched.dtype == torch.bfloat16
    with pytest.warns(UserWarning, match="deprecated"):  # torch's own warning
        legacy = tigon.nn.functional.cross_entropy(logits, target, size_average=False)
    assert torch.equal(legacy, tigon.nn.functional.cross_entropy(logits, target, reduction="sum"))
    with pytest.raises(ValueError, match="class indices"):
        tigon.nn.functional.cross_entropy(logits, torch.rand_like(logits))


@pytest.mark.parametrize("device", DEVICES)
def test_hf_loss_paths_stay_float32(device):
    from tigon.transformers.loss import causal_lm_loss

    logits = torch.randn(2, 9, 50, device=device, dtype=torch.bfloat16)
    labels = torch.randint(0, 50, (2, 9), device=device)
    loss = causal_lm_loss(logits, labels, vocab_size=50)
    assert loss.dtype == torch.float32
    assert (
        causal_lm_loss(logits, labels, vocab_size=50, num_items_in_batch=7).dtype == torch.float32
    )
    hidden = torch.randn(12, 16, device=device, dtype=torch.bfloat16)
    head = torch.randn(50, 16, device=device, dtype=torch.bfloat16)
    flce = tigon.ops.fused_linear_cross_entropy(hidden, head, labels.view(-1)[:12])
    assert flce.dtype == torch.float32
    module = tigon.nn.CrossEntropyLoss(lse_square_scale=1e-3, return_z_loss=True)
    loss, z = module(logits, labels)
    assert loss.dtype == z.dtype == torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("compute_grad", [True, False])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_opcheck(reduction, compute_grad, device):
    logits, target = _problem(9, 33, torch.float32, device)
    w = torch.rand(33, device=device)
    args = (logits.requires_grad_(), target, w, None, -100, reduction, 0.1, 1e-3, 0.0, compute_grad)
    torch.library.opcheck(OPS.cross_entropy_fwd.default, args)
    lse = OPS.cross_entropy_fwd(*args)[2]
    up = torch.rand(9 if reduction == "none" else (), device=device)
    bargs = (up, logits.detach(), target, w, None, lse, -100, reduction, 0.1, 1e-3, 0.0)
    torch.library.opcheck(OPS.cross_entropy_bwd.default, bargs)
    inplace = (logits.detach().clone(), target, w, None, -100, "sum", 0.0, 0.0, 0.0)
    torch.library.opcheck(OPS.cross_entropy_fwd_inplace.default, inplace,
                          test_utils=("test_schema", "test_faketensor"))  # fmt: skip
    grad_inplace = (logits.detach().clone().requires_grad_() * 1, *inplace[1:])
    torch.library.opcheck(OPS.cross_entropy_fwd_inplace.default, grad_inplace)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("reduction", "in_place"), [("mean", False), ("none", False), ("mean", True)]
)
def test_compile_fullgraph(reduction, in_place, device):
    torch._dynamo.reset()
    logits, target = _problem(12, 70, torch.bfloat16, device)

    def f(x, t):
        loss = tigon.ops.cross_entropy(
            x.float() * 1.5, t, reduction=reduction, softcap=30.0, in_place=in_place
        )
        return loss.sum() if reduction == "none" else loss

    x1 = logits.clone().requires_grad_()
    f(x1, target).backward()
    x2 = logits.clone().requires_grad_()
    out = torch.compile(f, fullgraph=True)(x2, target)
    out.backward()
    torch.testing.assert_close(out, f(logits, target))
    torch.testing.assert_close(x2.grad, x1.grad)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_compile_drop_ins_keep_torch_dtype(reduction, device):
    torch._dynamo.reset()
    logits, target = _problem(12, 70, torch.bfloat16, device)
    module = tigon.nn.CrossEntropyLoss(reduction=reduction)
    for fn in (module, lambda x, t: tigon.nn.functional.cross_entropy(x, t, reduction=reduction)):
        x1, x2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        eager = fn(x1, target)
        compiled = torch.compile(fn, fullgraph=True)(x2, target)
        assert compiled.dtype == eager.dtype == torch.bfloat16
        assert torch.equal(compiled, eager)
        eager.sum().backward()
        compiled.sum().backward()
        assert torch.equal(x2.grad, x1.grad)


def test_errors_name_the_argument():
    logits, target = _problem(4, 10, torch.float32, "cpu")
    with pytest.raises(ValueError, match="reduction"):
        tigon.ops.cross_entropy(logits, target, reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        tigon.ops.cross_entropy(logits, target, label_smoothing=2.0)
    with pytest.raises(ValueError, match="target"):
        tigon.ops.cross_entropy(logits, target[:3])
    with pytest.raises(ValueError, match="num_items_in_batch"):
        tigon.ops.cross_entropy(logits, target, num_items_in_batch=3)
    with pytest.raises(ValueError, match="weight"):
        tigon.ops.cross_entropy(logits, target, weight=torch.ones(9))
