"""``tigon.nn.functional``: drop-ins for ``torch.nn.functional`` (same signature, same output
dtype), computed by tigon's operators.

The op-level functions are in :mod:`tigon.ops`; these only adapt torch's calling convention.
"""

from __future__ import annotations

import torch
from torch.nn import _reduction

from tigon.ops.cross_entropy import cross_entropy as _cross_entropy
from tigon.ops.divergence import kl_div as _kl_div
from tigon.ops.group_norm import group_norm as _group_norm
from tigon.ops.layer_norm import layer_norm as _layer_norm

__all__ = ["cross_entropy", "group_norm", "kl_div", "layer_norm"]


def cross_entropy(
    input: torch.Tensor,  # noqa: A002  (torch's name)
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """``torch.nn.functional.cross_entropy`` with class-index targets, computed by
    :func:`tigon.ops.cross_entropy` in float32 and returned in ``input``'s dtype, as torch returns
    it (for bfloat16 / float16 input: ``F.cross_entropy(input.float(), ...)`` rounded once to the
    input's dtype).

    Shapes as torch: ``input`` ``[C]``, ``[N, C]`` or ``[N, C, d1, ...]`` (classes in dimension 1),
    ``target`` ``[]``, ``[N]`` or ``[N, d1, ...]``; ``reduction="none"`` gives the target's shape.
    ``size_average`` and ``reduce`` are torch's deprecated forms of ``reduction``. Not supported:
    class-probability targets (a floating ``target``). Differences from torch: a ``mean`` over a
    batch whose targets are all ``ignore_index`` is 0, not NaN (docs/ops/cross_entropy.md).
    """
    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce)
    if target.is_floating_point():
        raise ValueError(
            "tigon.nn.functional.cross_entropy: argument 'target': expected class indices (an "
            f"integer tensor), got {target.dtype} (class probabilities are not supported)"
        )
    logits = input.movedim(1, -1) if input.dim() > 2 else input
    loss = _cross_entropy(
        logits,
        target,
        weight,
        ignore_index=ignore_index,
        reduction=reduction,
        label_smoothing=label_smoothing,
    )
    return loss.to(input.dtype)


def group_norm(
    input: torch.Tensor,  # noqa: A002  (torch's name)
    num_groups: int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``torch.nn.functional.group_norm``, computed by :func:`tigon.ops.group_norm`: float32
    statistics, one rounding to ``input``'s dtype, as torch (docs/ops/group_norm.md)."""
    return _group_norm(input, num_groups, weight, bias, eps)


def layer_norm(
    input: torch.Tensor,  # noqa: A002  (torch's name)
    normalized_shape: list[int] | tuple[int, ...] | torch.Size,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` over the last dimension (``normalized_shape`` must be
    ``input.shape[-1:]``), computed by :func:`tigon.ops.layer_norm`: float32 statistics, one
    rounding to ``input``'s dtype, as torch (docs/ops/layer_norm.md)."""
    if tuple(normalized_shape) != tuple(input.shape[-1:]):
        raise ValueError(
            "tigon.nn.functional.layer_norm: normalized_shape must be the last dimension of "
            f"input ({tuple(input.shape[-1:])}), got {tuple(normalized_shape)}"
        )
    return _layer_norm(input, weight, bias, eps)


def kl_div(
    input: torch.Tensor,  # noqa: A002  (torch's name)
    target: torch.Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> torch.Tensor:
    """``torch.nn.functional.kl_div`` computed by :func:`tigon.ops.kl_div` in float32 and returned
    in torch's dtype (input's and target's promoted dtype; both are cast to it first). Shapes:
    ``input`` and ``target`` the same (no broadcasting). ``size_average`` and ``reduce`` are
    torch's deprecated forms of ``reduction``. Only ``input`` is differentiated (a ``target`` that
    requires grad is refused)."""
    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce)
    dtype = torch.promote_types(input.dtype, target.dtype)
    loss = _kl_div(input.to(dtype), target.to(dtype), reduction=reduction, log_target=log_target)
    return loss.to(dtype)
