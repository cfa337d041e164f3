"""Modules: drop-in replacements for the Hugging Face transformers modules (and, in
:mod:`tigon.nn.functional`, for ``torch.nn.functional``'s functions)."""

from tigon.nn import functional
from tigon.nn.cross_entropy import CrossEntropyLoss
from tigon.nn.divergence import JSD, KLDivLoss, TVDLoss
from tigon.nn.dyt import DyT
from tigon.nn.fused_add_rms_norm import FusedAddRMSNorm
from tigon.nn.fused_linear_cross_entropy import FusedLinearCrossEntropyLoss
from tigon.nn.gated_rms_norm import RMSNormGated
from tigon.nn.glu import (
    GLUMLP,
    GeGLUMLP,
    Phi3SwiGLUMLP,
    SwiGLUMLP,
    glu_down_proj,
    glu_experts_apply_gate,
    glu_experts_forward,
    glu_packed_down_proj,
    use_tigon_experts,
)
from tigon.nn.group_norm import GroupNorm
from tigon.nn.layer_norm import LayerNorm
from tigon.nn.moe_experts import MoEExperts
from tigon.nn.poly_norm import PolyNorm
from tigon.nn.rms_norm import RMSNorm

__all__ = [
    "GLUMLP",
    "CrossEntropyLoss",
    "DyT",
    "FusedAddRMSNorm",
    "FusedLinearCrossEntropyLoss",
    "GeGLUMLP",
    "GroupNorm",
    "JSD",
    "KLDivLoss",
    "LayerNorm",
    "MoEExperts",
    "Phi3SwiGLUMLP",
    "PolyNorm",
    "RMSNorm",
    "RMSNormGated",
    "SwiGLUMLP",
    "TVDLoss",
    "functional",
    "glu_down_proj",
    "glu_experts_apply_gate",
    "glu_experts_forward",
    "glu_packed_down_proj",
    "use_tigon_experts",
]
