"""``cross_entropy=`` and ``fused_linear_cross_entropy=``: the causal-LM loss with tigon's kernels.

* ``cross_entropy=True`` keeps HF's forward (logits, soft-capping, Granite's scaling, Mixtral's aux
  loss all as HF computes them) and replaces only its loss: ``ForCausalLMLoss`` becomes
  :func:`causal_lm_loss` (same label shift, ``ignore_index``, ``shift_labels`` and
  ``num_items_in_batch`` semantics) on ``tigon.ops.cross_entropy``, which reads the logits in
  their own dtype (no float32 copy of ``[tokens, vocab]``). Gemma2/3 logits arrive already
  soft-capped by HF's forward, so no softcap is passed again.
* ``fused_linear_cross_entropy=True`` replaces the causal-LM forward: in training with labels (or
  ``shift_labels``) it runs the base model and computes the loss straight from the hidden states
  with ``tigon.ops.fused_linear_cross_entropy`` (the ``[tokens, vocab]`` logits never exist;
  Gemma2/3's ``final_logit_softcapping`` goes in as ``softcap``, Granite's ``logits_scaling``
  divides the hidden states, Falcon-H1's ``lm_head_multiplier`` multiplies them), and returns
  ``logits=None``. In eval mode or without labels it is HF's forward, unchanged (logits,
  generation). ``model(..., return_token_accuracy=True)`` in training also returns the token
  accuracy (the training loop's accuracy metric, which has no logits here) as
  ``output.token_accuracy``, as Liger-Kernel's patched forwards do.

model=None replaces ``<CausalLM>.forward`` / sets ``<CausalLM>._loss_function`` on HF's class
itself (process-wide, also for models built before; undone by ``revert_patches``). model=...
swaps the causal-LM instance's class for a tigon subclass (FLCE) or sets its ``loss_function``
(cross-entropy): nothing global changes.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import operator
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from tigon.transformers import _ops
from tigon.transformers._common import (
    drift,
    import_family_module,
    lazy_classes,
    make_subclass,
    module_class,
    skip_parity,
    swap_class,
)
from tigon.transformers.families import FAMILIES, FamilySpec
from tigon.transformers.probe import probe_config

Forward = Callable[..., Any]

#: HF's causal-LM forward parameters (transformers 5.17), checked before patching.
_FORWARD_PARAMS = [
    "self",
    "input_ids",
    "attention_mask",
    "position_ids",
    "past_key_values",
    "inputs_embeds",
    "labels",
    "use_cache",
    "logits_to_keep",
    "kwargs",
]
_MOE_FORWARD_PARAMS = [*_FORWARD_PARAMS[:8], "output_router_logits", *_FORWARD_PARAMS[8:]]

_ORIGINAL_FORWARDS: dict[tuple[str, str], Forward] = {}
#: (module, class) -> whether HF's class had its own ``_loss_function`` (restored on revert).
_ORIGINAL_LOSS: dict[tuple[str, str], Any] = {}
_CLASSES: dict[tuple[str, str], type] = {}
_VERIFIED: set[tuple[str, str, int]] = set()
_MISSING = object()


# --------------------------------------------------------------------------------------------
# The losses
# --------------------------------------------------------------------------------------------


def _shifted(
    labels: torch.Tensor | None, shift_labels: torch.Tensor | None, ignore_index: int
) -> torch.Tensor:
    if shift_labels is None:
        assert labels is not None
        labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    return shift_labels


def _divide(loss: torch.Tensor, num_items_in_batch: Any) -> torch.Tensor:
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def causal_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor | None,
    vocab_size: int,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """HF's ``ForCausalLMLoss`` on ``tigon.ops.cross_entropy`` (computed in float32)."""
    target = _shifted(labels, shift_labels, ignore_index).reshape(-1).to(logits.device)
    reduction = "sum" if num_items_in_batch is not None else "mean"
    loss = _ops.cross_entropy(
        logits.reshape(-1, vocab_size),
        target,
        ignore_index=ignore_index,
        reduction=reduction,
        softcap=None,
    )
    return loss if num_items_in_batch is None else _divide(loss, num_items_in_batch)


def fused_causal_lm_loss(
    model: nn.Module,
    family: FamilySpec,
    hidden_states: torch.Tensor,
    labels: torch.Tensor | None,
    *,
    shift_labels: torch.Tensor | None = None,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    return_token_accuracy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The causal-LM loss of ``model`` from its final hidden states, without logits, and the token
    accuracy when ``return_token_accuracy`` (else None)."""
    spec = family.loss
    config = model.config
    target = _shifted(labels, shift_labels, ignore_index).reshape(-1)
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    if spec.logit_divisor_attr is not None:
        divisor = getattr(config, spec.logit_divisor_attr)
        if divisor != 1:
            hidden = hidden / divisor  # (h @ W.T) / s == (h / s) @ W.T
    if spec.logit_multiplier_attr is not None:
        multiplier = operator.attrgetter(spec.logit_multiplier_attr)(model)
        if multiplier != 1:
            hidden = hidden * multiplier  # (h @ W.T) * m == (h * m) @ W.T
    softcap = getattr(config, spec.softcap_attr, None) if spec.softcap_attr else None
    head = model.lm_head
    reduction = "sum" if num_items_in_batch is not None else "mean"
    loss, accuracy = _ops.fused_linear_cross_entropy(
        hidden,
        head.weight,
        target.to(hidden.device),
        getattr(head, "bias", None),
        ignore_index=ignore_index,
        reduction=reduction,
        softcap=softcap,
        return_token_accuracy=return_token_accuracy,
    )
    if num_items_in_batch is not None:
        loss = _divide(loss, num_items_in_batch)
    return loss, accuracy


@functools.cache
def _with_token_accuracy(output_class: type) -> type:
    """HF's ``output_class`` with a ``token_accuracy`` field (last, so tuples keep HF's order)."""
    field = dataclasses.field(default=None)
    return dataclasses.make_dataclass(
        f"Tigon{output_class.__name__}",
        [("token_accuracy", torch.Tensor | None, field)],
        bases=(output_class,),
        namespace={"__module__": __name__},
    )


def _output(output_class: type, token_accuracy: torch.Tensor | None, **fields: Any) -> Any:
    if token_accuracy is None:
        return output_class(**fields)
    return _with_token_accuracy(output_class)(**fields, token_accuracy=token_accuracy)


# --------------------------------------------------------------------------------------------
# The fused causal-LM forward
# --------------------------------------------------------------------------------------------


def _make_forward(family: FamilySpec, hf_forward: Forward) -> Forward:
    from transformers.modeling_outputs import CausalLMOutputWithPast, MoeCausalLMOutputWithPast
    from transformers.utils import can_return_tuple

    moe = family.loss.router_aux_loss

    def run(
        self: Any,
        input_ids: Any,
        attention_mask: Any,
        position_ids: Any,
        past_key_values: Any,
        inputs_embeds: Any,
        labels: Any,
        use_cache: Any,
        logits_to_keep: Any,
        router: dict[str, Any],
        kwargs: dict[str, Any],
    ) -> Any:
        base_args = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "past_key_values": past_key_values,
            "inputs_embeds": inputs_embeds,
            "use_cache": use_cache,
            **router,
        }
        shift_labels = kwargs.get("shift_labels")
        kwargs = dict(kwargs)
        return_token_accuracy = kwargs.pop("return_token_accuracy", False)
        if not (self.training and (labels is not None or shift_labels is not None)):
            return hf_forward(
                self, labels=labels, logits_to_keep=logits_to_keep, **base_args, **kwargs
            )
        kwargs.pop("shift_labels", None)
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        ignore_index = kwargs.pop("ignore_index", -100)
        if moe and base_args["output_router_logits"] is None:
            base_args["output_router_logits"] = self.config.output_router_logits
        outputs = self.model(**base_args, **kwargs)
        hidden = outputs.last_hidden_state
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        loss, accuracy = fused_causal_lm_loss(
            self,
            family,
            hidden[:, keep, :],
            labels,
            shift_labels=shift_labels,
            num_items_in_batch=num_items_in_batch,
            ignore_index=ignore_index,
            return_token_accuracy=return_token_accuracy,
        )
        if not moe:
            return _output(
                CausalLMOutputWithPast,
                accuracy,
                loss=loss,
                logits=None,
                past_key_values=outputs.past_key_values,
                hidden_states=outputs.hidden_states,
                attentions=outputs.attentions,
            )
        aux_loss = None
        if base_args["output_router_logits"]:
            balance = getattr(sys.modules[family.module], "load_balancing_loss_func")
            aux_loss = balance(
                outputs.router_logits, self.num_experts, self.num_experts_per_tok, attention_mask
            )
            loss = loss + self.router_aux_loss_coef * aux_loss.to(loss.device)
        return _output(
            MoeCausalLMOutputWithPast,
            accuracy,
            loss=loss,
            aux_loss=aux_loss,
            logits=None,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            router_logits=outputs.router_logits,
        )

    if moe:

        def forward(
            self: Any,
            input_ids: Any = None,
            attention_mask: Any = None,
            position_ids: Any = None,
            past_key_values: Any = None,
            inputs_embeds: Any = None,
            labels: Any = None,
            use_cache: Any = None,
            output_router_logits: Any = None,
            logits_to_keep: Any = 0,
            **kwargs: Any,
        ) -> Any:
            router = {"output_router_logits": output_router_logits}
            return run(
                self, input_ids, attention_mask, position_ids, past_key_values, inputs_embeds,
                labels, use_cache, logits_to_keep, router, kwargs,
            )  # fmt: skip

    else:

        def forward(  # type: ignore[misc]
            self: Any,
            input_ids: Any = None,
            attention_mask: Any = None,
            position_ids: Any = None,
            past_key_values: Any = None,
            inputs_embeds: Any = None,
            labels: Any = None,
            use_cache: Any = None,
            logits_to_keep: Any = 0,
            **kwargs: Any,
        ) -> Any:
            return run(
                self, input_ids, attention_mask, position_ids, past_key_values, inputs_embeds,
                labels, use_cache, logits_to_keep, {}, kwargs,
            )  # fmt: skip

    forward.__doc__ = (
        f"{family.causal_lm}.forward with tigon.ops.fused_linear_cross_entropy in training "
        f"(logits=None); HF's forward otherwise."
    )
    forward.tigon_family = family.name  # type: ignore[attr-defined]
    forward.tigon_original = hf_forward  # type: ignore[attr-defined]
    return can_return_tuple(forward)


def _is_ours(forward: Any) -> bool:
    return hasattr(forward, "tigon_original")


# --------------------------------------------------------------------------------------------
# Classes and probes
# --------------------------------------------------------------------------------------------


class TigonCausalLM:
    """Marker base of the causal-LM subclasses with tigon's fused loss."""

    tigon_family: str = ""


def _hf_class(family: FamilySpec) -> type:
    return module_class(family, import_family_module(family), family.causal_lm)


def _hf_forward(family: FamilySpec, hf_cls: type) -> Forward:
    forward = hf_cls.__dict__.get("forward", hf_cls.forward)
    return forward.tigon_original if _is_ours(forward) else forward


def _class_name(family: FamilySpec) -> str:
    return f"Tigon{family.causal_lm}"


def tigon_class(family: FamilySpec) -> type:
    """The causal-LM subclass with the fused forward (instance patching)."""
    key = (family.module, family.causal_lm)
    if key not in _CLASSES:
        hf_cls = _hf_class(family)
        attrs = {
            "forward": _make_forward(family, _hf_forward(family, hf_cls)),
            "tigon_family": family.name,
            "__doc__": f"{family.module}.{family.causal_lm} with tigon's fused linear CE.",
        }
        _CLASSES[key] = make_subclass(
            (hf_cls, TigonCausalLM), _class_name(family), __name__, attrs, family.causal_lm
        )
    return _CLASSES[key]


def _build_by_name(name: str) -> type | None:
    for family in FAMILIES.values():
        if _class_name(family) == name:
            return tigon_class(family)
    return None


__getattr__ = lazy_classes(globals(), _build_by_name)


def _check_signature(family: FamilySpec, hf_forward: Forward) -> None:
    want = _MOE_FORWARD_PARAMS if family.loss.router_aux_loss else _FORWARD_PARAMS
    got = list(inspect.signature(hf_forward).parameters)
    if got != want:
        raise drift(family.name, f"{family.causal_lm}.forward takes {got}; expected {want}")


def _tiny_model(family: FamilySpec, hf_cls: type) -> nn.Module:
    config = probe_config(family)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            model = hf_cls(config)
        except Exception as exc:
            raise drift(family.name, f"{family.causal_lm}(config) failed: {exc!r}") from exc
    return model.train()


def _probe_batch(config: Any) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(20260104)
    ids = torch.randint(3, config.vocab_size, (2, 7), generator=gen)
    labels = ids.clone()
    labels[0, :2] = -100
    return ids, labels


def _mismatch(family: FamilySpec, what: str, want: torch.Tensor, got: torch.Tensor) -> None:
    if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
        raise drift(
            family.name,
            f"{what} no longer matches tigon's ({want.tolist() if want.numel() == 1 else ''} vs "
            f"{got.tolist() if got.numel() == 1 else ''}; max difference "
            f"{(got - want).abs().max().item():.3g}). Set TIGON_SKIP_PARITY_CHECK=1 to patch anyway",
        )


def check_fused_parity(family: FamilySpec, hf_cls: type, hf_forward: Forward) -> None:
    """Once per class: a tiny float32 model's training loss and lm_head gradient, HF's forward vs
    tigon's, with labels and with ``num_items_in_batch``."""
    key = (family.module, family.causal_lm, id(hf_forward))
    _check_signature(family, hf_forward)
    if key in _VERIFIED or skip_parity():
        return
    model = _tiny_model(family, hf_cls)
    ours = _make_forward(family, hf_forward)
    ids, labels = _probe_batch(model.config)
    for extra in ({}, {"num_items_in_batch": torch.tensor(5)}):
        results = []
        for forward in (hf_forward, ours):
            model.zero_grad(set_to_none=True)
            out = forward(model, input_ids=ids, labels=labels, **extra)
            out.loss.backward()
            results.append((out.loss.detach(), model.lm_head.weight.grad))
        what = f"{family.causal_lm}'s training loss{' with num_items_in_batch' if extra else ''}"
        _mismatch(family, what, results[0][0], results[1][0])
        _mismatch(family, f"{what} (lm_head gradient)", results[0][1], results[1][1])
    _VERIFIED.add(key)


def check_loss_parity(family: FamilySpec, hf_cls: type) -> None:
    """Once per class: HF's forward must call ``self.loss_function`` for its loss, and
    :func:`causal_lm_loss` must equal HF's ``ForCausalLMLoss`` (float32)."""
    key = (family.module, family.causal_lm, -1)
    if key in _VERIFIED or skip_parity():
        return
    from transformers.loss.loss_utils import ForCausalLMLoss

    model = _tiny_model(family, hf_cls)
    ids, labels = _probe_batch(model.config)
    calls = []

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return causal_lm_loss(*args, **kwargs)

    hf_forward = _hf_forward(family, hf_cls)
    with torch.no_grad():
        want = hf_forward(model, input_ids=ids, labels=labels).loss
        model.loss_function = counting
        got = hf_forward(model, input_ids=ids, labels=labels).loss
    if not calls:
        raise drift(family.name, f"{family.causal_lm}.forward no longer calls self.loss_function")
    _mismatch(family, f"{family.causal_lm}'s loss", want, got)
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 7, 64, generator=gen)
    for extra in ({}, {"num_items_in_batch": torch.tensor(9)}, {"shift_labels": labels}):
        _mismatch(
            family,
            f"ForCausalLMLoss{extra and f' with {next(iter(extra))}'}",
            ForCausalLMLoss(logits, labels, 64, **extra),
            causal_lm_loss(logits, labels, 64, **extra),
        )
    _VERIFIED.add(key)


# --------------------------------------------------------------------------------------------
# Patching
# --------------------------------------------------------------------------------------------

FLCE = "tigon.ops.fused_linear_cross_entropy (training; logits=None)"
CE = "tigon.ops.cross_entropy (loss_function)"


def describe(module: nn.Module) -> str | None:
    """What the loss of a causal-LM module is, if tigon's; None otherwise."""
    if _is_ours(getattr(type(module), "forward", None)):
        return FLCE
    if getattr(module, "_loss_function", None) is causal_lm_loss:
        return CE
    return None


def _causal_lms(family: FamilySpec, model: nn.Module) -> list[tuple[str, nn.Module]]:
    hf_cls = _hf_class(family)
    return [(n, m) for n, m in model.named_modules() if isinstance(m, hf_cls)]


def _nothing(family: FamilySpec, flag: str, model: nn.Module) -> RuntimeError:
    return RuntimeError(
        f"tigon.transformers[{family.name}]: {flag}=True found nothing to patch in this "
        f"{type(model).__name__}: no {family.causal_lm} module."
    )


def replace_forward(family: FamilySpec) -> dict[str, str]:
    """model=None: ``<CausalLM>.forward`` becomes the fused one (process-wide)."""
    _ops.require("fused_linear_cross_entropy")
    hf_cls = _hf_class(family)
    hf_forward = _hf_forward(family, hf_cls)
    check_fused_parity(family, hf_cls, hf_forward)
    if not _is_ours(hf_cls.__dict__.get("forward")):
        _ORIGINAL_FORWARDS.setdefault((family.module, family.causal_lm), hf_forward)
        hf_cls.forward = _make_forward(family, hf_forward)
    return {f"{family.module}.{family.causal_lm}.forward": FLCE}


def patch_forward(family: FamilySpec, model: nn.Module) -> dict[str, str]:
    """model=...: each causal-LM instance becomes the tigon subclass (same object, same weights)."""
    _ops.require("fused_linear_cross_entropy")
    found = _causal_lms(family, model)
    if not found:
        raise _nothing(family, "fused_linear_cross_entropy", model)
    done: dict[str, str] = {}
    for name, module in found:
        if describe(module) != FLCE:
            hf_cls = type(module)
            check_fused_parity(family, hf_cls, _hf_forward(family, hf_cls))
            swap_class(module, tigon_class(family), family.name, family.causal_lm)
        done[name] = FLCE
    return done


def replace_loss(family: FamilySpec) -> dict[str, str]:
    """model=None: ``<CausalLM>``'s ``loss_function`` becomes :func:`causal_lm_loss`."""
    _ops.require("cross_entropy")
    hf_cls = _hf_class(family)
    check_loss_parity(family, hf_cls)
    key = (family.module, family.causal_lm)
    _ORIGINAL_LOSS.setdefault(key, hf_cls.__dict__.get("_loss_function", _MISSING))
    hf_cls._loss_function = staticmethod(causal_lm_loss)
    return {f"{family.module}.{family.causal_lm}.loss_function": CE}


def patch_loss(family: FamilySpec, model: nn.Module) -> dict[str, str]:
    """model=...: sets ``loss_function`` on each causal-LM instance."""
    _ops.require("cross_entropy")
    found = _causal_lms(family, model)
    if not found:
        raise _nothing(family, "cross_entropy", model)
    for _, module in found:
        check_loss_parity(family, type(module))
        module.loss_function = causal_lm_loss
    return dict.fromkeys((n for n, _ in found), CE)


def revert(family: FamilySpec) -> list[str]:
    module = sys.modules.get(family.module)
    hf_cls = getattr(module, family.causal_lm, None) if module is not None else None
    if not isinstance(hf_cls, type):
        return []
    key = (family.module, family.causal_lm)
    restored = []
    original = _ORIGINAL_FORWARDS.get(key)
    if original is not None and _is_ours(hf_cls.__dict__.get("forward")):
        hf_cls.forward = original
        restored.append(f"{family.module}.{family.causal_lm}.forward")
    loss = _ORIGINAL_LOSS.pop(key, None)
    if loss is not None:
        if loss is _MISSING:
            del hf_cls._loss_function
        else:
            hf_cls._loss_function = loss
        restored.append(f"{family.module}.{family.causal_lm}.loss_function")
    return restored
