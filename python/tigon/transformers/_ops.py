"""The tigon ops the transformers integration calls, in one place (their signatures live here).

Each is looked up at call time, so ``tigon.transformers`` imports even from a build that lacks an op
(only a patch that needs it fails, with the name of the missing op).
"""

from __future__ import annotations

from typing import Any

import torch

import tigon


def _op(name: str) -> Any:
    fn = getattr(tigon.ops, name, None)
    if fn is None:
        raise RuntimeError(
            f"tigon.transformers: this tigon build has no tigon.ops.{name}; rebuild tigon, or "
            f"turn the corresponding kernel flag off"
        )
    return fn


def require(*names: str) -> None:
    """Raises before patching if an op is missing."""
    for name in names:
        _op(name)


def glu(
    kind: str, gate: torch.Tensor, up: torch.Tensor, gate_multiplier: float = 1.0
) -> torch.Tensor:
    """``act(gate) * up`` with ``kind`` ``"swiglu"`` (silu) or ``"geglu"`` (tanh GELU);
    ``act(gate * gate_multiplier) * up`` with a multiplier (Falcon-H1).

    ``in_place``: the backward may write the gradients into gate's and up's buffers; it does when
    nothing else can observe them (checked at run time), as for fresh projection outputs (a
    Linear's backward needs its input, not its output).
    """
    return _op(kind)(gate, up, in_place=True, gate_multiplier=gate_multiplier)


def glu_packed(kind: str, gate_up: torch.Tensor) -> torch.Tensor:
    """``gate, up = gate_up.chunk(2, -1); act(gate) * up`` without copies (Phi3, MoE experts)."""
    return _op(f"{kind}_packed")(gate_up, in_place=True)


def glu_down_proj(
    kind: str, gate: torch.Tensor, up: torch.Tensor, down_proj: Any, gate_multiplier: float = 1.0
) -> torch.Tensor:
    """``down_proj(glu(kind, gate, up, gate_multiplier))`` whose backward recomputes the product
    instead of saving it (``tigon.nn.glu_down_proj``; the plain path for a wrapped or hooked
    down_proj)."""
    return tigon.nn.glu_down_proj(
        kind, gate, up, down_proj, in_place=True, gate_multiplier=gate_multiplier
    )


def glu_packed_down_proj(kind: str, gate_up: torch.Tensor, down_proj: Any) -> torch.Tensor:
    """``down_proj(glu_packed(kind, gate_up))``, recomputing the product in the backward."""
    return tigon.nn.glu_packed_down_proj(kind, gate_up, down_proj, in_place=True)


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    in_place: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = x + residual`` and ``rms_norm(h)`` in one op: returns ``(y, h)``."""
    return _op("fused_add_rms_norm")(x, residual, weight, eps, offset, casting_mode, in_place)


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)``."""
    return _op("rope")(q, k, cos, sin, None, unsqueeze_dim)


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    *,
    ignore_index: int,
    reduction: str,
    softcap: float | None,
) -> torch.Tensor:
    """Cross-entropy of ``[N, V]`` logits (any float dtype, computed in float32)."""
    return _op("cross_entropy")(
        logits, target, ignore_index=ignore_index, reduction=reduction, softcap=softcap
    )


def fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    ignore_index: int,
    reduction: str,
    softcap: float | None,
    return_token_accuracy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Cross-entropy of ``hidden @ weight.T + bias`` without materializing the logits, and the
    token accuracy when ``return_token_accuracy`` (else None)."""
    out = _op("fused_linear_cross_entropy")(
        hidden,
        weight,
        target,
        bias=bias,
        ignore_index=ignore_index,
        reduction=reduction,
        softcap=softcap,
        return_token_accuracy=return_token_accuracy,
    )
    return (out.loss, out.token_accuracy) if return_token_accuracy else (out, None)
