"""``swiglu=`` / ``geglu=``: the gated MLPs of each family with tigon's GLU op.

Each tigon class is a subclass of the HF class (same constructor, same Parameters and names, so
checkpoints load unchanged and ``isinstance`` checks keep working) whose forward replaces
``act(gate) * up`` by ``tigon.ops.swiglu`` / ``tigon.ops.geglu``: one kernel, no saved activation.
When down_proj is a plain ``nn.Linear``, the product is not saved for down_proj's backward either
(``tigon.nn.glu_down_proj`` recomputes it; ``tigon_fuse_down_proj = False`` on the class or an
instance turns that off).
Mixtral's experts (transformers 5.x stores them as 3-D Parameters in one ``MixtralExperts``
module) get the op inside every experts implementation (eager loop, ``grouped_mm``,
``batched_mm``: they all call ``_apply_gate``).
Falcon-H1's ``up(x) * act(gate(x) * gate_multiplier)`` passes the gate multiplier to the op (which
rounds ``gate * gm`` to the activation dtype as HF's product does; ``up * h`` and ``h * up`` are the
same IEEE product), and multiplies down_proj's output by the down multiplier, as HF does.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

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
from tigon.transformers.families import FAMILIES, FamilySpec, MlpSpec
from tigon.transformers.probe import probe_config

#: Activation names (config value) each kernel reproduces exactly.
ACTIVATIONS = {"swiglu": ("silu", "swish"), "geglu": ("gelu_pytorch_tanh",)}

#: (HF module, HF class name) -> the original HF class, recorded when first replaced.
_ORIGINALS: dict[tuple[str, str], type] = {}
_CLASSES: dict[tuple[str, str], type] = {}
_VERIFIED: set[tuple[str, str, int]] = set()


class TigonGLU:
    """Marker base of every tigon MLP class (``isinstance`` checks, reporting)."""

    tigon_family: str = ""
    tigon_replaces: str = ""
    tigon_spec: MlpSpec
    #: down_proj's backward recomputes act(gate) * up instead of autograd saving it.
    tigon_fuse_down_proj: bool = True


def _check_activation(module: nn.Module, spec: MlpSpec, family: str) -> None:
    if spec.act_attr is None:  # a fixed activation in the forward: the parity probe checks it
        return
    config = getattr(module, "config", None)
    act = getattr(config, spec.act_attr, None)
    if act not in ACTIVATIONS[spec.kind]:
        raise ValueError(
            f"tigon.transformers[{family}]: {spec.kind}=True needs config.{spec.act_attr} in "
            f"{ACTIVATIONS[spec.kind]}, this {spec.cls} has {act!r}; pass {spec.kind}=False"
        )


def _split_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    spec = self.tigon_spec
    gate_proj, up_proj, down_proj = (getattr(self, name) for name in spec.proj)
    gm, dm = (
        (1.0, 1.0) if spec.multipliers is None else (getattr(self, a) for a in spec.multipliers)
    )
    gate, up = gate_proj(x), up_proj(x)
    if self.tigon_fuse_down_proj:
        out = _ops.glu_down_proj(spec.kind, gate, up, down_proj, gm)
    else:
        out = down_proj(_ops.glu(spec.kind, gate, up, gm))
    if dm != 1.0:  # Falcon-H1: ``down_proj(y) * down_multiplier`` on the Linear's output
        out = out * dm
    return _output_dropout(self, out)


def _output_dropout(self: Any, out: torch.Tensor) -> torch.Tensor:
    """The MLP output's dropout where the HF forward has one (MlpSpec.dropout_attr)."""
    attr = self.tigon_spec.dropout_attr
    if attr is None:
        return out
    return nn.functional.dropout(out, p=getattr(self, attr), training=self.training)


def _fused_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    kind, gate_up = self.tigon_spec.kind, self.gate_up_proj(hidden_states)
    if self.tigon_fuse_down_proj:
        return _ops.glu_packed_down_proj(kind, gate_up, self.down_proj)
    return self.down_proj(_ops.glu_packed(kind, gate_up))


def _apply_gate(self: Any, gate_up_out: torch.Tensor) -> torch.Tensor:
    return _ops.glu_packed(self.tigon_spec.kind, gate_up_out)


def make_experts_forward(hf_cls: type) -> Any:
    """HF's experts forward with ``self._apply_gate`` in every implementation (also the eager
    loop, re-written here with it); the moe patch's fallback off the CPU uses it too."""
    hf_forward = hf_cls.forward

    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        top_k_index: torch.Tensor,
        top_k_weights: torch.Tensor,
    ) -> torch.Tensor:
        if self.config._experts_implementation not in (None, "eager"):
            return hf_forward(self, hidden_states, top_k_index, top_k_weights)  # -> _apply_gate
        # HF's eager loop (MixtralExperts.forward, transformers 5.17) with _apply_gate.
        final = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = nn.functional.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert in hit:
            expert = expert[0]
            if expert == self.num_experts:
                continue
            pos, token = torch.where(mask[expert])
            gate_up = nn.functional.linear(hidden_states[token], self.gate_up_proj[expert])
            out = nn.functional.linear(self._apply_gate(gate_up), self.down_proj[expert])
            out = out * top_k_weights[token, pos, None]
            final.index_add_(0, token, out.to(final.dtype))
        return final

    return forward


def _class_name(hf_name: str) -> str:
    return f"Tigon{hf_name}"


def _build_class(family: FamilySpec, hf_cls: type) -> type:
    spec = family.mlp
    assert spec is not None
    hf_init = hf_cls.__init__

    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        hf_init(self, config, *args, **kwargs)
        _check_activation(self, spec, family.name)

    attrs: dict[str, Any] = {
        "__init__": __init__,
        "__doc__": f"{family.module}.{spec.cls} with tigon.ops.{spec.kind}.",
        "tigon_family": family.name,
        "tigon_replaces": f"{family.module}.{spec.cls}",
        "tigon_spec": spec,
    }
    if spec.layout == "split":
        attrs["forward"] = _split_forward
    elif spec.layout == "fused":
        attrs["forward"] = _fused_forward
    else:
        attrs["_apply_gate"] = _apply_gate
        attrs["forward"] = make_experts_forward(hf_cls)
    return make_subclass((hf_cls, TigonGLU), _class_name(spec.cls), __name__, attrs)


def original_class(family: FamilySpec, name: str) -> type | None:
    """The HF class this module replaced under ``name`` in the family's module, if it did."""
    return _ORIGINALS.get((family.module, name))


def _original(family: FamilySpec) -> type:
    spec = family.mlp
    assert spec is not None
    current = module_class(family, import_family_module(family), spec.cls)
    if issubclass(current, TigonGLU):
        return _ORIGINALS[(family.module, spec.cls)]
    from tigon.transformers import moe as _moe  # moe=True may have replaced the same class

    if issubclass(current, _moe.TigonMoE):
        return _moe.original_class(family, spec.cls) or current.__bases__[0]
    return current


def tigon_class(family: FamilySpec) -> type:
    """The tigon class standing in for the family's MLP class (built once)."""
    spec = family.mlp
    assert spec is not None
    hf_cls = _original(family)
    key = (family.module, spec.cls)
    if key not in _CLASSES or _CLASSES[key].__bases__[0] is not hf_cls:
        _CLASSES[key] = _build_class(family, hf_cls)
    return _CLASSES[key]


def _build_by_name(name: str) -> type | None:
    for family in FAMILIES.values():
        if family.mlp is not None and _class_name(family.mlp.cls) == name:
            return tigon_class(family)
    return None


__getattr__ = lazy_classes(globals(), _build_by_name)


# --------------------------------------------------------------------------------------------
# Parity probe
# --------------------------------------------------------------------------------------------


def _probe_inputs(
    family: FamilySpec, module: nn.Module, config: Any, gen: torch.Generator
) -> tuple[Any, ...]:
    hidden = config.hidden_size
    x = torch.randn(2, 5, hidden, generator=gen, requires_grad=True)
    if family.mlp is not None and family.mlp.layout == "experts":
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
        tokens, k = 10, config.num_experts_per_tok
        index = torch.stack(
            [torch.randperm(module.num_experts, generator=gen)[:k] for _ in range(10)]
        )
        weights = torch.softmax(torch.randn(tokens, k, generator=gen), dim=-1)
        return (x.detach().reshape(tokens, hidden).requires_grad_(), index, weights)
    return (x,)


def check_parity(family: FamilySpec, hf_cls: type) -> None:
    """Once per HF class: the tigon subclass must match HF's forward and input gradient (float32)."""
    spec = family.mlp
    assert spec is not None
    key = (family.module, spec.cls, id(hf_cls))
    if key in _VERIFIED or skip_parity():
        return
    config = probe_config(family)
    gen = torch.Generator().manual_seed(20260102)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            ref = hf_cls(config)
        except Exception as exc:  # any failure here means a changed class
            raise drift(family.name, f"{spec.cls}(config) failed: {exc!r}") from exc
    inputs = _probe_inputs(family, ref, config, gen)
    ours = copy.deepcopy(ref)
    ours.__class__ = tigon_class(family)
    _check_activation(ours, spec, family.name)
    results = []
    for model in (ref, ours):
        x = inputs[0].detach().requires_grad_()
        y = model(x, *inputs[1:])
        y.square().sum().backward()
        results.append((y.detach(), x.grad))
    for what, want, got in zip(("output", "input gradient"), results[0], results[1]):
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
            raise drift(
                family.name,
                f"{spec.cls}'s {what} no longer matches tigon.ops.{spec.kind} (max difference "
                f"{(got - want).abs().max().item():.3g} in float32). Set TIGON_SKIP_PARITY_CHECK=1 "
                f"to patch anyway",
            )
    _VERIFIED.add(key)


# --------------------------------------------------------------------------------------------
# Patching
# --------------------------------------------------------------------------------------------


def describe(spec: MlpSpec) -> str:
    return f"tigon.ops.{spec.kind}({spec.cls})"


def replace_classes(family: FamilySpec) -> dict[str, str]:
    """model=None: ``modeling_<x>.<MLP class>`` becomes the tigon subclass."""
    spec = family.mlp
    assert spec is not None
    _ops.require(spec.kind)
    module = import_family_module(family)
    hf_cls = _original(family)
    check_parity(family, hf_cls)
    _ORIGINALS.setdefault((family.module, spec.cls), hf_cls)
    setattr(module, spec.cls, tigon_class(family))
    return {f"{family.module}.{spec.cls}": describe(spec)}


def patch_instances(family: FamilySpec, model: nn.Module) -> dict[str, str]:
    """model=...: every instance of the family's MLP class becomes the tigon subclass in place."""
    spec = family.mlp
    assert spec is not None
    _ops.require(spec.kind)
    wanted = (family.module, spec.cls)
    ours = tigon_class(family)
    done: dict[str, str] = {}
    for name, module in model.named_modules():
        if class_key(module) == wanted and not isinstance(module, TigonGLU):
            check_parity(family, type(module))
            _check_activation(module, spec, family.name)
            swap_class(module, ours, family.name, spec.cls)
        elif not isinstance(module, ours):
            continue
        done[name] = describe(spec)
    if not done:
        raise RuntimeError(
            f"tigon.transformers[{family.name}]: {spec.kind}=True found nothing to patch in this "
            f"{type(model).__name__}: no {spec.cls} module."
        )
    return done


def revert(family: FamilySpec) -> list[str]:
    spec = family.mlp
    return [] if spec is None else restore_class(family, spec.cls, _ORIGINALS, TigonGLU)
