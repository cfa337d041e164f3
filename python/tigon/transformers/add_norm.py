"""``fused_add_norm=``: the decoder layer's residual add and the norm after it in one op.

In a Llama-style layer ``h = residual + attn(input_norm(x)); residual = h; h = norm(h)`` becomes
``h, residual = tigon.ops.fused_add_rms_norm(attn_out, residual, ...)``: one read of the two
addends instead of a write of ``h`` and a read of it back by the norm. The tigon class is a
subclass of the HF decoder layer (same constructor, Parameters, names, ``__name__``) whose forward
is HF's with the add + norm fused (``AddNormSpec`` in families.py says which attributes it
calls). Each HF class is checked once per process: a tiny float32 model must give the same loss
and gradients, bit for bit, with HF's forward and with tigon's (a changed layer raises instead of
being patched silently).

The fused op runs only when it gives the bits of the unfused path: the norm is tigon's RMSNorm
(``rms_norm=True``) with no hooks on it, and the two addends have one shape and dtype. Anything
else (a PEFT ``modules_to_save`` wrapper around the norm, accelerate hooks, autocast's mixed
dtypes) takes HF's ``residual + h`` followed by the norm module.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch
from torch import nn

from tigon.nn import RMSNorm
from tigon.transformers import _ops
from tigon.transformers import norm as _norm
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
from tigon.transformers.families import FAMILIES, AddNormSpec, FamilySpec
from tigon.transformers.probe import probe_config

#: (HF module, HF class name) -> the original HF class, recorded when first replaced.
_ORIGINALS: dict[tuple[str, str], type] = {}
_CLASSES: dict[tuple[str, str], type] = {}
_VERIFIED: set[tuple[str, str, int]] = set()


class TigonAddNormLayer:
    """Marker base of every tigon decoder-layer class (``isinstance`` checks, reporting)."""

    tigon_family: str = ""
    tigon_replaces: str = ""
    tigon_spec: AddNormSpec
    #: Names of HF's forward parameters after ``hidden_states`` that may come positionally.
    tigon_positional: tuple[str, ...] = ()
    #: Their defaults (HF's layer passes each of them on by name, given or not).
    tigon_defaults: dict[str, Any] = {}  # noqa: RUF012 - replaced per class, never mutated


def _hooked(norm: nn.Module) -> bool:
    """Hooks that must see the norm's own input or gradient (module or global ones)."""
    return bool(
        norm._forward_hooks
        or norm._forward_pre_hooks
        or norm._backward_hooks
        or norm._backward_pre_hooks
        or nn.modules.module._global_forward_hooks
        or nn.modules.module._global_forward_pre_hooks
        or nn.modules.module._global_backward_hooks
        or nn.modules.module._global_backward_pre_hooks
        or "_old_forward" in norm.__dict__  # accelerate
    )


def _fusable(norm: nn.Module, x: torch.Tensor, residual: torch.Tensor) -> bool:
    return (
        isinstance(norm, RMSNorm)
        and not _hooked(norm)
        and x.dtype == residual.dtype
        and x.shape == residual.shape
    )


def add_then_norm(
    norm: nn.Module, x: torch.Tensor, residual: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = residual + x; (norm(h), h)``, fused when that gives the same bits."""
    if _fusable(norm, x, residual):
        return _ops.fused_add_rms_norm(
            x,
            residual,
            norm.weight,
            norm.variance_epsilon,
            norm.offset,
            norm.casting_mode,
            norm.in_place,
        )
    h = residual + x
    return norm(h), h


def _branch_output(self: Any, out: torch.Tensor, index: int) -> torch.Tensor:
    """What HF adds to the residual: the branch output, after its norm / dropout / multiplier."""
    spec = self.tigon_spec
    if spec.branch_norms is not None:
        out = getattr(self, spec.branch_norms[index])(out)
    if spec.branch_dropouts is not None:
        out = getattr(self, spec.branch_dropouts[index])(out)
    if spec.residual_multiplier is not None:
        out = out * getattr(self, spec.residual_multiplier)
    return out


def _extra(self: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments HF's layer forward collects in ``**kwargs``."""
    return {k: v for k, v in kwargs.items() if k not in self.tigon_positional}


def _attention(self: Any, normed: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    return getattr(self, self.tigon_spec.attn)(hidden_states=normed, **kwargs)[0]


def _lfm2(self: Any, normed: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    """LFM2: attention, or the short conv, to which HF passes past_key_values, attention_mask and
    the layer's extra keyword arguments (transformers 5.17: ``seq_idx`` alone, None when absent;
    5.23: all of them)."""
    if self.is_attention_layer:
        return _attention(self, normed, kwargs)
    extra = _extra(self, kwargs)
    accepted = _keyword_names(type(self.conv).forward)
    if accepted is not None:
        extra = {k: v for k, v in extra.items() if k in accepted}
    return self.conv(
        hidden_states=normed,
        past_key_values=kwargs.get("past_key_values"),
        attention_mask=kwargs.get("attention_mask"),
        **extra,
    )


def _falcon_h1(self: Any, normed: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    """Falcon-H1: ``mamba(h) * ssm_out + attn(h * attn_in) * attn_out``, as HF's layer calls them."""
    extra = _extra(self, kwargs)
    mamba = self.mamba(
        hidden_states=normed,
        cache_params=kwargs.get("past_key_values"),
        attention_mask=kwargs.get("mamba_attention_mask"),
        **extra,
    )
    mamba = mamba * self.ssm_out_multiplier
    attention, _ = self.self_attn(
        hidden_states=normed * self.attention_in_multiplier,
        attention_mask=kwargs.get("attention_mask"),
        position_ids=kwargs.get("position_ids"),
        past_key_values=kwargs.get("past_key_values"),
        use_cache=kwargs.get("use_cache", False),
        position_embeddings=kwargs.get("position_embeddings"),
        **extra,
    )
    return mamba + attention * self.attn_out_multiplier


_MIXERS = {"attention": _attention, "lfm2": _lfm2, "falcon_h1": _falcon_h1}


#: forward function -> its parameter names (None: takes ``**kwargs``); filled by the parity probe.
_KEYWORDS: dict[Any, frozenset[str] | None] = {}


def _keyword_names(fn: Any) -> frozenset[str] | None:
    if fn not in _KEYWORDS:
        params = inspect.signature(fn).parameters.values()
        var = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        _KEYWORDS[fn] = None if var else frozenset(p.name for p in params)
    return _KEYWORDS[fn]


def _forward(self: Any, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    # HF's layer passes every argument after hidden_states on to the attention, by name.
    kwargs = {**self.tigon_defaults, **dict(zip(self.tigon_positional, args)), **kwargs}
    spec = self.tigon_spec
    residual = hidden_states
    hidden_states = getattr(self, spec.input_norm)(hidden_states)
    hidden_states = _MIXERS[spec.mixer](self, hidden_states, kwargs)
    hidden_states = _branch_output(self, hidden_states, 0)
    hidden_states, residual = add_then_norm(getattr(self, spec.norm), hidden_states, residual)
    hidden_states = getattr(self, spec.mlp)(hidden_states)
    hidden_states = residual + _branch_output(self, hidden_states, 1)
    return (hidden_states,) if spec.returns_tuple else hidden_states


def _named_parameters(family: FamilySpec, hf_cls: type) -> list[inspect.Parameter]:
    """HF's layer forward parameters after ``hidden_states``, except ``**kwargs``."""
    params = list(inspect.signature(hf_cls.forward).parameters.values())
    names = [p.name for p in params]
    if names[:2] != ["self", "hidden_states"]:
        raise drift(
            family.name,
            f"{hf_cls.__name__}.forward takes {names}; expected (self, hidden_states, ...)",
        )
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)
    return [p for p in params[2:] if p.kind in kinds]


def _class_name(spec: AddNormSpec) -> str:
    return f"Tigon{spec.layer}"


def _build_class(family: FamilySpec, hf_cls: type) -> type:
    spec = family.add_norm
    assert spec is not None
    named = _named_parameters(family, hf_cls)
    attrs: dict[str, Any] = {
        "forward": _forward,
        "__doc__": f"{family.module}.{spec.layer} with its residual add + {spec.norm} fused "
        f"(tigon.ops.fused_add_rms_norm).",
        "tigon_family": family.name,
        "tigon_replaces": f"{family.module}.{spec.layer}",
        "tigon_spec": spec,
        "tigon_positional": tuple(p.name for p in named),
        "tigon_defaults": {p.name: p.default for p in named if p.default is not p.empty},
    }
    # __name__ stays HF's: accelerate's _no_split_modules and save_pretrained match on it.
    return make_subclass(
        (hf_cls, TigonAddNormLayer), _class_name(spec), __name__, attrs, spec.layer
    )


def _original(family: FamilySpec) -> type:
    spec = family.add_norm
    assert spec is not None
    current = module_class(family, import_family_module(family), spec.layer)
    if issubclass(current, TigonAddNormLayer):
        return _ORIGINALS[(family.module, spec.layer)]
    return current


def tigon_class(family: FamilySpec) -> type:
    """The tigon class standing in for the family's decoder layer (built once)."""
    spec = family.add_norm
    assert spec is not None
    hf_cls = _original(family)
    key = (family.module, spec.layer)
    if key not in _CLASSES or _CLASSES[key].__bases__[0] is not hf_cls:
        _CLASSES[key] = _build_class(family, hf_cls)
    return _CLASSES[key]


def _build_by_name(name: str) -> type | None:
    for family in FAMILIES.values():
        if family.add_norm is not None and _class_name(family.add_norm) == name:
            return tigon_class(family)
    return None


__getattr__ = lazy_classes(globals(), _build_by_name)


# --------------------------------------------------------------------------------------------
# Parity probe
# --------------------------------------------------------------------------------------------


def _tiny_model(family: FamilySpec, hf_cls: type) -> nn.Module:
    """A 2-layer float32 causal LM of the family with tigon's norms and HF's layers."""
    spec = family.add_norm
    assert spec is not None
    extra = {} if spec.probe_layer_types is None else {"layer_types": list(spec.probe_layer_types)}
    config = probe_config(family, num_hidden_layers=2, **extra)
    causal_lm = module_class(family, import_family_module(family), family.causal_lm)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            model = causal_lm(config)
            for p in model.parameters():  # zero-init norms would hide a skipped weight
                p.data.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
        except Exception as exc:  # any failure here means a changed class
            raise drift(family.name, f"{family.causal_lm}(config) failed: {exc!r}") from exc
    for module in model.modules():
        if isinstance(module, hf_cls) and type(module) is not hf_cls:
            module.__class__ = hf_cls  # built after a model=None patch: back to HF's layer
    _norm.patch_instances(family, model)
    return model.train()


def _run(model: nn.Module, ids: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    got = [("loss", out.loss.detach())]
    got += [(f"{n}.grad", p.grad) for n, p in model.named_parameters() if p.grad is not None]
    return got


def check_parity(family: FamilySpec, hf_cls: type) -> None:
    """Once per HF class: loss and every gradient of a tiny float32 model must be bitwise equal
    with HF's layer forward (and tigon's unfused norms) and with tigon's fused one."""
    spec = family.add_norm
    assert spec is not None
    key = (family.module, spec.layer, id(hf_cls))
    if key in _VERIFIED or skip_parity():
        return
    ref = _tiny_model(family, hf_cls)
    ours = copy.deepcopy(ref)
    layers = [m for m in ours.modules() if type(m) is hf_cls]
    if not layers:
        raise drift(family.name, f"{family.causal_lm} has no {spec.layer} module")
    tigon_cls = tigon_class(family)
    for layer in layers:
        layer.__class__ = tigon_cls
    ids = torch.randint(
        3, ref.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(7)
    )
    try:
        want, got = _run(ref, ids), _run(ours, ids)
    except Exception as exc:
        raise drift(family.name, f"{spec.layer} with the fused add-norm failed: {exc!r}") from exc
    for (name, w), (_, g) in zip(want, got):
        if w is None or g is None or not torch.equal(w, g):
            diff = (g - w).abs().max().item() if w is not None and g is not None else "missing"
            raise drift(
                family.name,
                f"{spec.layer}'s forward no longer matches tigon's fused add-norm layer: {name} "
                f"differs (max {diff} in float32). Set TIGON_SKIP_PARITY_CHECK=1 to patch anyway, "
                f"or pass fused_add_norm=False",
            )
    _VERIFIED.add(key)


# --------------------------------------------------------------------------------------------
# Patching
# --------------------------------------------------------------------------------------------


def describe(spec: AddNormSpec) -> str:
    return f"tigon.ops.fused_add_rms_norm({spec.layer}: residual add + {spec.norm})"


def replace_classes(family: FamilySpec) -> dict[str, str]:
    """model=None: ``modeling_<x>.<DecoderLayer>`` becomes the tigon subclass."""
    spec = family.add_norm
    assert spec is not None
    _ops.require("fused_add_rms_norm")
    module = import_family_module(family)
    hf_cls = _original(family)
    check_parity(family, hf_cls)
    _ORIGINALS.setdefault((family.module, spec.layer), hf_cls)
    setattr(module, spec.layer, tigon_class(family))
    return {f"{family.module}.{spec.layer}": describe(spec)}


def patch_instances(family: FamilySpec, model: nn.Module) -> dict[str, str]:
    """model=...: every decoder layer of the family becomes the tigon subclass in place."""
    spec = family.add_norm
    assert spec is not None
    _ops.require("fused_add_rms_norm")
    wanted = (family.module, spec.layer)
    ours = tigon_class(family)
    done: dict[str, str] = {}
    for name, module in model.named_modules():
        if class_key(module) == wanted and not isinstance(module, TigonAddNormLayer):
            check_parity(family, type(module))
            swap_class(module, ours, family.name, spec.layer)
        elif not isinstance(module, ours):
            continue
        done[name] = describe(spec)
    if not done:
        raise RuntimeError(
            f"tigon.transformers[{family.name}]: fused_add_norm=True found nothing to patch in "
            f"this {type(model).__name__}: no {spec.layer} module."
        )
    return done


def revert(family: FamilySpec) -> list[str]:
    spec = family.add_norm
    return [] if spec is None else restore_class(family, spec.layer, _ORIGINALS, TigonAddNormLayer)
