"""Mixture-of-experts: fakes of ``torch.ops.tigon.moe_experts_*`` and ``moe_router_*``,
:func:`moe_experts` and :func:`moe_router`.

The op is the experts half of an HF MoE block (``MixtralExperts``, ``Qwen3MoeExperts``): the
router stays HF's module and hands over ``(top_k_index, top_k_weights)``. Formula, every rounding
and the fixed accumulation orders: ``include/tigon/ops/moe_experts.h``; the autograd kernel is C++
(``bindings/torch/moe_experts_autograd.cpp``).
"""

from __future__ import annotations

import torch

__all__ = ["MOE_ACTIVATIONS", "moe_experts", "moe_router"]

_OPS = "tigon::"

#: The experts' gate activation: HF config name -> the op's name.
MOE_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh"}


@torch.library.register_fake(_OPS + "moe_experts_fwd")
def _moe_experts_fwd_fake(
    hidden: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str,
    save: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    n, h = hidden.shape
    slots = topk_ids.numel()
    experts, i2 = w_gate_up.shape[0], w_gate_up.shape[1]
    return (
        hidden.new_empty((n, h)),
        hidden.new_empty((experts + 1,), dtype=torch.long),
        hidden.new_empty((slots,), dtype=torch.long),
        hidden.new_empty((slots, i2) if save else (0, 0)),
        hidden.new_empty((slots, h) if save else (0, 0)),
    )


@torch.library.register_fake(_OPS + "moe_experts_bwd")
def _moe_experts_bwd_fake(
    grad_out: torch.Tensor,
    hidden: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    expert_offsets: torch.Tensor,
    sorted_slots: torch.Tensor,
    gate_up: torch.Tensor,
    expert_out: torch.Tensor,
    activation: str,
    output_mask: list[bool],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    def like(wanted: bool, t: torch.Tensor) -> torch.Tensor:
        return t.new_empty(t.shape if wanted else (0,))

    return (
        like(output_mask[0], grad_out),
        like(output_mask[1], topk_weights),
        like(output_mask[2], w_gate_up),
        like(output_mask[3], w_down),
    )


def moe_experts(
    hidden: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str = "silu",
) -> torch.Tensor:
    """The routed experts of an MoE layer, as HF's eager experts loop computes them.

    ``out[t] = sum_k w[t, k] * down_e(act(gate_e(x_t)) * up_e(x_t))`` with ``e = topk_ids[t, k]``,
    rounded where HF rounds (``include/tigon/ops/moe_experts.h``); an id equal to the number of
    experts is a dropped slot (HF skips it).

    Args:
        hidden: ``[..., H]`` float32, float16 or bfloat16.
        topk_ids: ``[..., K]`` integer expert ids in ``[0, E]``.
        topk_weights: ``[..., K]`` routing weights, float32 (Mixtral's router) or hidden's dtype
            (Qwen3-MoE's).
        w_gate_up: ``[E, 2I, H]`` (gate rows first, then up), hidden's dtype.
        w_down: ``[E, H, I]``, hidden's dtype.
        activation: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU); HF's config names
            (``"swish"``, ``"gelu_pytorch_tanh"``) are accepted too.

    Returns:
        ``[..., H]`` in hidden's dtype. Differentiable in hidden, topk_weights, w_gate_up and
        w_down.
    """
    act = MOE_ACTIVATIONS.get(activation, activation)
    shape = hidden.shape
    flat = hidden.reshape(-1, shape[-1])
    k = topk_ids.shape[-1]
    ids = topk_ids.reshape(-1, k)
    if ids.dtype != torch.long:
        ids = ids.long()
    weights = topk_weights.reshape(-1, k)
    out = torch.ops.tigon.moe_experts_fwd(flat, ids, weights, w_gate_up, w_down, act, False)[0]
    return out.reshape(shape)


@torch.library.register_fake(_OPS + "moe_router_fwd")
def _moe_router_fwd_fake(
    logits: torch.Tensor, top_k: int, renormalize: bool, weights_fp32: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    n = logits.shape[0]
    weights_dtype = torch.float32 if weights_fp32 else logits.dtype
    return (
        logits.new_empty((n, top_k), dtype=torch.long),
        logits.new_empty((n, top_k), dtype=weights_dtype),
    )


@torch.library.register_fake(_OPS + "moe_router_bwd")
def _moe_router_bwd_fake(
    grad_weights: torch.Tensor,
    logits: torch.Tensor,
    topk_ids: torch.Tensor,
    top_k: int,
    renormalize: bool,
) -> torch.Tensor:
    return logits.new_empty(logits.shape)


def moe_router(
    router_logits: torch.Tensor,
    top_k: int,
    *,
    renormalize: bool = True,
    weights_fp32: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax-then-top-k routing, as HF's MixtralTopKRouter / Qwen3MoeTopKRouter after their
    ``F.linear`` (``include/tigon/ops/moe_router.h``).

    Args:
        router_logits: ``[N, E]`` float32, float16 or bfloat16.
        top_k: experts per token, ``1 <= top_k <= E``.
        renormalize: divide the top-k probabilities by their sum (Mixtral; Qwen3-MoE's
            ``norm_topk_prob``).
        weights_fp32: float32 weights (Mixtral) or weights in the logits' dtype (Qwen3-MoE).

    Returns:
        ``(topk_weights, topk_ids)``: ``[N, K]`` weights (differentiable in the logits) and int64
        expert ids, largest probability first (equal probabilities: the lower id first).
    """
    ids, weights = torch.ops.tigon.moe_router_fwd(router_logits, top_k, renormalize, weights_fp32)
    return weights, ids
