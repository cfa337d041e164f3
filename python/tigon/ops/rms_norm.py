"""RMSNorm: fake implementations of ``torch.ops.tigon.rms_norm_*``, and :func:`rms_norm`.

The kernels and their exact cast order are specified in ``include/tigon/ops/rms_norm.h``; the
autograd kernel is C++ (``bindings/torch/rms_norm_autograd.cpp``).
"""

from __future__ import annotations

import torch

__all__ = ["CASTING_MODES", "rms_norm"]

#: Where the forward rounds to the input dtype: ``"llama"`` (HF LlamaRMSNorm: normalize in
#: float32, round, then multiply by the weight), ``"gemma"`` (HF GemmaRMSNorm: everything in
#: float32, ``offset + weight`` included, one rounding at the end) or ``"none"`` (eager PyTorch
#: in the input dtype).
CASTING_MODES: tuple[str, ...] = ("llama", "gemma", "none")

_OPS = "tigon::"


def _check_casting_mode(casting_mode: object, op: str) -> None:
    if not isinstance(casting_mode, str):
        raise TypeError(
            f"tigon::{op}: argument 'casting_mode': expected a str, got "
            f"{type(casting_mode).__name__}"
        )
    if casting_mode not in CASTING_MODES:
        raise ValueError(
            f"tigon::{op}: argument 'casting_mode': expected 'llama', 'gemma' or 'none', "
            f"got {casting_mode!r}"
        )


def _output_dtype(x: torch.Tensor, weight: torch.Tensor | None, casting_mode: str) -> torch.dtype:
    """y's dtype, as tigon::rms_norm_output_dtype: promote(x, weight) except in Gemma mode."""
    if weight is None or casting_mode == "gemma":
        return x.dtype
    return torch.promote_types(x.dtype, weight.dtype)


@torch.library.register_fake(_OPS + "rms_norm_fwd")
def _rms_norm_fwd_fake(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_casting_mode(casting_mode, "rms_norm_fwd")
    y = x.new_empty(x.shape, dtype=_output_dtype(x, weight, casting_mode))
    rstd = x.new_empty(x.shape[:-1], dtype=torch.float32)
    return y, rstd


def _weight_grad_like(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((0,)) if weight is None else weight.new_empty(weight.shape)


@torch.library.register_fake(_OPS + "rms_norm_bwd")
def _rms_norm_bwd_fake(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_casting_mode(casting_mode, "rms_norm_bwd")
    return x.new_empty(x.shape), _weight_grad_like(x, weight)


@torch.library.register_fake(_OPS + "rms_norm_bwd_inplace")
def _rms_norm_bwd_inplace_fake(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
) -> torch.Tensor:
    _check_casting_mode(casting_mode, "rms_norm_bwd_inplace")
    return _weight_grad_like(x, weight)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    """RMSNorm over the last dimension: ``y = x / sqrt(mean(x**2) + eps) * (offset + weight)``.

    Args:
        x: ``[..., H]`` float32, float16 or bfloat16. Row-strided views (e.g. ``big[..., :H]``)
            are read in place; other layouts are copied first.
        weight: ``[H]`` float32, float16 or bfloat16, or None (no affine; offset must be 0).
        eps: added to the mean of squares, >= 0.
        offset: added to the weight (1.0 for Gemma's ``1 + weight``).
        casting_mode: ``"llama"``, ``"gemma"`` or ``"none"``; see :data:`CASTING_MODES`.
        in_place: allow the backward to write dx into the incoming gradient's buffer (saves one
            activation-sized allocation). The backward reuses a buffer only when nothing else can
            observe it (checked at run time: docs/ARCHITECTURE.md, "In place"), so this is safe
            whatever else reads y or its gradient.

    Returns:
        y with x's shape; dtype ``promote(x, weight)`` in "llama" and "none" mode (as Hugging
        Face returns float32 for bfloat16 activations with float32 weights), x's dtype in
        "gemma" mode or without a weight.
    """
    _check_casting_mode(casting_mode, "rms_norm")
    return torch.ops.tigon.rms_norm_fwd(x, weight, eps, offset, casting_mode, bool(in_place))[0]
