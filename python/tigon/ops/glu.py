"""SwiGLU / GeGLU: fake implementations of ``torch.ops.tigon.{swiglu,geglu}_*``, and
:func:`swiglu`, :func:`geglu`, :func:`swiglu_packed`, :func:`geglu_packed`, :func:`glu_down_proj`,
:func:`glu_packed_down_proj`.

The kernels and their exact cast order are specified in ``include/tigon/ops/glu.h``; the autograd
kernels are C++ (``bindings/torch/glu_autograd.cpp``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as _module

__all__ = [
    "fusable_down_proj",
    "geglu",
    "geglu_packed",
    "glu",
    "glu_down_proj",
    "glu_packed",
    "glu_packed_down_proj",
    "swiglu",
    "swiglu_packed",
]

_OPS = "tigon::"
_NAMES = ("swiglu", "geglu")

#: HF activation names (``config.hidden_act``) -> tigon op name.
ACTIVATIONS: dict[str, str] = {
    "silu": "swiglu",
    "swish": "swiglu",
    "gelu_pytorch_tanh": "geglu",
}


def _register_fakes(name: str) -> None:
    @torch.library.register_fake(f"{_OPS}{name}_fwd")
    def _fwd_fake(
        a: torch.Tensor,
        b: torch.Tensor,
        in_place: bool = False,
        gate_multiplier: float = 1.0,
        down_multiplier: float = 1.0,
    ) -> torch.Tensor:
        return torch.empty(a.shape, dtype=a.dtype, device=a.device)

    @torch.library.register_fake(f"{_OPS}{name}_bwd")
    def _bwd_fake(
        dy: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        gate_multiplier: float = 1.0,
        down_multiplier: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            torch.empty(a.shape, dtype=a.dtype, device=a.device),
            torch.empty(b.shape, dtype=b.dtype, device=b.device),
        )

    @torch.library.register_fake(f"{_OPS}{name}_bwd_inplace")
    def _bwd_inplace_fake(
        dy: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        gate_multiplier: float = 1.0,
        down_multiplier: float = 1.0,
    ) -> None:
        return None

    @torch.library.register_fake(f"{_OPS}{name}_packed_fwd")
    def _packed_fwd_fake(gate_up: torch.Tensor, in_place: bool = False) -> torch.Tensor:
        _check_packed(gate_up, f"{name}_packed_fwd")
        return gate_up.new_empty((*gate_up.shape[:-1], gate_up.shape[-1] // 2))

    @torch.library.register_fake(f"{_OPS}{name}_down_proj_fwd")
    def _down_proj_fwd_fake(
        gate: torch.Tensor,
        up: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        in_place: bool = False,
        gate_multiplier: float = 1.0,
    ) -> torch.Tensor:
        return gate.new_empty((*gate.shape[:-1], weight.shape[0]))

    @torch.library.register_fake(f"{_OPS}{name}_packed_down_proj_fwd")
    def _packed_down_proj_fwd_fake(
        gate_up: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        in_place: bool = False,
    ) -> torch.Tensor:
        _check_packed(gate_up, f"{name}_packed_down_proj_fwd")
        return gate_up.new_empty((*gate_up.shape[:-1], weight.shape[0]))


def _check_pair(a: torch.Tensor, b: torch.Tensor, op: str) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"tigon::{op}: argument 'b': expected shape {tuple(a.shape)} (a's shape), "
            f"got {tuple(b.shape)}"
        )


def _multiplier(value: float, name: str, op: str) -> float:
    """A multiplier as the op's float argument: a Python number (finiteness is checked by the op).
    A tensor is refused rather than read with .item(), which would synchronize with the device on
    every call and break torch.compile's graph."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"tigon::{op}: argument '{name}': expected a Python float, got {type(value).__name__}"
        )
    return float(value)


def swiglu(
    a: torch.Tensor,
    b: torch.Tensor,
    in_place: bool = False,
    gate_multiplier: float = 1.0,
    down_multiplier: float = 1.0,
) -> torch.Tensor:
    """``silu(a) * b`` exactly as Hugging Face's eager ``act_fn(gate_proj(x)) * up_proj(x)``.

    Args:
        a: the gate projection ``[..., N]``, float32, float16 or bfloat16. Row-strided views
            (e.g. ``gate_up.chunk(2, -1)[0]``) are read in place.
        b: the up projection, same shape and dtype.
        in_place: allow the backward to write da into a's buffer and db into b's (no gradient
            buffers). It does so only when nothing else can observe a and b (checked at run
            time: docs/ARCHITECTURE.md, "In place"), e.g. fresh projection outputs inside an
            MLP; otherwise it allocates the gradients.
        gate_multiplier: Falcon-H1's ``mlp_multipliers[0]``: the activation's input is
            ``round(a * gate_multiplier)`` in a's dtype, as HF's ``gate_proj(x) * gate_multiplier``.
        down_multiplier: the output is ``round(y * down_multiplier)`` (Liger's semantics: the
            GLU's output; HF's Falcon-H1 scales ``down_proj``'s output instead, as
            :class:`tigon.nn.SwiGLUMLP` does). Both finite; 1.0 is the plain op bit for bit.

    Returns:
        ``round(round(silu(a)) * b)`` in a's dtype, a new contiguous tensor (with multipliers:
        ``include/tigon/ops/glu.h``).
    """
    _check_pair(a, b, "swiglu")
    gm = _multiplier(gate_multiplier, "gate_multiplier", "swiglu")
    dm = _multiplier(down_multiplier, "down_multiplier", "swiglu")
    return torch.ops.tigon.swiglu_fwd(a, b, bool(in_place), gm, dm)


def geglu(
    a: torch.Tensor,
    b: torch.Tensor,
    in_place: bool = False,
    gate_multiplier: float = 1.0,
    down_multiplier: float = 1.0,
) -> torch.Tensor:
    """``gelu(a, approximate="tanh") * b`` as Hugging Face's eager GemmaMLP; see :func:`swiglu`."""
    _check_pair(a, b, "geglu")
    gm = _multiplier(gate_multiplier, "gate_multiplier", "geglu")
    dm = _multiplier(down_multiplier, "down_multiplier", "geglu")
    return torch.ops.tigon.geglu_fwd(a, b, bool(in_place), gm, dm)


def glu(
    activation: str,
    a: torch.Tensor,
    b: torch.Tensor,
    in_place: bool = False,
    gate_multiplier: float = 1.0,
    down_multiplier: float = 1.0,
) -> torch.Tensor:
    """:func:`swiglu` or :func:`geglu` by HF activation name (``config.hidden_act``)."""
    return _GLU[_op_name(activation)](a, b, in_place, gate_multiplier, down_multiplier)


def _op_name(activation: str) -> str:
    try:
        return ACTIVATIONS[activation]
    except KeyError:
        raise ValueError(
            f"tigon: activation {activation!r} has no fused GLU kernel; "
            f"expected one of {sorted(ACTIVATIONS)}"
        ) from None


_GLU = {"swiglu": swiglu, "geglu": geglu}


def _check_packed(gate_up: torch.Tensor, op: str) -> None:
    if gate_up.dim() == 0 or gate_up.size(-1) % 2 != 0:
        raise ValueError(
            f"tigon::{op}: argument 'gate_up': expected an even last dimension "
            f"([..., 2 * N]: gate then up), got shape {tuple(gate_up.shape)}"
        )


def swiglu_packed(gate_up: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """Phi3's fused form: ``gate, up = gate_up.chunk(2, -1); silu(gate) * up`` (no copies).

    The gradient of gate_up is one buffer; ``in_place`` allows it to be gate_up's own (when
    nothing else can observe gate_up, as :func:`swiglu`).
    """
    _check_packed(gate_up, "swiglu_packed")
    return torch.ops.tigon.swiglu_packed_fwd(gate_up, bool(in_place))


def geglu_packed(gate_up: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """:func:`swiglu_packed` with ``gelu(approximate="tanh")``."""
    _check_packed(gate_up, "geglu_packed")
    return torch.ops.tigon.geglu_packed_fwd(gate_up, bool(in_place))


def glu_packed(activation: str, gate_up: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """:func:`swiglu_packed` or :func:`geglu_packed` by HF activation name."""
    name = _op_name(activation)
    _check_packed(gate_up, f"{name}_packed")
    return getattr(torch.ops.tigon, f"{name}_packed_fwd")(gate_up, bool(in_place))


# ------------------------------------------------------------------------- GLU + down_proj
# Autograd of down_proj(glu(gate, up)) saves the product h (tokens x intermediate, the largest
# activation of a decoder layer) as the Linear's input, although the GLU's own backward already
# keeps gate and up. The ops below save gate, up and the weight only and recompute h in the
# backward (one elementwise pass), bitwise as the unfused path (bindings/torch/glu_autograd.cpp).


def fusable_down_proj(down_proj: nn.Module, *inputs: torch.Tensor) -> bool:
    """Whether ``down_proj(glu(...))`` may run as one recomputing op: a plain ``nn.Linear``
    (exact type: LoRA/PEFT, quantized and FSDP2 classes are not), called without hooks or an
    instance-level forward (accelerate), plain contiguous weight tensors, autograd on and autocast
    off for the input's device (else the ordinary path: nothing to save, or autocast's casts to
    reproduce)."""
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
    gate_multiplier: float = 1.0,
) -> torch.Tensor:
    """``down_proj(act(gate) * up)``, bitwise as ``down_proj(glu(activation, gate, up,
    in_place))``, whose backward recomputes ``act(gate) * up`` from gate and up instead of
    keeping it alive from forward to backward (saves tokens x intermediate x dtype bytes per
    MLP). Falls back to the two calls when :func:`fusable_down_proj` says no.
    ``activation``: an HF name (``silu``, ``gelu_pytorch_tanh``, ...) or ``swiglu``/``geglu``.
    ``in_place``, ``gate_multiplier``: as :func:`swiglu` (a down multiplier scales
    ``down_proj``'s output in HF's Falcon-H1: multiply the result).
    """
    name = _resolve(activation)
    gm = _multiplier(gate_multiplier, "gate_multiplier", f"{name}_down_proj")
    if not fusable_down_proj(down_proj, gate, up) or gate.shape != up.shape:
        return down_proj(_GLU[name](gate, up, in_place, gm))
    op = getattr(torch.ops.tigon, f"{name}_down_proj_fwd")
    return op(gate, up, down_proj.weight, down_proj.bias, bool(in_place), gm)


def glu_packed_down_proj(
    activation: str, gate_up: torch.Tensor, down_proj: nn.Module, in_place: bool = True
) -> torch.Tensor:
    """:func:`glu_down_proj` for Phi3's fused ``gate_up`` (``gate, up = gate_up.chunk(2, -1)``)."""
    name = _resolve(activation)
    if not fusable_down_proj(down_proj, gate_up) or gate_up.dim() == 0 or gate_up.size(-1) % 2:
        return down_proj(_GLU_PACKED[name](gate_up, in_place))
    op = getattr(torch.ops.tigon, f"{name}_packed_down_proj_fwd")
    return op(gate_up, down_proj.weight, down_proj.bias, bool(in_place))


_GLU_PACKED = {"swiglu": swiglu_packed, "geglu": geglu_packed}


def _resolve(activation: str) -> str:
    return activation if activation in _GLU else _op_name(activation)


for _name in _NAMES:
    _register_fakes(_name)
