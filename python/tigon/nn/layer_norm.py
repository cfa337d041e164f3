"""``tigon.nn.LayerNorm``: a drop-in replacement for ``torch.nn.LayerNorm`` over the last
dimension."""

from __future__ import annotations

import math

import torch
from torch import nn

from tigon.ops.layer_norm import layer_norm

__all__ = ["LayerNorm"]


class LayerNorm(nn.Module):
    """``torch.nn.LayerNorm`` over the last dimension, computed by :func:`tigon.ops.layer_norm`.

    Same constructor, parameters (``weight``, ``bias``; state dicts load both ways), attributes
    (``normalized_shape`` as a 1-tuple, ``eps``, ``elementwise_affine``) and output dtype as
    torch's. Outputs match torch's on almost every element bit for bit and within 1 ulp except
    where the output cancels to a tiny value (docs/ops/layer_norm.md).

    Args:
        normalized_shape: the size of the last dimension, an int or a 1-tuple (tigon normalizes
            over the last dimension only).
        eps: added to the variance, finite and >= 0.
        elementwise_affine: learn a weight (ones) and, with ``bias``, a bias (zeros).
        bias: learn a bias (only with ``elementwise_affine``).
        in_place: allow the backward to write dx into the incoming gradient's buffer (saves one
            activation-sized buffer); it does so only when nothing else can observe that buffer
            (checked at run time), so it is safe where the gradient is shared, e.g. a residual sum.
        device: device of the parameters.
        dtype: dtype of the parameters.
    """

    def __init__(
        self,
        normalized_shape: int | tuple[int] | list[int] | torch.Size,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        in_place: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        shape = (
            (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        )
        if (
            len(shape) != 1
            or isinstance(shape[0], bool)
            or not isinstance(shape[0], int)
            or shape[0] <= 0
        ):
            raise ValueError(
                "LayerNorm: normalized_shape must be an int > 0 or a 1-tuple of one (tigon "
                f"normalizes over the last dimension only), got {normalized_shape!r}"
            )
        if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
            raise ValueError(f"LayerNorm: eps must be a finite number >= 0, got {eps!r}")
        self.normalized_shape: tuple[int] = (shape[0],)
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        self.in_place = in_place
        factory = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, **factory))
            if bias:
                self.bias = nn.Parameter(torch.empty(self.normalized_shape, **factory))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weight ones, bias zeros (torch's initialization)."""
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002  (torch's name)
        """Normalizes ``input`` ``[..., normalized_shape[0]]`` over its last dimension."""
        if input.shape[-1:] != self.normalized_shape:
            raise ValueError(
                f"LayerNorm: expected an input whose last dimension is {self.normalized_shape[0]}, "
                f"got shape {tuple(input.shape)}"
            )
        return layer_norm(input, self.weight, self.bias, self.eps, self.in_place)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )
