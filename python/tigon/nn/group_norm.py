"""``tigon.nn.GroupNorm``: a drop-in replacement for ``torch.nn.GroupNorm``."""

from __future__ import annotations

import math

import torch
from torch import nn

from tigon.ops.group_norm import group_norm

__all__ = ["GroupNorm"]


class GroupNorm(nn.Module):
    """``torch.nn.GroupNorm``, computed by :func:`tigon.ops.group_norm`.

    Same constructor, parameters (``weight``, ``bias``; state dicts load both ways), attributes
    (``num_groups``, ``num_channels``, ``eps``, ``affine``) and output dtype as torch's. Outputs
    match torch's on almost every element bit for bit and within 1 ulp except where the output
    cancels to a tiny value (docs/ops/group_norm.md).

    Args:
        num_groups: number of groups; divides ``num_channels``.
        num_channels: C, the size of the input's dimension 1.
        eps: added to the variance, finite and >= 0.
        affine: learn a per-channel weight (ones) and bias (zeros).
        device: device of the parameters.
        dtype: dtype of the parameters.
    """

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("num_groups", num_groups), ("num_channels", num_channels)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"GroupNorm: {name} must be an int > 0, got {value!r}")
        if num_channels % num_groups != 0:
            raise ValueError(
                f"GroupNorm: num_groups must divide num_channels, got num_groups={num_groups} "
                f"and num_channels={num_channels}"
            )
        if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
            raise ValueError(f"GroupNorm: eps must be a finite number >= 0, got {eps!r}")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = float(eps)
        self.affine = affine
        factory = {"device": device, "dtype": dtype}
        if affine:
            self.weight = nn.Parameter(torch.empty(num_channels, **factory))
            self.bias = nn.Parameter(torch.empty(num_channels, **factory))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weight ones, bias zeros (torch's initialization)."""
        if self.affine:
            nn.init.ones_(self.weight)
            nn.init.zeros_(self.bias)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002  (torch's name)
        """Normalizes ``input`` ``[N, num_channels, *]``."""
        if input.dim() < 2 or input.shape[1] != self.num_channels:
            raise ValueError(
                f"GroupNorm: expected an input [N, {self.num_channels}, *], "
                f"got shape {tuple(input.shape)}"
            )
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
