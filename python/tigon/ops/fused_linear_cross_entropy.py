"""Fused linear cross-entropy: fake implementations of
``torch.ops.tigon.fused_linear_cross_entropy_fwd`` / ``_bwd``, and
:func:`fused_linear_cross_entropy`.

For reduction mean and sum the forward computes the loss and, chunk by chunk, the gradients of
hidden, weight and bias (``include/tigon/ops/fused_linear_cross_entropy.h``); the backward only
scales them by the upstream gradient on the device (in place when nothing else holds them, and
not at all when it is 1). For reduction none the upstream gradient is per row: the backward
recomputes the logits chunk by chunk with it (``fused_linear_cross_entropy_bwd``). The autograd is
C++ (``bindings/torch/fused_linear_cross_entropy_autograd.cpp``).
"""

from __future__ import annotations

import torch

from tigon.ops.cross_entropy import (
    CrossEntropyOutput,
    _check_reduction,
    _divisor,
    _predictions_like,
    _result,
)

__all__ = ["fused_linear_cross_entropy"]

_OP = "tigon::fused_linear_cross_entropy_fwd"


def _grads_like(hidden, weight, bias, grad_hidden, grad_weight, grad_bias):
    dx = hidden.new_empty(hidden.shape if grad_hidden else (0,))
    dw = weight.new_empty(weight.shape if grad_weight else (0,))
    db = (
        hidden.new_empty((0,))
        if bias is None
        else bias.new_empty(bias.shape if grad_bias else (0,))
    )
    return dx, dw, db


@torch.library.register_fake(_OP)
def _fake(
    hidden, weight, target, bias, class_weight, divisor, token_scale, ignore_index, reduction,
    label_smoothing, lse_square_scale, softcap, use_token_scaling, chunk_rows, grad_hidden,
    grad_weight, grad_bias, accum_fp32, compute_predicted=False, compute_accuracy=False,
):  # fmt: skip
    _check_reduction(reduction, "fused_linear_cross_entropy_fwd")
    shape = (target.numel(),) if reduction == "none" else ()
    loss = hidden.new_empty(shape, dtype=torch.float32)
    grads = _grads_like(hidden, weight, bias, grad_hidden, grad_weight, grad_bias)
    predictions = _predictions_like(hidden, target, reduction, compute_predicted, compute_accuracy)
    return loss, torch.empty_like(loss), *grads, *predictions


@torch.library.register_fake("tigon::fused_linear_cross_entropy_bwd")
def _bwd_fake(
    grad_loss, hidden, weight, target, bias, class_weight, divisor, token_scale, ignore_index,
    reduction, label_smoothing, lse_square_scale, softcap, use_token_scaling, chunk_rows,
    grad_hidden, grad_weight, grad_bias, accum_fp32,
):  # fmt: skip
    _check_reduction(reduction, "fused_linear_cross_entropy_bwd")
    return _grads_like(hidden, weight, bias, grad_hidden, grad_weight, grad_bias)


def fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ce_weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: float | None = None,
    return_z_loss: bool = False,
    num_items_in_batch: torch.Tensor | int | float | None = None,
    chunk_size: int | None = None,
    accum_dtype: torch.dtype | None = None,
    token_scale: torch.Tensor | None = None,
    use_token_scaling: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | CrossEntropyOutput:
    """``tigon.ops.cross_entropy(hidden @ weight.T + bias, target, ...)`` without the logits.

    Args:
        hidden: ``[..., H]`` hidden states (the LM head's input), float32/float16/bfloat16.
        weight: ``[V, H]`` LM-head weight; cast to ``hidden``'s dtype if it differs (as autocast).
        target: class indices with ``hidden.shape[:-1]`` elements; shifting is the caller's.
        bias: ``[V]`` or None. ce_weight: ``[V]`` class weights or None.
        ignore_index, reduction, label_smoothing, lse_square_scale, softcap, return_z_loss,
            num_items_in_batch: as :func:`tigon.ops.cross_entropy` (softcap is Gemma2's
            ``final_logit_softcapping``; HF's ``num_items_in_batch`` goes with reduction="sum").
            With reduction="none" any upstream gradient works (``loss.backward(g)``): the
            backward recomputes the logits chunk by chunk (one more pass of GEMMs).
        chunk_size: rows per chunk (default: chunk logits of at most 256 MiB on CUDA; on the
            CPU at most 256 KiB, but at least 256 rows).
        accum_dtype: dtype the weight gradient accumulates in across chunks: float32 (default)
            or the weight's dtype (less memory, less precise).
        token_scale: per-token factor with ``target``'s number of elements (any float dtype,
            used in float32), multiplying each token's loss and gradient in every reduction; the
            mean's denominator is unchanged. A constant: no gradient flows to it.
        use_token_scaling: also multiply each token's loss and gradient by its target's
            probability ``softmax(logits)[target]``, detached (Liger's ``use_token_scaling``;
            computed in float32).
        return_token_accuracy, return_predicted_tokens: as :func:`tigon.ops.cross_entropy`, of
            the logits ``hidden @ weight.T + bias`` rounded to ``hidden``'s dtype (the training
            loop's accuracy metric without logits).

    Returns:
        As :func:`tigon.ops.cross_entropy`.
    """
    _check_reduction(reduction, "fused_linear_cross_entropy", num_items_in_batch)
    h = hidden.reshape(-1, hidden.shape[-1])
    w = weight if weight.dtype == hidden.dtype else weight.to(hidden.dtype)
    t = target.reshape(-1)
    if t.dtype != torch.int64:
        t = t.long()
    # reduction none: no gradient in the forward; the backward recomputes them for its upstream.
    grad_on = torch.is_grad_enabled() and reduction != "none"
    flags = [grad_on and x is not None and x.requires_grad for x in (h, w, bias)]
    scale = None if token_scale is None else token_scale.reshape(-1)
    if accum_dtype is not None and accum_dtype not in (torch.float32, w.dtype):
        raise ValueError(f"accum_dtype must be torch.float32 or {w.dtype}, got {accum_dtype}")
    accum_fp32 = accum_dtype is None or accum_dtype == torch.float32
    loss, z_loss, *_, predicted, accuracy = torch.ops.tigon.fused_linear_cross_entropy_fwd(
        h, w, t, bias, ce_weight, _divisor(num_items_in_batch, hidden.device), scale,
        int(ignore_index), reduction, float(label_smoothing), float(lse_square_scale),
        0.0 if softcap is None else float(softcap), bool(use_token_scaling),
        int(chunk_size or 0), *flags, accum_fp32,
        bool(return_predicted_tokens), bool(return_token_accuracy),
    )  # fmt: skip
    return _result(
        loss, z_loss, predicted, accuracy, hidden.shape[:-1], reduction, return_z_loss,
        return_token_accuracy, return_predicted_tokens,
    )  # fmt: skip
