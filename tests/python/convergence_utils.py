"""Helpers for the transformers patch and convergence tests: tiny configs, data, a training loop.

Data is byte-level (vocab 256) text from examples/demo_corpus.txt, so the loss really goes down.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

import tigon.transformers as tt

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "demo_corpus.txt"
FAMILIES: list[str] = list(tt.FAMILIES)

#: Shared by every tiny config: 2 layers, hidden 64, byte vocabulary.
_COMMON: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "rms_norm_eps": 1e-6,
}

#: Per family: what its defaults need changed for a tiny model (same in both runs).
_EXTRA: dict[str, dict[str, Any]] = {
    # MoE: the router's aux loss on (output_router_logits), so the runs compare it too.
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2, "output_router_logits": True},
    "qwen3_moe": {
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "norm_topk_prob": True,
        "output_router_logits": True,
    },
    "gemma2": {"attn_implementation": "eager"},  # attention soft-capping, as HF recommends
    "gemma3_text": {"sliding_window": 16},  # exercise the local/global layer pattern at seq 32
    # Dropout defaults of 0.1 would make two training runs differ by their random masks alone
    # (the MLP's output dropout has its own test in test_transformers_kernels.py).
    "seed_oss": {"residual_dropout": 0.0, "attention_dropout": 0.0},
    "lfm2": {"layer_types": ["conv", "full_attention"]},  # one short-conv layer, one attention
    # Hybrid layers (attention + Mamba2 mixer, HF's torch path on the CPU) with small Mamba dims,
    # and non-trivial MLP / lm_head multipliers (the patched MLP and fused loss apply them).
    "falcon_h1": {
        "mamba_d_ssm": 64,
        "mamba_n_heads": 4,
        "mamba_d_state": 16,
        "mamba_chunk_size": 16,
        "mlp_multipliers": [0.7, 1.3],
        "lm_head_multiplier": 0.6,
    },
}


def tiny_config(family: str, **overrides: Any) -> Any:
    """A random-init-sized config of ``family`` (its own Config class, via AutoConfig)."""
    from transformers import AutoConfig

    kwargs = {**_COMMON, **_EXTRA.get(family, {}), **overrides}
    attn = kwargs.pop("attn_implementation", None)
    config = AutoConfig.for_model(family, **kwargs)
    if attn is not None:
        config._attn_implementation = attn
    return config


def only(family: str, *names: str) -> dict[str, bool]:
    """Kernel flags of ``family`` with only ``names`` on (the others explicitly off)."""
    return {k: k in names for k in tt.kernel_flags(family)}


#: Named kernel selections for the tests: "all" = the defaults (fused linear cross-entropy),
#: "ce" = every kernel with the unfused cross-entropy, "norms" = RMSNorm only.
def kernel_set(family: str, name: str) -> dict[str, bool]:
    if name == "all":
        return {}
    if name == "ce":
        return {"cross_entropy": True}
    if name == "norms":
        return only(family, "rms_norm")
    raise ValueError(name)


def build_model(
    family: str,
    *,
    seed: int = 0,
    tigon: str | None = None,
    kernels: dict[str, bool] | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    **overrides: Any,
) -> nn.Module:
    """Builds a tiny causal LM of ``family``, seeded so every build starts from the same weights.

    Args:
        tigon: None (plain HF), ``"classes"`` (patch the classes, then build) or ``"instance"``
            (build, then patch the model in place). RoPE and the class-level loss patches are
            process-wide: a plain-HF reference must run before (or after reverting), and the
            caller reverts (the tests' autouse fixtures call ``revert_patches()``).
        kernels: the kernel flags (default: the apply function's defaults, every kernel).
    """
    from transformers import AutoModelForCausalLM

    kernels = kernels or {}
    if device == "cuda":
        # HF's eager attention (matmuls and a softmax): on the GPU, SDPA's memory-efficient and
        # cuDNN backwards are non-deterministic, and AdamW turns that noise in near-zero gradients
        # (e.g. LoRA A before B has grown) into parameter differences of order lr, which would
        # be charged to tigon. With eager attention both runs are deterministic.
        overrides.setdefault("attn_implementation", "eager")
    config = tiny_config(family, **overrides)
    if tigon == "classes":
        tt.apply_tigon_kernel(family, **kernels)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    if tigon == "instance":
        tt.apply_tigon_kernel(family, model=model, **kernels)
    return model.to(device=device, dtype=dtype)


@contextlib.contextmanager
def patched_classes(family: str, **kernels: bool) -> Iterator[dict[str, str]]:
    """``apply_tigon_kernel_to_<family>(**kernels)`` for the duration of the block, then restored."""
    try:
        yield tt.apply_tigon_kernel(family, **kernels)
    finally:
        tt.revert_patches(family)


def hf_norm_names(model: nn.Module, family: str) -> set[str]:
    """Qualified names of the modules of ``model`` that are the family's HF norm classes."""
    spec = tt.FAMILIES[family]
    wanted = {(spec.module, name) for name in spec.norms}
    return {
        n for n, m in model.named_modules() if (type(m).__module__, type(m).__qualname__) in wanted
    }


def corpus_batches(
    n: int, batch: int, seq: int, *, seed: int = 1234, device: str = "cpu"
) -> list[torch.Tensor]:
    """``n`` batches ``[batch, seq]`` of byte ids, random windows of the corpus (seeded)."""
    data = torch.frombuffer(bytearray(CORPUS.read_bytes()), dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, data.numel() - seq, (n, batch), generator=gen)
    return [torch.stack([data[s : s + seq] for s in row]).to(device) for row in starts]


@dataclass
class RunResult:
    """What one training run produced."""

    losses: list[float]
    #: Top-k log-probs (float32) of the final model on a held-out batch, ``[B, T, k]``.
    eval_topk: torch.Tensor
    params: dict[str, torch.Tensor] = field(default_factory=dict)


def train(
    model: nn.Module,
    batches: list[torch.Tensor],
    eval_batch: torch.Tensor,
    *,
    lr: float = 1e-3,
    topk: int = 20,
    compile: str | None = None,
    rounding_noise: bool = False,
) -> RunResult:
    """AdamW over ``batches`` (one step each, loss = HF's causal-LM loss), then an eval forward.

    ``compile``: a torch.compile backend ("inductor", "aot_eager") for the whole model, or None.
    ``rounding_noise``: every RMSNorm's output, and the gradient into it, gets one rounding of
    noise (times 1 + eps of its dtype, a random sign per element, seeded): the run of an equally
    exact norm that rounds differently (the noise floor of assert_runs_close's ``perturbed`` run).
    """
    model.train()
    hooks = _add_rounding_noise(model) if rounding_noise else []
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    step_model = torch.compile(model, backend=compile) if compile else model
    losses = []
    for ids in batches:
        loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = step_model(input_ids=eval_batch).logits
        topk_lp = torch.log_softmax(logits.float(), dim=-1).topk(topk, dim=-1).values
    for hook in hooks:
        hook.remove()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return RunResult(losses, topk_lp, params)


def _add_rounding_noise(model: nn.Module) -> list[torch.utils.hooks.RemovableHandle]:
    """Forward hooks for train's ``rounding_noise`` on every module whose class is an RMSNorm."""
    generator = torch.Generator(device=next(model.parameters()).device)
    generator.manual_seed(0)

    def jitter(t: torch.Tensor) -> torch.Tensor:
        signs = torch.randn(t.shape, generator=generator, device=t.device, dtype=t.dtype).sign()
        return t * (1 + torch.finfo(t.dtype).eps * signs)

    def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor | None:
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return None
        out = jitter(out)
        out.register_hook(jitter)
        return out

    return [
        m.register_forward_hook(hook)
        for m in model.modules()
        if type(m).__name__.endswith("RMSNorm")
    ]


@dataclass(frozen=True)
class Tolerances:
    """(atol, rtol) per compared quantity: |a - b| <= atol + rtol * |b|."""

    loss: tuple[float, float]
    logprobs: tuple[float, float]
    params: tuple[float, float]


def max_violation(
    a: torch.Tensor, b: torch.Tensor, tol: tuple[float, float]
) -> tuple[float, float]:
    """(max |a - b|, max of |a - b| / (atol + rtol |b|)); the second must be <= 1 to pass."""
    a64, b64 = a.double(), b.double()
    diff = (a64 - b64).abs()
    ratio = diff / (tol[0] + tol[1] * b64.abs())
    return diff.max().item(), ratio.max().item()


def assert_runs_close(
    ref: RunResult,
    got: RunResult,
    tol: Tolerances,
    what: str,
    exact: Callable[[], RunResult] | None = None,
    perturbed: Callable[[], RunResult] | None = None,
) -> dict[str, float]:
    """Asserts every step's loss, the eval top-k log-probs and every parameter agree.

    ``exact``: builds the same run in float64 (called only when needed). A parameter tensor
    outside ``tol.params``, or eval log-probs outside ``tol.logprobs``, still pass when tigon is
    as accurate as the reference itself: max |got - exact| <= 2 max |ref - exact|. AdamW divides each gradient by its running RMS, so
    an element whose gradient is a cancellation (e.g. through a norm's backward, which removes
    the component along its input) moves by order lr on rounding noise alone: the two float32
    runs can differ there by more than any fixed tolerance while both sit equally far from the
    float64 run. ``perturbed``: builds the reference run with one rounding of noise at its norms
    (train's ``rounding_noise``), called only when tigon is further from float64 than that bound:
    how far rounding alone carries such an element (one float32 run can land close to float64 by
    chance), so the bound becomes 2 max(|ref - exact|, |perturbed - exact|). The log-probs of a
    family whose training amplifies rounding (Apertus's xIELU on CUDA in float32: 5e-5 apart
    after the tiny run, with only the loss patched) diverge the same way.

    Returns, per quantity, the max |difference| and the max ratio to the tolerance (<= 1).
    """
    worst: dict[str, float] = {}
    loss_ref = torch.tensor(ref.losses, dtype=torch.float64)
    loss_got = torch.tensor(got.losses, dtype=torch.float64)
    worst["loss"], worst["loss_ratio"] = max_violation(loss_got, loss_ref, tol.loss)
    step = int((loss_got - loss_ref).abs().argmax())
    assert worst["loss_ratio"] <= 1, (
        f"{what}: loss differs by {worst['loss']:.3g} at step {step} "
        f"({ref.losses[step]!r} vs {got.losses[step]!r}); tolerance {tol.loss}"
    )
    runs: dict[str, RunResult] = {}

    def as_accurate(label: str, diff: float, tolerance: tuple[float, float], pick) -> float:
        """Passes a quantity beyond ``tolerance`` when tigon is as close to float64 as the
        reference (or the reference with rounding noise); returns tigon's ratio to that bound."""
        if "exact" not in runs:
            runs["exact"] = exact()
        x = pick(runs["exact"]).double()

        def from_exact(run: RunResult) -> float:
            return (pick(run).double() - x).abs().max().item()

        err_got, err_ref = from_exact(got), from_exact(ref)
        floor, basis, noisy = err_ref, "the reference", ""
        if err_got > 2 * err_ref and perturbed is not None:
            if "perturbed" not in runs:
                runs["perturbed"] = perturbed()
            err_noisy = from_exact(runs["perturbed"])
            noisy = f" (with rounding noise {err_noisy:.3g})"
            if err_noisy > floor:
                floor, basis = err_noisy, "the reference with rounding noise"
        assert err_got <= 2 * floor, (
            f"{what}: {label} differs by {diff:.3g} (tolerance {tolerance}) and is "
            f"{err_got:.3g} from the float64 run, where the reference is {err_ref:.3g}{noisy}"
        )
        print(
            f"{what}: {label} differs by {diff:.3g}, beyond {tolerance}; vs float64: "
            f"tigon {err_got:.3g}, {basis} {floor:.3g} (as accurate: passes)"
        )
        return err_got / max(floor, 1e-30)

    worst["logprobs"], worst["logprobs_ratio"] = max_violation(
        got.eval_topk, ref.eval_topk, tol.logprobs
    )
    if worst["logprobs_ratio"] > 1 and exact is not None:
        worst["logprobs_vs_float64"] = as_accurate(
            "eval top-k log-probs", worst["logprobs"], tol.logprobs, lambda run: run.eval_topk
        )
    else:
        assert worst["logprobs_ratio"] <= 1, (
            f"{what}: eval top-k log-probs differ by {worst['logprobs']:.3g}; "
            f"tolerance {tol.logprobs}"
        )
    assert ref.params.keys() == got.params.keys(), f"{what}: parameter names differ"
    worst["params"] = worst["params_ratio"] = 0.0
    for name, p_ref in ref.params.items():
        diff, ratio = max_violation(got.params[name].float(), p_ref.float(), tol.params)
        if ratio > 1 and exact is not None:
            ratio_64 = as_accurate(
                f"parameter {name}", diff, tol.params, lambda run, name=name: run.params[name]
            )
            worst["params_vs_float64"] = max(worst.get("params_vs_float64", 0.0), ratio_64)
            continue
        worst["params"] = max(worst["params"], diff)
        worst["params_ratio"] = max(worst["params_ratio"], ratio)
        assert ratio <= 1, f"{what}: parameter {name} differs by {diff:.3g}; tolerance {tol.params}"
    return worst


def clone_model(model: nn.Module) -> nn.Module:
    """A deep copy (same weights, independent parameters)."""
    return copy.deepcopy(model)
