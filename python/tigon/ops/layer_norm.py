"""LayerNorm: fake implementations of ``torch.ops.tigon.layer_norm_*``, and :func:`layer_norm`.

The kernels and their exact cast order are specified in ``include/tigon/ops/layer_norm.h``; the
autograd kernel is C++ (``bindings/torch/layer_norm_autograd.cpp``).
"""

from __future__ import annotations

import torch

__all__ = ["layer_norm"]

_OPS = "tigon::"


def _row_statistic(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[:-1], dtype=torch.float32)


def _parameter_grad_like(x: torch.Tensor, parameter: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((0,)) if parameter is None else parameter.new_empty(parameter.shape)


@torch.library.register_fake(_OPS + "layer_norm_fwd")
def _layer_norm_fwd_fake(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), _row_statistic(x), _row_statistic(x)


@torch.library.register_fake(_OPS + "layer_norm_bwd")
def _layer_norm_bwd_fake(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), _parameter_grad_like(x, weight), _parameter_grad_like(x, bias)


@torch.library.register_fake(_OPS + "layer_norm_bwd_inplace")
def _layer_norm_bwd_inplace_fake(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _parameter_grad_like(x, weight), _parameter_grad_like(x, bias)


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    in_place: bool = False,
) -> torch.Tensor:
    """LayerNorm over the last dimension: ``y = (x - mean) / sqrt(var + eps) * weight + bias``.

    ``torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)``: float32 statistics
    (the biased variance), one rounding of the float32 result to x's dtype.

    Args:
        x: ``[..., H]`` float32, float16 or bfloat16. Row-strided views (e.g. ``big[..., :H]``)
            are read in place; other layouts are copied first.
        weight: ``[H]`` in x's dtype or float32, or None (1).
        bias: ``[H]`` in x's dtype or float32, or None (0); independent of ``weight``.
        eps: added to the variance, >= 0.
        in_place: allow the backward to write dx into the incoming gradient's buffer (saves one
            activation-sized allocation). The backward reuses a buffer only when nothing else can
            observe it (checked at run time: docs/ARCHITECTURE.md, "In place"), so this is safe
            whatever else reads y or its gradient.

    Returns:
        y with x's shape and dtype.
    """
    return torch.ops.tigon.layer_norm_fwd(x, weight, bias, eps, bool(in_place))[0]
