"""Shared by the per-kernel patch modules: drift errors, module lookup, in-place class swaps."""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Callable
from typing import Any

from torch import nn

from tigon.transformers.families import FamilySpec

#: Set to ``1`` to skip the numerical parity probe of each HF class (e.g. to try a transformers
#: version whose modeling code changed). The probe is what stops a silently wrong patch.
SKIP_PARITY_CHECK_ENV = "TIGON_SKIP_PARITY_CHECK"


#: The transformers releases the patches are tested on: the oldest supported one (pinned in
#: requirements-dev.txt, `make test`) and the newest one checked (`make test-compat`).
TESTED_TRANSFORMERS = ("5.17.0", "5.23.0")


def transformers_version() -> str:
    try:
        import transformers
    except ImportError:  # pragma: no cover - tigon.transformers needs transformers
        return "not installed"
    return str(transformers.__version__)


def drift(family: str, what: str) -> RuntimeError:
    return RuntimeError(
        f"tigon.transformers[{family}]: {what} (transformers {transformers_version()}; tigon's "
        f"table is tested on transformers {' and '.join(TESTED_TRANSFORMERS)}). The modeling "
        f"code changed: update tigon/transformers/families.py, or pin transformers."
    )


def skip_parity() -> bool:
    return os.environ.get(SKIP_PARITY_CHECK_ENV) == "1"


def import_family_module(family: FamilySpec) -> types.ModuleType:
    try:
        return importlib.import_module(family.module)
    except ImportError as exc:
        raise drift(family.name, f"cannot import {family.module}: {exc}") from exc


def class_key(obj: Any) -> tuple[str, str]:
    cls = obj if isinstance(obj, type) else type(obj)
    return cls.__module__, cls.__qualname__


def module_class(family: FamilySpec, module: types.ModuleType, name: str) -> type:
    """``module.<name>``, required to be an nn.Module class."""
    current = getattr(module, name, None)
    if current is None:
        raise drift(family.name, f"{family.module} has no class {name}")
    if not (isinstance(current, type) and issubclass(current, nn.Module)):
        raise drift(family.name, f"{family.module}.{name} is not an nn.Module class")
    return current


def swap_class(module: nn.Module, new_cls: type, family: str, what: str) -> None:
    """``module.__class__ = new_cls`` in place (same object, same Parameters).

    accelerate's hooks call the forward saved on the instance (``_old_forward``): it is rebound to
    the new class's forward. Any other forward set on the instance is refused (it would silently
    bypass the kernel).
    """
    state = module.__dict__
    hooked = "_old_forward" in state
    if "forward" in state and not hooked:
        raise RuntimeError(
            f"tigon.transformers[{family}]: a {what} instance has its forward overridden on the "
            f"instance ({state['forward']!r}); refusing to patch it silently. Patch the model "
            f"before whatever replaced the forward."
        )
    module.__class__ = new_cls
    if hooked:
        state["_old_forward"] = types.MethodType(new_cls.forward, module)


def make_subclass(
    bases: tuple[type, ...],
    name: str,
    module_name: str,
    attrs: dict[str, Any],
    public_name: str | None = None,
) -> type:
    """A subclass of an HF class, importable as ``module_name.name`` (pickling).

    ``public_name`` keeps ``__name__`` (what ``save_pretrained`` writes as the architecture).
    """
    cls = type(name, bases, {"__module__": module_name, "__qualname__": name, **attrs})
    if public_name is not None:
        cls.__name__ = public_name
    return cls


def lazy_classes(
    module_globals: dict[str, Any], build: Callable[[str], type | None]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that builds a class on first access by name (pickle-safe)."""

    def __getattr__(name: str) -> Any:
        cls = build(name)
        if cls is None:
            raise AttributeError(f"module {module_globals['__name__']!r} has no attribute {name!r}")
        return cls

    return __getattr__


def restore_class(
    family: FamilySpec, name: str, originals: dict[tuple[str, str], type], ours: type
) -> list[str]:
    """Puts HF's class `name` back in the family's modeling module where a tigon subclass of
    `ours` replaced it (class patching); returns the restored symbol, or nothing."""
    module = sys.modules.get(family.module)
    original = originals.get((family.module, name))
    if module is None or original is None:
        return []
    current = getattr(module, name, None)
    if isinstance(current, type) and issubclass(current, ours):
        setattr(module, name, original)
        return [f"{family.module}.{name}"]
    return []
