"""Gated MLPs on tigon's SwiGLU / GeGLU kernels: drop-ins for Hugging Face's LlamaMLP-style
modules (``SwiGLUMLP``, ``GeGLUMLP``), Phi3's fused ``gate_up_proj`` (``Phi3SwiGLUMLP``), the
stacked-expert MoE modules of transformers 5 (``use_tigon_experts``), and ``glu_down_proj`` /
``glu_packed_down_proj``: ``down_proj(act(gate) * up)`` whose backward recomputes the product
instead of saving it."""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.modules import module as _module

from tigon.ops.glu import (
    ACTIVATIONS,
    _op_name,
    _writable,
    geglu,
    geglu_packed,
    glu,
    glu_packed,
    swiglu,
    swiglu_packed,
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


# ------------------------------------------------------------------------- GLU + down_proj
# Autograd of down_proj(glu(gate, up)) saves the product h (tokens x intermediate, the largest
# activation of a decoder layer) as the Linear's input, although the GLU's own backward already
# keeps gate and up. The functions below save gate, up and the weight only and recompute h in the
# backward (one elementwise pass). Every result is produced by the same op, on the same operands
# and strides, as autograd of F.linear (addmm / mm backward), so outputs and gradients are
# bitwise those of the unfused path.


@torch.library.custom_op("tigon::glu_recompute", mutates_args=())
def _recompute(a: torch.Tensor, b: torch.Tensor, name: str) -> torch.Tensor:
    """``tigon::<name>_fwd(a, b)`` under another op name: torch.compile's CSE would merge the
    backward's recomputation with the forward's product, which autograd would then save."""
    return getattr(torch.ops.tigon, f"{name}_fwd")(a, b)


@_recompute.register_fake
def _(a: torch.Tensor, b: torch.Tensor, name: str) -> torch.Tensor:
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


def _linear_backward(
    dy: torch.Tensor, h_of: Any, weight: torch.Tensor, needs: tuple[bool, bool, bool]
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(dh as [tokens, in_features], dweight, dbias) of ``F.linear(h, weight, bias)`` for the
    ``needs`` (h, weight, bias); ``h_of()`` recomputes h.

    Autograd's mm backward with mat2 = weight.t() (column-major) forms grad_mat2 as
    ``grad.t().mm(mat1).t()`` (then .t() back to weight's layout) and grad_mat1 as
    ``grad.mm(mat2.t())``; the bias gradient is ``sum_to_size``: a sum over the token dim.
    """
    need_h, need_w, need_b = needs
    dy2 = dy.reshape(-1, dy.size(-1))
    dweight = dbias = dh = None
    if need_w:
        h = h_of()
        dweight = dy2.t().mm(h.reshape(-1, weight.size(1)))
        del h  # transient: freed before dh is allocated
    if need_b:
        dbias = dy2.sum(0)
    if need_h:
        dh = dy2.mm(weight)
    return dh, dweight, dbias


class _GluDownProj(torch.autograd.Function):
    """``F.linear(act(gate) * up, weight, bias)``; saves gate, up, weight (not the product)."""

    @staticmethod
    def forward(
        ctx: Any,
        gate: torch.Tensor,
        up: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        name: str,
        in_place: bool,
    ) -> torch.Tensor:
        h = getattr(torch.ops.tigon, f"{name}_fwd")(gate, up)
        ctx.save_for_backward(gate, up, weight)
        ctx.name, ctx.in_place = name, in_place
        return F.linear(h, weight, bias)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        gate, up, weight = ctx.saved_tensors
        need_gate, need_up, need_w, need_b = ctx.needs_input_grad[:4]
        dh, dweight, dbias = _linear_backward(
            dy,
            lambda: _recompute(gate, up, ctx.name),
            weight,
            (need_gate or need_up, need_w, need_b),
        )
        dgate = dup = None
        if dh is not None:
            dh = dh.view(gate.shape)
            if ctx.in_place and _writable(gate) and _writable(up):
                # as tigon.ops.swiglu(in_place=True): the saved gate and up become the gradients
                getattr(torch.ops.tigon, f"{ctx.name}_bwd_inplace")(dh, gate, up)
                dgate, dup = gate, up
            else:
                dgate, dup = getattr(torch.ops.tigon, f"{ctx.name}_bwd")(dh, gate, up)
            del dh
        return (
            dgate if need_gate else None,
            dup if need_up else None,
            dweight,
            dbias,
            None,
            None,
        )


class _PackedGluDownProj(torch.autograd.Function):
    """``F.linear(act(gate) * up, weight, bias)`` with gate, up = gate_up.chunk(2, -1); saves
    gate_up and weight; the gradient of gate_up is one buffer as in ``glu_packed``."""

    @staticmethod
    def forward(
        ctx: Any,
        gate_up: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        name: str,
        in_place: bool,
    ) -> torch.Tensor:
        h = getattr(torch.ops.tigon, f"{name}_fwd")(*gate_up.chunk(2, dim=-1))
        ctx.save_for_backward(gate_up, weight)
        ctx.name, ctx.in_place = name, in_place
        return F.linear(h, weight, bias)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        gate_up, weight = ctx.saved_tensors
        dh, dweight, dbias = _linear_backward(
            dy,
            lambda: _recompute(*gate_up.chunk(2, dim=-1), ctx.name),
            weight,
            ctx.needs_input_grad[:3],
        )
        grad = None
        if dh is not None:
            grad = gate_up if ctx.in_place and _writable(gate_up) else torch.empty_like(gate_up)
            if grad is not gate_up:
                grad.copy_(gate_up)  # the kernel reads gate and up from the buffer it writes
            gate, up = grad.chunk(2, dim=-1)
            getattr(torch.ops.tigon, f"{ctx.name}_bwd_inplace")(dh.view(gate.shape), gate, up)
        return grad, dweight, dbias, None, None


def fusable_down_proj(down_proj: nn.Module, *inputs: torch.Tensor) -> bool:
    """Whether ``down_proj(glu(...))`` may run as one recomputing function: a plain
    ``nn.Linear`` (exact type: LoRA/PEFT, quantized and FSDP2 classes are not), called without
    hooks or an instance-level forward (accelerate), plain contiguous weight tensors, autograd on and
    autocast off for the input's device (else the ordinary path: nothing to save, or autocast's
    casts to reproduce)."""
    if type(down_proj) is not nn.Linear or "forward" in down_proj.__dict__:
        return False
    if (
        down_proj._forward_hooks
        or down_proj._forward_pre_hooks
        or down_proj._backward_hooks
        or down_proj._backward_pre_hooks
        or _module._global_forward_hooks
        or _module._global_forward_pre_hooks
        or _module._global_backward_hooks
        or _module._global_backward_pre_hooks
    ):
        return False
    weight, bias = down_proj.weight, down_proj.bias
    if type(weight) not in (nn.Parameter, torch.Tensor) or (
        bias is not None and type(bias) not in (nn.Parameter, torch.Tensor)
    ):
        return False
    if not weight.is_contiguous():  # autograd's mm backward picks another product order then
        return False
    if not torch.is_grad_enabled() or torch.is_autocast_enabled(inputs[0].device.type):
        return False
    params = (weight,) if bias is None else (weight, bias)
    return any(t.requires_grad for t in (*inputs, *params))


def glu_down_proj(
    activation: str,
    gate: torch.Tensor,
    up: torch.Tensor,
    down_proj: nn.Module,
    in_place: bool = True,
) -> torch.Tensor:
    """``down_proj(act(gate) * up)``, bitwise as ``down_proj(tigon.ops.glu(activation, gate,
    up, in_place))``, whose backward recomputes ``act(gate) * up`` from gate and up instead of
    keeping it alive from forward to backward (saves tokens x intermediate x dtype bytes per
    MLP). Falls back to the two calls when :func:`fusable_down_proj` says no.
    ``activation``: an HF name (``silu``, ``gelu_pytorch_tanh``, ...) or ``swiglu``/``geglu``.
    """
    name = _resolve(activation)
    if not fusable_down_proj(down_proj, gate, up) or gate.shape != up.shape:
        return down_proj(_GLU_OPS[name](gate, up, in_place))
    return _GluDownProj.apply(gate, up, down_proj.weight, down_proj.bias, name, bool(in_place))


def glu_packed_down_proj(
    activation: str, gate_up: torch.Tensor, down_proj: nn.Module, in_place: bool = True
) -> torch.Tensor:
    """:func:`glu_down_proj` for Phi3's fused ``gate_up`` (``gate, up = gate_up.chunk(2, -1)``)."""
    name = _resolve(activation)
    if not fusable_down_proj(down_proj, gate_up) or gate_up.dim() == 0 or gate_up.size(-1) % 2:
        return down_proj(_GLU_PACKED_OPS[name](gate_up, in_place))
    return _PackedGluDownProj.apply(gate_up, down_proj.weight, down_proj.bias, name, bool(in_place))


_GLU_OPS = {"swiglu": swiglu, "geglu": geglu}
_GLU_PACKED_OPS = {"swiglu": swiglu_packed, "geglu": geglu_packed}


def _resolve(activation: str) -> str:
    return activation if activation in _GLU_OPS else _op_name(activation)


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
        in_place: the backward writes the activation's gradients into the gate/up projection
            outputs' buffers (they are not read again), saving two activation-sized buffers.
        fuse_down_proj: the backward recomputes ``act(gate) * up`` for down_proj instead of
            autograd keeping it (:func:`glu_down_proj`; bitwise the same results).
    """

    _allowed: tuple[str, ...] = tuple(ACTIVATIONS)

    def __init__(
        self,
        config: Any,
        intermediate_size: int | None = None,
        in_place: bool = True,
        fuse_down_proj: bool = True,
    ) -> None:
        super().__init__()
        self.config = config
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
        if self.fuse_down_proj:
            return glu_down_proj(self.activation, gate, up, self.down_proj, self.in_place)
        return self.down_proj(glu(self.activation, gate, up, self.in_place))

    def extra_repr(self) -> str:
        return (
            f"activation={self.activation!r}, in_place={self.in_place}, "
            f"fuse_down_proj={self.fuse_down_proj}"
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
    ``in_place``, the gradient of the gate_up projection is written into its output's buffer;
    ``fuse_down_proj`` as in :class:`GLUMLP`."""

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
    ``gate_up_out`` with one tigon kernel (gradient written into gate_up_out's buffer)."""
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
