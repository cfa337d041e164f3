"""SwiGLU / GeGLU: fake implementations and autograd of ``torch.ops.tigon.{swiglu,geglu}_*``,
and :func:`swiglu`, :func:`geglu`, :func:`swiglu_packed`, :func:`geglu_packed`.

The kernels and their exact cast order are specified in ``include/tigon/ops/glu.h``.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["geglu", "geglu_packed", "glu", "glu_packed", "swiglu", "swiglu_packed"]

_OPS = "tigon::"
_NAMES = ("swiglu", "geglu")

#: HF activation names (``config.hidden_act``) -> tigon op name.
ACTIVATIONS: dict[str, str] = {
    "silu": "swiglu",
    "swish": "swiglu",
    "gelu_pytorch_tanh": "geglu",
}


def _register(name: str) -> None:
    @torch.library.register_fake(f"{_OPS}{name}_fwd")
    def _fwd_fake(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
        return torch.empty(a.shape, dtype=a.dtype, device=a.device)

    @torch.library.register_fake(f"{_OPS}{name}_bwd")
    def _bwd_fake(
        dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            torch.empty(a.shape, dtype=a.dtype, device=a.device),
            torch.empty(b.shape, dtype=b.dtype, device=b.device),
        )

    @torch.library.register_fake(f"{_OPS}{name}_bwd_inplace")
    def _bwd_inplace_fake(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        return None

    ops = getattr(torch.ops.tigon, f"{name}_bwd")
    ops_inplace = getattr(torch.ops.tigon, f"{name}_bwd_inplace")

    def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        a, b, in_place = inputs
        ctx.save_for_backward(a, b)
        ctx.in_place = in_place

    def _backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        a, b = ctx.saved_tensors
        if ctx.in_place and _writable(a) and _writable(b):
            # The saved activations become the gradients: no new buffer (a second backward
            # through this graph would see the overwritten values).
            ops_inplace(dy, a, b)
            return a, b, None
        da, db = ops(dy, a, b)
        return da, db, None

    torch.library.register_autograd(f"{_OPS}{name}_fwd", _backward, setup_context=_setup_context)


def _writable(t: torch.Tensor) -> bool:
    """The kernel can write t's elements in place: last dim dense, rows a single stride."""
    if t.dim() == 0 or t.numel() == 0:
        return True
    if t.size(-1) != 1 and t.stride(-1) != 1:
        return False
    stride, span = None, 1
    for d in range(t.dim() - 2, -1, -1):
        if t.size(d) == 1:
            continue
        if stride is None:
            stride, span = t.stride(d), t.size(d)
        elif t.stride(d) != stride * span:
            return False
        else:
            span *= t.size(d)
    return stride is None or stride >= t.size(-1)


for _name in _NAMES:
    _register(_name)


def _check_pair(a: torch.Tensor, b: torch.Tensor, op: str) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"tigon::{op}: argument 'b': expected shape {tuple(a.shape)} (a's shape), "
            f"got {tuple(b.shape)}"
        )


def swiglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """``silu(a) * b`` exactly as Hugging Face's eager ``act_fn(gate_proj(x)) * up_proj(x)``.

    Args:
        a: the gate projection ``[..., N]``, float32, float16 or bfloat16. Row-strided views
            (e.g. ``gate_up.chunk(2, -1)[0]``) are read in place.
        b: the up projection, same shape and dtype.
        in_place: the backward writes da into a's buffer and db into b's (no gradient
            buffers). Only when nothing else reads a and b afterwards (true inside an MLP);
            a second backward through the same graph is then wrong.

    Returns:
        ``round(round(silu(a)) * b)`` in a's dtype, a new contiguous tensor.
    """
    _check_pair(a, b, "swiglu")
    return torch.ops.tigon.swiglu_fwd(a, b, bool(in_place))


def geglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """``gelu(a, approximate="tanh") * b`` as Hugging Face's eager GemmaMLP; see :func:`swiglu`."""
    _check_pair(a, b, "geglu")
    return torch.ops.tigon.geglu_fwd(a, b, bool(in_place))


def glu(activation: str, a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """:func:`swiglu` or :func:`geglu` by HF activation name (``config.hidden_act``)."""
    return _GLU[_op_name(activation)](a, b, in_place)


def _op_name(activation: str) -> str:
    try:
        return ACTIVATIONS[activation]
    except KeyError:
        raise ValueError(
            f"tigon: activation {activation!r} has no fused GLU kernel; "
            f"expected one of {sorted(ACTIVATIONS)}"
        ) from None


_GLU = {"swiglu": swiglu, "geglu": geglu}


class _PackedGlu(torch.autograd.Function):
    """act(gate) * up with gate, up = gate_up.chunk(2, -1); the gradient of gate_up is one
    buffer (gate_up's own when in_place), with no concatenation."""

    @staticmethod
    def forward(ctx: Any, gate_up: torch.Tensor, name: str, in_place: bool) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        ctx.save_for_backward(gate_up)
        ctx.name = name
        ctx.in_place = in_place
        return getattr(torch.ops.tigon, f"{name}_fwd")(gate, up)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        (gate_up,) = ctx.saved_tensors
        grad = gate_up if ctx.in_place and _writable(gate_up) else torch.empty_like(gate_up)
        if grad is not gate_up:
            grad.copy_(gate_up)  # the kernel reads gate and up from the buffer it writes
        gate, up = grad.chunk(2, dim=-1)
        getattr(torch.ops.tigon, f"{ctx.name}_bwd_inplace")(dy, gate, up)
        return grad, None, None


def _check_packed(gate_up: torch.Tensor, op: str) -> None:
    if gate_up.dim() == 0 or gate_up.size(-1) % 2 != 0:
        raise ValueError(
            f"tigon::{op}: argument 'gate_up': expected an even last dimension "
            f"([..., 2 * N]: gate then up), got shape {tuple(gate_up.shape)}"
        )


def swiglu_packed(gate_up: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """Phi3's fused form: ``gate, up = gate_up.chunk(2, -1); silu(gate) * up`` (no copies).

    With ``in_place`` the gradient of gate_up is written into gate_up's own buffer.
    """
    _check_packed(gate_up, "swiglu_packed")
    return _PackedGlu.apply(gate_up, "swiglu", bool(in_place))


def geglu_packed(gate_up: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """:func:`swiglu_packed` with ``gelu(approximate="tanh")``."""
    _check_packed(gate_up, "geglu_packed")
    return _PackedGlu.apply(gate_up, "geglu", bool(in_place))


def glu_packed(activation: str, gate_up: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """:func:`swiglu_packed` or :func:`geglu_packed` by HF activation name."""
    name = _op_name(activation)
    _check_packed(gate_up, f"{name}_packed")
    return _PackedGlu.apply(gate_up, name, bool(in_place))
