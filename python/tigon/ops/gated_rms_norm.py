"""Gated RMSNorm: fakes of ``torch.ops.tigon.gated_rms_norm_*``, and :func:`gated_rms_norm`.

The kernels and their exact cast order are specified in ``include/tigon/ops/gated_rms_norm.h``;
the autograd kernel is C++ (``bindings/torch/gated_rms_norm_autograd.cpp``).
"""

from __future__ import annotations

import torch

__all__ = ["gated_rms_norm"]

_OPS = "tigon::"


@torch.library.register_fake(_OPS + "gated_rms_norm_fwd")
def _gated_rms_norm_fwd_fake(
    x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float, in_place: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.register_fake(_OPS + "gated_rms_norm_bwd")
def _gated_rms_norm_bwd_fake(
    dy: torch.Tensor,
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), gate.new_empty(gate.shape), weight.new_empty(weight.shape)


@torch.library.register_fake(_OPS + "gated_rms_norm_bwd_inplace")
def _gated_rms_norm_bwd_inplace_fake(
    dy: torch.Tensor,
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    return gate.new_empty(gate.shape), weight.new_empty(weight.shape)


def gated_rms_norm(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    in_place: bool = False,
) -> torch.Tensor:
    """``rms_norm(x) * silu(gate)`` over the last dimension, norm before gate.

    Hugging Face's ``Qwen3NextRMSNormGated`` / ``Qwen3_5RMSNormGated`` cast for cast: the
    normalized x is rounded to x's dtype, multiplied by ``weight`` in the promoted dtype, then by
    ``silu(gate)`` in float32, and rounded once to x's dtype.

    Args:
        x: ``[..., H]`` float32, float16 or bfloat16.
        gate: x's shape and dtype.
        weight: ``[H]``, any floating dtype (x's, or float32 master weights).
        eps: added to the mean of squares, >= 0.
        in_place: allow the backward to write dx into the incoming gradient's buffer (saves one
            buffer); done only when nothing else can observe that buffer.

    Returns:
        y with x's shape and dtype.
    """
    return torch.ops.tigon.gated_rms_norm_fwd(x, gate, weight, eps, bool(in_place))[0]
