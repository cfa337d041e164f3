"""Modules: drop-in replacements for the Hugging Face transformers modules."""

from tigon.nn.rms_norm import RMSNorm

__all__ = ["RMSNorm"]
