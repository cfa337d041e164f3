"""GroupNorm: fake implementations of ``torch.ops.tigon.group_norm_*``, and :func:`group_norm`.

The kernels and their exact cast order are specified in ``include/tigon/ops/group_norm.h``; the
autograd kernel is C++ (``bindings/torch/group_norm_autograd.cpp``).
"""

from __future__ import annotations

import torch

__all__ = ["group_norm"]

_OPS = "tigon::"


def _group_statistic(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x.new_empty((x.shape[0] if x.dim() else 0, groups), dtype=torch.float32)


def _parameter_grad_like(x: torch.Tensor, parameter: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((0,)) if parameter is None else parameter.new_empty(parameter.shape)


@torch.library.register_fake(_OPS + "group_norm_fwd")
def _group_norm_fwd_fake(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    groups: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch._check(x.dim() >= 2, lambda: f"group_norm_fwd: x must be [N, C, *], got {x.shape}")
    return x.new_empty(x.shape), _group_statistic(x, groups), _group_statistic(x, groups)


@torch.library.register_fake(_OPS + "group_norm_bwd")
def _group_norm_bwd_fake(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), _parameter_grad_like(x, weight), _parameter_grad_like(x, bias)


@torch.library.register_fake(_OPS + "group_norm_bwd_inplace")
def _group_norm_bwd_inplace_fake(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _parameter_grad_like(x, weight), _parameter_grad_like(x, bias)


def group_norm(
    x: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """GroupNorm of ``x`` ``[N, C, *]``: ``torch.nn.functional.group_norm(x, num_groups, weight,
    bias, eps)``.

    The C channels split into ``num_groups`` groups of consecutive channels; each (sample, group)
    is normalized over its channels and positions with float32 statistics (the biased variance),
    then scaled and shifted per channel; one rounding of the float32 result to x's dtype.

    Args:
        x: ``[N, C, *]`` float32, float16 or bfloat16. Samples are read in place when each is
            contiguous (any stride between samples); other layouts (channels-last) are copied.
        num_groups: divides C.
        weight: ``[C]`` in x's dtype or float32, or None (1).
        bias: ``[C]`` in x's dtype or float32, or None (0); independent of ``weight``.
        eps: added to the variance, >= 0.

    Returns:
        y with x's shape and dtype. The backward writes dx into the incoming gradient's buffer when
        nothing else can observe it (docs/ARCHITECTURE.md, "In place").
    """
    return torch.ops.tigon.group_norm_fwd(x, weight, bias, int(num_groups), float(eps))[0]
