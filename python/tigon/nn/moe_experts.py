"""Mixture-of-experts routed experts on tigon's fused op: a drop-in for transformers 5's stacked
experts modules (``MixtralExperts``, ``Qwen3MoeExperts``: ``gate_up_proj [E, 2I, H]``,
``down_proj [E, H, I]``, ``forward(hidden_states, top_k_index, top_k_weights)``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tigon.ops.moe_experts import MOE_ACTIVATIONS, moe_experts

__all__ = ["MoEExperts"]


class MoEExperts(nn.Module):
    """The routed experts of an MoE block; the router stays outside (HF's module).

    Same Parameter names and shapes as HF's experts modules, so ``load_state_dict`` of an HF
    experts module (or :meth:`from_hf`, which shares its very Parameters) gives the same model.

    Args:
        num_experts: E.
        hidden_size: H.
        intermediate_size: I (each expert's gate and up projections are ``[I, H]``).
        activation: the gate activation, HF's config name (``"silu"``, ``"swish"``,
            ``"gelu_pytorch_tanh"``).
    """

    def __init__(
        self,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        activation: str = "silu",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if activation not in MOE_ACTIVATIONS:
            raise ValueError(
                f"MoEExperts: activation {activation!r} is not supported; expected one of "
                f"{tuple(MOE_ACTIVATIONS)}"
            )
        self.num_experts = num_experts
        self.hidden_dim = hidden_size
        self.intermediate_dim = intermediate_size
        self.activation = activation
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.gate_up_proj = nn.Parameter(
            torch.empty(num_experts, 2 * intermediate_size, hidden_size, **factory)
        )
        self.down_proj = nn.Parameter(
            torch.empty(num_experts, hidden_size, intermediate_size, **factory)
        )

    @classmethod
    def from_hf(cls, experts: nn.Module, activation: str | None = None) -> MoEExperts:
        """A module computing HF's ``experts`` with its very Parameters (shared, not copied)."""
        if activation is None:
            config = getattr(experts, "config", None)
            activation = getattr(config, "hidden_act", None) or "silu"
        e, i2, h = experts.gate_up_proj.shape
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        module.num_experts, module.hidden_dim, module.intermediate_dim = e, h, i2 // 2
        if activation not in MOE_ACTIVATIONS:
            raise ValueError(f"MoEExperts.from_hf: activation {activation!r} is not supported")
        module.activation = activation
        module.gate_up_proj = experts.gate_up_proj
        module.down_proj = experts.down_proj
        return module

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        return moe_experts(
            hidden_states,
            top_k_index,
            top_k_weights,
            self.gate_up_proj,
            self.down_proj,
            self.activation,
        )

    def extra_repr(self) -> str:
        return (
            f"num_experts={self.num_experts}, hidden={self.hidden_dim}, "
            f"intermediate={self.intermediate_dim}, activation={self.activation}"
        )
