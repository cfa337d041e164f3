"""DyT: fakes of ``torch.ops.tigon.dyt_*``, and :func:`dyt`.

The kernels and their exact cast order are specified in ``include/tigon/ops/dyt.h``; the
autograd kernel is C++ (``bindings/torch/dyt_autograd.cpp``).
"""

from __future__ import annotations

import torch

__all__ = ["dyt"]

_OPS = "tigon::"


@torch.library.register_fake(_OPS + "dyt_fwd")
def _dyt_fwd_fake(
    x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None
) -> torch.Tensor:
    return x.new_empty(x.shape)


@torch.library.register_fake(_OPS + "dyt_bwd")
def _dyt_bwd_fake(
    dy: torch.Tensor,
    x: torch.Tensor,
    alpha: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dbeta = x.new_empty((0,)) if beta is None else beta.new_empty(beta.shape)
    return x.new_empty(x.shape), alpha.new_empty(alpha.shape), gamma.new_empty(gamma.shape), dbeta


def dyt(
    x: torch.Tensor,
    alpha: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dynamic Tanh over the last dimension: ``y = gamma * tanh(alpha * x) + beta``.

    Computed in float32 and rounded once to x's dtype (the peer's kernel; eager PyTorch in a
    16-bit dtype rounds after every operation).

    Args:
        x: ``[..., H]`` float32, float16 or bfloat16.
        alpha: one element (a learnable scalar, e.g. shape ``[1]``), x's dtype or float32.
        gamma: ``[H]``, x's dtype or float32.
        beta: ``[H]`` (x's dtype or float32) or None (0).

    Returns:
        y with x's shape and dtype.
    """
    return torch.ops.tigon.dyt_fwd(x, alpha, gamma, beta)
