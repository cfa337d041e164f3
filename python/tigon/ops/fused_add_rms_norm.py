"""Fused residual add + RMSNorm: fakes of ``torch.ops.tigon.fused_add_rms_norm_*``, and
:func:`fused_add_rms_norm`.

The kernels and their exact cast order are specified in
``include/tigon/ops/fused_add_rms_norm.h``; the autograd kernel is C++
(``bindings/torch/fused_add_rms_norm_autograd.cpp``).
"""

from __future__ import annotations

import torch

from tigon.ops.rms_norm import _check_casting_mode, _output_dtype, _weight_grad_like

__all__ = ["fused_add_rms_norm"]

_OPS = "tigon::"


@torch.library.register_fake(_OPS + "fused_add_rms_norm_fwd")
def _fused_add_rms_norm_fwd_fake(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_casting_mode(casting_mode, "fused_add_rms_norm_fwd")
    y = x.new_empty(x.shape, dtype=_output_dtype(x, weight, casting_mode))
    h = x.new_empty(x.shape)
    rstd = x.new_empty(x.shape[:-1], dtype=torch.float32)
    return y, h, rstd


@torch.library.register_fake(_OPS + "fused_add_rms_norm_bwd")
def _fused_add_rms_norm_bwd_fake(
    dy: torch.Tensor,
    dh: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_casting_mode(casting_mode, "fused_add_rms_norm_bwd")
    return h.new_empty(h.shape), _weight_grad_like(h, weight)


@torch.library.register_fake(_OPS + "fused_add_rms_norm_bwd_inplace")
def _fused_add_rms_norm_bwd_inplace_fake(
    dh: torch.Tensor,
    dy: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
) -> torch.Tensor:
    _check_casting_mode(casting_mode, "fused_add_rms_norm_bwd_inplace")
    return _weight_grad_like(h, weight)


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = x + residual`` then RMSNorm of ``h``, in one pass: returns ``(y, h)``.

    A decoder layer's ``hidden_states = residual + hidden_states`` followed by the next norm:
    ``hidden_states, residual = fused_add_rms_norm(hidden_states, residual, weight, eps)``. ``h``
    has the bits of PyTorch's add in x's dtype and ``y`` those of :func:`tigon.ops.rms_norm` of
    ``h``; the backward gives x and residual the same gradient, ``dh + d(rms_norm)/dh``, with the
    bits of autograd's sum of the two in x's dtype.

    Args:
        x: ``[..., H]`` float32, float16 or bfloat16.
        residual: x's shape and dtype (no promotion).
        weight, eps, offset, casting_mode: as :func:`tigon.ops.rms_norm`.
        in_place: allow the backward to write the input gradient into h's incoming gradient
            (saves one activation-sized allocation); done only when nothing else can observe
            that buffer (checked at run time: docs/ARCHITECTURE.md, "In place").

    Returns:
        ``(y, h)``: y as :func:`tigon.ops.rms_norm` returns it (dtype ``promote(x, weight)`` in
        "llama" and "none" mode), h with x's shape and dtype (the new residual).
    """
    _check_casting_mode(casting_mode, "fused_add_rms_norm")
    y, h, _ = torch.ops.tigon.fused_add_rms_norm_fwd(
        x, residual, weight, eps, offset, casting_mode, bool(in_place)
    )
    return y, h
