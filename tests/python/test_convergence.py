"""Convergence: 32 AdamW steps of a tiny model of every family, Hugging Face as is vs tigon-patched.

Same seed, same data (byte-level text), same optimizer. Compared: every step's loss, the final
model's top-k log-probs on a held-out batch (eval mode: the fused loss returns no logits in
training), and every parameter. Kernels: every kernel with the fused linear cross-entropy (the
defaults, "all") and with the unfused cross-entropy ("ce"). Variants: plain (classes replaced
before construction), gradient checkpointing (model patched in place), torch.compile of the whole
model, and a PEFT LoRA-wrapped model patched through the wrapper.

RoPE and the class-level loss patches are process-wide, so every test trains the plain-HF
reference first and patches afterwards.

float32 on the CPU (CI; the plain variant also in bfloat16); float32 and bfloat16 on a GPU (marker
``gpu``).
"""

from __future__ import annotations

import os

# Deterministic cuBLAS on the GPU; must be set before the first cuBLAS handle is created.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

from collections.abc import Callable, Iterator  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from convergence_utils import (  # noqa: E402
    FAMILIES,
    RunResult,
    Tolerances,
    assert_runs_close,
    build_model,
    corpus_batches,
    kernel_set,
    train,
)

import tigon  # noqa: E402
import tigon.transformers as tt  # noqa: E402

pytestmark = pytest.mark.convergence

STEPS = 32
BATCH = 4
SEQ = 32
#: Learning rate per dtype. In pure bf16, AdamW's sign-like update turns ulp-level gradient
#: differences into parameter differences that grow with the learning rate: at 1e-3 the worst
#: family used 86% of the bf16 parameter tolerance (H200), at 3e-4 it keeps a safe margin.
LR = {torch.float32: 1e-3, torch.bfloat16: 3e-4}

# float32: tighter than the (1e-5, 1e-5) for losses and than Liger's (5e-3, 1e-5) for
# log-probs and parameters. The runs differ only in the norms' reduction order (ulp-level), which
# AdamW's normalized update can amplify for parameters whose gradients are near zero. Observed on
# the CPU: losses <= 1.4e-6 apart, log-probs <= 3e-6, parameters <= 4.5e-5 (at most 45% of
# these tolerances).
FP32 = Tolerances(loss=(1e-6, 2e-6), logprobs=(1e-5, 1e-5), params=(1e-4, 1e-5))
# bfloat16 (GPU): the bounds (Liger's bf16 convergence tolerances).
BF16 = Tolerances(loss=(1e-2, 5e-2), logprobs=(1e-1, 1e-2), params=(1e-2, 1e-2))

DEVICE_DTYPES = [
    pytest.param("cpu", torch.float32, id="cpu-fp32"),
    pytest.param("cuda", torch.float32, id="cuda-fp32", marks=pytest.mark.gpu),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=pytest.mark.gpu),
]


@pytest.fixture(autouse=True)
def _deterministic() -> Iterator[None]:
    """One CPU thread (tiny models: faster, and no oversubscription on CI); deterministic CUDA."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
        tt.revert_patches()


def _fmt(worst: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.2g}" for k, v in worst.items())


def _tolerances(dtype: torch.dtype) -> Tolerances:
    return FP32 if dtype == torch.float32 else BF16


def _arbiters(
    dtype: torch.dtype, make: Callable[[torch.dtype, bool], RunResult]
) -> dict[str, Callable[[], RunResult]]:
    """For float32 runs, assert_runs_close's arbiters from ``make(run_dtype, rounding_noise)``, a
    plain-HF run (tigon's patches reverted first, they are process-wide): ``exact`` in float64 and
    ``perturbed`` in float32 with rounding noise at its norms. Empty for bf16 (wide tolerances)."""
    if dtype != torch.float32:
        return {}

    def plain(run_dtype: torch.dtype, rounding_noise: bool) -> Callable[[], RunResult]:
        def run() -> RunResult:
            tt.revert_patches()
            return make(run_dtype, rounding_noise)

        return run

    return {"exact": plain(torch.float64, False), "perturbed": plain(dtype, True)}


def _plain_hf(
    family: str,
    device: str,
    batches: list[torch.Tensor],
    eval_batch: torch.Tensor,
    dtype: torch.dtype,
) -> dict[str, Callable[[], RunResult]]:
    """_arbiters for plain-HF runs of ``family`` with ``dtype``'s learning rate."""

    def make(run_dtype: torch.dtype, rounding_noise: bool) -> RunResult:
        model = build_model(family, dtype=run_dtype, device=device)
        return train(model, batches, eval_batch, lr=LR[dtype], rounding_noise=rounding_noise)

    return _arbiters(dtype, make)


def _check_device(device: str) -> None:
    if device == "cuda" and not tigon.has_cuda_kernels():
        pytest.fail("a CUDA device is present but tigon was built without its CUDA kernels")


def _data(device: str) -> tuple[list[torch.Tensor], torch.Tensor]:
    batches = corpus_batches(STEPS, BATCH, SEQ, device=device)
    eval_batch = corpus_batches(1, BATCH, SEQ, seed=4321, device=device)[0]
    return batches, eval_batch


def _assert_same_start(ref: dict[str, torch.Tensor], ours: torch.nn.Module) -> None:
    got = dict(ours.named_parameters())
    assert ref.keys() == got.keys()
    for name, p in ref.items():
        assert torch.equal(p, got[name]), f"initial {name} differs: the runs must start equal"


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


KERNEL_SETS = ["all", "ce"]


def _assert_learned(run: RunResult, by: float = 0.3) -> None:
    assert run.losses[-1] < run.losses[0] - by, f"loss did not go down by {by}: {run.losses}"


@pytest.mark.parametrize(
    ("device", "dtype"),
    # bf16 on the CPU as well: the casting modes matter most in bf16, and CI has no GPU.
    [*DEVICE_DTYPES, pytest.param("cpu", torch.bfloat16, id="cpu-bf16")],
)
@pytest.mark.parametrize("kernels", KERNEL_SETS)
@pytest.mark.parametrize("family", FAMILIES)
def test_convergence(family: str, kernels: str, device: str, dtype: torch.dtype) -> None:
    """Classes replaced before construction (the usual way), vs plain HF."""
    _check_device(device)
    batches, eval_batch = _data(device)
    hf = build_model(family, dtype=dtype, device=device)
    start = _snapshot(hf)
    ref = train(hf, batches, eval_batch, lr=LR[dtype])
    flags = kernel_set(family, kernels)
    ours = build_model(family, tigon="classes", kernels=flags, dtype=dtype, device=device)
    # hf now reports the process-wide kernels (RoPE, the loss) too; only ours has tigon modules.
    assert len(tt.patched_modules(ours)) > len(tt.patched_modules(hf))
    _assert_same_start(start, ours)
    got = train(ours, batches, eval_batch, lr=LR[dtype])
    _assert_learned(ref)
    what = f"{family} {kernels} {device} {dtype}"
    arbiters = _plain_hf(family, device, batches, eval_batch, dtype)
    worst = assert_runs_close(ref, got, _tolerances(dtype), what, **arbiters)
    print(f"{what}: {_fmt(worst)}")


@pytest.mark.parametrize(("device", "dtype"), DEVICE_DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_convergence_gradient_checkpointing(family: str, device: str, dtype: torch.dtype) -> None:
    """Activation checkpointing (recomputed forwards) on both; tigon patched on the instance."""
    _check_device(device)
    batches, eval_batch = _data(device)
    hf = build_model(family, dtype=dtype, device=device)
    hf.gradient_checkpointing_enable()
    ref = train(hf, batches, eval_batch, lr=LR[dtype])
    ours = build_model(family, tigon="instance", dtype=dtype, device=device)
    ours.gradient_checkpointing_enable()
    got = train(ours, batches, eval_batch, lr=LR[dtype])
    worst = assert_runs_close(
        ref,
        got,
        _tolerances(dtype),
        f"{family} checkpointing {device} {dtype}",
        **_plain_hf(family, device, batches, eval_batch, dtype),
    )
    print(f"{family} checkpointing {device} {dtype}: {_fmt(worst)}")


ADD_NORM_FAMILIES = [f for f in FAMILIES if tt.FAMILIES[f].add_norm is not None]


@pytest.mark.parametrize(("device", "dtype"), DEVICE_DTYPES)
@pytest.mark.parametrize("family", ADD_NORM_FAMILIES)
def test_convergence_fused_add_norm_on_off(family: str, device: str, dtype: torch.dtype) -> None:
    """Every other kernel on, the fused residual add + RMSNorm on vs off: the same training run
    bit for bit (every loss, the final log-probs, every parameter)."""
    _check_device(device)
    batches, eval_batch = _data(device)
    runs = {}
    for fused in (False, True):
        model = build_model(
            family, tigon="classes", kernels={"fused_add_norm": fused}, dtype=dtype, device=device
        )
        fused_layers = [v for v in tt.patched_modules(model).values() if "fused_add" in v]
        assert len(fused_layers) == (model.config.num_hidden_layers if fused else 0)
        runs[fused] = train(model, batches, eval_batch, lr=LR[dtype])
        tt.revert_patches(family)
    off, on = runs[False], runs[True]
    what = f"{family} fused_add_norm on vs off, {device} {dtype}"
    assert on.losses == off.losses, f"{what}: losses off {off.losses} vs on {on.losses}"
    assert torch.equal(on.eval_topk, off.eval_topk), f"{what}: final log-probs differ"
    for name, p in off.params.items():
        d = (on.params[name].float() - p.float()).abs().max().item()
        assert torch.equal(on.params[name], p), f"{what}: {name} differs by up to {d:.3g}"
    _assert_learned(on)


# One family per casting mode. On the CPU (CI), Inductor's C++ code generation is what costs
# (minutes on 2 cores with a cold cache), so gemma2 there goes through Dynamo and AOTAutograd
# only ("aot_eager": the same graph capture, functionalization of the in-place backward and
# fake-tensor checks, without code generation); on the GPU both run with Inductor.
COMPILE_CASES = [
    pytest.param("llama", "cpu", torch.float32, "inductor", id="llama-cpu-fp32-inductor"),
    pytest.param("gemma2", "cpu", torch.float32, "aot_eager", id="gemma2-cpu-fp32-aot_eager"),
    *(
        pytest.param(
            family,
            "cuda",
            dtype,
            "inductor",
            id=f"{family}-cuda-{tag}-inductor",
            marks=pytest.mark.gpu,
        )
        for family in ("llama", "gemma2")
        for dtype, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16"))
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "device", "dtype", "backend"), COMPILE_CASES)
def test_convergence_torch_compile(
    family: str, device: str, dtype: torch.dtype, backend: str
) -> None:
    """torch.compile of the whole model, HF compiled vs tigon compiled (same backend)."""
    _check_device(device)
    torch._dynamo.reset()
    batches, eval_batch = _data(device)
    hf = build_model(family, dtype=dtype, device=device)
    ref = train(hf, batches, eval_batch, lr=LR[dtype], compile=backend)
    torch._dynamo.reset()
    ours = build_model(family, tigon="classes", dtype=dtype, device=device)
    got = train(ours, batches, eval_batch, lr=LR[dtype], compile=backend)
    torch._dynamo.reset()
    _assert_learned(ref)
    worst = assert_runs_close(ref, got, _tolerances(dtype), f"{family} compiled {device} {dtype}")
    print(f"{family} compiled ({backend}) {device} {dtype}: {_fmt(worst)}")


LORA_FAMILIES = ["llama", "qwen3", "gemma2", "olmo2", "qwen3_moe"]  # qwen3_moe: frozen experts


@pytest.mark.parametrize(("device", "dtype"), DEVICE_DTYPES)
@pytest.mark.parametrize("family", LORA_FAMILIES)
def test_convergence_lora(family: str, device: str, dtype: torch.dtype) -> None:
    """PEFT LoRA on every linear layer, norms trained through ``modules_to_save``; tigon
    patches the already-wrapped model in place."""
    peft = pytest.importorskip("peft")
    _check_device(device)
    batches, eval_batch = _data(device)

    def run(patch: bool, run_dtype: torch.dtype, rounding_noise: bool = False) -> RunResult:
        base = build_model(family, dtype=run_dtype, device=device)
        config = peft.LoraConfig(
            r=8, lora_alpha=16, target_modules="all-linear", modules_to_save=["norm"]
        )
        torch.manual_seed(1)
        model = peft.get_peft_model(base, config)
        if patch:
            patched = tt.apply_tigon_kernel(family, model=model)
            assert any(".modules_to_save.default" in n for n in patched), sorted(patched)
            assert any(".original_module" in n for n in patched), sorted(patched)
        return train(model, batches, eval_batch, lr=LR[dtype], rounding_noise=rounding_noise)

    ref, got = run(False, dtype), run(True, dtype)
    _assert_learned(ref, by=0.1)
    worst = assert_runs_close(
        ref,
        got,
        _tolerances(dtype),
        f"{family} LoRA {device} {dtype}",
        **_arbiters(dtype, lambda run_dtype, noise: run(False, run_dtype, noise)),
    )
    print(f"{family} LoRA {device} {dtype}: {_fmt(worst)}")


def test_float64_arbiter_of_parameter_differences() -> None:
    """A parameter beyond the tolerance passes only when tigon is as close to float64 as HF is,
    from the same start or with rounding noise at its norms."""
    tol = Tolerances(loss=(1e-6, 0), logprobs=(1e-6, 0), params=(1e-4, 0))
    topk = torch.zeros(1)

    def result(p: float) -> RunResult:
        return RunResult([1.0], topk, {"w": torch.tensor([p, 0.5])})

    ref, exact = result(1e-3), result(6e-4)
    calls = []

    def arbiter() -> RunResult:
        calls.append(1)
        return exact

    assert assert_runs_close(ref, result(1.05e-3), tol, "within", arbiter)["params_ratio"] <= 1
    assert not calls, "the float64 run is built only when a tolerance is exceeded"
    assert_runs_close(ref, result(3e-4), tol, "as accurate", arbiter)  # 3e-4 from it, HF 4e-4
    with pytest.raises(AssertionError, match="from the float64 run"):
        assert_runs_close(ref, result(1.6e-3), tol, "worse", arbiter)  # 1e-3 vs HF's 4e-4
    with pytest.raises(AssertionError, match="tolerance"):
        assert_runs_close(ref, result(3e-4), tol, "no arbiter")

    perturbed_calls = []

    def perturbed() -> RunResult:  # 8e-4 from float64: where rounding alone can carry HF
        perturbed_calls.append(1)
        return result(1.4e-3)

    assert_runs_close(ref, result(3e-4), tol, "as accurate", arbiter, perturbed)
    assert not perturbed_calls, "the perturbed run is built only when tigon is further than HF"
    assert_runs_close(ref, result(1.6e-3), tol, "as noisy", arbiter, perturbed)  # 1e-3 vs 8e-4
    with pytest.raises(AssertionError, match="rounding noise"):
        assert_runs_close(ref, result(2.3e-3), tol, "worse", arbiter, perturbed)  # 1.7e-3 vs 8e-4
