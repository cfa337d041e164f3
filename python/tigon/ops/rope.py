"""RoPE (Hugging Face's half-split rotary embedding): fake implementations and autograd of
``torch.ops.tigon.rope_*``, :func:`rope` and :func:`apply_rotary_pos_emb`.

The kernels and their exact cast order are specified in ``include/tigon/ops/rope.h``.
"""

from __future__ import annotations

from typing import Any

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


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    q, k, cos, sin, unsqueeze_dim, in_place = inputs
    ctx.unsqueeze_dim = unsqueeze_dim
    ctx.in_place = in_place
    ctx.dtype = q.dtype
    # q and k are kept only for cos / sin gradients, which HF's tables never need.
    table_grad = cos.requires_grad or sin.requires_grad
    ctx.save_for_backward(cos, sin, q if table_grad else None, k if table_grad else None)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _table_grads(
    grads: tuple[torch.Tensor, torch.Tensor],
    inputs: tuple[torch.Tensor, torch.Tensor],
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """d/dcos and d/dsin with plain torch ops (eager reduction order, not bitwise HF's)."""
    shape = cos.unsqueeze(unsqueeze_dim).shape
    rotary = cos.shape[-1]
    dcos = dsin = None
    for dy, x in zip(grads, inputs, strict=True):
        dy_rot, x_rot = dy[..., :rotary], x[..., :rotary]
        term_cos = (dy_rot * x_rot).sum_to_size(shape)
        term_sin = (dy_rot * _rotate_half(x_rot)).sum_to_size(shape)
        dcos = term_cos if dcos is None else dcos + term_cos
        dsin = term_sin if dsin is None else dsin + term_sin
    return dcos.reshape(cos.shape).to(cos.dtype), dsin.reshape(sin.shape).to(sin.dtype)


def _can_write_into(dy: torch.Tensor, dtype: torch.dtype) -> bool:
    """dx may overwrite dy's buffer: same dtype, dense, not part of a graph."""
    dense = dy.is_contiguous() or (dy.dim() >= 3 and dy.transpose(-3, -2).is_contiguous())
    return dy.dtype == dtype and dense and not dy.requires_grad


def _backward(ctx: Any, dq_embed: torch.Tensor, dk_embed: torch.Tensor) -> tuple:
    # An unused output's gradient arrives as zeros (autograd materializes it).
    cos, sin, q, k = ctx.saved_tensors
    if (
        ctx.in_place
        and _can_write_into(dq_embed, ctx.dtype)
        and _can_write_into(dk_embed, ctx.dtype)
    ):
        torch.ops.tigon.rope_bwd_inplace(dq_embed, dk_embed, cos, sin, ctx.unsqueeze_dim)
        dq, dk = dq_embed, dk_embed
    else:
        dq, dk = torch.ops.tigon.rope_bwd(
            dq_embed, dk_embed, cos, sin, ctx.unsqueeze_dim, ctx.dtype
        )
    dcos = dsin = None
    if ctx.needs_input_grad[2] or ctx.needs_input_grad[3]:
        dcos, dsin = _table_grads((dq_embed, dk_embed), (q, k), cos, sin, ctx.unsqueeze_dim)
    return dq, dk, dcos, dsin, None, None


torch.library.register_autograd(_OPS + "rope_fwd", _backward, setup_context=_setup_context)


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
            or ``[B, S, Hq, D]`` with ``unsqueeze_dim=2``; float32, float16 or bfloat16.
        k: like q, with its own head count (GQA) and q's dtype.
        cos, sin: ``[B, S, R]`` or ``[1, S, R]`` (``[S, R]`` with ``unsqueeze_dim=0``), R even and
            at most D; the activation dtype or float32. Channels ``>= R`` pass through.
        position_ids: ignored (cos and sin are already gathered at the positions), as in HF.
        unsqueeze_dim: where cos and sin get the heads dimension, as in HF.
        in_place: write the result into q and k when autograd is not recording (inference), and
            write dq, dk into the incoming gradients in the backward. Needs the result dtype to
            be q's (cos in q's dtype, or float32 q). The returned tensors are the results either
            way; do not read q, k, or the gradients handed to this op afterwards.

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
