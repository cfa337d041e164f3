"""Tiny configs for the parity probes: each family's own Config class, 1 layer, hidden 32."""

from __future__ import annotations

from typing import Any

from tigon.transformers.families import FamilySpec

_TINY: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "max_position_embeddings": 32,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def probe_config(family: FamilySpec, **overrides: Any) -> Any:
    """A tiny config of ``family`` (eager attention: the probes run on the CPU in float32)."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(family.name, **{**_TINY, **family.probe_config, **overrides})
    config._attn_implementation = "eager"
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    return config
