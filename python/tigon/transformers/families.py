"""Per-family tables: which Hugging Face classes tigon replaces, and with what semantics.

Every entry was read off the modeling file of transformers 5.17 (``transformers/models/<family>/
modeling_<family>.py``). When transformers changes one of these classes, patching fails with a
clear error (missing class, changed constructor, or a forward whose numerics no longer match the
mode below: see :mod:`tigon.transformers.patching`), and this table is what must be updated.

How the RMSNorm columns are chosen:

* ``casting_mode``: where the forward rounds to the activation dtype. ``"llama"``:
  ``weight * (x.float() * rstd).to(x.dtype)`` (round, then multiply by the weight).
  ``"gemma"``: everything in float32 including the weight, one rounding at the end:
  ``(x.float() * rstd * (offset + weight.float())).to(x.dtype)``.
* ``offset``: 1.0 where HF computes ``1 + weight`` (weights stored zero-centered).
* ``init``: the HF constructor's initial weight (``zeros`` for the ``1 + weight`` norms).
* ``in_place``: whether the backward may write dx into the incoming gradient's buffer. Off where
  that gradient is also read by another branch: a norm whose output is added straight to the
  residual stream (post-norms: Gemma2/3 ``post_*_layernorm``, Olmo2), since autograd hands the
  very same gradient tensor to both operands of the sum.
* ``eps_attr``: the attribute holding epsilon on the HF module (``variance_epsilon`` or ``eps``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["FAMILIES", "MODEL_TYPE_TO_FAMILY", "FamilySpec", "NormSpec"]


@dataclass(frozen=True)
class NormSpec:
    """How one HF RMSNorm class maps onto :class:`tigon.nn.RMSNorm`."""

    casting_mode: str
    offset: float
    init: str
    in_place: bool
    eps_attr: str
    #: One line for the docs: why these settings.
    why: str = ""


@dataclass(frozen=True)
class FamilySpec:
    """One model family (= one HF ``model_type`` and its modeling module)."""

    #: Family name, used in ``apply_tigon_kernel_to_<name>``; equal to its HF ``model_type``.
    name: str
    #: The modeling module whose classes are replaced (``transformers.models.<x>.modeling_<x>``).
    module: str
    #: The causal-LM class name (documentation and tests).
    causal_lm: str
    #: RMSNorm class name in ``module`` -> how it is mapped.
    norms: Mapping[str, NormSpec] = field(default_factory=dict)
    #: Further HF ``model_type`` values served by this family's patch.
    aliases: tuple[str, ...] = ()


def _llama(why: str = "pre-norm; forward rounds x*rstd before the weight multiply") -> NormSpec:
    return NormSpec("llama", 0.0, "ones", True, "variance_epsilon", why)


_GEMMA1 = NormSpec(
    "gemma", 1.0, "zeros", True, "eps", "fp32 `x*rstd*(1 + w.float())`, one rounding; pre-norm"
)
_GEMMA_SANDWICH = NormSpec(
    "gemma",
    1.0,
    "zeros",
    False,
    "eps",
    "as Gemma; post-attention/post-feedforward norms feed the residual sum, so dy is shared",
)
_OLMO2 = NormSpec(
    "gemma",
    0.0,
    "ones",
    False,
    "variance_epsilon",
    "`(w * x.float()*rstd).to(dtype)`: the weight multiply is in fp32 with one rounding, i.e. "
    "gemma casting with offset 0 (not llama); post-norms feed the residual sum",
)


def _family(
    name: str,
    module: str,
    causal_lm: str,
    norms: dict[str, NormSpec],
    aliases: tuple[str, ...] = (),
) -> FamilySpec:
    return FamilySpec(name, module, causal_lm, MappingProxyType(norms), aliases)


_M = "transformers.models"

#: Every supported family, by name (= HF model_type).
FAMILIES: Mapping[str, FamilySpec] = MappingProxyType(
    {
        f.name: f
        for f in (
            _family("llama", f"{_M}.llama.modeling_llama", "LlamaForCausalLM",
                    {"LlamaRMSNorm": _llama()}),
            _family("mistral", f"{_M}.mistral.modeling_mistral", "MistralForCausalLM",
                    {"MistralRMSNorm": _llama()}),
            _family("mixtral", f"{_M}.mixtral.modeling_mixtral", "MixtralForCausalLM",
                    {"MixtralRMSNorm": _llama()}),
            _family("qwen2", f"{_M}.qwen2.modeling_qwen2", "Qwen2ForCausalLM",
                    {"Qwen2RMSNorm": _llama()}),
            _family("qwen3", f"{_M}.qwen3.modeling_qwen3", "Qwen3ForCausalLM",
                    {"Qwen3RMSNorm": _llama(
                        "llama casting; also q_norm/k_norm over head_dim, whose output gradient "
                        "comes from RoPE's backward (a private buffer)")}),
            _family("gemma", f"{_M}.gemma.modeling_gemma", "GemmaForCausalLM",
                    {"GemmaRMSNorm": _GEMMA1}),
            _family("gemma2", f"{_M}.gemma2.modeling_gemma2", "Gemma2ForCausalLM",
                    {"Gemma2RMSNorm": _GEMMA_SANDWICH}),
            _family("gemma3_text", f"{_M}.gemma3.modeling_gemma3", "Gemma3ForCausalLM",
                    {"Gemma3RMSNorm": _GEMMA_SANDWICH}),
            _family("phi3", f"{_M}.phi3.modeling_phi3", "Phi3ForCausalLM",
                    {"Phi3RMSNorm": _llama()}),
            _family("granite", f"{_M}.granite.modeling_granite", "GraniteForCausalLM",
                    {"GraniteRMSNorm": _llama()}),
            _family("olmo2", f"{_M}.olmo2.modeling_olmo2", "Olmo2ForCausalLM",
                    {"Olmo2RMSNorm": _OLMO2}),
        )
    }
)  # fmt: skip

#: HF ``model_type`` -> family name.
MODEL_TYPE_TO_FAMILY: Mapping[str, str] = MappingProxyType(
    {t: f.name for f in FAMILIES.values() for t in (f.name, *f.aliases)}
)
