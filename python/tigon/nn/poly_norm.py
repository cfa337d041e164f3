"""``tigon.nn.PolyNorm``: the polynomial normalization of PolyCom (the peer's ``LigerPolyNorm``)."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.poly_norm import poly_norm

__all__ = ["PolyNorm"]


class PolyNorm(nn.Module):
    """``y = w0 * norm(x**3) + w1 * norm(x**2) + w2 * norm(x) + b`` over the last dimension.

    The peer's module (``LigerPolyNorm(eps=1e-6)``), with the same parameters: ``weight`` ``[3]``
    (1/3 each) and ``bias`` ``[]`` (1.0). It has no hidden size: the norms are over whatever the
    last dimension is.

    Args:
        eps: added to each mean of squares, >= 0.
        device: device of the parameters.
        dtype: dtype of the parameters.
    """

    def __init__(
        self,
        eps: float = 1e-6,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not eps >= 0:
            raise ValueError(f"PolyNorm: eps must be >= 0, got {eps!r}")
        self.eps = float(eps)
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(3, **factory))
        self.bias = nn.Parameter(torch.empty((), **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight = 1/3 each, bias = 1."""
        with torch.no_grad():
            self.weight.fill_(1.0 / 3.0)
            self.bias.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Applies PolyNorm to ``x`` ``[..., H]``."""
        return poly_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"eps={self.eps}"
