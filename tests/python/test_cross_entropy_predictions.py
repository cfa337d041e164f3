"""return_token_accuracy / return_predicted_tokens of tigon.ops.cross_entropy, tigon.ops.
fused_linear_cross_entropy and tigon.nn.CrossEntropyLoss against torch.argmax of the unfused
logits: ties (first index), NaN rows (first NaN), ties made by the softcap's saturation, ignored
rows, every reduction; the return conventions, non-differentiable outputs that leave the loss and
its gradient unchanged, opcheck of the changed ops and torch.compile(fullgraph=True)."""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICES

import tigon
from tigon.ops import CrossEntropyOutput

OPS = torch.ops.tigon
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _logits(n, v, dtype, device, ignore_index=-100):
    """Random logits with deliberate ties, a NaN row, a softcap-saturated tie and ignored rows;
    targets hit some rows' argmax."""
    x = 3 * torch.randn(n, v)
    x[0, [5, v // 2, v - 1]] = 20.0  # a three-way tie: class 5
    x[1, [v - 1, 2]] = 20.0  # class 2
    x[2, [9, 4]] = float("nan")  # the first NaN: class 4
    x[3, 11], x[3, 6] = 1e4, 5e3  # capped, 6 and 11 are equal (tanh saturates): class 6
    x = x.to(dtype)
    target = torch.randint(0, v, (n,))
    target[[0, 1, 3]] = torch.tensor([5, v - 1, 6])  # a hit, a lost tie, a hit only when capped
    target[7::4] = torch.argmax(x[7::4].float(), -1)
    target[4::5] = ignore_index
    return x.to(device), target.to(device)


def _capped(x, softcap):
    x = x.float()
    return x if softcap is None else softcap * torch.tanh(x / softcap)


def _same(got, want, device):
    """Asking for predictions leaves the loss and gradient unchanged: bit for bit on the CPU
    (the same loop); on CUDA they run the kernel with options, equal within its tolerances."""
    tol = {} if device == "cuda" else {"rtol": 0, "atol": 0}
    torch.testing.assert_close(got, want, equal_nan=True, **tol)


def _expected(logits, target, reduction, softcap=None, ignore_index=-100):
    """(accuracy, predicted) from torch.argmax, as the header specifies them."""
    valid = target != ignore_index
    predicted = torch.where(valid, torch.argmax(_capped(logits, softcap), -1), -1)
    hits = ((predicted == target) & valid).float()
    if reduction == "none":
        return hits, predicted
    count = valid.sum()
    return torch.where(count > 0, hits.sum() / count.clamp(min=1), 0.0), predicted


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("softcap", [None, 2.0], ids=["plain", "softcap"])
def test_cross_entropy_matches_torch_argmax(softcap, reduction, dtype, device):
    logits, target = _logits(37, 301, dtype, device)
    x = logits.clone().requires_grad_()
    out = tigon.ops.cross_entropy(
        x, target, reduction=reduction, softcap=softcap, label_smoothing=0.1,
        return_token_accuracy=True, return_predicted_tokens=True,
    )  # fmt: skip
    accuracy, predicted = _expected(logits, target, reduction, softcap)
    assert isinstance(out, CrossEntropyOutput) and out.z_loss is None
    assert out.predicted_tokens.dtype == torch.int64 and out.token_accuracy.dtype == torch.float32
    assert torch.equal(out.predicted_tokens, predicted)
    assert out.predicted_tokens[:4].tolist() == [5, 2, 4, 6 if softcap else 11]
    torch.testing.assert_close(out.token_accuracy, accuracy, rtol=0, atol=0)
    assert not out.token_accuracy.requires_grad and not out.predicted_tokens.requires_grad

    x2 = logits.clone().requires_grad_()
    plain = tigon.ops.cross_entropy(
        x2, target, reduction=reduction, softcap=softcap, label_smoothing=0.1
    )
    _same(out.loss, plain, device)
    up = torch.rand_like(plain)
    out.loss.backward(up)
    plain.backward(up)
    _same(x.grad, x2.grad, device)


@pytest.mark.parametrize("device", DEVICES)
def test_shapes_and_return_conventions(device):
    logits, target = _logits(24, 40, torch.float32, device)
    x, t = logits.view(2, 12, 40), target.view(2, 12)
    assert torch.is_tensor(tigon.ops.cross_entropy(x, t))
    loss, z = tigon.ops.cross_entropy(x, t, return_z_loss=True)  # unchanged: a plain tuple
    assert type(tigon.ops.cross_entropy(x, t, return_z_loss=True)) is tuple
    out = tigon.ops.cross_entropy(x, t, return_z_loss=True, return_token_accuracy=True)
    assert out.token_accuracy.shape == () and out.predicted_tokens is None
    torch.testing.assert_close(out.z_loss, z, equal_nan=True)
    out = tigon.ops.cross_entropy(x, t, reduction="none", return_predicted_tokens=True)
    assert out.predicted_tokens.shape == (2, 12) and out.token_accuracy is None
    assert out.loss.shape == (2, 12) and out.z_loss is None
    out = tigon.ops.cross_entropy(x, t, reduction="none", return_token_accuracy=True)
    assert out.token_accuracy.shape == (2, 12)
    loss, z_loss, accuracy, predicted = tigon.ops.cross_entropy(
        x, t, return_token_accuracy=True, return_predicted_tokens=True
    )  # unpacks as the peer's CrossEntropyOutput
    assert z_loss is None and predicted.shape == (2, 12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_all_ignored_and_in_place(reduction, device):
    logits, target = _logits(10, 50, torch.bfloat16, device)
    out = tigon.ops.cross_entropy(
        logits, torch.full_like(target, -100), reduction=reduction,
        return_token_accuracy=True, return_predicted_tokens=True,
    )  # fmt: skip
    assert (out.predicted_tokens == -1).all() and (out.token_accuracy == 0).all()
    if reduction != "none":
        x = logits.clone().requires_grad_()
        out = tigon.ops.cross_entropy(
            x * 1, target, reduction=reduction, in_place=True,
            return_token_accuracy=True, return_predicted_tokens=True,
        )  # fmt: skip
        accuracy, predicted = _expected(logits, target, reduction)
        assert torch.equal(out.predicted_tokens, predicted)
        torch.testing.assert_close(out.token_accuracy, accuracy, rtol=0, atol=0)
        out.loss.backward()
        assert x.grad is not None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
def test_module_keeps_torch_dtype_for_the_loss(dtype, device):
    logits, target = _logits(20, 64, dtype, device)
    module = tigon.nn.CrossEntropyLoss(
        lse_square_scale=1e-3, return_z_loss=True, return_token_accuracy=True,
        return_predicted_tokens=True,
    )  # fmt: skip
    out = module(logits, target)
    accuracy, predicted = _expected(logits, target, "mean")
    assert out.loss.dtype == out.z_loss.dtype == dtype
    assert out.token_accuracy.dtype == torch.float32
    torch.testing.assert_close(out.token_accuracy, accuracy, rtol=0, atol=0)
    assert torch.equal(out.predicted_tokens, predicted)


def _flce_problem(n, h, v, dtype, device):
    """Rows 2 and 7 of the weight (and bias) are equal, so their logits tie in every row; hidden
    rows 3k make them the largest."""
    hidden = torch.randn(n, h)
    weight = 0.3 * torch.randn(v, h)
    bias = 0.1 * torch.randn(v)
    weight[[2, 7]] = 0.5
    bias[[2, 7]] = 0.25
    hidden[::3] = 2.0
    target = torch.randint(0, v, (n,))
    target[::6], target[3::6] = 2, 7
    target[4::5] = -100
    return [t.to(device=device, dtype=dtype) for t in (hidden, weight, bias)] + [target.to(device)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("chunk", [None, 1, 5])
def test_fused_linear_matches_argmax_of_the_logits(chunk, reduction, dtype, device):
    hidden, weight, bias, target = _flce_problem(23, 16, 50, dtype, device)
    grads = reduction != "none"
    h = hidden.clone().requires_grad_(grads)
    out = tigon.ops.fused_linear_cross_entropy(
        h, weight, target, bias, reduction=reduction, chunk_size=chunk,
        return_token_accuracy=True, return_predicted_tokens=True,
    )  # fmt: skip
    logits = hidden.double() @ weight.double().T + bias.double()
    _, want = _expected(logits, target, reduction)
    top2 = logits.topk(2, -1).values
    margin = 0.3 if dtype == torch.bfloat16 else 1e-3  # the logits' roundings cannot flip these
    clear = (top2[:, 0] - top2[:, 1] > margin) | (target == -100)
    assert torch.equal(out.predicted_tokens[clear], want[clear])
    assert (out.predicted_tokens[::3][target[::3] != -100] == 2).all(), "the tie goes to class 2"
    accuracy, _ = _expected(logits, target, reduction)
    hits = (out.predicted_tokens == target).float()
    if reduction == "none":
        assert torch.equal(out.token_accuracy, hits)
    else:
        valid = target != -100
        torch.testing.assert_close(out.token_accuracy, hits[valid].sum() / valid.sum())
        if torch.equal(out.predicted_tokens, want):
            torch.testing.assert_close(out.token_accuracy, accuracy.float(), rtol=0, atol=0)
        plain = tigon.ops.fused_linear_cross_entropy(
            hidden.clone().requires_grad_(), weight, target, bias, reduction=reduction,
            chunk_size=chunk,
        )  # fmt: skip
        _same(out.loss, plain, device)
        out.loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_fused_linear_module(device):
    hidden, weight, bias, target = _flce_problem(12, 16, 30, torch.float32, device)
    module = tigon.nn.FusedLinearCrossEntropyLoss(
        return_token_accuracy=True, return_predicted_tokens=True
    )
    out = module(weight, hidden, target, bias)
    want = tigon.ops.fused_linear_cross_entropy(
        hidden, weight, target, bias, return_token_accuracy=True, return_predicted_tokens=True
    )
    assert torch.equal(out.predicted_tokens, want.predicted_tokens)
    assert torch.equal(out.token_accuracy, want.token_accuracy)
    assert torch.equal(out.loss, want.loss)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_opcheck(reduction, device):
    logits, target = _logits(9, 40, torch.float32, device)
    logits[2] = 0.0  # opcheck compares outputs with NaN-free inputs
    args = (logits.requires_grad_(), target, None, None, -100, reduction, 0.1, 1e-3, 2.0)
    for compute_grad in (True, False):
        torch.library.opcheck(OPS.cross_entropy_fwd.default, (*args, compute_grad, True, True))
    torch.library.opcheck(OPS.cross_entropy_fwd.default, (*args, True, False, True))
    inplace = (logits.detach().clone(), target, None, None, -100, "sum", 0.0, 0.0, 0.0, True, True)
    torch.library.opcheck(OPS.cross_entropy_fwd_inplace.default, inplace,
                          test_utils=("test_schema", "test_faketensor"))  # fmt: skip
    hidden, weight, bias, t = _flce_problem(9, 8, 20, torch.float32, device)
    grads = reduction != "none"
    flce = (hidden.requires_grad_(grads), weight.requires_grad_(grads), t, bias, None, None, None,
            -100, reduction, 0.0, 0.0, 0.0, False, 4, grads, grads, False, True, True, True)  # fmt: skip
    torch.library.opcheck(OPS.fused_linear_cross_entropy_fwd.default, flce)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("reduction", "in_place"), [("mean", False), ("none", False), ("sum", True)]
)
def test_compile_fullgraph(reduction, in_place, device):
    torch._dynamo.reset()
    logits, target = _logits(12, 70, torch.bfloat16, device)
    logits[2] = 1.0

    def f(x, t):
        out = tigon.ops.cross_entropy(
            x * 1.5, t, reduction=reduction, softcap=30.0, in_place=in_place,
            return_token_accuracy=True, return_predicted_tokens=True,
        )  # fmt: skip
        loss = out.loss.sum() if reduction == "none" else out.loss
        return loss, out.token_accuracy, out.predicted_tokens

    x1, x2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    eager = f(x1, target)
    compiled = torch.compile(f, fullgraph=True)(x2, target)
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want)
    eager[0].backward()
    compiled[0].backward()
    torch.testing.assert_close(x2.grad, x1.grad)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_fused_linear(device):
    torch._dynamo.reset()
    hidden, weight, bias, target = _flce_problem(16, 8, 30, torch.float32, device)

    def f(h, w):
        return tigon.ops.fused_linear_cross_entropy(
            h, w, target, bias, return_token_accuracy=True, return_predicted_tokens=True
        )

    leaves = [[t.clone().requires_grad_() for t in (hidden, weight)] for _ in range(2)]
    eager = f(*leaves[0])
    compiled = torch.compile(f, fullgraph=True)(*leaves[1])
    assert isinstance(compiled, CrossEntropyOutput)
    for got, want in zip(compiled, eager, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got, want)
    eager.loss.backward()
    compiled.loss.backward()
    for a, b in zip(leaves[0], leaves[1], strict=True):
        torch.testing.assert_close(b.grad, a.grad)
