"""Hugging Face transformers integration: patch models with tigon's kernels.

Before building a model (replaces the family's classes; checkpoints load unchanged)::

    from tigon.transformers import apply_tigon_kernel_to_llama
    apply_tigon_kernel_to_llama()  # rms_norm=True
    model = AutoModelForCausalLM.from_pretrained(...)

or on a built model, also PEFT-wrapped (patches its modules in place)::

    apply_tigon_kernel_to_llama(model=model)

or in one step: ``AutoTigonForCausalLM.from_pretrained(...)``. ``patched_modules(model)`` reports
what is patched. See docs/transformers.md.
"""

from __future__ import annotations

from tigon.transformers.auto_model import AutoTigonForCausalLM
from tigon.transformers.families import FAMILIES, MODEL_TYPE_TO_FAMILY, FamilySpec, NormSpec
from tigon.transformers.patching import (
    KERNELS,
    SKIP_PARITY_CHECK_ENV,
    ApplyFn,
    Kernel,
    apply_tigon_kernel,
    apply_tigon_kernel_to_instance,
    describe_module,
    family_for_model_type,
    kernel_flags,
    make_apply_fn,
    patched_modules,
    revert_patches,
    supported_model_types,
    supported_versions,
)

apply_tigon_kernel_to_llama: ApplyFn = make_apply_fn("llama")
apply_tigon_kernel_to_mistral: ApplyFn = make_apply_fn("mistral")
apply_tigon_kernel_to_mixtral: ApplyFn = make_apply_fn("mixtral")
apply_tigon_kernel_to_qwen2: ApplyFn = make_apply_fn("qwen2")
apply_tigon_kernel_to_qwen3: ApplyFn = make_apply_fn("qwen3")
apply_tigon_kernel_to_qwen3_moe: ApplyFn = make_apply_fn("qwen3_moe")
apply_tigon_kernel_to_gemma: ApplyFn = make_apply_fn("gemma")
apply_tigon_kernel_to_gemma2: ApplyFn = make_apply_fn("gemma2")
apply_tigon_kernel_to_gemma3_text: ApplyFn = make_apply_fn("gemma3_text")
apply_tigon_kernel_to_phi3: ApplyFn = make_apply_fn("phi3")
apply_tigon_kernel_to_granite: ApplyFn = make_apply_fn("granite")
apply_tigon_kernel_to_olmo2: ApplyFn = make_apply_fn("olmo2")
apply_tigon_kernel_to_olmo3: ApplyFn = make_apply_fn("olmo3")
apply_tigon_kernel_to_smollm3: ApplyFn = make_apply_fn("smollm3")
apply_tigon_kernel_to_ministral: ApplyFn = make_apply_fn("ministral")
apply_tigon_kernel_to_exaone4: ApplyFn = make_apply_fn("exaone4")
apply_tigon_kernel_to_hunyuan_v1_dense: ApplyFn = make_apply_fn("hunyuan_v1_dense")
apply_tigon_kernel_to_seed_oss: ApplyFn = make_apply_fn("seed_oss")
apply_tigon_kernel_to_ernie4_5: ApplyFn = make_apply_fn("ernie4_5")
apply_tigon_kernel_to_glm4: ApplyFn = make_apply_fn("glm4")
apply_tigon_kernel_to_lfm2: ApplyFn = make_apply_fn("lfm2")
apply_tigon_kernel_to_apertus: ApplyFn = make_apply_fn("apertus")
apply_tigon_kernel_to_falcon_h1: ApplyFn = make_apply_fn("falcon_h1")

#: HF model_type -> its apply function.
MODEL_TYPE_TO_APPLY_FN: dict[str, ApplyFn] = {
    model_type: globals()[f"apply_tigon_kernel_to_{family}"]
    for model_type, family in MODEL_TYPE_TO_FAMILY.items()
}

__all__ = [
    "FAMILIES",
    "KERNELS",
    "MODEL_TYPE_TO_APPLY_FN",
    "MODEL_TYPE_TO_FAMILY",
    "SKIP_PARITY_CHECK_ENV",
    "ApplyFn",
    "AutoTigonForCausalLM",
    "FamilySpec",
    "Kernel",
    "NormSpec",
    "apply_tigon_kernel",
    "apply_tigon_kernel_to_apertus",
    "apply_tigon_kernel_to_ernie4_5",
    "apply_tigon_kernel_to_exaone4",
    "apply_tigon_kernel_to_falcon_h1",
    "apply_tigon_kernel_to_gemma",
    "apply_tigon_kernel_to_gemma2",
    "apply_tigon_kernel_to_gemma3_text",
    "apply_tigon_kernel_to_glm4",
    "apply_tigon_kernel_to_granite",
    "apply_tigon_kernel_to_hunyuan_v1_dense",
    "apply_tigon_kernel_to_instance",
    "apply_tigon_kernel_to_lfm2",
    "apply_tigon_kernel_to_llama",
    "apply_tigon_kernel_to_ministral",
    "apply_tigon_kernel_to_mistral",
    "apply_tigon_kernel_to_mixtral",
    "apply_tigon_kernel_to_olmo2",
    "apply_tigon_kernel_to_olmo3",
    "apply_tigon_kernel_to_phi3",
    "apply_tigon_kernel_to_qwen2",
    "apply_tigon_kernel_to_qwen3",
    "apply_tigon_kernel_to_qwen3_moe",
    "apply_tigon_kernel_to_seed_oss",
    "apply_tigon_kernel_to_smollm3",
    "describe_module",
    "family_for_model_type",
    "kernel_flags",
    "make_apply_fn",
    "patched_modules",
    "revert_patches",
    "supported_model_types",
    "supported_versions",
]
