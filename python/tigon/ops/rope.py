"""RoPE (Hugging Face's half-split rotary embedding): fake implementations of
``torch.ops.tigon.rope_*``, :func:`rope` and :func:`apply_rotary_pos_emb`.

The kernels and their exact cast order are specified in ``include/tigon/ops/rope.h``; the
autograd kernel is C++ (``bindings/torch/rope_autograd.cpp``).
"""

from __future__ import annotations

import torch

__all__ = ["apply_rotary_pos_emb", "rope"]

_OPS = "tigon::"


def _output_dtype(x: torch.Tensor, cos: torch.Tensor) -> torch.dtype:
    """q_embed's dtype: PyTorch's promotion of q and cos, as HF's eager ops produce."""
    return torch.promote_types(x.dtype, cos.dtype)


@torch.library.register_fake(_OPS + "rope_fwd")
def _rope_fwd_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int = 1,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = _output_dtype(q, cos)
    return torch.empty_like(q, dtype=dtype), torch.empty_like(k, dtype=dtype)


@torch.library.register_fake(_OPS + "rope_fwd_inplace")
def _rope_fwd_inplace_fake(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> None:
    return None


@torch.library.register_fake(_OPS + "rope_bwd")
def _rope_bwd_fake(
    dq_embed: torch.Tensor,
    dk_embed: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(dq_embed, dtype=dtype), torch.empty_like(dk_embed, dtype=dtype)


@torch.library.register_fake(_OPS + "rope_bwd_inplace")
def _rope_bwd_inplace_fake(
    dq_embed: torch.Tensor,
    dk_embed: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int,
) -> None:
    return None


def _recording(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    unsqueeze_dim: int = 1,
    *,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding of q and k, numerically identical to HF's
    ``apply_rotary_pos_emb`` (Llama) and, for ``cos.shape[-1] < head_dim``, Phi3's partial one.

    Args:
        q: ``[B, Hq, S, D]`` (any strides: HF's transposed projection views are read in place),
            ``[B, S, Hq, D]`` with ``unsqueeze_dim=2``, or 3-D without the batch (``[S, Hq, D]``,
            ``[Hq, S, D]``); float32, float16 or bfloat16.
        k: like q, with its own head count (GQA) and q's dtype.
        cos, sin: ``[B, S, R]`` or ``[1, S, R]``, or ``[S, R]`` (with ``unsqueeze_dim=0`` for
            ``[B, H, S, D]`` q; with the default 1 for the vision towers' ``[S, H, D]`` q or
            ``[B, S, H, D]`` q), broadcast as HF's ``cos.unsqueeze(unsqueeze_dim)``
            (docs/ops/rope.md, the table forms); R even and at most D; the activation dtype or
            float32. Channels ``>= R`` pass through.
        position_ids: ignored (cos and sin are already gathered at the positions), as in HF.
        unsqueeze_dim: where cos and sin get the heads dimension, as in HF.
        in_place: when autograd is not recording (inference), write the result into q and k
            themselves (an explicit overwrite: the returned tensors are q and k, and their old
            values are gone). When it is recording, allow the backward to write dq, dk into the
            incoming gradients' buffers, which it does only when nothing else can observe them
            (checked at run time: docs/ARCHITECTURE.md, "In place"). Needs the result dtype to
            be q's (cos in q's dtype, or float32 q).

    Returns:
        ``(q_embed, k_embed)`` with q's / k's shape and layout, dtype ``promote(q.dtype,
        cos.dtype)`` (float32 for bfloat16 q with float32 cos, as HF returns).

    Gradients flow to q and k (exact HF rounding). If cos or sin require grad, their gradients
    are computed with plain torch ops (correct, but not fused and not bitwise HF's reduction).
    """
    del position_ids
    if in_place:
        if _output_dtype(q, cos) != q.dtype:
            raise TypeError(
                "tigon::rope: argument 'in_place': expected cos in q's dtype (or float32 q) so the "
                f"result can be written into q, got q {q.dtype} and cos {cos.dtype}"
            )
        if not _recording(q, k, cos, sin):
            torch.ops.tigon.rope_fwd_inplace(q, k, cos, sin, unsqueeze_dim)
            return q, k
    return torch.ops.tigon.rope_fwd(q, k, cos, sin, unsqueeze_dim, bool(in_place))


def apply_rotary_pos_emb(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for ``transformers.models.<family>.modeling_<family>.apply_rotary_pos_emb``
    (same signature as transformers 5.x; Phi3-style partial rotary included). See :func:`rope`.
    """
    return torch.ops.tigon.rope_fwd(q, k, cos, sin, unsqueeze_dim, False)
