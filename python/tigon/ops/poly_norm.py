"""PolyNorm: fakes of ``torch.ops.tigon.poly_norm_*``, and :func:`poly_norm`.

The kernels and their exact cast order are specified in ``include/tigon/ops/poly_norm.h``; the
autograd kernel is C++ (``bindings/torch/poly_norm_autograd.cpp``).
"""

from __future__ import annotations

import torch

__all__ = ["poly_norm"]

_OPS = "tigon::"


@torch.library.register_fake(_OPS + "poly_norm_fwd")
def _poly_norm_fwd_fake(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    return x.new_empty(x.shape)


@torch.library.register_fake(_OPS + "poly_norm_bwd")
def _poly_norm_bwd_fake(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), weight.new_empty(weight.shape), bias.new_empty(bias.shape)


def poly_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """PolyNorm over the last dimension (the peer's PolyCom):
    ``y = w0 * norm(x**3) + w1 * norm(x**2) + w2 * norm(x) + b``,
    ``norm(u) = u / sqrt(mean(u**2) + eps)``.

    The powers are rounded to x's dtype (as the peer's forward and the eager reference form them);
    the rest is float32, rounded once to x's dtype.

    Args:
        x: ``[..., H]`` float32, float16 or bfloat16.
        weight: ``[3]`` (``weight[0]`` multiplies the cube's norm), x's dtype or float32.
        bias: one element (a learnable scalar, e.g. shape ``[]``), x's dtype or float32.
        eps: added to each mean of squares, >= 0; used in float32.

    Returns:
        y with x's shape and dtype.
    """
    return torch.ops.tigon.poly_norm_fwd(x, weight, bias, eps)
