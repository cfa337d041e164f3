"""``tigon.nn.RMSNormGated``: Qwen3-Next / Qwen3.5's gated RMSNorm."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.gated_rms_norm import gated_rms_norm

__all__ = ["RMSNormGated"]


class RMSNormGated(nn.Module):
    """``rms_norm(hidden_states) * silu(gate)``, a drop-in for ``Qwen3NextRMSNormGated``.

    Same constructor, parameter (``weight`` ``[hidden_size]``, ones), attribute
    (``variance_epsilon``) and forward signature as the Hugging Face module, and the same bits
    (:func:`tigon.ops.gated_rms_norm`).

    Args:
        hidden_size: size of the last dimension, > 0.
        eps: added to the mean of squares.
        in_place: allow the backward to write dx into the incoming gradient's buffer (saves one
            buffer); done only when nothing else can observe that buffer.
        device: device of the weight.
        dtype: dtype of the weight.
    """

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        in_place: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"RMSNormGated: hidden_size must be an int > 0, got {hidden_size!r}")
        self.hidden_size = hidden_size
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.variance_epsilon = eps
        self.activation = "silu"
        self.in_place = in_place

    def forward(self, hidden_states: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Normalizes ``hidden_states`` ``[..., hidden_size]`` and gates it with ``silu(gate)``."""
        return gated_rms_norm(
            hidden_states, gate, self.weight, self.variance_epsilon, self.in_place
        )

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.variance_epsilon}, in_place={self.in_place}"
