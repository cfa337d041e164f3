"""``moe=``: each family's stacked MoE experts module with tigon's fused experts op.

The tigon class is a subclass of the HF experts class (``MixtralExperts``, ``Qwen3MoeExperts``:
same constructor, the same 3-D ``gate_up_proj`` / ``down_proj`` Parameters, so checkpoints and
optimizer state are unchanged) whose forward is ``tigon.ops.moe_experts``: routing by expert,
both GEMMs and the GLU in one op, HF's eager loop's roundings and accumulation orders
(``include/tigon/ops/moe_experts.h``). It replaces every experts implementation
(``config._experts_implementation``: eager, ``grouped_mm``, ``batched_mm``). The router stays
HF's module, and with it the auxiliary load-balancing loss (from the router logits).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from tigon.ops.moe_experts import MOE_ACTIVATIONS, moe_experts
from tigon.transformers import _ops
from tigon.transformers._common import (
    class_key,
    drift,
    import_family_module,
    lazy_classes,
    make_subclass,
    module_class,
    restore_class,
    skip_parity,
    swap_class,
)
from tigon.transformers.families import FAMILIES, FamilySpec, MoeSpec
from tigon.transformers.probe import probe_config

_ORIGINALS: dict[tuple[str, str], type] = {}
_CLASSES: dict[tuple[str, str], type] = {}
_VERIFIED: set[tuple[str, str, int]] = set()


class TigonMoE:
    """Marker base of every tigon experts class (``isinstance`` checks, reporting)."""

    tigon_family: str = ""
    tigon_replaces: str = ""
    tigon_spec: MoeSpec


def _activation(module: nn.Module, spec: MoeSpec, family: str) -> str:
    config = getattr(module, "config", None)
    act = getattr(config, spec.act_attr, None)
    if act not in MOE_ACTIVATIONS:
        raise ValueError(
            f"tigon.transformers[{family}]: moe=True needs config.{spec.act_attr} in "
            f"{tuple(MOE_ACTIVATIONS)}, this {spec.cls} has {act!r}; pass moe=False"
        )
    layout = {
        "has_gate": True,
        "has_bias": False,
        "is_transposed": False,
        "is_concatenated": True,
    }
    for attr, want in layout.items():
        if getattr(module, attr, want) != want:
            raise ValueError(
                f"tigon.transformers[{family}]: moe=True needs {spec.cls}.{attr} == {want} "
                f"(gate_up_proj [E, 2I, H] with gate rows first, down_proj [E, H, I], no "
                f"biases); pass moe=False"
            )
    return act


#: Devices with tigon's experts kernels. CUDA comes in issue 38's next slice; until then the
#: patched class runs its fallback there (``_tigon_fallback``): HF's experts forward, with the GLU
#: kernel as its ``_apply_gate`` where the family's swiglu/geglu flag covers this class (Mixtral),
#: so a GPU model keeps what ``moe=False`` gives it instead of failing.
KERNEL_DEVICES = ("cpu",)


def _forward(
    self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    if hidden_states.device.type not in KERNEL_DEVICES:
        return self._tigon_fallback(hidden_states, top_k_index, top_k_weights)
    act = getattr(self.config, self.tigon_spec.act_attr)
    return moe_experts(
        hidden_states, top_k_index, top_k_weights, self.gate_up_proj, self.down_proj, act
    )


def _class_name(hf_name: str) -> str:
    return f"TigonMoE{hf_name}"


def _build_class(family: FamilySpec, hf_cls: type) -> type:
    spec = family.moe
    assert spec is not None
    hf_init = hf_cls.__init__

    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        hf_init(self, config, *args, **kwargs)
        _activation(self, spec, family.name)

    attrs: dict[str, Any] = {
        "__init__": __init__,
        "__doc__": f"{family.module}.{spec.cls} with tigon.ops.moe_experts.",
        "tigon_family": family.name,
        "tigon_replaces": f"{family.module}.{spec.cls}",
        "tigon_spec": spec,
        "forward": _forward,
        "_tigon_fallback": hf_cls.forward,
    }
    glu = family.mlp
    if glu is not None and glu.cls == spec.cls:  # Mixtral: the GLU-only patch off the CPU
        from tigon.transformers import mlp as _mlp

        kind = glu.kind
        attrs["_apply_gate"] = lambda self, gate_up_out: _ops.glu_packed(kind, gate_up_out)
        attrs["_tigon_fallback"] = _mlp.make_experts_forward(hf_cls)
    return make_subclass((hf_cls, TigonMoE), _class_name(spec.cls), __name__, attrs)


def original_class(family: FamilySpec, name: str) -> type | None:
    """The HF class this module replaced under ``name`` in the family's module, if it did."""
    return _ORIGINALS.get((family.module, name))


def _original(family: FamilySpec) -> type:
    spec = family.moe
    assert spec is not None
    current = module_class(family, import_family_module(family), spec.cls)
    if issubclass(current, TigonMoE):
        return _ORIGINALS[(family.module, spec.cls)]
    from tigon.transformers import mlp as _mlp  # swiglu=True may have replaced the same class

    if issubclass(current, _mlp.TigonGLU):
        return _mlp.original_class(family, spec.cls) or current.__bases__[0]
    return current


def tigon_class(family: FamilySpec) -> type:
    """The tigon class standing in for the family's experts class (built once)."""
    spec = family.moe
    assert spec is not None
    hf_cls = _original(family)
    key = (family.module, spec.cls)
    if key not in _CLASSES or _CLASSES[key].__bases__[0] is not hf_cls:
        _CLASSES[key] = _build_class(family, hf_cls)
    return _CLASSES[key]


def _build_by_name(name: str) -> type | None:
    for family in FAMILIES.values():
        if family.moe is not None and _class_name(family.moe.cls) == name:
            return tigon_class(family)
    return None


__getattr__ = lazy_classes(globals(), _build_by_name)


def describe(spec: MoeSpec) -> str:
    return f"tigon.ops.moe_experts({spec.cls})"


# --------------------------------------------------------------------------------------------
# Parity probe
# --------------------------------------------------------------------------------------------


def check_parity(family: FamilySpec, hf_cls: type) -> None:
    """Once per HF class: the tigon subclass must match HF's eager experts loop (float32)."""
    spec = family.moe
    assert spec is not None
    key = (family.module, spec.cls, id(hf_cls))
    if key in _VERIFIED or skip_parity():
        return
    config = probe_config(family)
    gen = torch.Generator().manual_seed(20260103)
    try:
        ref = hf_cls(config)
    except Exception as exc:  # any failure here means a changed class
        raise drift(family.name, f"{spec.cls}(config) failed: {exc!r}") from exc
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    ours = copy.deepcopy(ref)
    ours.__class__ = tigon_class(family)
    _activation(ours, spec, family.name)
    tokens, hidden, k = 10, config.hidden_size, config.num_experts_per_tok
    x = torch.randn(tokens, hidden, generator=gen)
    index = torch.stack([torch.randperm(ref.num_experts, generator=gen)[:k] for _ in range(tokens)])
    weights = torch.softmax(torch.randn(tokens, k, generator=gen), dim=-1)
    results = []
    for model in (ref, ours):
        xg, wg = x.clone().requires_grad_(), weights.clone().requires_grad_()
        y = model(xg, index, wg)
        y.square().sum().backward()
        results.append((y.detach(), xg.grad, wg.grad))
    names = ("output", "input gradient", "routing weights' gradient")
    # The GEMMs sum in float32 in another order than HF's: a relative error of order 1e-7; a
    # changed formula is off by far more.
    for what, want, got in zip(names, results[0], results[1]):
        rel = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
        if not rel <= 1e-5:
            raise drift(
                family.name,
                f"{spec.cls}'s {what} no longer matches tigon.ops.moe_experts (relative "
                f"difference {rel:.3g} in float32). Set TIGON_SKIP_PARITY_CHECK=1 to patch anyway",
            )
    _VERIFIED.add(key)


# --------------------------------------------------------------------------------------------
# Patching
# --------------------------------------------------------------------------------------------


def replace_classes(family: FamilySpec) -> dict[str, str]:
    """model=None: ``modeling_<x>.<experts class>`` becomes the tigon subclass."""
    spec = family.moe
    assert spec is not None
    module = import_family_module(family)
    hf_cls = _original(family)
    check_parity(family, hf_cls)
    _ORIGINALS.setdefault((family.module, spec.cls), hf_cls)
    setattr(module, spec.cls, tigon_class(family))
    return {f"{family.module}.{spec.cls}": describe(spec)}


def patch_instances(family: FamilySpec, model: nn.Module) -> dict[str, str]:
    """model=...: every instance of the family's experts class becomes the tigon subclass."""
    spec = family.moe
    assert spec is not None
    from tigon.transformers import mlp as _mlp

    ours = tigon_class(family)
    wanted = (family.module, spec.cls)
    done: dict[str, str] = {}
    for name, module in model.named_modules():
        is_hf = class_key(module) == wanted
        is_glu = isinstance(module, _mlp.TigonGLU) and module.tigon_replaces == (
            f"{family.module}.{spec.cls}"
        )
        if (is_hf or is_glu) and not isinstance(module, TigonMoE):
            check_parity(family, _original(family) if is_glu else type(module))
            _activation(module, spec, family.name)
            swap_class(module, ours, family.name, spec.cls)
        elif not isinstance(module, ours):
            continue
        done[name] = describe(spec)
    if not done:
        raise RuntimeError(
            f"tigon.transformers[{family.name}]: moe=True found nothing to patch in this "
            f"{type(model).__name__}: no {spec.cls} module."
        )
    return done


def revert(family: FamilySpec) -> list[str]:
    spec = family.moe
    return [] if spec is None else restore_class(family, spec.cls, _ORIGINALS, TigonMoE)
