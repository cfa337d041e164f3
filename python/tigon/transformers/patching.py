"""Patching Hugging Face transformers models with tigon's kernels.

Two ways, per family (see :mod:`tigon.transformers.families`):

* ``model=None``: replace the classes in the family's modeling module, before any model is
  built. Models constructed afterwards use tigon's modules; parameter names are unchanged, so
  checkpoints load as they are. This changes the module for the whole process (undo with
  :func:`revert_patches`).
* ``model=<nn.Module>``: patch an existing model's modules in place: each HF norm instance becomes
  an instance of tigon's class (``module.__class__`` is swapped), keeping the very same weight
  ``Parameter`` (device, dtype, optimizer state, hooks). Works through wrappers that hold the model
  as a submodule (PEFT ``PeftModel``/LoRA, ``ModulesToSaveWrapper``, ``torch.compile``'s
  ``OptimizedModule``, DDP). Nothing global changes.

Kernels are switched by keyword flags (``rms_norm=True``, ...), one per entry of :data:`KERNELS`;
adding a kernel is one entry there plus its column in the family table. Unknown flags raise
``TypeError``. Anything that does not patch as expected raises ``RuntimeError`` naming the family,
the class and the transformers version: a missing class, a changed constructor, a forward whose
numerics no longer match the table (checked once per class on a small bfloat16 probe), or a
model in which a requested kernel found nothing to patch.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from torch import nn

from tigon.transformers import add_norm as _add_norm
from tigon.transformers import loss as _loss
from tigon.transformers import mlp as _mlp
from tigon.transformers import moe as _moe
from tigon.transformers import norm as _norm
from tigon.transformers import rope as _rope
from tigon.transformers._common import (
    SKIP_PARITY_CHECK_ENV,
    TESTED_TRANSFORMERS,
    class_key,
    transformers_version,
)
from tigon.transformers.families import FAMILIES, MODEL_TYPE_TO_FAMILY, FamilySpec

__all__ = [
    "KERNELS",
    "SKIP_PARITY_CHECK_ENV",
    "ApplyFn",
    "Kernel",
    "apply_tigon_kernel",
    "apply_tigon_kernel_to_instance",
    "describe_module",
    "family_for_model_type",
    "kernel_flags",
    "make_apply_fn",
    "patched_modules",
    "revert_patches",
    "supported_model_types",
    "supported_versions",
]


def describe_module(module: nn.Module) -> str | None:
    """What tigon does in a module, e.g. ``"tigon.nn.RMSNorm(llama)"``,
    ``"tigon.ops.swiglu(LlamaMLP)"``; None for modules tigon does not touch.

    Attention modules of a family whose ``apply_rotary_pos_emb`` is tigon's report the RoPE
    kernel; causal-LM modules report tigon's loss (fused or not).
    """
    norm = _norm.describe_module(module)
    if norm is not None:
        return norm
    if isinstance(module, _mlp.TigonGLU):
        return _mlp.describe(module.tigon_spec)
    if isinstance(module, _add_norm.TigonAddNormLayer):
        return _add_norm.describe(module.tigon_spec)
    if isinstance(module, _moe.TigonMoE):
        return _moe.describe(module.tigon_spec)
    loss = _loss.describe(module)
    if loss is not None:
        return loss
    family = _ATTENTION_CLASSES.get(class_key(module))
    if family is not None and _rope.is_patched(family):
        return _rope.describe(family)
    return None


#: (HF module, attention class name) -> family (RoPE reporting).
_ATTENTION_CLASSES: dict[tuple[str, str], FamilySpec] = {
    (f.module, f.rope.attention): f for f in FAMILIES.values() if f.rope is not None
}


# --------------------------------------------------------------------------------------------
# Kernel registry and the apply functions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """One switchable kernel: its flag name, default, and how it patches a family."""

    name: str
    default: bool
    #: Whether the family has something for this kernel to replace.
    applies_to: Callable[[FamilySpec], bool]
    #: model=None: replace module-level symbols; returns {replaced symbol: what it is now}.
    patch_classes: Callable[[FamilySpec], dict[str, str]]
    #: model=...: patch the instance; returns {module name: what it is now}; raises if nothing.
    patch_model: Callable[[FamilySpec, nn.Module], dict[str, str]]


def _has_glu(kind: str) -> Callable[[FamilySpec], bool]:
    return lambda f: f.mlp is not None and f.mlp.kind == kind


#: Every kernel flag, in the order applied. Adding a kernel is one entry here plus its column in
#: families.py.
KERNELS: Mapping[str, Kernel] = types.MappingProxyType(
    {
        "rms_norm": Kernel(
            "rms_norm", True, lambda f: bool(f.norms), _norm.replace_classes, _norm.patch_instances
        ),
        "fused_add_norm": Kernel(
            "fused_add_norm",
            True,
            lambda f: f.add_norm is not None,
            _add_norm.replace_classes,
            _add_norm.patch_instances,
        ),
        "rope": Kernel(
            "rope",
            True,
            lambda f: f.rope is not None,
            _rope.replace_function,
            _rope.patch_model,
        ),
        "swiglu": Kernel(
            "swiglu", True, _has_glu("swiglu"), _mlp.replace_classes, _mlp.patch_instances
        ),
        "geglu": Kernel(
            "geglu", True, _has_glu("geglu"), _mlp.replace_classes, _mlp.patch_instances
        ),
        "moe": Kernel(
            "moe", True, lambda f: f.moe is not None, _moe.replace_classes, _moe.patch_instances
        ),
        "cross_entropy": Kernel(
            "cross_entropy", False, lambda f: True, _loss.replace_loss, _loss.patch_loss
        ),
        "fused_linear_cross_entropy": Kernel(
            "fused_linear_cross_entropy",
            True,
            lambda f: True,
            _loss.replace_forward,
            _loss.patch_forward,
        ),
    }
)


def family_for_model_type(model_type: str) -> FamilySpec:
    """The family serving an HF ``model_type`` (or family name); ValueError if unsupported."""
    name = MODEL_TYPE_TO_FAMILY.get(model_type)
    if name is None:
        raise ValueError(
            f"tigon.transformers: model_type {model_type!r} is not supported; supported: "
            f"{', '.join(supported_model_types())}"
        )
    return FAMILIES[name]


def supported_versions() -> dict[str, object]:
    """What the patches are tested on: ``{"transformers": {"min": ..., "tested": (...)},
    "installed": ...}``. Other releases may work (each HF class is probed numerically before it
    is patched, and a changed one is a clear error, never a silent patch)."""
    return {
        "transformers": {"min": TESTED_TRANSFORMERS[0], "tested": TESTED_TRANSFORMERS},
        "installed": transformers_version(),
    }


def supported_model_types() -> list[str]:
    """Every HF ``model_type`` tigon can patch, sorted."""
    return sorted(MODEL_TYPE_TO_FAMILY)


def kernel_flags(family: str) -> dict[str, bool]:
    """The kernel flags a family's apply function accepts, with their defaults."""
    spec = family_for_model_type(family)
    return {k.name: k.default for k in KERNELS.values() if k.applies_to(spec)}


def _resolve_flags(spec: FamilySpec, fn_name: str, flags: Mapping[str, Any]) -> dict[str, bool]:
    accepted = kernel_flags(spec.name)
    for key, value in flags.items():
        if key not in accepted:
            raise TypeError(
                f"{fn_name}() got an unexpected keyword argument {key!r}; it accepts "
                f"{', '.join([*accepted, 'model'])}"
            )
        if not isinstance(value, bool):
            raise TypeError(f"{fn_name}(): {key} must be a bool, got {type(value).__name__}")
    resolved = {**accepted, **flags}
    if resolved.get("moe") and spec.mlp is not None and spec.moe is not None:
        if spec.mlp.cls == spec.moe.cls:  # the fused experts op includes the GLU (Mixtral)
            resolved[spec.mlp.kind] = False
    if flags.get("cross_entropy") and "fused_linear_cross_entropy" not in flags:
        resolved["fused_linear_cross_entropy"] = False  # asking for the unfused loss implies it
    if flags.get("rms_norm") is False and "fused_add_norm" in accepted:
        if flags.get("fused_add_norm"):
            raise ValueError(
                f"{fn_name}(): fused_add_norm=True needs rms_norm=True (the fused op is tigon's "
                f"RMSNorm with the residual add in front); pass fused_add_norm=False"
            )
        resolved["fused_add_norm"] = False  # HF's norms stay: nothing to fuse the add into
    if resolved.get("cross_entropy") and resolved.get("fused_linear_cross_entropy"):
        raise ValueError(
            f"{fn_name}(): cross_entropy=True and fused_linear_cross_entropy=True are exclusive "
            f"(both replace the causal-LM loss); pick one"
        )
    return resolved


def apply_tigon_kernel(
    family: str, *, model: nn.Module | None = None, **kernels: bool
) -> dict[str, str]:
    """Patches one family (or HF ``model_type``) with tigon's kernels.

    Args:
        family: family name or HF ``model_type``, e.g. ``"llama"``, ``"gemma3_text"``.
        model: None to replace the classes of the family's modeling module (call this before
            building the model); an existing model (also PEFT-wrapped or compiled) to patch its
            modules in place.
        **kernels: one bool per kernel, see :func:`kernel_flags` (today: ``rms_norm``). Omitted
            flags take their default (True).

    Returns:
        What was patched: ``{module name or replaced class: description}``, e.g.
        ``{"model.norm": "tigon.nn.RMSNorm(llama)"}``.

    Raises:
        ValueError: unsupported family.
        TypeError: an unknown flag, or a non-bool value.
        RuntimeError: the modeling code differs from what tigon expects, or a requested kernel
            found nothing to patch in ``model``.
    """
    spec = family_for_model_type(family)
    fn_name = f"apply_tigon_kernel_to_{spec.name}"
    flags = _resolve_flags(spec, fn_name, kernels)
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"{fn_name}(): model must be a torch.nn.Module, got {type(model).__name__}")
    done: dict[str, str] = {}
    for name, enabled in flags.items():
        if not enabled:
            continue
        kernel = KERNELS[name]
        done.update(
            kernel.patch_classes(spec) if model is None else kernel.patch_model(spec, model)
        )
    return done


def _unwrap_config(model: nn.Module) -> Any:
    config = getattr(model, "config", None)
    if config is None:
        for attr in ("base_model", "_orig_mod", "module"):
            inner = getattr(model, attr, None)
            if isinstance(inner, nn.Module) and inner is not model:
                return _unwrap_config(inner)
    return config


def apply_tigon_kernel_to_instance(model: nn.Module, **kernels: bool) -> dict[str, str]:
    """Patches a built model in place, picking the family from ``model.config.model_type``.

    Same flags, return value and errors as :func:`apply_tigon_kernel`.
    """
    config = _unwrap_config(model)
    model_type = getattr(config, "model_type", None)
    if not isinstance(model_type, str):
        raise ValueError(
            f"tigon.transformers: cannot tell the model_type of a {type(model).__name__} (no "
            f".config.model_type); call apply_tigon_kernel_to_<family>(model=...) instead"
        )
    return apply_tigon_kernel(model_type, model=model, **kernels)


class ApplyFn(Protocol):
    """``apply_tigon_kernel_to_<family>(*, rms_norm=True, ..., model=None) -> dict[str, str]``."""

    def __call__(self, *, model: nn.Module | None = None, **kernels: bool) -> dict[str, str]: ...


def _kernels_doc(spec: FamilySpec) -> str:
    lines = []
    if spec.add_norm is not None:
        a = spec.add_norm
        lines.append(
            f"        fused_add_norm: ``{a.layer}``'s residual add + ``{a.norm}`` -> "
            f"tigon.ops.fused_add_rms_norm (needs rms_norm=True)."
        )
    if spec.rope is not None:
        lines.append(
            f"        rope: ``{spec.module}.{spec.rope.fn}`` -> tigon.ops.rope (process-wide, also "
            f"with model=...)."
        )
    if spec.moe is not None:
        lines.append(
            f"        moe: ``{spec.moe.cls}`` -> tigon.ops.moe_experts (routing by expert, both "
            f"GEMMs and the GLU in one op; the router and its aux loss stay HF's"
            + (
                f"; supersedes {spec.mlp.kind} for this class"
                if spec.mlp is not None and spec.mlp.cls == spec.moe.cls
                else ""
            )
            + ")."
        )
    if spec.mlp is not None:
        lines.append(
            f"        {spec.mlp.kind}: ``{spec.mlp.cls}`` -> tigon.ops.{spec.mlp.kind} "
            f"({spec.mlp.layout} layout{', gate/down multipliers' if spec.mlp.multipliers else ''})."
        )
    lines.append(
        "        cross_entropy: HF's loss_function -> tigon.ops.cross_entropy (default False)."
    )
    lines.append(
        f"        fused_linear_cross_entropy: {spec.causal_lm}.forward computes the training loss "
        f"with tigon.ops.fused_linear_cross_entropy, logits=None (exclusive with cross_entropy)."
    )
    return "\n".join(lines) + "\n"


def make_apply_fn(family: str) -> ApplyFn:
    """Builds ``apply_tigon_kernel_to_<family>`` with its real keyword-only signature."""
    spec = family_for_model_type(family)
    flags = kernel_flags(spec.name)

    def apply(*, model: nn.Module | None = None, **kernels: bool) -> dict[str, str]:
        return apply_tigon_kernel(spec.name, model=model, **kernels)

    params = [
        inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v, annotation=bool)
        for k, v in flags.items()
    ]
    params.append(
        inspect.Parameter(
            "model", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="nn.Module | None"
        )
    )
    signature = inspect.Signature(params, return_annotation="dict[str, str]")
    apply.__signature__ = signature  # type: ignore[attr-defined]
    apply.__name__ = apply.__qualname__ = f"apply_tigon_kernel_to_{spec.name}"
    apply.__module__ = "tigon.transformers"
    norms = "\n".join(
        f"        - ``{n}`` -> {_norm.describe(s)}: {s.why}" for n, s in spec.norms.items()
    )
    kernels_doc = _kernels_doc(spec)
    apply.__doc__ = (
        f"Patches {spec.name} models ({spec.causal_lm}) with tigon's kernels.\n\n"
        f"    Call it with ``model=None`` before building the model (replaces the classes of\n"
        f"    ``{spec.module}``; checkpoints load unchanged), or pass an existing ``model``\n"
        f"    (also PEFT-wrapped) to patch its modules in place.\n\n"
        f"    Args:\n"
        f"        rms_norm: replace every RMSNorm:\n{norms}\n{kernels_doc}"
        f"        model: the model to patch in place, or None.\n\n"
        f"    Returns:\n"
        f"        ``{{patched module or class: what it is now}}``.\n\n"
        f"    Raises:\n"
        f"        TypeError: unknown keyword argument or non-bool flag.\n"
        f"        RuntimeError: transformers' modeling code changed, or nothing to patch.\n"
    )
    return apply


# --------------------------------------------------------------------------------------------
# Reporting and undoing
# --------------------------------------------------------------------------------------------


def patched_modules(model: nn.Module) -> dict[str, str]:
    """Every tigon module inside ``model``: ``{qualified name: what it is}``.

    E.g. ``{"model.layers.0.input_layernorm": "tigon.nn.RMSNorm(llama)", ...}``; names include
    wrapper prefixes (``base_model.model.`` under PEFT). Empty if nothing is patched.
    """
    out: dict[str, str] = {}
    for name, module in model.named_modules():
        what = describe_module(module)
        if what is not None:
            out[name] = what
    return out


def revert_patches(family: str | None = None) -> list[str]:
    """Restores what ``apply_tigon_kernel_to_<family>(model=None)`` replaced: the norm and MLP
    classes, ``apply_rotary_pos_emb`` (also when a ``model=`` patch replaced it), and the
    causal-LM class's ``forward`` / ``loss_function``.

    Models built in the meantime keep their tigon norm and MLP modules; RoPE and the class-level
    loss patches are restored for every model (they live on HF's module and class). Instance
    patches (``model=...``) of norms, MLPs and losses stay. Returns the restored symbols.
    """
    names = (
        {f.name: f for f in FAMILIES.values()}
        if family is None
        else {family_for_model_type(family).name: family_for_model_type(family)}
    )
    restored: list[str] = []
    for spec in names.values():
        restored += (
            _rope.revert(spec)
            + _moe.revert(spec)
            + _mlp.revert(spec)
            + _loss.revert(spec)
            + _norm.revert(spec)
            + _add_norm.revert(spec)
        )
    return restored
