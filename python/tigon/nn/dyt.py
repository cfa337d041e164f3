"""``tigon.nn.DyT``: Dynamic Tanh, a normalization-free replacement of LayerNorm."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.dyt import dyt

__all__ = ["DyT"]


class DyT(nn.Module):
    """``y = gamma * tanh(alpha * x) + beta`` over the last dimension.

    The peer's module (``LigerDyT(hidden_size, beta=True, init_alpha=0.5)``), with the same
    parameters: ``alpha`` ``[1]`` (init_alpha), ``gamma`` ``[H]`` (ones), ``beta`` ``[H]`` (zeros)
    or None.

    Args:
        hidden_size: size of the last dimension, > 0.
        beta: learn a shift ``beta``.
        init_alpha: initial value of ``alpha``.
        device: device of the parameters.
        dtype: dtype of the parameters.
    """

    def __init__(
        self,
        hidden_size: int,
        beta: bool = True,
        init_alpha: float = 0.5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"DyT: hidden_size must be an int > 0, got {hidden_size!r}")
        self.hidden_size = hidden_size
        self.init_alpha = float(init_alpha)
        factory = {"device": device, "dtype": dtype}
        self.alpha = nn.Parameter(torch.empty(1, **factory))
        self.gamma = nn.Parameter(torch.empty(hidden_size, **factory))
        if beta:
            self.beta = nn.Parameter(torch.empty(hidden_size, **factory))
        else:
            self.register_parameter("beta", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """alpha = init_alpha, gamma = 1, beta = 0."""
        with torch.no_grad():
            self.alpha.fill_(self.init_alpha)
            self.gamma.fill_(1.0)
            if self.beta is not None:
                self.beta.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Applies DyT to ``x`` ``[..., hidden_size]``."""
        return dyt(x, self.alpha, self.gamma, self.beta)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, init_alpha={self.init_alpha}, beta={self.beta is not None}"
