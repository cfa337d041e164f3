"""tigon.transformers: the RoPE, SwiGLU/GeGLU, cross-entropy and fused linear cross-entropy flags."""

from __future__ import annotations

import copy
import importlib
import io
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from convergence_utils import FAMILIES, build_model, only
from helpers import restore_transformers, token_ids
from torch import nn

import tigon.transformers as tt
from tigon.transformers import loss as tl
from tigon.transformers import mlp as tm

transformers = pytest.importorskip("transformers")

GLU = {f: ("geglu" if f.startswith("gemma") else "swiglu") for f in FAMILIES}
#: The first layer's MLP module where it isn't ``model.layers.0.mlp``.
MLP_NAMES = {
    "mixtral": "model.layers.0.mlp.experts",
    "lfm2": "model.layers.0.feed_forward",
    "falcon_h1": "model.layers.0.feed_forward",
}
#: The first layer's MoE experts module (the ``moe`` flag).
MOE_NAMES = {"mixtral": "model.layers.0.mlp.experts", "qwen3_moe": "model.layers.0.mlp.experts"}


def _glu_patched(family: str) -> bool:
    """Whether the defaults leave a TigonGLU in the model: the family has a gated MLP that the
    ``moe`` flag's fused experts op does not supersede (Mixtral's experts: moe wins)."""
    spec = tt.FAMILIES[family]
    return spec.mlp is not None and (spec.moe is None or spec.moe.cls != spec.mlp.cls)


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield from restore_transformers()


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _reference(family: str, **kwargs: Any) -> tuple[nn.Module, dict[str, Any]]:
    """A plain HF model and its training loss, gradients and eval logits (run before patching:
    RoPE and the class-level loss patches are process-wide)."""
    hf = build_model(family)
    ids = token_ids()
    hf.train()
    out = hf(input_ids=ids, labels=ids, **kwargs)
    out.loss.backward()
    hf.eval()
    with torch.no_grad():
        logits = hf(input_ids=ids).logits
    return hf, {"loss": out.loss.detach(), "grads": _grads(hf), "logits": logits}


def _assert_matches(ref: dict[str, Any], model: nn.Module, *, fused: bool, **kwargs: Any) -> None:
    ids = token_ids()
    model.train()
    out = model(input_ids=ids, labels=ids, **kwargs)
    assert (out.logits is None) == fused  # the fused loss never materializes logits
    torch.testing.assert_close(out.loss, ref["loss"], atol=1e-5, rtol=1e-5)
    out.loss.backward()
    got = _grads(model)
    assert got.keys() == ref["grads"].keys()
    for name, grad in ref["grads"].items():
        torch.testing.assert_close(got[name], grad, atol=1e-5, rtol=1e-4, msg=name)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, ref["logits"], atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# Flags
# ------------------------------------------------------------------------------------------------


def test_flags_per_family() -> None:
    for family in FAMILIES:
        flags = tt.kernel_flags(family)
        rope = {"rope": True} if tt.FAMILIES[family].rope is not None else {}
        mlp = {GLU[family]: True} if tt.FAMILIES[family].mlp is not None else {}
        add_norm = {"fused_add_norm": True} if tt.FAMILIES[family].add_norm is not None else {}
        moe = {"moe": True} if tt.FAMILIES[family].moe is not None else {}
        assert flags == {
            "rms_norm": True,
            **add_norm,
            **rope,
            **mlp,
            **moe,
            "cross_entropy": False,
            "fused_linear_cross_entropy": True,
        }


def test_loss_flags_are_exclusive() -> None:
    with pytest.raises(ValueError, match="exclusive"):
        tt.apply_tigon_kernel_to_llama(cross_entropy=True, fused_linear_cross_entropy=True)
    # cross_entropy=True alone turns the fused loss off.
    done = tt.apply_tigon_kernel_to_llama(cross_entropy=True)
    assert any(k.endswith("loss_function") for k in done)
    assert not any(k.endswith(".forward") for k in done)


# ------------------------------------------------------------------------------------------------
# Every kernel, every family: same loss, gradients and eval logits as HF
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["fused", "ce"])
@pytest.mark.parametrize("family", FAMILIES)
def test_class_replacement_all_kernels(family: str, loss: str) -> None:
    hf, ref = _reference(family)
    flags = {"cross_entropy": True} if loss == "ce" else {}
    ours = build_model(family, tigon="classes", kernels=flags)
    assert ours.state_dict().keys() == hf.state_dict().keys()
    patched = tt.patched_modules(ours)
    mlp = MLP_NAMES.get(family, "model.layers.0.mlp")
    if tt.FAMILIES[family].mlp is not None:
        assert patched[mlp]
    else:
        assert mlp not in patched
    moe = tt.FAMILIES[family].moe
    if moe is not None:
        assert patched[MOE_NAMES[family]] == f"tigon.ops.moe_experts({moe.cls})"
    if tt.FAMILIES[family].rope is not None:
        assert "tigon.ops.rope" in patched["model.layers.1.self_attn"]
    else:
        assert "model.layers.1.self_attn" not in patched
    assert patched[""] == (tl.FLCE if loss == "fused" else tl.CE)
    _assert_matches(ref, ours, fused=loss == "fused")


@pytest.mark.parametrize("family", FAMILIES)
def test_instance_patching_all_kernels(family: str) -> None:
    _, ref = _reference(family)
    model = build_model(family)
    params = dict(model.named_parameters())
    done = tt.apply_tigon_kernel(family, model=model)
    assert dict(model.named_parameters()) == params  # same Parameter objects
    assert tt.patched_modules(model) == done
    mlps = [n for n, m in model.named_modules() if isinstance(m, tm.TigonGLU)]
    assert bool(mlps) == _glu_patched(family)
    assert all(done[n].startswith(f"tigon.ops.{GLU[family]}") for n in mlps)
    assert done[""] == tl.FLCE
    assert type(model).__name__ == tt.FAMILIES[family].causal_lm  # save_pretrained architectures
    assert tt.apply_tigon_kernel(family, model=model) == done  # idempotent
    _assert_matches(ref, model, fused=True)


def test_instance_cross_entropy() -> None:
    _, ref = _reference("gemma2")  # HF soft-caps the logits before the loss
    model = build_model("gemma2")
    done = tt.apply_tigon_kernel_to_gemma2(model=model, cross_entropy=True)
    assert done[""] == tl.CE
    _assert_matches(ref, model, fused=False)


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "granite", "mixtral", "falcon_h1"])
def test_fused_loss_trainer_kwargs(family: str) -> None:
    """num_items_in_batch (HF Trainer's gradient accumulation), shift_labels, ignore_index."""
    hf = build_model(family)
    ids = token_ids()
    labels = ids.clone()
    labels[:, :5] = -100
    shift = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
    cases = [
        {"labels": labels, "num_items_in_batch": torch.tensor(13)},
        {"labels": ids, "shift_labels": shift},  # shift_labels wins over labels
    ]
    refs = [hf(input_ids=ids, **c).loss.detach() for c in cases]
    ours = build_model(family, tigon="instance")
    for case, want in zip(cases, refs):
        out = ours(input_ids=ids, **case)
        assert out.logits is None
        torch.testing.assert_close(out.loss, want, atol=1e-5, rtol=1e-5)
    out = ours(input_ids=ids, labels=labels, return_dict=False)
    assert isinstance(out, tuple)


@pytest.mark.parametrize("family", ["llama", "gemma2", "mixtral"])
def test_fused_loss_returns_token_accuracy(family: str) -> None:
    """model(..., return_token_accuracy=True) in training: the accuracy of the argmax of HF's
    (soft-capped) logits over the shifted, non-ignored labels, as a last output field."""
    hf = build_model(family)
    ids = token_ids()
    with torch.no_grad():
        predicted = hf(input_ids=ids).logits[:, :-1].argmax(-1)
    labels = ids.clone()
    labels[:, 1::2] = predicted[:, ::2]  # about half the tokens predicted right
    labels[:, :5] = -100
    target = labels[:, 1:]
    valid = target != -100
    want = (predicted == target)[valid].float().mean()
    assert 0 < want < 1
    ours = build_model(family, tigon="instance")
    out = ours(input_ids=ids, labels=labels, return_token_accuracy=True)
    assert out.logits is None
    assert out.token_accuracy.dtype == torch.float32
    torch.testing.assert_close(out.token_accuracy, want, rtol=0, atol=0)
    out.loss.backward()
    plain = ours(input_ids=ids, labels=labels)
    assert "token_accuracy" not in plain.keys()
    torch.testing.assert_close(plain.loss, out.loss)
    as_tuple = ours(input_ids=ids, labels=labels, return_token_accuracy=True, return_dict=False)
    torch.testing.assert_close(as_tuple[-1], want, rtol=0, atol=0)


def test_fused_loss_with_gradient_checkpointing_and_revert() -> None:
    _, ref = _reference("qwen3")
    model = build_model("qwen3", tigon="classes")
    model.gradient_checkpointing_enable()
    _assert_matches(ref, model, fused=True)
    module = importlib.import_module("transformers.models.qwen3.modeling_qwen3")
    restored = tt.revert_patches("qwen3")
    assert "transformers.models.qwen3.modeling_qwen3.apply_rotary_pos_emb" in restored
    assert "transformers.models.qwen3.modeling_qwen3.Qwen3ForCausalLM.forward" in restored
    assert not hasattr(module.apply_rotary_pos_emb, "tigon_original")
    assert not issubclass(module.Qwen3MLP, tm.TigonGLU)
    assert tt.revert_patches("qwen3") == []


def test_rope_is_process_wide_and_reported() -> None:
    other = build_model("llama")  # built before, not passed to the patch
    model = build_model("llama")
    done = tt.apply_tigon_kernel_to_llama(model=model, **only("llama", "rope"))
    assert set(done) == {"model.layers.0.self_attn", "model.layers.1.self_attn"}
    assert tt.patched_modules(other) == done  # documented: the function is module-global


def test_mlp_activation_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="swiglu=True needs config.hidden_act"):
        build_model("llama", tigon="instance", hidden_act="gelu")
    tt.apply_tigon_kernel_to_llama(**only("llama", "swiglu"))
    with pytest.raises(ValueError, match="pass swiglu=False"):
        build_model("llama", hidden_act="relu")


def test_mlp_output_dropout_is_kept() -> None:
    """Seed-OSS drops out its MLP's output in training: the tigon MLP does too, with the same
    mask for the same random state; in eval it is the identity."""
    hf = build_model("seed_oss", residual_dropout=0.25)
    ours = build_model(
        "seed_oss", tigon="instance", kernels=only("seed_oss", "swiglu"), residual_dropout=0.25
    )
    mlp_ref, mlp = hf.model.layers[0].mlp, ours.model.layers[0].mlp
    assert isinstance(mlp, tm.TigonGLU) and not isinstance(mlp_ref, tm.TigonGLU)
    x = torch.randn(2, 8, 64)
    for training in (True, False):
        mlp_ref.train(training)
        mlp.train(training)
        torch.manual_seed(3)
        want = mlp_ref(x)
        torch.manual_seed(3)
        got = mlp(x)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        assert (got == 0).float().mean() > 0.1 if training else not (got == 0).any()


@pytest.mark.parametrize("fuse_down_proj", [True, False])
def test_falcon_h1_mlp_multipliers_match_hf(fuse_down_proj: bool) -> None:
    """FalconH1MLP: ``up(x) * silu(gate(x) * gm)``, then ``down(y) * dm``. tigon's MLP (gate
    multiplier in the op, down multiplier on down_proj's output) gives HF's output, input gradient
    and weight gradients bit for bit in bf16 (CPU), with and without the down_proj recompute."""
    hf = build_model("falcon_h1", mlp_multipliers=[0.8838834764831844, 0.5859375])
    ours = build_model(
        "falcon_h1",
        tigon="instance",
        kernels=only("falcon_h1", "swiglu"),
        mlp_multipliers=[0.8838834764831844, 0.5859375],
    )
    mlp_ref = hf.model.layers[0].feed_forward.to(torch.bfloat16)
    mlp = ours.model.layers[0].feed_forward.to(torch.bfloat16)
    assert isinstance(mlp, tm.TigonGLU) and (mlp.gate_multiplier, mlp.down_multiplier) == (
        0.8838834764831844,
        0.5859375,
    )
    mlp.tigon_fuse_down_proj = fuse_down_proj
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(4, 16, 64, generator=gen) * 2).to(torch.bfloat16)
    dy = torch.randn(4, 16, 64, generator=gen).to(torch.bfloat16)
    results = []
    for module in (mlp_ref, mlp):
        module.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        y = module(xi)
        y.backward(dy)
        grads = {n: p.grad for n, p in module.named_parameters()}
        results.append((y.detach(), xi.grad, grads))
    (y_ref, dx_ref, g_ref), (y, dx, g) = results
    assert torch.equal(y, y_ref)
    assert torch.equal(dx, dx_ref)
    assert g.keys() == g_ref.keys()
    for name in g_ref:
        assert torch.equal(g[name], g_ref[name]), name


def test_changed_mlp_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("transformers.models.llama.modeling_llama")
    original = module.LlamaMLP

    class Changed(original):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x) * 2)

    Changed.__name__ = Changed.__qualname__ = "LlamaMLP"
    Changed.__module__ = module.__name__
    monkeypatch.setattr(module, "LlamaMLP", Changed)
    monkeypatch.setattr(tm, "_CLASSES", {})
    with pytest.raises(RuntimeError, match="LlamaMLP's output no longer matches tigon.ops.swiglu"):
        tt.apply_tigon_kernel_to_llama(**only("llama", "swiglu"))


def test_changed_rope_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("transformers.models.mistral.modeling_mistral")
    original = module.apply_rotary_pos_emb

    def interleaved(q: Any, k: Any, cos: Any, sin: Any, unsqueeze_dim: int = 1) -> Any:
        q, k = original(q, k, cos, sin, unsqueeze_dim)
        return q.flip(-1), k

    monkeypatch.setattr(module, "apply_rotary_pos_emb", interleaved)
    with pytest.raises(RuntimeError, match="apply_rotary_pos_emb no longer matches tigon.ops.rope"):
        tt.apply_tigon_kernel_to_mistral(**only("mistral", "rope"))


def test_changed_causal_lm_forward_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("transformers.models.olmo2.modeling_olmo2")
    cls = module.Olmo2ForCausalLM
    original = cls.forward

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        if out.loss is not None:
            out.loss = out.loss * 1.5  # e.g. a new loss scaling tigon does not know about
        return out

    import functools

    monkeypatch.setattr(cls, "forward", functools.wraps(original)(forward))
    with pytest.raises(RuntimeError, match="Olmo2ForCausalLM's training loss no longer matches"):
        tt.apply_tigon_kernel_to_olmo2(**only("olmo2", "fused_linear_cross_entropy"))


def test_patched_model_pickles() -> None:
    model = build_model("phi3", tigon="instance")
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert tt.patched_modules(loaded) == tt.patched_modules(model)
    assert tt.patched_modules(copy.deepcopy(model)) == tt.patched_modules(model)
    ids = token_ids()
    model.eval()
    loaded.eval()
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


# ------------------------------------------------------------------------------------------------
# MoE experts (the moe flag)
# ------------------------------------------------------------------------------------------------


def test_moe_flag_supersedes_swiglu_for_mixtral_experts() -> None:
    """moe=False keeps the GLU-only patch of MixtralExperts; the default (moe=True) then swaps
    the same instance to the fused experts op; the class patch is revertible either way."""
    from tigon.transformers import moe as tmoe

    _, ref = _reference("mixtral")
    model = build_model("mixtral", tigon="instance", kernels={"moe": False})
    name = MOE_NAMES["mixtral"]
    assert isinstance(model.get_submodule(name), tm.TigonGLU)
    done = tt.apply_tigon_kernel_to_mixtral(model=model)
    experts = model.get_submodule(name)
    assert isinstance(experts, tmoe.TigonMoE) and not isinstance(experts, tm.TigonGLU)
    assert done[name] == "tigon.ops.moe_experts(MixtralExperts)"
    _assert_matches(ref, model, fused=True)

    module = importlib.import_module("transformers.models.mixtral.modeling_mixtral")
    original = module.MixtralExperts
    tt.apply_tigon_kernel_to_mixtral(moe=False)
    assert issubclass(module.MixtralExperts, tm.TigonGLU)
    tt.apply_tigon_kernel_to_mixtral()
    assert issubclass(module.MixtralExperts, tmoe.TigonMoE)
    assert module.MixtralExperts.__bases__[0] is original
    tt.revert_patches("mixtral")
    assert module.MixtralExperts is original


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_moe_training_loss_includes_the_router_aux_loss(family: str) -> None:
    """output_router_logits=True (the tiny configs): HF's aux loss is added to the loss the
    patched model returns, with the experts on tigon."""
    _, ref = _reference(family)
    model = build_model(family, tigon="instance")
    out = model(input_ids=token_ids(), labels=token_ids())
    assert out.aux_loss is not None and out.aux_loss > 0
    torch.testing.assert_close(out.loss, ref["loss"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_moe_fallback_off_the_kernel_devices(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where tigon has no experts kernel yet (CUDA until issue 38's next slice), the patched
    experts run HF's forward, with the GLU kernel as its gate where the swiglu flag covers the
    class (Mixtral): what moe=False gives. Simulated on the CPU by emptying KERNEL_DEVICES."""
    from tigon.transformers import _ops
    from tigon.transformers import moe as tmoe

    _, ref = _reference(family)
    model = build_model(family, tigon="instance")
    monkeypatch.setattr(tmoe, "KERNEL_DEVICES", ())
    calls = []
    glu_packed = _ops.glu_packed

    def counted(kind: str, gate_up: torch.Tensor) -> torch.Tensor:
        calls.append(kind)
        return glu_packed(kind, gate_up)

    monkeypatch.setattr(_ops, "glu_packed", counted)
    _assert_matches(ref, model, fused=True)
    assert bool(calls) == (family == "mixtral") and set(calls) <= {"swiglu"}
