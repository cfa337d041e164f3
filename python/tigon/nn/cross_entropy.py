"""``tigon.nn.CrossEntropyLoss``: ``torch.nn.CrossEntropyLoss`` computed in float32 by tigon, with
torch's output dtype."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.cross_entropy import REDUCTIONS, CrossEntropyOutput, cross_entropy

__all__ = ["CrossEntropyLoss"]


class CrossEntropyLoss(nn.Module):
    """Cross-entropy over the last dimension of ``[..., V]`` logits, computed in float32 whatever
    their dtype, plus z-loss and soft-capping. The loss has the logits' dtype, as
    ``torch.nn.CrossEntropyLoss`` returns: the float32 result rounded once (for bfloat16 / float16
    logits, ``nn.CrossEntropyLoss`` on ``logits.float()`` then ``.to(logits.dtype)``). Gradients
    are those of :func:`tigon.ops.cross_entropy` (the float32 op-level loss, docs/ops/
    cross_entropy.md, "Output dtype").

    Args mirror :func:`tigon.ops.cross_entropy`; ``forward(logits, target)`` returns the loss, or
    ``(loss, z_loss)`` with ``return_z_loss=True`` (both in the logits' dtype), or with
    ``return_token_accuracy`` / ``return_predicted_tokens`` a
    :class:`tigon.ops.CrossEntropyOutput` (loss and z-loss in the logits' dtype, the token
    accuracy float32, the predicted tokens int64).
    """

    def __init__(
        self,
        weight: torch.Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        lse_square_scale: float = 0.0,
        softcap: float | None = None,
        return_z_loss: bool = False,
        in_place: bool = False,
        return_token_accuracy: bool = False,
        return_predicted_tokens: bool = False,
    ) -> None:
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"CrossEntropyLoss: reduction must be one of {REDUCTIONS}")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(
                f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}"
            )
        if softcap is not None and not softcap > 0:
            raise ValueError(f"CrossEntropyLoss: softcap must be > 0 or None, got {softcap}")
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.lse_square_scale = lse_square_scale
        self.softcap = softcap
        self.return_z_loss = return_z_loss
        self.in_place = in_place
        self.return_token_accuracy = return_token_accuracy
        self.return_predicted_tokens = return_predicted_tokens

    def forward(
        self, logits: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | CrossEntropyOutput:
        out = cross_entropy(
            logits,
            target,
            self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
            lse_square_scale=self.lse_square_scale,
            softcap=self.softcap,
            return_z_loss=self.return_z_loss,
            in_place=self.in_place,
            return_token_accuracy=self.return_token_accuracy,
            return_predicted_tokens=self.return_predicted_tokens,
        )
        if isinstance(out, CrossEntropyOutput):
            z_loss = None if out.z_loss is None else out.z_loss.to(logits.dtype)
            return out._replace(loss=out.loss.to(logits.dtype), z_loss=z_loss)
        if self.return_z_loss:
            return out[0].to(logits.dtype), out[1].to(logits.dtype)
        return out.to(logits.dtype)

    def extra_repr(self) -> str:
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
            f"label_smoothing={self.label_smoothing}, lse_square_scale={self.lse_square_scale}, "
            f"softcap={self.softcap}"
        )
