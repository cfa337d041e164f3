"""Cross-entropy: fake implementations of ``torch.ops.tigon.cross_entropy_*`` and
:func:`cross_entropy`.

The formula, options and roundings are specified in ``include/tigon/ops/cross_entropy.h``.
The gradient is computed in the forward (for upstream gradient 1) and scaled on the device in
the backward, unless ``reduction="none"``: then the forward keeps the per-row log-sum-exp and the
backward recomputes the gradient with the per-row upstream gradient in one pass. The autograd of
``cross_entropy_fwd`` and ``cross_entropy_fwd_inplace`` is C++
(``bindings/torch/cross_entropy_autograd.cpp``: far less host time per call than a Python
registration).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

__all__ = ["REDUCTIONS", "CrossEntropyOutput", "cross_entropy"]

REDUCTIONS: tuple[str, ...] = ("mean", "sum", "none")

_OPS = "tigon::"


def _check_reduction(reduction: object, op: str, num_items_in_batch: object = None) -> None:
    """The reduction is one of REDUCTIONS, and HF's num_items_in_batch comes with "sum"."""
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"tigon::{op}: argument 'reduction': expected 'mean', 'sum' or 'none', "
            f"got {reduction!r}"
        )
    if num_items_in_batch is not None and reduction != "sum":
        raise ValueError(
            f"tigon::{op}: argument 'num_items_in_batch': expected reduction='sum' "
            f"(the summed loss is divided by it), got reduction={reduction!r}"
        )


class CrossEntropyOutput(NamedTuple):
    """What the losses return when ``return_token_accuracy`` or ``return_predicted_tokens`` is
    set (fields not asked for are None)."""

    loss: torch.Tensor
    z_loss: torch.Tensor | None = None
    token_accuracy: torch.Tensor | None = None
    predicted_tokens: torch.Tensor | None = None


def _loss_like(logits: torch.Tensor, target: torch.Tensor, reduction: str) -> torch.Tensor:
    shape = (target.numel(),) if reduction == "none" else ()
    return logits.new_empty(shape, dtype=torch.float32)


def _predictions_like(
    like: torch.Tensor, target: torch.Tensor, reduction: str, predicted: bool, accuracy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fakes' (predicted, accuracy): [N] int64 and the loss's shape, or [0] when not asked."""
    pred = like.new_empty((target.numel() if predicted else 0,), dtype=torch.int64)
    acc = (
        _loss_like(like, target, reduction)
        if accuracy
        else like.new_empty((0,), dtype=torch.float32)
    )
    return pred, acc


@torch.library.register_fake(_OPS + "cross_entropy_fwd")
def _fwd_fake(
    logits, target, weight, divisor, ignore_index, reduction, label_smoothing, lse_square_scale,
    softcap, compute_grad, compute_predicted=False, compute_accuracy=False,
):  # fmt: skip
    _check_reduction(reduction, "cross_entropy_fwd")
    loss = _loss_like(logits, target, reduction)
    lse = logits.new_empty((target.numel(),), dtype=torch.float32)
    grad = logits.new_empty(logits.shape if compute_grad else (0,))
    predictions = _predictions_like(logits, target, reduction, compute_predicted, compute_accuracy)
    return loss, torch.empty_like(loss), lse, grad, *predictions


@torch.library.register_fake(_OPS + "cross_entropy_fwd_inplace")
def _fwd_inplace_fake(
    logits, target, weight, divisor, ignore_index, reduction, label_smoothing, lse_square_scale,
    softcap, compute_predicted=False, compute_accuracy=False,
):  # fmt: skip
    _check_reduction(reduction, "cross_entropy_fwd_inplace")
    loss = _loss_like(logits, target, reduction)
    lse = logits.new_empty((target.numel(),), dtype=torch.float32)
    predictions = _predictions_like(logits, target, reduction, compute_predicted, compute_accuracy)
    return loss, torch.empty_like(loss), lse, *predictions


@torch.library.register_fake(_OPS + "cross_entropy_bwd")
def _bwd_fake(
    grad_loss, logits, target, weight, divisor, lse, ignore_index, reduction, label_smoothing,
    lse_square_scale, softcap,
):  # fmt: skip
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


@torch.library.register_fake(_OPS + "cross_entropy_scale_grad_")
def _scale_fake(grad, grad_loss):
    return None


@torch.library.register_fake(_OPS + "cross_entropy_scale_grad")
def _scaled_fake(grad, grad_loss):
    return torch.empty_like(grad, memory_format=torch.contiguous_format)


def _result(
    loss: torch.Tensor,
    z_loss: torch.Tensor,
    predicted: torch.Tensor,
    accuracy: torch.Tensor,
    rows_shape: torch.Size,
    reduction: str,
    return_z_loss: bool,
    return_token_accuracy: bool,
    return_predicted_tokens: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | CrossEntropyOutput:
    """The losses' return value from the op's outputs: the loss, ``(loss, z_loss)`` with
    return_z_loss alone, a :class:`CrossEntropyOutput` when a prediction is asked for."""

    def per_row(t: torch.Tensor) -> torch.Tensor:
        return t.view(rows_shape) if reduction == "none" else t

    loss, z_loss = per_row(loss), per_row(z_loss)
    if not (return_token_accuracy or return_predicted_tokens):
        return (loss, z_loss) if return_z_loss else loss
    return CrossEntropyOutput(
        loss,
        z_loss if return_z_loss else None,
        per_row(accuracy) if return_token_accuracy else None,
        predicted.view(rows_shape) if return_predicted_tokens else None,
    )


def _divisor(value: Any, device: torch.device) -> torch.Tensor | None:
    """HF's num_items_in_batch as one float32 element on `device`, without a host sync."""
    if value is None:
        return None
    if torch.is_tensor(value):
        return value.to(device=device, dtype=torch.float32)
    return torch.full((), float(value), dtype=torch.float32, device=device)


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: float | None = None,
    return_z_loss: bool = False,
    num_items_in_batch: torch.Tensor | int | float | None = None,
    in_place: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | CrossEntropyOutput:
    """Cross-entropy of ``[..., V]`` logits, computed in float32 (``F.cross_entropy`` on
    ``logits.float()``, which is what Hugging Face computes), with a float32 result.

    Args:
        logits: ``[..., V]`` float32, float16 or bfloat16, read in its own dtype.
        target: class indices with ``logits.shape[:-1]`` elements (any integer dtype).
        weight: ``[V]`` class weights (as ``F.cross_entropy``), or None.
        ignore_index: targets equal to it contribute nothing.
        reduction: ``"mean"`` (over non-ignored targets, weighted by their class weights),
            ``"sum"`` or ``"none"`` (shape ``logits.shape[:-1]``). An all-ignored batch gives 0.
        label_smoothing: in [0, 1], as ``F.cross_entropy``.
        lse_square_scale: z-loss coefficient: adds ``lse_square_scale * logsumexp(logits)**2``
            per non-ignored row (averaged over non-ignored rows for "mean").
        softcap: Gemma2's final-logit soft-capping, ``softcap * tanh(logits / softcap)``.
        return_z_loss: also return the z-loss part (for logging; not differentiable).
        num_items_in_batch: with ``reduction="sum"``, divide by it (HF's gradient-accumulation
            normalization); a tensor stays on the device (no synchronization).
        in_place: write the gradient into ``logits``' buffer during the forward (no memory
            beyond the logits). An explicit overwrite: the logits are gone afterwards, so only
            when nothing else reads them. Their version counter is bumped, so autograd raises if
            another op saved them for its backward. Ignored for ``reduction="none"`` and when no
            gradient is needed.
        return_token_accuracy: also return the token accuracy (float32, not differentiable): the
            fraction of non-ignored targets equal to the argmax of their row's (soft-capped)
            logits, 0 without any; per row (1 or 0, 0 for ignored rows) for ``reduction="none"``.
        return_predicted_tokens: also return each row's argmax (int64, ``logits.shape[:-1]``; -1
            where the target is ``ignore_index``). Ties go to the first index and NaN counts as
            the largest value, as ``torch.argmax``. Both come from the pass that computes the
            loss: no logits are read again.

    Returns:
        The loss, float32 for every logits dtype (the op-level API and HF's upcast loss), or
        ``(loss, z_loss)`` when ``return_z_loss`` alone; with ``return_token_accuracy`` or
        ``return_predicted_tokens``, a :class:`CrossEntropyOutput` ``(loss, z_loss,
        token_accuracy, predicted_tokens)`` whose fields not asked for are None. The drop-ins
        for torch,
        :class:`tigon.nn.CrossEntropyLoss` and :func:`tigon.nn.functional.cross_entropy`, return
        the logits' dtype as torch does (docs/ops/cross_entropy.md, "Output dtype").
    """
    _check_reduction(reduction, "cross_entropy", num_items_in_batch)
    vocab = logits.shape[-1]
    flat_logits = logits.reshape(-1, vocab)
    flat_target = target.reshape(-1)
    if flat_target.dtype != torch.int64:
        flat_target = flat_target.long()
    divisor = _divisor(num_items_in_batch, logits.device)
    cap = 0.0 if softcap is None else float(softcap)
    options = (int(ignore_index), reduction, float(label_smoothing), float(lse_square_scale), cap)
    needs_grad = torch.is_grad_enabled() and logits.requires_grad
    predictions = (bool(return_predicted_tokens), bool(return_token_accuracy))
    if in_place and needs_grad and reduction != "none":
        loss, z_loss, _lse, predicted, accuracy = torch.ops.tigon.cross_entropy_fwd_inplace(
            flat_logits, flat_target, weight, divisor, *options, *predictions
        )
    else:
        compute_grad = needs_grad and reduction != "none"
        loss, z_loss, _lse, _grad, predicted, accuracy = torch.ops.tigon.cross_entropy_fwd(
            flat_logits, flat_target, weight, divisor, *options, compute_grad, *predictions
        )
    return _result(
        loss, z_loss, predicted, accuracy, logits.shape[:-1], reduction, return_z_loss,
        return_token_accuracy, return_predicted_tokens,
    )  # fmt: skip
