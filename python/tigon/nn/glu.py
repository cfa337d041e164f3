"""Gated MLPs on tigon's SwiGLU / GeGLU kernels: drop-ins for Hugging Face's LlamaMLP-style
modules (``SwiGLUMLP``, ``GeGLUMLP``), Phi3's fused ``gate_up_proj`` (``Phi3SwiGLUMLP``) and the
stacked-expert MoE modules of transformers 5 (``use_tigon_experts``). ``glu_down_proj`` /
``glu_packed_down_proj`` (``down_proj(act(gate) * up)`` whose backward recomputes the product)
live in :mod:`tigon.ops.glu` and are re-exported here."""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

from tigon.ops.glu import (
    ACTIVATIONS,
    glu,
    glu_down_proj,
    glu_packed,
    glu_packed_down_proj,
)

__all__ = [
    "GLUMLP",
    "GeGLUMLP",
    "Phi3SwiGLUMLP",
    "SwiGLUMLP",
    "glu_down_proj",
    "glu_experts_apply_gate",
    "glu_experts_forward",
    "glu_packed_down_proj",
    "use_tigon_experts",
]


def config_activation(config: Any) -> str:
    """The MLP activation name of an HF config: ``hidden_activation`` (Gemma 2/3) when the
    config sets one, else ``hidden_act``."""
    act = getattr(config, "hidden_activation", None)
    return act if act is not None else config.hidden_act


def _checked(activation: str, allowed: tuple[str, ...], cls: str) -> str:
    if activation not in allowed:
        raise ValueError(
            f"{cls}: activation {activation!r} is not supported; expected one of {allowed}"
        )
    return activation


class GLUMLP(nn.Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))`` with the fused tigon activation.

    Same constructor, parameter names and state dict as HF's LlamaMLP / MistralMLP / Qwen2MLP
    (``bias=config.mlp_bias`` when the config has it) and Qwen2Moe/Qwen3Moe's shared-expert MLP
    (``intermediate_size`` argument). The activation comes from the config (``silu``/``swish``:
    SwiGLU, ``gelu_pytorch_tanh``: GeGLU).

    Args:
        config: an HF config with hidden_size, intermediate_size and hidden_act
            (or hidden_activation).
        intermediate_size: overrides config.intermediate_size (MoE shared experts).
        in_place: allow the backward to write the activation's gradients into the gate/up
            projection outputs' buffers, saving two activation-sized buffers; it does so only
            when nothing else can observe them (checked at run time).
        fuse_down_proj: the backward recomputes ``act(gate) * up`` for down_proj instead of
            autograd keeping it (:func:`glu_down_proj`; bitwise the same results).
        gate_multiplier, down_multiplier: Falcon-H1's MLP multipliers (default: the config's
            ``mlp_multipliers`` when it has them, else 1.0): the module computes HF's FalconH1MLP,
            ``down_proj(up(x) * act(gate(x) * gate_multiplier)) * down_multiplier``, bit for bit
            (the gate multiplier inside the fused op, the down multiplier on down_proj's output
            as HF rounds it).
    """

    _allowed: tuple[str, ...] = tuple(ACTIVATIONS)

    def __init__(
        self,
        config: Any,
        intermediate_size: int | None = None,
        in_place: bool = True,
        fuse_down_proj: bool = True,
        gate_multiplier: float | None = None,
        down_multiplier: float | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        multipliers = getattr(config, "mlp_multipliers", None) or (1.0, 1.0)
        self.gate_multiplier = float(multipliers[0] if gate_multiplier is None else gate_multiplier)
        self.down_multiplier = float(multipliers[1] if down_multiplier is None else down_multiplier)
        self.hidden_size = config.hidden_size
        self.intermediate_size = (
            config.intermediate_size if intermediate_size is None else intermediate_size
        )
        self.activation = _checked(config_activation(config), self._allowed, type(self).__name__)
        self.in_place = in_place
        self.fuse_down_proj = fuse_down_proj
        bias = bool(getattr(config, "mlp_bias", False))
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.up_proj(x)
        gm = self.gate_multiplier
        if self.fuse_down_proj:
            y = glu_down_proj(self.activation, gate, up, self.down_proj, self.in_place, gm)
        else:
            y = self.down_proj(glu(self.activation, gate, up, self.in_place, gm))
        # HF's FalconH1MLP: down_proj(...) * down_multiplier, rounded after the Linear's rounding.
        return y if self.down_multiplier == 1.0 else y * self.down_multiplier

    def extra_repr(self) -> str:
        extra = (
            f", gate_multiplier={self.gate_multiplier}, down_multiplier={self.down_multiplier}"
            if (self.gate_multiplier, self.down_multiplier) != (1.0, 1.0)
            else ""
        )
        return (
            f"activation={self.activation!r}, in_place={self.in_place}, "
            f"fuse_down_proj={self.fuse_down_proj}{extra}"
        )


class SwiGLUMLP(GLUMLP):
    """Drop-in for HF's LlamaMLP (Llama, Mistral, Qwen2/3, Qwen MoE shared experts, ...):
    ``hidden_act`` must be ``silu`` or ``swish``. See :class:`GLUMLP`."""

    _allowed = ("silu", "swish")


class GeGLUMLP(GLUMLP):
    """Drop-in for HF's GemmaMLP / Gemma2MLP / Gemma3MLP: the activation must be
    ``gelu_pytorch_tanh``. See :class:`GLUMLP`."""

    _allowed = ("gelu_pytorch_tanh",)


class Phi3SwiGLUMLP(nn.Module):
    """Drop-in for HF's Phi3MLP: ``gate, up = gate_up_proj(x).chunk(2, -1)``,
    ``down_proj(up * silu(gate))``. The two halves are read in place (no chunk copies) and, with
    ``in_place``, the gradient of the gate_up projection may be written into its output's buffer
    (when nothing else can observe it); ``fuse_down_proj`` as in :class:`GLUMLP`."""

    def __init__(self, config: Any, in_place: bool = True, fuse_down_proj: bool = True) -> None:
        super().__init__()
        self.config = config
        self.activation = _checked(
            config_activation(config), tuple(ACTIVATIONS), type(self).__name__
        )
        self.in_place = in_place
        self.fuse_down_proj = fuse_down_proj
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(hidden_states)
        if self.fuse_down_proj:
            return glu_packed_down_proj(self.activation, gate_up, self.down_proj, self.in_place)
        return self.down_proj(glu_packed(self.activation, gate_up, self.in_place))

    def extra_repr(self) -> str:
        return (
            f"activation={self.activation!r}, in_place={self.in_place}, "
            f"fuse_down_proj={self.fuse_down_proj}"
        )


# ------------------------------------------------------------------------- MoE experts
# transformers 5 stores MoE experts as 3-D parameters (MixtralExperts, Qwen2MoeExperts,
# Qwen3MoeExperts: gate_up_proj [E, 2I, H], down_proj [E, H, I], act_fn) and routes forward
# through @use_experts_implementation: "eager" runs the class's own loop, "batched_mm" and
# "grouped_mm" call self._apply_gate(gate_up_out) for `act_fn(gate) * up`.


def glu_experts_apply_gate(self: nn.Module, gate_up_out: torch.Tensor) -> torch.Tensor:
    """Replacement for HF's ``_default_apply_gate``: ``act_fn(gate) * up`` on the chunk views of
    ``gate_up_out`` with one tigon kernel (gradient written into gate_up_out's buffer when nothing
    else can observe it)."""
    return glu_packed(config_activation(self.config), gate_up_out, in_place=True)


def glu_experts_forward(
    self: nn.Module,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    """HF's eager experts loop (MixtralExperts.forward and the Qwen MoE copies) with the
    activation and product fused: identical routing, accumulation order and dtypes."""
    final_hidden_states = torch.zeros_like(hidden_states)
    with torch.no_grad():
        expert_mask = nn.functional.one_hot(top_k_index, num_classes=self.num_experts)
        expert_mask = expert_mask.permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit:
        expert_idx = expert_idx[0]
        if expert_idx == self.num_experts:
            continue
        top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
        current_state = hidden_states[token_idx]
        gate_up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx])
        current = glu_experts_apply_gate(self, gate_up)
        current = nn.functional.linear(current, self.down_proj[expert_idx])
        current = current * top_k_weights[token_idx, top_k_pos, None]
        final_hidden_states.index_add_(0, token_idx, current.to(final_hidden_states.dtype))
    return final_hidden_states


def use_tigon_experts(experts: nn.Module) -> nn.Module:
    """Makes an HF stacked-experts module (MixtralExperts, Qwen2MoeExperts, Qwen3MoeExperts, or
    any module with gate_up_proj [E, 2I, H], down_proj [E, H, I], num_experts, config) run its
    gate activation on tigon, whatever ``config._experts_implementation`` selects: the
    batched_mm / grouped_mm paths through ``_apply_gate``, the eager path through
    :func:`glu_experts_forward`. Parameters and state dict are untouched. Returns ``experts``.
    """
    activation = config_activation(experts.config)
    _checked(activation, tuple(ACTIVATIONS), type(experts).__name__)
    if getattr(experts, "has_gate", True) is False or getattr(experts, "has_bias", False):
        raise ValueError(
            f"use_tigon_experts: {type(experts).__name__} has no gate or has biases; "
            "only gated, bias-free experts are supported"
        )
    experts._apply_gate = types.MethodType(glu_experts_apply_gate, experts)
    implementation = getattr(experts.config, "_experts_implementation", None)
    if implementation in (None, "eager"):
        experts.forward = types.MethodType(glu_experts_forward, experts)
    return experts
