"""Distillation loss modules: ``tigon.nn.KLDivLoss`` (``torch.nn.KLDivLoss``'s signature and
output dtype), ``tigon.nn.JSD`` and ``tigon.nn.TVDLoss`` (the peer's ``LigerJSD`` and
``LigerTVDLoss`` signatures)."""

from __future__ import annotations

import torch
from torch import nn

from tigon.nn.functional import kl_div
from tigon.ops.divergence import jsd, tvd

__all__ = ["JSD", "KLDivLoss", "TVDLoss"]


class KLDivLoss(nn.KLDivLoss):
    """``torch.nn.KLDivLoss`` (same arguments, including the deprecated ``size_average`` and
    ``reduce``) computed by :func:`tigon.nn.functional.kl_div`."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class JSD(nn.Module):
    """Generalized Jensen-Shannon divergence (:func:`tigon.ops.jsd`), as the peer's ``LigerJSD``:
    ``forward(log_q, log_p, shift_labels=None)`` with the student's log-probabilities ``log_q``
    and the teacher's ``log_p``; the loss in ``log_q``'s dtype."""

    def __init__(self, beta: float = 0.5, ignore_index: int = -100) -> None:
        super().__init__()
        if not 0.0 <= beta <= 1.0:
            raise ValueError(
                f"tigon.nn.JSD: argument 'beta': expected a value in [0, 1], got {beta}"
            )
        self.beta = beta
        self.ignore_index = ignore_index

    def forward(
        self, log_q: torch.Tensor, log_p: torch.Tensor, shift_labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        loss = jsd(log_q, log_p, shift_labels, beta=self.beta, ignore_index=self.ignore_index)
        return loss.to(log_q.dtype)


class TVDLoss(nn.Module):
    """Total variation distance (:func:`tigon.ops.tvd`), as the peer's ``LigerTVDLoss``:
    ``forward(p, q, shift_labels=None)``; the loss is float32."""

    def __init__(self, reduction: str = "batchmean", ignore_index: int = -100) -> None:
        super().__init__()
        self.reduction = reduction
        self.ignore_index = ignore_index

    def forward(
        self, p: torch.Tensor, q: torch.Tensor, shift_labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        return tvd(p, q, shift_labels, reduction=self.reduction, ignore_index=self.ignore_index)
