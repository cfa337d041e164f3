"""Functional interface: the tigon operators with their autograd formulas."""

from tigon.ops.cross_entropy import REDUCTIONS, cross_entropy
from tigon.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
from tigon.ops.rms_norm import CASTING_MODES, rms_norm

__all__ = ["CASTING_MODES", "REDUCTIONS", "cross_entropy", "fused_linear_cross_entropy", "rms_norm"]
