"""``tigon.nn.FusedAddRMSNorm``: a residual add and the RMSNorm that follows it, in one op."""

from __future__ import annotations

import torch

from tigon.nn.rms_norm import RMSNorm
from tigon.ops.fused_add_rms_norm import fused_add_rms_norm

__all__ = ["FusedAddRMSNorm"]


class FusedAddRMSNorm(RMSNorm):
    """``h = hidden_states + residual``, then RMSNorm of ``h``; ``forward`` returns ``(y, h)``.

    Replaces a decoder layer's ``hidden_states = residual + hidden_states`` followed by
    ``norm(hidden_states)`` (``hidden_states, residual = fused(hidden_states, residual)``), bit
    for bit: h as PyTorch's add, y as the Hugging Face norm of the chosen casting mode
    (:class:`tigon.nn.RMSNorm`, whose arguments, parameter and state dict it shares).
    """

    def forward(  # type: ignore[override]
        self, hidden_states: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Adds ``residual`` to ``hidden_states`` and normalizes the sum over its last dimension."""
        return fused_add_rms_norm(
            hidden_states,
            residual,
            self.weight,
            self.variance_epsilon,
            self.offset,
            self.casting_mode,
            self.in_place,
        )
