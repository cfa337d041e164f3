"""Distillation losses: fake implementations of ``torch.ops.tigon.{kl_div,jsd,tvd}_{fwd,bwd}``
and :func:`kl_div`, :func:`jsd`, :func:`tvd`.

Formulas, options and roundings are specified in ``include/tigon/ops/divergence.h`` (and
docs/ops/divergence.md). Only ``input`` is differentiated; a ``target`` that requires grad is
refused. jsd and tvd compute the gradient in the forward (for upstream gradient 1, scaled on the
device in the backward), as the peer does; kl_div, whose gradient needs only the target, and
``reduction="none"`` recompute it in the backward in one pass. The autograd is C++
(``bindings/torch/divergence_autograd.cpp``).
"""

from __future__ import annotations

import torch

__all__ = ["DIVERGENCE_REDUCTIONS", "jsd", "kl_div", "tvd"]

DIVERGENCE_REDUCTIONS: tuple[str, ...] = ("batchmean", "mean", "sum", "none")

_OPS = "tigon::"


def _check_reduction(reduction: object, op: str) -> None:
    if reduction not in DIVERGENCE_REDUCTIONS:
        raise ValueError(
            f"tigon::{op}: argument 'reduction': expected 'batchmean', 'mean', 'sum' or 'none', "
            f"got {reduction!r}"
        )


def _forward_fake(
    input: torch.Tensor,  # noqa: A002
    reduction: str,
    none_dtype: torch.dtype,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    if reduction == "none":
        loss = input.new_empty(input.shape, dtype=none_dtype)
    else:
        loss = input.new_empty((), dtype=torch.float32)
    return loss, input.new_empty(input.shape if compute_grad else (0,))


def _grad_fake(input: torch.Tensor) -> torch.Tensor:  # noqa: A002
    return input.new_empty(input.shape)


@torch.library.register_fake(_OPS + "kl_div_fwd")
def _kl_div_fwd_fake(input, target, reduction, log_target, compute_grad):  # noqa: A002
    _check_reduction(reduction, "kl_div_fwd")
    return _forward_fake(input, reduction, input.dtype, compute_grad)


@torch.library.register_fake(_OPS + "kl_div_bwd")
def _kl_div_bwd_fake(grad_loss, input, target, reduction, log_target):  # noqa: A002
    return _grad_fake(input)


@torch.library.register_fake(_OPS + "jsd_fwd")
def _jsd_fwd_fake(input, target, labels, beta, ignore_index, compute_grad):  # noqa: A002
    return _forward_fake(input, "batchmean", torch.float32, compute_grad)


@torch.library.register_fake(_OPS + "jsd_bwd")
def _jsd_bwd_fake(grad_loss, input, target, labels, beta, ignore_index):  # noqa: A002
    return _grad_fake(input)


@torch.library.register_fake(_OPS + "tvd_fwd")
def _tvd_fwd_fake(input, target, labels, reduction, ignore_index, compute_grad):  # noqa: A002
    _check_reduction(reduction, "tvd_fwd")
    return _forward_fake(input, reduction, torch.float32, compute_grad)


@torch.library.register_fake(_OPS + "tvd_bwd")
def _tvd_bwd_fake(grad_loss, input, target, labels, reduction, ignore_index):  # noqa: A002
    return _grad_fake(input)


def _needs_grad(input: torch.Tensor) -> bool:  # noqa: A002
    return torch.is_grad_enabled() and input.requires_grad


def _labels(labels: torch.Tensor | None) -> torch.Tensor | None:
    """Per-row labels as the op takes them: int64, flattened."""
    if labels is None:
        return None
    return labels.reshape(-1).to(torch.int64)


def kl_div(
    input: torch.Tensor,  # noqa: A002  (torch's name)
    target: torch.Tensor,
    reduction: str = "mean",
    log_target: bool = False,
) -> torch.Tensor:
    """KL divergence as ``torch.nn.functional.kl_div`` (input: log-probabilities; target:
    probabilities, or log-probabilities with ``log_target``), read in their dtype and computed in
    float32: per element ``target * (log(target) - input)`` (0 where target is 0) or
    ``exp(target) * (target - input)``.

    Args:
        input, target: the same shape ``[..., V]`` and dtype (float32, float16 or bfloat16).
        reduction: ``"mean"`` (over every element), ``"batchmean"`` (sum / ``input.size(0)``),
            ``"sum"`` or ``"none"`` (per element).

    Returns:
        float32 ``[]``, or with ``reduction="none"`` input's shape and dtype (each element
        rounded once). Only ``input`` is differentiated.
    """
    _check_reduction(reduction, "kl_div")
    loss, _grad = torch.ops.tigon.kl_div_fwd(input, target, reduction, bool(log_target), False)
    return loss


def jsd(
    input: torch.Tensor,  # noqa: A002
    target: torch.Tensor,
    labels: torch.Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> torch.Tensor:
    """Generalized Jensen-Shannon divergence of the peer (LigerJSD) and TRL's GKD:
    ``beta * KL(P || M) + (1 - beta) * KL(Q || M)``, ``M = beta * P + (1 - beta) * Q``, with
    ``Q = exp(input)`` (the student), ``P = exp(target)`` (the teacher); ``beta = 0`` is the
    forward KL(P || Q) and ``beta = 1`` the reverse KL(Q || P), as the peer and TRL define them.

    Args:
        input, target: ``[..., V]`` log-probabilities of the same shape and dtype.
        labels: one per row (e.g. shifted labels); rows whose label is ``ignore_index`` are left
            out of the loss and of the count.
        beta: in [0, 1].

    Returns:
        float32 ``[]``: the sum over non-ignored rows / their count (0 when there are none).
    """
    loss, _grad = torch.ops.tigon.jsd_fwd(
        input, target, _labels(labels), float(beta), int(ignore_index), _needs_grad(input)
    )
    return loss


def tvd(
    input: torch.Tensor,  # noqa: A002
    target: torch.Tensor,
    labels: torch.Tensor | None = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
) -> torch.Tensor:
    """Total variation distance of the peer (LigerTVDLoss): ``0.5 * |input - target|`` per element
    (probabilities), with the gradient ``+-0.5`` (``-0.5`` where they are equal).

    Args:
        input, target: ``[..., V]`` probabilities of the same shape and dtype.
        labels: one per row; rows whose label is ``ignore_index`` count for nothing.
        reduction: ``"batchmean"`` (sum / non-ignored rows), ``"mean"`` (sum / (rows * V)),
            ``"sum"`` or ``"none"``.

    Returns:
        float32: ``[]``, or input's shape with ``reduction="none"``.
    """
    _check_reduction(reduction, "tvd")
    compute_grad = _needs_grad(input) and reduction != "none"
    loss, _grad = torch.ops.tigon.tvd_fwd(
        input, target, _labels(labels), reduction, int(ignore_index), compute_grad
    )
    return loss
