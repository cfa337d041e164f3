"""``AutoTigonForCausalLM``: ``AutoModelForCausalLM`` that patches the model it returns."""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from tigon.transformers.families import FamilySpec
from tigon.transformers.patching import (
    KERNELS,
    apply_tigon_kernel,
    family_for_model_type,
    kernel_flags,
)

__all__ = ["AutoTigonForCausalLM"]

#: from_pretrained keyword arguments that locate the config (forwarded to AutoConfig as well).
_CONFIG_KWARGS = (
    "cache_dir",
    "force_download",
    "local_files_only",
    "proxies",
    "revision",
    "subfolder",
    "token",
    "trust_remote_code",
)


def _split_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, bool], dict[str, Any]]:
    """Separates tigon's kernel flags (any name in KERNELS) from Hugging Face's arguments."""
    ours = {k: v for k, v in kwargs.items() if k in KERNELS}
    theirs = {k: v for k, v in kwargs.items() if k not in KERNELS}
    return ours, theirs


def _check_flags(family: FamilySpec, flags: dict[str, bool]) -> None:
    accepted = kernel_flags(family.name)
    for key, value in flags.items():
        if key not in accepted:
            raise TypeError(
                f"AutoTigonForCausalLM: kernel flag {key!r} does not apply to {family.name} "
                f"models; flags for {family.name}: {', '.join(accepted)}"
            )
        if not isinstance(value, bool):
            raise TypeError(
                f"AutoTigonForCausalLM: {key} must be a bool, got {type(value).__name__}"
            )


class AutoTigonForCausalLM:
    """Loads or builds a causal LM with ``transformers.AutoModelForCausalLM`` and patches it.

    The family comes from ``config.model_type``; keyword arguments named like tigon's kernel flags
    (``rms_norm=...``) go to the family's patch, everything else to Hugging Face. The returned
    model is patched in place (``apply_tigon_kernel_to_<family>(model=...)``): transformers'
    classes are not modified for the rest of the process.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise OSError(
            "AutoTigonForCausalLM is used through AutoTigonForCausalLM.from_pretrained(...) or "
            "AutoTigonForCausalLM.from_config(config)"
        )

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike[str], *model_args: Any, **kwargs: Any
    ) -> nn.Module:
        """``AutoModelForCausalLM.from_pretrained(...)``, then tigon's patch for its model_type.

        Raises:
            ValueError: the model_type is not supported (checked from the config before the
                weights load, when the config can be read on its own).
            TypeError: a kernel flag that does not apply to the family, or a non-bool flag.
        """
        from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

        flags, hf_kwargs = _split_kwargs(kwargs)
        config = hf_kwargs.get("config")
        if not isinstance(config, PretrainedConfig):
            try:
                config = AutoConfig.from_pretrained(
                    pretrained_model_name_or_path,
                    **{k: hf_kwargs[k] for k in _CONFIG_KWARGS if k in hf_kwargs},
                )
            except (OSError, ValueError):
                config = None  # e.g. an adapter folder: decided once the model is loaded
        if config is not None:
            _check_flags(family_for_model_type(config.model_type), flags)
        model = AutoModelForCausalLM.from_pretrained(
            pretrained_model_name_or_path, *model_args, **hf_kwargs
        )
        return _patch(model, flags)

    @classmethod
    def from_config(cls, config: Any, **kwargs: Any) -> nn.Module:
        """``AutoModelForCausalLM.from_config(config, ...)``, then tigon's patch (random init)."""
        from transformers import AutoModelForCausalLM

        flags, hf_kwargs = _split_kwargs(kwargs)
        _check_flags(family_for_model_type(config.model_type), flags)
        model = AutoModelForCausalLM.from_config(config, **hf_kwargs)
        return _patch(model, flags)


def _patch(model: nn.Module, flags: dict[str, bool]) -> nn.Module:
    family = family_for_model_type(model.config.model_type)
    _check_flags(family, flags)
    apply_tigon_kernel(family.name, model=model, **flags)
    return model
