"""tigon.transformers: patching HF models (classes and instances), reporting, errors, Auto class.

The RMSNorm side (tests/python/test_transformers_kernels.py covers the other kernels): models
here are patched with ``rms_norm`` only, unless a test says otherwise.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from convergence_utils import FAMILIES, hf_norm_names, only, tiny_config
from convergence_utils import build_model as _build_model
from convergence_utils import patched_classes as _patched_classes
from helpers import restore_transformers, token_ids
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import tigon
import tigon.transformers as tt
from tigon.transformers.patching import SKIP_PARITY_CHECK_ENV

transformers = pytest.importorskip("transformers")

#: What patched_modules must report for each family's norms.
EXPECTED = {
    "llama": "tigon.nn.RMSNorm(llama)",
    "mistral": "tigon.nn.RMSNorm(llama)",
    "mixtral": "tigon.nn.RMSNorm(llama)",
    "qwen2": "tigon.nn.RMSNorm(llama)",
    "qwen3": "tigon.nn.RMSNorm(llama)",
    "qwen3_moe": "tigon.nn.RMSNorm(llama)",
    "gemma": "tigon.nn.RMSNorm(gemma, offset=1)",
    "gemma2": "tigon.nn.RMSNorm(gemma, offset=1)",
    "gemma3_text": "tigon.nn.RMSNorm(gemma, offset=1)",
    "phi3": "tigon.nn.RMSNorm(llama)",
    "granite": "tigon.nn.RMSNorm(llama)",
    "olmo2": "tigon.nn.RMSNorm(gemma)",
    "olmo3": "tigon.nn.RMSNorm(gemma)",
    "smollm3": "tigon.nn.RMSNorm(llama)",
    "ministral": "tigon.nn.RMSNorm(llama)",
    "exaone4": "tigon.nn.RMSNorm(llama)",
    "hunyuan_v1_dense": "tigon.nn.RMSNorm(llama)",
    "seed_oss": "tigon.nn.RMSNorm(llama)",
    "ernie4_5": "tigon.nn.RMSNorm(llama)",
    "glm4": "tigon.nn.RMSNorm(llama)",
    "apertus": "tigon.nn.RMSNorm(llama)",
    "lfm2": "tigon.nn.RMSNorm(llama)",
    "falcon_h1": "tigon.nn.RMSNorm(llama)",
}

#: The final norm and a layer's second norm, by the names most families use ...
LLAMA_NORMS = ["model.norm", "model.layers.1.post_attention_layernorm"]
#: ... and where the family names them differently.
BASE_NORMS = {
    "apertus": ["model.norm", "model.layers.1.feedforward_layernorm"],
    "lfm2": ["model.embedding_norm", "model.layers.1.ffn_norm"],
    "falcon_h1": ["model.final_layernorm", "model.layers.1.pre_ff_layernorm"],
}

#: Norms each tiny (2-layer) model must have, beyond input/post-attention/final ones.
SPECIAL_NORMS = {
    "lfm2": ["model.layers.0.operator_norm", "model.layers.1.self_attn.q_layernorm"],
    "qwen3": ["model.layers.0.self_attn.q_norm", "model.layers.1.self_attn.k_norm"],
    "gemma2": [
        "model.layers.0.pre_feedforward_layernorm",
        "model.layers.1.post_feedforward_layernorm",
    ],
    "gemma3_text": ["model.layers.0.self_attn.q_norm", "model.layers.1.post_feedforward_layernorm"],
    "olmo2": ["model.layers.0.self_attn.q_norm", "model.layers.1.post_feedforward_layernorm"],
}


def norms(family: str) -> dict[str, bool]:
    """The flags that patch the norms only."""
    return only(family, "rms_norm")


def build_model(family: str, *, tigon: str | None = None, **kwargs: Any) -> nn.Module:
    return _build_model(family, tigon=tigon, kernels=norms(family) if tigon else None, **kwargs)


def patched_classes(family: str) -> Any:
    return _patched_classes(family, **norms(family))


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield from restore_transformers()


class _CountTigonOps(TorchDispatchMode):
    """Counts calls of torch.ops.tigon.* (proof that the kernel actually ran)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        name = str(func)
        if name.startswith("tigon."):
            self.calls[name] = self.calls.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same_outputs(hf: nn.Module, ours: nn.Module, *, atol: float = 1e-5) -> None:
    """Forward logits, loss and every parameter gradient agree within float32 tolerance."""
    ids = token_ids()
    out_ref = hf(input_ids=ids, labels=ids)
    out = ours(input_ids=ids, labels=ids)
    torch.testing.assert_close(out.logits, out_ref.logits, atol=atol, rtol=1e-5)
    torch.testing.assert_close(out.loss, out_ref.loss, atol=atol, rtol=1e-5)
    out_ref.loss.backward()
    out.loss.backward()
    ref, got = _grads(hf), _grads(ours)
    assert ref.keys() == got.keys()
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], atol=atol, rtol=1e-4, msg=name)


# ------------------------------------------------------------------------------------------------
# API shape
# ------------------------------------------------------------------------------------------------


def test_every_family_has_an_apply_function() -> None:
    assert sorted(tt.FAMILIES) == sorted(FAMILIES)
    assert set(EXPECTED) == set(FAMILIES)
    for family in FAMILIES:
        fn = getattr(tt, f"apply_tigon_kernel_to_{family}")
        assert tt.MODEL_TYPE_TO_APPLY_FN[family] is fn
        params = inspect.signature(fn).parameters
        glu = "geglu" if family.startswith("gemma") else "swiglu"
        rope = ["rope"] if tt.FAMILIES[family].rope is not None else []
        mlp = [glu] if tt.FAMILIES[family].mlp is not None else []
        add_norm = ["fused_add_norm"] if tt.FAMILIES[family].add_norm is not None else []
        moe = ["moe"] if tt.FAMILIES[family].moe is not None else []
        assert list(params) == [
            "rms_norm",
            *add_norm,
            *rope,
            *mlp,
            *moe,
            "cross_entropy",
            "fused_linear_cross_entropy",
            "model",
        ]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
        assert params["rms_norm"].default is True and params["model"].default is None
        assert all(params[k].default is True for k in [*add_norm, *rope, *mlp, *moe])
        assert params["fused_linear_cross_entropy"].default is True
        assert params["cross_entropy"].default is False
        assert fn.__doc__ and family in fn.__doc__
    assert tt.supported_model_types() == sorted(FAMILIES)


def test_supported_versions_are_the_tested_ones() -> None:
    """The versions tigon declares are the ones `make test` (the pin) and `make test-compat` run,
    and this run is one of them."""
    root = Path(__file__).resolve().parents[2]
    versions = tt.supported_versions()
    tested = versions["transformers"]["tested"]
    pin = re.search(r"^transformers==([0-9.]+)", (root / "requirements-dev.txt").read_text(), re.M)
    compat = re.search(r"^COMPAT_TRANSFORMERS \?= ([0-9.]+)", (root / "Makefile").read_text(), re.M)
    assert pin and compat
    assert tested == (pin.group(1), compat.group(1))
    assert versions["transformers"]["min"] == pin.group(1)
    assert versions["installed"] == transformers.__version__ in tested


def test_every_family_module_has_its_classes() -> None:
    """The table matches the installed transformers (fails on version drift)."""
    for spec in tt.FAMILIES.values():
        module = importlib.import_module(spec.module)
        assert hasattr(module, spec.causal_lm)
        for name in spec.norms:
            assert isinstance(getattr(module, name), type), f"{spec.module}.{name}"


# ------------------------------------------------------------------------------------------------
# Class replacement (before construction)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_class_replacement(family: str) -> None:
    spec = tt.FAMILIES[family]
    module = importlib.import_module(spec.module)
    originals = {name: getattr(module, name) for name in spec.norms}
    hf = build_model(family)
    norms = hf_norm_names(hf, family)
    assert set(BASE_NORMS.get(family, LLAMA_NORMS)) <= norms
    assert set(SPECIAL_NORMS.get(family, [])) <= norms

    with patched_classes(family) as done:
        assert done == {f"{spec.module}.{n}": EXPECTED[family] for n in spec.norms}
        for name in spec.norms:
            cls = getattr(module, name)
            assert issubclass(cls, tigon.nn.RMSNorm) and "RMSNorm" in cls.__name__
        torch.manual_seed(0)
        ours = transformers.AutoModelForCausalLM.from_config(tiny_config(family))
    assert {name: getattr(module, name) for name in spec.norms} == originals  # restored

    assert tt.patched_modules(ours) == dict.fromkeys(norms, EXPECTED[family])
    assert tt.patched_modules(hf) == {}
    # Same parameter names, same initial values (Gemma's zero-centered weights included): HF
    # checkpoints load unchanged, both ways.
    assert ours.state_dict().keys() == hf.state_dict().keys()
    for name, value in hf.state_dict().items():
        assert torch.equal(value, ours.state_dict()[name]), name
    ours.load_state_dict(hf.state_dict(), strict=True)
    _assert_same_outputs(hf, ours)


def test_class_replacement_is_idempotent_and_revertible() -> None:
    module = importlib.import_module("transformers.models.llama.modeling_llama")
    original = module.LlamaRMSNorm
    first = tt.apply_tigon_kernel_to_llama(**norms("llama"))
    replaced = module.LlamaRMSNorm
    assert tt.apply_tigon_kernel_to_llama(**norms("llama")) == first
    assert module.LlamaRMSNorm is replaced
    assert tt.revert_patches("llama") == ["transformers.models.llama.modeling_llama.LlamaRMSNorm"]
    assert module.LlamaRMSNorm is original
    assert tt.revert_patches("llama") == []


def test_replaced_class_accepts_hf_constructor_forms() -> None:
    with patched_classes("gemma3_text"):
        module = importlib.import_module("transformers.models.gemma3.modeling_gemma3")
        by_keyword = module.Gemma3RMSNorm(dim=16, eps=1e-5)
        positional = module.Gemma3RMSNorm(16, 1e-5)
    for norm in (by_keyword, positional):
        assert norm.weight.shape == (16,) and norm.eps == norm.variance_epsilon == 1e-5
        assert torch.equal(norm.weight, torch.zeros(16))  # Gemma stores 1 + w: zeros
    with pytest.raises(TypeError, match="exactly one of hidden_size or dim"):
        type(by_keyword)()


def test_checkpoint_saved_by_hf_loads_into_patched_classes(
    tmp_path: Path,
) -> None:
    hf = build_model("gemma2")
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)  # non-default norm weights
    hf.save_pretrained(tmp_path)
    with patched_classes("gemma2"):
        ours = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert len(tt.patched_modules(ours)) == len(hf_norm_names(hf, "gemma2"))
    for name, value in hf.state_dict().items():
        assert torch.equal(value, ours.state_dict()[name]), name
    hf.zero_grad()
    _assert_same_outputs(hf, ours)


# ------------------------------------------------------------------------------------------------
# Instance patching (an existing model)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_instance_patching(family: str) -> None:
    hf = build_model(family)
    model = copy.deepcopy(hf)
    norms = hf_norm_names(model, family)
    params_before = {n: p for n, p in model.named_parameters()}
    done = tt.apply_tigon_kernel(family, model=model, **only(family, "rms_norm"))
    assert done == dict.fromkeys(norms, EXPECTED[family])
    assert tt.patched_modules(model) == done
    # The same Parameter objects (optimizers and hooks stay valid), same device and dtype.
    assert {n: p for n, p in model.named_parameters()} == params_before
    spec = tt.FAMILIES[family]
    for name in norms:
        norm = model.get_submodule(name)
        assert isinstance(norm, tigon.nn.RMSNorm)
        norm_spec = next(iter(spec.norms.values()))
        assert (norm.casting_mode, norm.offset, norm.in_place) == (
            norm_spec.casting_mode,
            norm_spec.offset,
            norm_spec.in_place,
        )
        assert norm.variance_epsilon == hf.get_submodule(name).__dict__[norm_spec.eps_attr]
        assert norm.eps == norm.variance_epsilon
    # Patching again is a no-op that still reports everything.
    apply = getattr(tt, f"apply_tigon_kernel_to_{family}")
    assert apply(model=model, **only(family, "rms_norm")) == done
    _assert_same_outputs(hf, model)


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_norms_match_hf_in_low_precision(family: str) -> None:
    """Each patched norm against its own HF module, bf16/fp16 activations, 16-bit and float32
    weights: same output dtype and bit-identical outputs (<= 1% may differ by the order of the sum
    of squares). This, not the convergence test, is what pins the casting mode: convergence
    tolerances cannot tell the modes apart (olmo2 with llama casting passes them)."""
    hf = build_model(family)
    ours = build_model(family, tigon="instance")
    gen = torch.Generator().manual_seed(11)
    for name in sorted(hf_norm_names(hf, family))[:3]:
        ref_norm, norm = hf.get_submodule(name), ours.get_submodule(name)
        size = ref_norm.weight.shape[0]
        with torch.no_grad():
            ref_norm.weight.copy_(torch.randn(size, generator=gen) * 0.5 + 1 - norm.offset)
            norm.weight.copy_(ref_norm.weight)
        for x_dtype in (torch.bfloat16, torch.float16):
            for w_dtype in (x_dtype, torch.float32):
                x = (torch.randn(4, 8, size, generator=gen) * 3).to(x_dtype)
                want = copy.deepcopy(ref_norm).to(w_dtype)(x)
                got = copy.deepcopy(norm).to(w_dtype)(x)
                assert got.dtype == want.dtype, (name, x_dtype, w_dtype)
                differ = (got != want).float().mean().item()
                assert differ <= 0.01, f"{name} {x_dtype} x, {w_dtype} w: {differ:.1%} differ"
                torch.testing.assert_close(got, want, atol=0, rtol=2**-7)  # <= 1 bf16 ulp
        # Sensitivity: the other casting mode differs on far more than 1% of bf16 outputs.
        wrong = copy.deepcopy(norm).to(torch.bfloat16)
        wrong.casting_mode = "llama" if norm.casting_mode == "gemma" else "gemma"
        x = (torch.randn(4, 8, size, generator=gen) * 3).to(torch.bfloat16)
        want = copy.deepcopy(ref_norm).to(torch.bfloat16)(x)
        assert (wrong(x) != want).float().mean().item() > 0.05


@pytest.mark.parametrize("family", ["llama", "gemma2", "olmo2", "qwen3"])
def test_kernel_actually_runs(family: str) -> None:
    """Forward calls tigon's forward op once per norm, backward its backward ops once per norm."""
    model = build_model(family, tigon="instance")
    n = len(tt.patched_modules(model))
    ids = token_ids()
    with _CountTigonOps() as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    assert counter.calls.get("tigon.rms_norm_fwd.default") == n, counter.calls
    backward = sum(v for k, v in counter.calls.items() if k.startswith("tigon.rms_norm_bwd"))
    assert backward == n, counter.calls


@pytest.mark.parametrize("family", ["gemma2", "gemma3_text", "olmo2"])
def test_in_place_is_safe_where_the_gradient_is_shared(family: str) -> None:
    """Post-norms feed the residual sum, whose backward hands one gradient tensor to both
    operands. With in_place=True (the table's setting) the backward must see that the gradient is
    shared and leave it alone: gradients bitwise those of in_place=False, and HF's."""
    hf = build_model(family)
    patched = build_model(family, tigon="instance")
    norms = [m for m in patched.modules() if isinstance(m, tigon.nn.RMSNorm)]
    assert norms and all(m.in_place for m in norms)
    _assert_same_outputs(hf, patched)

    out_of_place = build_model(family, tigon="instance")
    for module in out_of_place.modules():
        if isinstance(module, tigon.nn.RMSNorm):
            module.in_place = False
    ids = token_ids()
    out_of_place(input_ids=ids, labels=ids).loss.backward()
    want, got = _grads(out_of_place), _grads(patched)
    assert want.keys() == got.keys()
    for name in want:
        assert torch.equal(got[name], want[name]), name


def test_instance_patching_after_accelerate_hooks() -> None:
    """accelerate's hooks call the forward saved on the instance; it must become tigon's."""
    hooks = pytest.importorskip("accelerate.hooks")
    hf = build_model("llama")
    model = copy.deepcopy(hf)
    hooks.add_hook_to_module(model.model.norm, hooks.ModelHook())
    tt.apply_tigon_kernel_to_llama(model=model, **norms("llama"))
    ids = token_ids()
    with _CountTigonOps() as counter:
        model(input_ids=ids)
    assert counter.calls["tigon.rms_norm_fwd.default"] == len(tt.patched_modules(model))
    _assert_same_outputs(hf, model)


def test_instance_patching_refuses_an_unknown_forward_override() -> None:
    model = build_model("llama")
    model.model.norm.forward = lambda x: x
    with pytest.raises(RuntimeError, match="forward overridden on the instance"):
        tt.apply_tigon_kernel_to_llama(model=model)


def test_model_built_after_class_replacement_counts_as_patched() -> None:
    model = build_model("mistral", tigon="classes")
    done = tt.apply_tigon_kernel_to_mistral(model=model, **norms("mistral"))
    assert done == tt.patched_modules(model) and len(done) == 5


def test_patched_model_pickles_and_deep_copies() -> None:
    model = build_model("gemma", tigon="instance")
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert tt.patched_modules(loaded) == tt.patched_modules(model)
    assert tt.patched_modules(copy.deepcopy(model)) == tt.patched_modules(model)
    ids = token_ids()
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_rms_norm_false_patches_nothing() -> None:
    model = build_model("llama")
    off = {k: False for k in norms("llama")}
    assert tt.apply_tigon_kernel_to_llama(**off, model=model) == {}
    assert tt.patched_modules(model) == {}
    assert tt.apply_tigon_kernel_to_llama(**off) == {}
    assert tt.revert_patches() == []


# ------------------------------------------------------------------------------------------------
# PEFT
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_peft_lora_wrapped_model(family: str) -> None:
    peft = pytest.importorskip("peft")
    hf = build_model(family)
    config = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules="all-linear",
        modules_to_save=["norm"],
        init_lora_weights=False,
    )
    torch.manual_seed(3)
    ref = peft.get_peft_model(hf, config)
    wrapped = copy.deepcopy(ref)
    done = tt.apply_tigon_kernel_to_instance(wrapped, **norms(family))
    names = set(done)
    assert all(n.startswith("base_model.model.model.") for n in names), sorted(names)
    # modules_to_save=["norm"] matches every name ending in "norm": each norm is wrapped, and
    # both the frozen original and the trained copy are patched.
    for norm in ("norm", "layers.1.post_attention_layernorm"):
        assert f"base_model.model.model.{norm}.modules_to_save.default" in names
        assert f"base_model.model.model.{norm}.original_module" in names
    assert len(names) == 2 * len(hf_norm_names(build_model(family), family))
    assert tt.patched_modules(wrapped) == done
    _assert_same_outputs(ref, wrapped)
    # Only LoRA weights and the saved norm copy train; the frozen norms still run tigon's kernel.
    trained = {n for n, p in wrapped.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trained)
    assert "base_model.model.model.norm.modules_to_save.default.weight" in trained


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------


def test_nothing_to_patch_is_an_error() -> None:
    model = build_model("gemma2")
    with pytest.raises(RuntimeError) as err:
        tt.apply_tigon_kernel_to_llama(model=model, **norms("llama"))
    msg = str(err.value)
    assert "llama" in msg and "LlamaRMSNorm" in msg and transformers.__version__ in msg
    assert "apply_tigon_kernel_to_gemma2" in msg  # the hint names the right family
    with pytest.raises(RuntimeError, match="found nothing to patch"):
        tt.apply_tigon_kernel_to_qwen3(model=nn.Sequential(nn.Linear(4, 4)))


def test_bad_arguments() -> None:
    with pytest.raises(
        TypeError,
        match="unexpected keyword argument 'geglu'.*accepts rms_norm, fused_add_norm, rope, swiglu,",
    ):
        tt.apply_tigon_kernel_to_llama(geglu=True)
    with pytest.raises(TypeError, match="must be a bool"):
        tt.apply_tigon_kernel_to_llama(rms_norm=1)
    with pytest.raises(TypeError):
        tt.apply_tigon_kernel_to_llama(True)  # type: ignore[misc]  # keyword-only
    with pytest.raises(TypeError, match="must be a torch.nn.Module"):
        tt.apply_tigon_kernel_to_llama(model="llama")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match="'gpt2' is not supported; supported: .*gemma, gemma2, gemma3_text"
    ):
        tt.apply_tigon_kernel("gpt2")


def test_missing_class_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("transformers.models.phi3.modeling_phi3")
    monkeypatch.delattr(module, "Phi3RMSNorm")
    with pytest.raises(RuntimeError) as err:
        tt.apply_tigon_kernel_to_phi3(**norms("phi3"))
    msg = str(err.value)
    assert "phi3" in msg and "Phi3RMSNorm" in msg and transformers.__version__ in msg


def _register_fake_class(
    monkeypatch: pytest.MonkeyPatch, module: object, name: str, cls: type
) -> None:
    cls.__name__ = cls.__qualname__ = name
    cls.__module__ = module.__name__  # type: ignore[attr-defined]
    monkeypatch.setattr(module, name, cls)


def test_changed_numerics_are_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """If Olmo2's norm switched to Llama's cast order, the parity probe must refuse to patch."""
    module = importlib.import_module("transformers.models.olmo2.modeling_olmo2")
    llama = importlib.import_module("transformers.models.llama.modeling_llama")

    class Changed(llama.LlamaRMSNorm):  # llama casting where the table says gemma casting
        pass

    _register_fake_class(monkeypatch, module, "Olmo2RMSNorm", Changed)
    with pytest.raises(RuntimeError, match=r"olmo2.*no longer matches tigon's 'gemma' casting"):
        tt.apply_tigon_kernel_to_olmo2(**norms("olmo2"))
    monkeypatch.setenv(SKIP_PARITY_CHECK_ENV, "1")
    tt.apply_tigon_kernel_to_olmo2(**norms("olmo2"))  # the escape hatch


def test_changed_constructor_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("transformers.models.granite.modeling_granite")

    class Changed(nn.Module):
        def __init__(self, hidden_size: int, eps: float = 1e-6, with_scale: bool = True) -> None:
            super().__init__()

    _register_fake_class(monkeypatch, module, "GraniteRMSNorm", Changed)
    with pytest.raises(RuntimeError, match=r"granite.*GraniteRMSNorm.__init__ has parameters"):
        tt.apply_tigon_kernel_to_granite(**norms("granite"))


def test_changed_initialization_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma's norms must start at zero (weights are stored as w with scale 1 + w)."""
    module = importlib.import_module("transformers.models.gemma.modeling_gemma")
    original = module.GemmaRMSNorm

    class Changed(original):
        def __init__(self, dim: int, eps: float = 1e-6) -> None:
            super().__init__(dim, eps)
            nn.init.ones_(self.weight)

    _register_fake_class(monkeypatch, module, "GemmaRMSNorm", Changed)
    with pytest.raises(RuntimeError, match="no longer starts as zeros"):
        tt.apply_tigon_kernel_to_gemma(**norms("gemma"))


# ------------------------------------------------------------------------------------------------
# AutoTigonForCausalLM
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "olmo2"])
def test_auto_from_config(family: str) -> None:
    config = tiny_config(family)
    torch.manual_seed(0)
    model = tt.AutoTigonForCausalLM.from_config(config, **norms(family))
    assert type(model).__name__ == tt.FAMILIES[family].causal_lm
    assert set(tt.patched_modules(model).values()) == {EXPECTED[family]}
    hf = build_model(family)
    assert len(tt.patched_modules(model)) == len(hf_norm_names(hf, family))
    # Transformers' classes were not touched.
    assert tt.patched_modules(build_model(family)) == {}
    _assert_same_outputs(hf, model)


def test_auto_from_config_flags_and_errors() -> None:
    config = tiny_config("qwen2")
    model = tt.AutoTigonForCausalLM.from_config(config, **{k: False for k in norms("qwen2")})
    assert tt.patched_modules(model) == {}
    with pytest.raises(TypeError, match="rms_norm must be a bool"):
        tt.AutoTigonForCausalLM.from_config(config, rms_norm="yes")
    gpt2 = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    with pytest.raises(ValueError, match="'gpt2' is not supported; supported: .*llama.*olmo2"):
        tt.AutoTigonForCausalLM.from_config(gpt2)
    with pytest.raises(OSError, match="from_pretrained"):
        tt.AutoTigonForCausalLM()


def test_auto_from_pretrained(tmp_path: Path) -> None:
    hf = build_model("qwen3")
    hf.save_pretrained(tmp_path)
    model = tt.AutoTigonForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, **norms("qwen3"))
    assert set(tt.patched_modules(model)) == hf_norm_names(hf, "qwen3")
    for name, value in hf.state_dict().items():
        assert torch.equal(value, model.state_dict()[name]), name
    _assert_same_outputs(hf, model)
    off = {k: False for k in norms("qwen3")}
    unpatched = tt.AutoTigonForCausalLM.from_pretrained(tmp_path, **off)
    assert tt.patched_modules(unpatched) == {}


def test_auto_from_pretrained_rejects_unsupported_before_loading(
    tmp_path: Path,
) -> None:
    gpt2 = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    gpt2.save_pretrained(tmp_path)  # a config without weights: must fail on model_type first
    with pytest.raises(ValueError, match="'gpt2' is not supported"):
        tt.AutoTigonForCausalLM.from_pretrained(tmp_path)
