"""RMSNorm patching: a tigon class standing in for each family's HF norm class.

``replace_classes`` swaps the classes in the family's modeling module (``model=None``);
``patch_instances`` turns a built model's HF norm instances into tigon's class in place, keeping
the very same weight ``Parameter``; ``revert`` puts the HF classes back. Each HF class is checked
once per process: its constructor, and its forward against tigon's casting mode on a small
bfloat16 probe (a changed class raises instead of being patched silently).
"""

from __future__ import annotations

import inspect
import sys
import types

import torch
from torch import nn

import tigon
from tigon.nn import RMSNorm
from tigon.transformers._common import SKIP_PARITY_CHECK_ENV, class_key, skip_parity
from tigon.transformers._common import drift as _drift
from tigon.transformers._common import import_family_module as _import_family_module
from tigon.transformers._common import transformers_version as _transformers_version
from tigon.transformers.families import FAMILIES, FamilySpec, NormSpec


class _TigonHFRMSNorm(RMSNorm):
    """Base of the per-family classes: tigon.nn.RMSNorm with an HF-style constructor."""

    #: Set on each subclass: family name, replaced class ("module.Class"), and its mapping.
    tigon_family: str = ""
    tigon_replaces: str = ""
    tigon_spec: NormSpec

    def __init__(
        self,
        hidden_size: int | None = None,
        eps: float = 1e-6,
        *,
        dim: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        # HF's constructors are (hidden_size, eps=1e-6) or, in the Gemma files, (dim, eps=1e-6);
        # both are accepted positionally or by name (checked against HF's when patching).
        size = hidden_size if hidden_size is not None else dim
        if size is None or (hidden_size is not None and dim is not None):
            raise TypeError(f"{type(self).__name__}: pass exactly one of hidden_size or dim")
        spec = type(self).tigon_spec
        super().__init__(
            size,
            eps=eps,
            offset=spec.offset,
            casting_mode=spec.casting_mode,
            in_place=spec.in_place,
            init=spec.init,
            device=device,
            dtype=dtype,
        )


def _norm_class_name(hf_name: str) -> str:
    return f"Tigon{hf_name}"  # keeps "RMSNorm" in the name: HF's _init_weights matches on it


def _make_norm_classes() -> dict[tuple[str, str], type[_TigonHFRMSNorm]]:
    classes: dict[tuple[str, str], type[_TigonHFRMSNorm]] = {}
    for family in FAMILIES.values():
        for hf_name, spec in family.norms.items():
            name = _norm_class_name(hf_name)
            cls = type(
                name,
                (_TigonHFRMSNorm,),
                {
                    "__module__": __name__,
                    "__qualname__": name,
                    "__doc__": f"tigon.nn.RMSNorm standing in for {family.module}.{hf_name}.",
                    "tigon_family": family.name,
                    "tigon_replaces": f"{family.module}.{hf_name}",
                    "tigon_spec": spec,
                },
            )
            globals()[name] = cls  # importable by name: patched models pickle and unpickle
            classes[(family.module, hf_name)] = cls
    return classes


#: (HF module, HF class name) -> tigon class; created at import so pickled models load.
_NORM_CLASSES = _make_norm_classes()

#: (HF module, HF class name) -> the original HF class, recorded when first replaced.
_ORIGINALS: dict[tuple[str, str], type] = {}

#: HF classes whose numerics were checked against their table entry in this process.
_VERIFIED: set[tuple[str, str, int]] = set()


def _check_constructor(family: FamilySpec, hf_name: str, hf_cls: type) -> None:
    try:
        params = list(inspect.signature(hf_cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):  # pragma: no cover - builtin or odd signature
        return
    names = [p.name for p in params]
    if (
        len(params) != 2
        or names[0] not in ("hidden_size", "dim")
        or names[1] != "eps"
        or params[1].default != 1e-6
    ):
        raise _drift(
            family.name,
            f"{hf_name}.__init__ has parameters {names} (defaults "
            f"{[p.default for p in params]}); expected (hidden_size|dim, eps=1e-6)",
        )


def _check_parity(family: FamilySpec, hf_name: str, hf_cls: type, spec: NormSpec) -> None:
    """Runs the HF class and tigon's kernel on a small CPU probe; raises if they disagree.

    bfloat16 inputs separate the casting modes (about a quarter of the outputs differ between
    "llama" and "gemma" casting) and a wrong offset changes every output, while the exact mode
    matches HF bit for bit (allowing a 1% margin for reduction order).
    """
    key = (family.module, hf_name, id(hf_cls))
    if key in _VERIFIED or skip_parity():
        return
    hidden = 64
    gen = torch.Generator().manual_seed(20260101)
    with torch.device("cpu"), torch.no_grad():
        try:
            ref = hf_cls(hidden, eps=1e-5)
        except Exception as exc:  # any failure here means a changed class
            raise _drift(family.name, f"{hf_name}({hidden}, eps=1e-5) failed: {exc!r}") from exc
        if not isinstance(getattr(ref, "weight", None), nn.Parameter):
            raise _drift(family.name, f"{hf_name} has no 'weight' Parameter")
        if getattr(ref, spec.eps_attr, None) != 1e-5:
            raise _drift(
                family.name, f"{hf_name} keeps its epsilon elsewhere than .{spec.eps_attr}"
            )
        fill = 1.0 if spec.init == "ones" else 0.0
        if not bool((ref.weight.float() == fill).all()):
            raise _drift(family.name, f"{hf_name}'s weight no longer starts as {spec.init}")
        for x_dtype, w_dtype in ((torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)):
            x = (torch.randn(32, hidden, generator=gen) * 3).to(x_dtype)
            w = (torch.randn(hidden, generator=gen) * 0.7 + (1.0 - spec.offset)).to(w_dtype)
            ref = ref.to(w_dtype)
            ref.weight.copy_(w)
            want = ref(x)
            got = tigon.ops.rms_norm(x, w, 1e-5, spec.offset, spec.casting_mode)
            if got.dtype != want.dtype:
                raise _drift(
                    family.name,
                    f"{hf_name} returns {want.dtype} for {x_dtype} input and {w_dtype} weight; "
                    f"tigon's {spec.casting_mode!r} mode returns {got.dtype}",
                )
            differ = (got != want).float().mean().item()
            if differ > 0.01:
                raise _drift(
                    family.name,
                    f"{hf_name}'s forward no longer matches tigon's {spec.casting_mode!r} casting "
                    f"with offset {spec.offset:g}: {differ:.0%} of {x_dtype} outputs differ "
                    f"(weight {w_dtype}). Set {SKIP_PARITY_CHECK_ENV}=1 to patch anyway",
                )
    _VERIFIED.add(key)


def _original_class(family: FamilySpec, module: types.ModuleType, hf_name: str) -> type:
    current = getattr(module, hf_name, None)
    if current is None:
        raise _drift(family.name, f"{family.module} has no class {hf_name}")
    if isinstance(current, type) and issubclass(current, _TigonHFRMSNorm):
        return _ORIGINALS[(family.module, hf_name)]
    if not (isinstance(current, type) and issubclass(current, nn.Module)):
        raise _drift(family.name, f"{family.module}.{hf_name} is not an nn.Module class")
    return current


def _verified_original(family: FamilySpec, module: types.ModuleType, hf_name: str) -> type:
    hf_cls = _original_class(family, module, hf_name)
    _check_constructor(family, hf_name, hf_cls)
    _check_parity(family, hf_name, hf_cls, family.norms[hf_name])
    return hf_cls


def replace_classes(family: FamilySpec) -> dict[str, str]:
    module = _import_family_module(family)
    done: dict[str, str] = {}
    for hf_name in family.norms:
        hf_cls = _verified_original(family, module, hf_name)
        tigon_cls = _NORM_CLASSES[(family.module, hf_name)]
        _ORIGINALS.setdefault((family.module, hf_name), hf_cls)
        setattr(module, hf_name, tigon_cls)
        done[f"{family.module}.{hf_name}"] = describe(tigon_cls.tigon_spec)
    return done


def _adopt_norm(module: nn.Module, family: FamilySpec, hf_name: str) -> None:
    """Turns an HF norm instance into the tigon class in place (same object, same Parameter)."""
    spec = family.norms[hf_name]
    weight = getattr(module, "weight", None)
    if not isinstance(weight, nn.Parameter) or weight.dim() != 1:
        raise _drift(family.name, f"a {hf_name} instance has no 1-D 'weight' Parameter")
    if not hasattr(module, spec.eps_attr):
        raise _drift(family.name, f"a {hf_name} instance has no attribute {spec.eps_attr!r}")
    eps = float(getattr(module, spec.eps_attr))
    state = module.__dict__
    hooked = "_old_forward" in state  # accelerate's hooks call the forward saved here
    if "forward" in state and not hooked:
        raise RuntimeError(
            f"tigon.transformers[{family.name}]: a {hf_name} instance has its forward overridden "
            f"on the instance ({state['forward']!r}); refusing to patch it silently. Patch the "
            f"model before whatever replaced the forward."
        )
    state.pop("eps", None)  # Gemma's plain attribute would shadow RMSNorm.eps (a property)
    module.__class__ = _NORM_CLASSES[(family.module, hf_name)]
    module.hidden_size = weight.shape[0]
    module.variance_epsilon = eps
    module.offset = spec.offset
    module.casting_mode = spec.casting_mode
    module.elementwise_affine = True
    module.in_place = spec.in_place
    module.init = spec.init
    if hooked:
        state["_old_forward"] = types.MethodType(RMSNorm.forward, module)


def patch_instances(family: FamilySpec, model: nn.Module) -> dict[str, str]:
    wanted = {(family.module, name): name for name in family.norms}
    ours = {_NORM_CLASSES[key] for key in wanted}  # already patched (e.g. built after model=None)
    done: dict[str, str] = {}
    for qualname, module in model.named_modules():
        hf_name = wanted.get(class_key(module))
        if hf_name is not None:
            _check_constructor(family, hf_name, type(module))
            _check_parity(family, hf_name, type(module), family.norms[hf_name])
            _adopt_norm(module, family, hf_name)
        elif type(module) not in ours:
            continue
        done[qualname] = describe_parts(module.casting_mode, module.offset, module.in_place)
    if not done:
        raise RuntimeError(
            f"tigon.transformers[{family.name}]: rms_norm=True found nothing to patch in this "
            f"{type(model).__name__}: no {' or '.join(family.norms)} module "
            f"(transformers {_transformers_version()}).{_hint(model)}"
        )
    return done


def _hint(model: nn.Module) -> str:
    """Names the family whose norm classes the model does contain, if any."""
    by_class: dict[tuple[str, str], str] = {}
    for f in FAMILIES.values():
        for name in f.norms:
            by_class[(f.module, name)] = f.name
            by_class[(__name__, _norm_class_name(name))] = f.name
    found = sorted({by_class[k] for m in model.modules() if (k := class_key(m)) in by_class})
    if found:
        fns = ", ".join(f"apply_tigon_kernel_to_{f}" for f in found)
        return f" Its norms are those of: {fns}."
    return " Is it a model of this family?"


def describe(spec: NormSpec) -> str:
    """What a family's norm becomes, e.g. ``"tigon.nn.RMSNorm(gemma, offset=1)"``."""
    return describe_parts(spec.casting_mode, spec.offset, spec.in_place)


def describe_module(module: nn.Module) -> str | None:
    """The description of a tigon RMSNorm module, None for any other module."""
    if not isinstance(module, RMSNorm):
        return None
    return describe_parts(module.casting_mode, module.offset, module.in_place)


def describe_parts(casting_mode: str, offset: float, in_place: bool) -> str:
    extras = "" if offset == 0 else f", offset={offset:g}"
    extras += "" if in_place else ", in_place=False"
    return f"tigon.nn.RMSNorm({casting_mode}{extras})"


def revert(family: FamilySpec) -> list[str]:
    """Puts back the HF norm classes replace_classes replaced; returns the restored symbols."""
    module = sys.modules.get(family.module)
    restored: list[str] = []
    for hf_name in family.norms:
        original = _ORIGINALS.get((family.module, hf_name))
        if module is None or original is None:
            continue
        current = getattr(module, hf_name, None)
        if isinstance(current, type) and issubclass(current, _TigonHFRMSNorm):
            setattr(module, hf_name, original)
            restored.append(f"{family.module}.{hf_name}")
    return restored
