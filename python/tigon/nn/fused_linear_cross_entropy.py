"""``tigon.nn.FusedLinearCrossEntropyLoss``: the cross-entropy of an LM head's logits without the
logits, as a module (the calling convention of Liger's ``LigerFusedLinearCrossEntropyLoss``)."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.cross_entropy import CrossEntropyOutput, _check_reduction
from tigon.ops.fused_linear_cross_entropy import fused_linear_cross_entropy

__all__ = ["FusedLinearCrossEntropyLoss"]


class FusedLinearCrossEntropyLoss(nn.Module):
    """:func:`tigon.ops.fused_linear_cross_entropy` as a module; the loss is float32.

    Args mirror the function (``ce_weight``, ``ignore_index``, ``lse_square_scale``,
    ``label_smoothing``, ``reduction``, ``softcap``, ``return_z_loss``, ``accum_dtype``,
    ``use_token_scaling``, ``chunk_size``, ``return_token_accuracy``,
    ``return_predicted_tokens``). ``forward(lin_weight, hidden, target, bias=None,
    token_scale=None)`` takes the LM head's ``[V, H]`` weight first, as Liger's module does, and
    returns the loss, ``(loss, z_loss)`` with ``return_z_loss=True``, or a
    ``tigon.ops.CrossEntropyOutput`` with either ``return_token_accuracy`` or
    ``return_predicted_tokens``. With
    ``reduction="none"`` the loss has ``target``'s shape and any upstream gradient works.
    """

    def __init__(
        self,
        ce_weight: torch.Tensor | None = None,
        ignore_index: int = -100,
        lse_square_scale: float = 0.0,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
        softcap: float | None = None,
        return_z_loss: bool = False,
        accum_dtype: torch.dtype | None = None,
        use_token_scaling: bool = False,
        chunk_size: int | None = None,
        return_token_accuracy: bool = False,
        return_predicted_tokens: bool = False,
    ) -> None:
        super().__init__()
        _check_reduction(reduction, "FusedLinearCrossEntropyLoss")  # the op checks the rest
        self.register_buffer("ce_weight", ce_weight)
        self.ignore_index = ignore_index
        self.lse_square_scale = lse_square_scale
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.softcap = softcap
        self.return_z_loss = return_z_loss
        self.accum_dtype = accum_dtype
        self.use_token_scaling = use_token_scaling
        self.chunk_size = chunk_size
        self.return_token_accuracy = return_token_accuracy
        self.return_predicted_tokens = return_predicted_tokens

    def forward(
        self,
        lin_weight: torch.Tensor,
        hidden: torch.Tensor,
        target: torch.Tensor,
        bias: torch.Tensor | None = None,
        token_scale: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | CrossEntropyOutput:
        return fused_linear_cross_entropy(
            hidden,
            lin_weight,
            target,
            bias,
            self.ce_weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
            lse_square_scale=self.lse_square_scale,
            softcap=self.softcap,
            return_z_loss=self.return_z_loss,
            chunk_size=self.chunk_size,
            accum_dtype=self.accum_dtype,
            token_scale=token_scale,
            use_token_scaling=self.use_token_scaling,
            return_token_accuracy=self.return_token_accuracy,
            return_predicted_tokens=self.return_predicted_tokens,
        )

    def extra_repr(self) -> str:
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
            f"label_smoothing={self.label_smoothing}, lse_square_scale={self.lse_square_scale}, "
            f"softcap={self.softcap}, use_token_scaling={self.use_token_scaling}"
        )
