"""Functional interface: the tigon operators with their autograd formulas."""

from tigon.ops.cross_entropy import REDUCTIONS, CrossEntropyOutput, cross_entropy
from tigon.ops.divergence import DIVERGENCE_REDUCTIONS, jsd, kl_div, tvd
from tigon.ops.dyt import dyt
from tigon.ops.fused_add_rms_norm import fused_add_rms_norm
from tigon.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
from tigon.ops.gated_rms_norm import gated_rms_norm
from tigon.ops.glu import geglu, geglu_packed, glu, glu_packed, swiglu, swiglu_packed
from tigon.ops.group_norm import group_norm
from tigon.ops.layer_norm import layer_norm
from tigon.ops.moe_experts import MOE_ACTIVATIONS, moe_experts, moe_router
from tigon.ops.poly_norm import poly_norm
from tigon.ops.rms_norm import CASTING_MODES, rms_norm
from tigon.ops.rope import apply_rotary_pos_emb, rope

__all__ = [
    "CASTING_MODES",
    "DIVERGENCE_REDUCTIONS",
    "MOE_ACTIVATIONS",
    "REDUCTIONS",
    "CrossEntropyOutput",
    "apply_rotary_pos_emb",
    "cross_entropy",
    "dyt",
    "fused_add_rms_norm",
    "fused_linear_cross_entropy",
    "gated_rms_norm",
    "geglu",
    "geglu_packed",
    "glu",
    "glu_packed",
    "group_norm",
    "jsd",
    "kl_div",
    "layer_norm",
    "moe_experts",
    "moe_router",
    "poly_norm",
    "rms_norm",
    "rope",
    "swiglu",
    "swiglu_packed",
    "tvd",
]
