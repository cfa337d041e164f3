"""Functional interface: the tigon operators with their autograd formulas."""

from tigon.ops.rms_norm import CASTING_MODES, rms_norm
from tigon.ops.rope import apply_rotary_pos_emb, rope

__all__ = ["CASTING_MODES", "apply_rotary_pos_emb", "rms_norm", "rope"]
