"""Functional interface: the tigon operators with their autograd formulas."""

from tigon.ops.glu import geglu, geglu_packed, glu, glu_packed, swiglu, swiglu_packed
from tigon.ops.rms_norm import CASTING_MODES, rms_norm

__all__ = [
    "CASTING_MODES",
    "geglu",
    "geglu_packed",
    "glu",
    "glu_packed",
    "rms_norm",
    "swiglu",
    "swiglu_packed",
]
