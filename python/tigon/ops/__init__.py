"""Functional interface: the tigon operators with their autograd formulas."""

from tigon.ops.glu import geglu, geglu_packed, glu, glu_packed, swiglu, swiglu_packed
from tigon.ops.rms_norm import CASTING_MODES, rms_norm
from tigon.ops.rope import apply_rotary_pos_emb, rope

__all__ = [
    "CASTING_MODES",
    "apply_rotary_pos_emb",
    "geglu",
    "geglu_packed",
    "glu",
    "glu_packed",
    "rms_norm",
    "rope",
    "swiglu",
    "swiglu_packed",
]
