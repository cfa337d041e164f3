"""``tigon.nn.RMSNorm``: a drop-in replacement for Hugging Face's RMSNorm modules."""

from __future__ import annotations

import math

import torch
from torch import nn

from tigon.ops.rms_norm import CASTING_MODES, rms_norm

__all__ = ["RMSNorm"]

_INITS = ("ones", "zeros")


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension, ``y = x / sqrt(mean(x**2) + eps) * (offset + weight)``.

    Matches, bit for bit in the output dtype, the Hugging Face module of the chosen casting mode:

    * ``RMSNorm(h, eps)``: ``LlamaRMSNorm`` (Llama, Mistral, Qwen2, Phi3, ...).
    * ``RMSNorm(h, eps, offset=1.0, casting_mode="gemma", init="zeros")``: ``GemmaRMSNorm``,
      ``Gemma3RMSNorm``.

    The parameter is named ``weight`` (state dicts load both ways) and the epsilon is available
    as ``variance_epsilon`` (Llama's name) and ``eps`` (Gemma's).

    Args:
        hidden_size: size of the last dimension, > 0.
        eps: added to the mean of squares, finite and >= 0.
        offset: added to the weight (1.0 for Gemma); must be 0 without a weight.
        casting_mode: ``"llama"``, ``"gemma"`` or ``"none"`` (see ``tigon.ops.CASTING_MODES``).
        elementwise_affine: learn a weight; False: no parameter (``weight`` is None).
        in_place: allow the backward to write dx into the incoming gradient's buffer (saves one
            activation-sized buffer). It does so only when nothing else can observe that buffer
            (checked at run time), so it is safe where the gradient is shared, e.g. a residual sum
            or Gemma2/3 sandwich norms.
        init: initial weight, ``"ones"`` (Llama) or ``"zeros"`` (Gemma's ``1 + weight``).
        device: device of the weight.
        dtype: dtype of the weight.
    """

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        offset: float = 0.0,
        casting_mode: str = "llama",
        elementwise_affine: bool = True,
        in_place: bool = True,
        init: str = "ones",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"RMSNorm: hidden_size must be an int > 0, got {hidden_size!r}")
        if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
            raise ValueError(f"RMSNorm: eps must be a finite number >= 0, got {eps!r}")
        if not isinstance(offset, (int, float)) or not math.isfinite(offset):
            raise ValueError(f"RMSNorm: offset must be a finite number, got {offset!r}")
        if not isinstance(casting_mode, str) or casting_mode not in CASTING_MODES:
            raise ValueError(
                f"RMSNorm: casting_mode must be one of {CASTING_MODES}, got {casting_mode!r}"
            )
        if init not in _INITS:
            raise ValueError(f"RMSNorm: init must be one of {_INITS}, got {init!r}")
        if not elementwise_affine and offset != 0:
            raise ValueError(
                f"RMSNorm: offset must be 0 when elementwise_affine=False, got {offset!r}"
            )
        self.hidden_size = hidden_size
        self.variance_epsilon = float(eps)
        self.offset = float(offset)
        self.casting_mode = casting_mode
        self.elementwise_affine = elementwise_affine
        self.in_place = in_place
        self.init = init
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    @property
    def eps(self) -> float:
        """The epsilon under Gemma's attribute name (same value as ``variance_epsilon``)."""
        return self.variance_epsilon

    @eps.setter
    def eps(self, value: float) -> None:
        self.variance_epsilon = value

    def reset_parameters(self) -> None:
        """Fills the weight with its initial value (ones or zeros, see ``init``)."""
        if self.weight is not None:
            with torch.no_grad():
                if self.init == "ones":
                    self.weight.fill_(1.0)
                else:
                    self.weight.zero_()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Normalizes ``hidden_states`` ``[..., hidden_size]`` over its last dimension."""
        return rms_norm(
            hidden_states,
            self.weight,
            self.variance_epsilon,
            self.offset,
            self.casting_mode,
            self.in_place,
        )

    def extra_repr(self) -> str:
        s = f"{(self.hidden_size,)}, eps={self.variance_epsilon}"
        if self.offset != 0:
            s += f", offset={self.offset}"
        s += f", casting_mode={self.casting_mode!r}, in_place={self.in_place}"
        if not self.elementwise_affine:
            s += ", elementwise_affine=False"
        return s
