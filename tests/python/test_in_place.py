"""The in-place rule (docs/ARCHITECTURE.md): an op writes into a buffer it did not allocate (an
incoming gradient, a saved input) only when nothing else can observe it.

Every op with an in-place path (RMSNorm, fused add + RMSNorm, LayerNorm, RoPE, SwiGLU, GeGLU, packed GLU, the GLU +
down_proj forms), with in_place=True, in the patterns where autograd shares a gradient or a user keeps one:
results bitwise equal to in_place=False and nothing the caller holds is changed. And the positive
side: the in-place path is taken when nothing else holds the buffer (the memory saving is kept).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from helpers import DEVICES
from torch import nn
from torch.utils.checkpoint import checkpoint

import tigon

ROWS, HIDDEN, OUT = 6, 32, 24


@dataclass(frozen=True)
class Case:
    """An op with an in-place path.

    ``make(device)``: the leaves (tensors, some requiring grad, or an nn.Linear). ``op(args,
    in_place)``: the outputs. The first ``saved`` args are inputs the backward may overwrite: they
    pass through ``* 1`` first (fresh buffers, like the projections feeding a GLU); the other ops
    may overwrite their incoming gradients instead: that of output ``grad_of``, which becomes
    the gradient of the first ``grad_leaves`` leaves (fused add + RMSNorm: dh becomes the one
    gradient of x and residual).
    """

    name: str
    make: Callable[[str], list[Any]]
    op: Callable[[list[Any], bool], tuple[torch.Tensor, ...]]
    saved: int = 0
    grad_of: int = 0
    grad_leaves: int = 1


def _leaf(*shape: int, device: str) -> torch.Tensor:
    return torch.randn(*shape, device=device).requires_grad_()


def _rms_norm_make(device: str) -> list[Any]:
    weight = (1 + 0.1 * torch.randn(HIDDEN, device=device)).requires_grad_()
    return [_leaf(ROWS, HIDDEN, device=device), weight]


def _rope_make(device: str) -> list[Any]:
    angles = torch.randn(2, 5, 8, device=device)
    emb = torch.cat((angles, angles), -1)
    q, k = _leaf(2, 4, 5, 16, device=device), _leaf(2, 2, 5, 16, device=device)
    return [q, k, emb.cos(), emb.sin()]


def _pair_make(device: str) -> list[Any]:
    return [_leaf(ROWS, HIDDEN, device=device), _leaf(ROWS, HIDDEN, device=device)]


def _packed_make(device: str) -> list[Any]:
    return [_leaf(ROWS, 2 * HIDDEN, device=device)]


def _down_proj_make(device: str) -> list[Any]:
    return [*_pair_make(device), nn.Linear(HIDDEN, OUT, device=device)]


def _packed_down_proj_make(device: str) -> list[Any]:
    return [*_packed_make(device), nn.Linear(HIDDEN, OUT, device=device)]


def _fused_add_rms_norm_make(device: str) -> list[Any]:
    return [*_pair_make(device), _rms_norm_make(device)[1]]


def _layer_norm_make(device: str) -> list[Any]:
    weight = (1 + 0.1 * torch.randn(HIDDEN, device=device)).requires_grad_()
    bias = (0.1 * torch.randn(HIDDEN, device=device)).requires_grad_()
    return [_leaf(ROWS, HIDDEN, device=device), weight, bias]


def _gated_rms_norm_make(device: str) -> list[Any]:
    return [*_pair_make(device), _rms_norm_make(device)[1]]


CASES = [
    Case(
        "layer_norm",
        _layer_norm_make,
        lambda a, ip: (tigon.ops.layer_norm(a[0], a[1], a[2], 1e-5, in_place=ip),),
    ),
    Case(
        "rms_norm",
        _rms_norm_make,
        lambda a, ip: (tigon.ops.rms_norm(a[0], a[1], 1e-6, in_place=ip),),
    ),
    Case(
        "fused_add_rms_norm",
        _fused_add_rms_norm_make,
        lambda a, ip: tigon.ops.fused_add_rms_norm(a[0], a[1], a[2], 1e-6, in_place=ip),
        grad_of=1,
        grad_leaves=2,
    ),
    Case(
        "gated_rms_norm",
        _gated_rms_norm_make,
        lambda a, ip: (tigon.ops.gated_rms_norm(a[0], a[1], a[2], 1e-6, in_place=ip),),
    ),
    Case("rope", _rope_make, lambda a, ip: tigon.ops.rope(*a, in_place=ip)),
    Case("swiglu", _pair_make, lambda a, ip: (tigon.ops.swiglu(*a, in_place=ip),), saved=2),
    Case("geglu", _pair_make, lambda a, ip: (tigon.ops.geglu(*a, in_place=ip),), saved=2),
    Case(
        "swiglu_packed",
        _packed_make,
        lambda a, ip: (tigon.ops.swiglu_packed(a[0], in_place=ip),),
        saved=1,
    ),
    Case(
        "glu_down_proj",
        _down_proj_make,
        lambda a, ip: (tigon.nn.glu_down_proj("silu", a[0], a[1], a[2], in_place=ip),),
        saved=2,
    ),
    Case(
        "glu_packed_down_proj",
        _packed_down_proj_make,
        lambda a, ip: (
            tigon.nn.glu_packed_down_proj("gelu_pytorch_tanh", a[0], a[1], in_place=ip),
        ),
        saved=1,
    ),
]
SAVED_CASES = [c for c in CASES if c.saved]
GRAD_CASES = [c for c in CASES if not c.saved]


def _ids(cases: list[Case]) -> list[str]:
    return [c.name for c in cases]


#: Ops without CUDA kernels yet (issue 36): their CUDA cases are skipped.
CPU_ONLY: set[str] = set()


@pytest.fixture(autouse=True)
def _skip_cpu_only_ops_on_cuda(request: pytest.FixtureRequest) -> None:
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    case = params.get("case")
    if params.get("device") == "cuda" and getattr(case, "name", None) in CPU_ONLY:
        pytest.skip(f"{case.name} has no CUDA kernels yet")


def _fresh(t: torch.Tensor, probe: dict[str, int] | None) -> torch.Tensor:
    """``t * 1``; with a probe, records the buffer's pointer and that of the gradient it gets
    (pointers only: a reference held here would itself make the buffer observable)."""
    f = t * 1
    if probe is not None and "input" not in probe:
        probe["input"] = f.data_ptr()
        f.register_hook(lambda g: probe.update(grad=g.data_ptr()))
    return f


def _run(
    case: Case, leaves: list[Any], in_place: bool, probe: dict[str, int] | None = None
) -> tuple[torch.Tensor, ...]:
    args = [_fresh(t, probe) for t in leaves[: case.saved]] + leaves[case.saved :]
    return case.op(args, in_place)


def _copy(leaves: list[Any]) -> list[Any]:
    return [
        copy.deepcopy(t)
        if isinstance(t, nn.Module)
        else t.detach().clone().requires_grad_(t.requires_grad)
        for t in leaves
    ]


def _grads_owners(leaves: list[Any]) -> list[torch.Tensor]:
    """The leaf tensors (a module's parameters) that require grad."""
    tensors: list[torch.Tensor] = []
    for t in leaves:
        tensors += list(t.parameters()) if isinstance(t, nn.Module) else [t]
    return [t for t in tensors if t.requires_grad]


def _grads(leaves: list[Any]) -> list[torch.Tensor | None]:
    return [t.grad for t in _grads_owners(leaves)]


def _assert_same_grads(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert (g is None) == (w is None), i
        if w is not None:
            assert torch.equal(g, w), f"gradient {i} differs from in_place=False"


def _both(case: Case, device: str, pattern: Callable[[list[Any], bool], None]) -> None:
    """Runs `pattern(leaves, in_place)` on copies of the same leaves with in_place True and
    False (the same random extras each time): every gradient bitwise equal. The pattern asserts
    its own invariants in both runs."""
    leaves = case.make(device)
    grads = []
    for in_place in (True, False):
        mine = _copy(leaves)
        torch.manual_seed(1)
        pattern(mine, in_place)
        grads.append(_grads(mine))
    _assert_same_grads(grads[0], grads[1])


def _like(outs: tuple[torch.Tensor, ...], requires_grad: bool = False) -> list[torch.Tensor]:
    return [torch.randn_like(o).requires_grad_(requires_grad) for o in outs]


# ------------------------------------------------------------------- shared or kept gradients


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
@pytest.mark.parametrize("through", [False, True], ids=["user_grad", "fresh_grad"])
def test_output_added_to_a_leaf(case: Case, through: bool, device: str) -> None:
    """(op(x) + b).backward(g): autograd hands the same gradient to both operands of the sum;
    b.grad must be g exactly and g must be unchanged. ``fresh_grad``: the sum goes through
    ``* 1`` (a gradient nobody but autograd holds) and b through ``* 1`` before the op, so that
    b's backward runs after the op's."""

    def pattern(leaves: list[Any], in_place: bool) -> None:
        shapes = [o.shape for o in _run(case, _copy(leaves), False)]
        b_leaves = [torch.randn(s, device=device, requires_grad=True) for s in shapes]
        bs = [b * 1 for b in b_leaves] if through else b_leaves
        outs = _run(case, leaves, in_place)
        gs = _like(outs)
        kept = [g.clone() for g in gs]
        sums = [o + b for o, b in zip(outs, bs, strict=True)]
        torch.autograd.backward([s * 1 if through else s for s in sums], gs)
        for b, g, g0 in zip(b_leaves, gs, kept, strict=True):
            assert torch.equal(g, g0), "the caller's gradient was overwritten"
            assert torch.equal(b.grad, g0), "the other operand's gradient was overwritten"

    _both(case, device, pattern)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_output_used_twice(case: Case, device: str) -> None:
    def pattern(leaves: list[Any], in_place: bool) -> None:
        outs = _run(case, leaves, in_place)
        gs = _like(outs)
        kept = [g.clone() for g in gs]
        torch.autograd.backward([(o + o * 3) * 1 for o in outs], gs)
        assert all(torch.equal(g, g0) for g, g0 in zip(gs, kept, strict=True))

    _both(case, device, pattern)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_output_added_to_a_residual_and_normed_again(case: Case, device: str) -> None:
    """h = op(x) + residual; z = rms_norm(h) + h (a post-norm on the residual stream): the
    gradient of h reaches both the second norm and the residual."""

    def pattern(leaves: list[Any], in_place: bool) -> None:
        outs = _run(case, leaves, in_place)
        residuals = _like(outs, requires_grad=True)
        hs = [o + r for o, r in zip(outs, residuals, strict=True)]
        zs = [tigon.ops.rms_norm(h, None, 1e-6, in_place=in_place) + h for h in hs]
        torch.autograd.backward([z * 1 for z in zs], _like(outs))
        leaves.extend(residuals)  # compared too

    _both(case, device, pattern)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_user_gradient_reused_after_backward(case: Case, device: str) -> None:
    """A gradient passed to backward() is the caller's: still equal to its original after the
    backward, and a second forward/backward with it gives the same gradients."""

    def pattern(leaves: list[Any], in_place: bool) -> None:
        gs = _like(_run(case, _copy(leaves), False))
        kept = [g.clone() for g in gs]
        runs = []
        for _ in range(2):
            mine = _copy(leaves)
            torch.autograd.backward(_run(case, mine, in_place), gs)
            assert all(torch.equal(g, g0) for g, g0 in zip(gs, kept, strict=True))
            runs.append(_grads(mine))
        _assert_same_grads(runs[1], runs[0])
        torch.autograd.backward(_run(case, leaves, in_place), gs)

    _both(case, device, pattern)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_retain_graph_double_backward(case: Case, device: str) -> None:
    """backward(retain_graph=True) twice through the same graph: identical gradients (a saved
    input overwritten by the first backward would corrupt the second)."""

    def pattern(leaves: list[Any], in_place: bool) -> None:
        outs = _run(case, leaves, in_place)
        gs = _like(outs)
        firsts = []
        for _ in range(2):
            for p in _grads_owners(leaves):
                p.grad = None
            torch.autograd.backward([o * 1 for o in outs], gs, retain_graph=True)
            firsts.append(_grads(leaves))
        _assert_same_grads(firsts[1], firsts[0])

    _both(case, device, pattern)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_hook_that_stores_the_gradient(case: Case, device: str) -> None:
    """A hook keeps the output's gradient; after the backward it still holds that gradient."""

    def pattern(leaves: list[Any], in_place: bool) -> None:
        outs = _run(case, leaves, in_place)
        stored: list[torch.Tensor] = []
        for o in outs:
            o.register_hook(stored.append)
        gs = _like(outs)
        torch.autograd.backward([o * 1 for o in outs], gs)
        assert len(stored) == len(gs)
        assert all(torch.equal(s, g) for s, g in zip(stored, gs, strict=True))

    _both(case, device, pattern)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_gradient_is_a_view_of_a_bucket(case: Case, device: str) -> None:
    """DDP-like: a hook hands on the gradient as a view of one bigger buffer (g =
    bucket[:n].view(shape)); the op must not write into the bucket."""

    def pattern(leaves: list[Any], in_place: bool) -> None:
        outs = _run(case, leaves, in_place)
        bucket = torch.zeros(sum(o.numel() for o in outs) + 7, device=device)
        offsets = []
        for o in outs:
            start = sum(outs[i].numel() for i in range(len(offsets)))
            offsets.append(start)

            def to_bucket(g: torch.Tensor, start: int = start) -> torch.Tensor:
                return bucket[start : start + g.numel()].view(g.shape).copy_(g)

            o.register_hook(to_bucket)
        gs = _like(outs)
        torch.autograd.backward([o * 1 for o in outs], gs)
        for g, start in zip(gs, offsets, strict=True):
            assert torch.equal(bucket[start : start + g.numel()].view(g.shape), g)

    _both(case, device, pattern)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_create_graph_keeps_every_buffer(case: Case, device: str) -> None:
    """backward(create_graph=True): autograd records the backward, so nothing is overwritten."""

    def pattern(leaves: list[Any], in_place: bool) -> None:
        outs = _run(case, leaves, in_place)
        gs = _like(outs)
        kept = [g.clone() for g in gs]
        torch.autograd.backward([o * 1 for o in outs], gs, create_graph=True)
        assert all(torch.equal(g, g0) for g, g0 in zip(gs, kept, strict=True))
        for t in _grads_owners(leaves):  # no reference cycle through .grad
            if t.grad is not None:
                t.grad = t.grad.detach()

    _both(case, device, pattern)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_activation_checkpointing(case: Case, device: str) -> None:
    """Non-reentrant activation checkpointing (saved-tensor hooks): same gradients."""

    def pattern(leaves: list[Any], in_place: bool) -> None:
        outs = checkpoint(lambda *a: _run(case, list(a), in_place), *leaves, use_reentrant=False)
        torch.autograd.backward([o * 1 for o in outs], _like(outs))

    _both(case, device, pattern)


# ------------------------------------------------------------------- the saving is kept


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", GRAD_CASES, ids=_ids(GRAD_CASES))
def test_unshared_incoming_gradient_is_reused(case: Case, device: str) -> None:
    """Nothing but autograd holds the incoming gradient: the op's input gradient is written into
    it (x.grad is that buffer: the leaf's AccumulateGrad adopts it), with in_place only."""
    for in_place in (True, False):
        leaves = case.make(device)
        if not in_place:
            # Accumulate into gradients that exist already: a buffer allocated once the incoming
            # gradient is freed (the second leaf's copy) could take its address and pass as it.
            for leaf in leaves[: case.grad_leaves]:
                leaf.grad = torch.zeros_like(leaf)
        outs = _run(case, leaves, in_place)
        seen: list[int] = []
        outs[case.grad_of].register_hook(lambda g: seen.append(g.data_ptr()))  # the pointer only
        torch.autograd.backward([o * 1 for o in outs], _like(outs))
        # Two leaves sharing one gradient: one AccumulateGrad adopts it, the other copies it.
        grads = {leaf.grad.data_ptr() for leaf in leaves[: case.grad_leaves]}
        assert (seen[0] in grads) == in_place


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", SAVED_CASES, ids=_ids(SAVED_CASES))
def test_unobserved_saved_input_becomes_its_gradient(case: Case, device: str) -> None:
    """A saved input nothing else holds (a fresh projection output) receives its own gradient,
    with in_place only."""
    for in_place in (True, False):
        probe: dict[str, int] = {}
        outs = _run(case, case.make(device), in_place, probe)
        torch.autograd.backward([o * 1 for o in outs], _like(outs))
        assert (probe["grad"] == probe["input"]) == in_place


# ------------------------------------------------------------------- saved inputs (GLU)


def _saved_args(case: Case, leaves: list[Any]) -> list[Any]:
    return [t * 1 for t in leaves[: case.saved]] + leaves[case.saved :]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", SAVED_CASES, ids=_ids(SAVED_CASES))
def test_saved_input_kept_alive_and_read_after_backward(case: Case, device: str) -> None:
    def pattern(leaves: list[Any], in_place: bool) -> None:
        args = _saved_args(case, leaves)
        kept = [a.detach().clone() for a in args[: case.saved]]
        outs = case.op(args, in_place)
        torch.autograd.backward([o * 1 for o in outs], _like(outs))
        for a, a0 in zip(args, kept, strict=False):
            assert torch.equal(a, a0), "an input the caller holds was overwritten"

    _both(case, device, pattern)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("before", [True, False], ids=["recorded_before", "recorded_after"])
@pytest.mark.parametrize("case", SAVED_CASES, ids=_ids(SAVED_CASES))
def test_saved_input_used_by_another_op(case: Case, before: bool, device: str) -> None:
    """The input is also saved by another op (sin saves its input): that op's backward must
    see the input's values, not the GLU's gradient. ``before``: sin is recorded first, so its
    backward runs after the GLU's."""

    def pattern(leaves: list[Any], in_place: bool) -> None:
        args = _saved_args(case, leaves)
        other = args[0].sin().sum() if before else None
        outs = case.op(args, in_place)
        other = args[0].sin().sum() if other is None else other
        del args
        torch.autograd.backward([(o + other) * 1 for o in outs], _like(outs))

    _both(case, device, pattern)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "out_of_place"])
@pytest.mark.parametrize("case", SAVED_CASES, ids=_ids(SAVED_CASES))
def test_saved_input_modified_in_place_is_an_error(case: Case, in_place: bool, device: str):
    args = _saved_args(case, case.make(device))
    outs = case.op(args, in_place)
    with torch.no_grad():
        args[0].add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.backward(list(outs), _like(outs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", SAVED_CASES, ids=_ids(SAVED_CASES))
def test_second_backward_without_retain_graph_is_an_error(case: Case, device: str) -> None:
    outs = _run(case, case.make(device), True)
    gs = _like(outs)
    torch.autograd.backward(list(outs), gs, retain_graph=True)
    torch.autograd.backward(list(outs), gs)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        torch.autograd.backward(list(outs), gs)


# ------------------------------------------------------------------- forward gradients


def _forward_grad_ops(device: str) -> dict[str, Callable[[], tuple[Any, ...]]]:
    """Ops whose forward computes the gradients for upstream 1 and whose backward scales them:
    ``call()`` -> (outputs, leaves, index of the first gradient output)."""
    gen = torch.Generator(device="cpu").manual_seed(3)
    logits = torch.randn(ROWS, OUT, generator=gen).to(device)
    hidden = torch.randn(ROWS, HIDDEN, generator=gen).to(device)
    weight = torch.randn(OUT, HIDDEN, generator=gen).to(device)
    bias = torch.randn(OUT, generator=gen).to(device)
    target = torch.randint(0, OUT, (ROWS,), generator=gen).to(device)
    ce = ("mean", 0.1, 1e-3, 0.0)

    def cross_entropy() -> tuple[Any, ...]:
        x = logits.clone().requires_grad_()
        outs = torch.ops.tigon.cross_entropy_fwd(x, target, None, None, -100, *ce, True)
        return outs, [x], 3

    def fused_linear() -> tuple[Any, ...]:
        leaves = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
        outs = torch.ops.tigon.fused_linear_cross_entropy_fwd(
            leaves[0], leaves[1], target, leaves[2], None, None, None, -100, *ce, False, 4, True,
            True, True, True,
        )  # fmt: skip
        return outs, leaves, 2

    def jsd() -> tuple[Any, ...]:
        x = torch.log_softmax(logits, -1).requires_grad_()
        outs = torch.ops.tigon.jsd_fwd(
            x, torch.log_softmax(logits.flip(0), -1), None, 0.3, -100, True
        )
        return outs, [x], 1

    def tvd() -> tuple[Any, ...]:
        x = torch.softmax(logits, -1).requires_grad_()
        outs = torch.ops.tigon.tvd_fwd(
            x, torch.softmax(logits.flip(0), -1), None, "sum", -100, True
        )
        return outs, [x], 1

    return {
        "cross_entropy": cross_entropy,
        "fused_linear_cross_entropy": fused_linear,
        "jsd": jsd,
        "tvd": tvd,
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["cross_entropy", "fused_linear_cross_entropy", "jsd", "tvd"])
def test_forward_gradient_held_by_the_caller_is_not_scaled(name: str, device: str) -> None:
    """A direct caller of the op keeps its gradient outputs: the backward scales copies, and the
    leaves get upstream * those gradients."""
    call = _forward_grad_ops(device)[name]
    outs, leaves, first = call()
    held = [g for g in outs[first:] if g.numel()]
    kept = [g.clone() for g in held]
    (outs[0] * 2.5).backward()
    assert all(torch.equal(g, g0) for g, g0 in zip(held, kept, strict=True))
    for leaf, g0 in zip(leaves, kept, strict=True):
        assert torch.equal(leaf.grad, g0 * 2.5)


# ------------------------------------------------------------------- the issue, defaults


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_module_default_keeps_a_shared_gradient(device: str) -> None:
    """The example of the issue: tigon.nn.RMSNorm defaults to in_place=True."""
    norm = tigon.nn.RMSNorm(256, device=device)
    assert norm.in_place
    x = torch.randn(4, 256, device=device, requires_grad=True)
    b = torch.randn(4, 256, device=device, requires_grad=True)
    g = torch.randn(4, 256, device=device)
    g0 = g.clone()
    (norm(x) + b).backward(g)
    assert torch.equal(b.grad, g) and torch.equal(g, g0)


# ------------------------------------------------------------------- explicit overwrites


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_in_place_overwrite_of_saved_logits_is_an_error(device: str) -> None:
    """cross_entropy(in_place=True) overwrites the logits (an explicit opt-in); when another op
    saved them for its backward, autograd's version counter reports it."""
    z = torch.randn(8, 11, device=device, requires_grad=True)
    target = torch.randint(0, 11, (8,), device=device)
    logits = torch.tanh(z)  # tanh saves its output: the logits
    loss = tigon.ops.cross_entropy(logits, target, in_place=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_ops_bump_versions(device: str) -> None:
    """Every op that writes into an argument bumps its version counter."""
    ops = torch.ops.tigon
    t = lambda *s: torch.randn(*s, device=device)  # noqa: E731
    x, dy = t(4, 8), t(4, 8)
    _, rstd = ops.rms_norm_fwd(x, None, 1e-6, 0.0, "llama")
    a, b = t(4, 8), t(4, 8)
    q, k, cos, sin = t(1, 2, 3, 8), t(1, 2, 3, 8), t(1, 3, 8), t(1, 3, 8)
    dq, dk = t(1, 2, 3, 8), t(1, 2, 3, 8)
    logits, grad = t(4, 8), t(4, 8)
    target = torch.zeros(4, dtype=torch.long, device=device)
    calls: list[tuple[Callable[[], object], list[torch.Tensor]]] = [
        (lambda: ops.rms_norm_bwd_inplace(dy, x, None, rstd, 0.0, "llama"), [dy]),
        (lambda: ops.swiglu_bwd_inplace(dy, a, b), [a, b]),
        (lambda: ops.geglu_bwd_inplace(dy, a, b), [a, b]),
        (lambda: ops.rope_fwd_inplace(q, k, cos, sin, 1), [q, k]),
        (lambda: ops.rope_bwd_inplace(dq, dk, cos, sin, 1), [dq, dk]),
        (
            lambda: ops.cross_entropy_fwd_inplace(
                logits, target, None, None, -100, "mean", 0.0, 0.0, 0.0
            ),
            [logits],
        ),
        (lambda: ops.cross_entropy_scale_grad_(grad, torch.ones((), device=device)), [grad]),
    ]
    dh = t(4, 8)
    calls.append(
        (lambda: ops.fused_add_rms_norm_bwd_inplace(dh, dy, x, None, rstd, 0.0, "llama"), [dh])
    )
    _, mean, ln_rstd = ops.layer_norm_fwd(x, None, None, 1e-5)
    calls.append((lambda: ops.layer_norm_bwd_inplace(dy, x, None, None, mean, ln_rstd), [dy]))
    gate, w, dyg = t(4, 8), t(8), t(4, 8)
    _, g_rstd = ops.gated_rms_norm_fwd(x, gate, w, 1e-6)
    calls.append((lambda: ops.gated_rms_norm_bwd_inplace(dyg, x, gate, w, g_rstd), [dyg]))
    for call, written in calls:
        before = [w._version for w in written]
        call()
        assert [w._version for w in written] == [v + 1 for v in before]
