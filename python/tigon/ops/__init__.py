"""Functional interface: the tigon operators with their autograd formulas."""

from tigon.ops.rms_norm import CASTING_MODES, rms_norm

__all__ = ["CASTING_MODES", "rms_norm"]
