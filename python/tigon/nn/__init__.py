"""Modules: drop-in replacements for the Hugging Face transformers modules."""

from tigon.nn.cross_entropy import CrossEntropyLoss
from tigon.nn.rms_norm import RMSNorm

__all__ = ["CrossEntropyLoss", "RMSNorm"]
