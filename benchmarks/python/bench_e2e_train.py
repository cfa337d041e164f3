"""End-to-end training step of a Llama-style model: Hugging Face as is vs tigon-patched.

The setup of /work/shared/PERF.md "End-to-end training step": 16 layers, hidden 2048,
intermediate 8192, 32/8 heads, vocab 128256 (about 1.5B parameters), bf16 weights, fused AdamW,
SDPA attention, seq 4096, random tokens. Each (provider, batch) runs in its own process (clean
peak memory; a crash does not end the benchmark). Reports steady-state tokens/s, ms/step (median
of CUDA-event-timed steps after warm-up) and peak GiB (torch.cuda.max_memory_allocated: weights,
gradients, optimizer state and activations), and writes JSON and CSV.

    python benchmarks/python/bench_e2e_train.py                     # batch 2 and 4, HF vs tigon
    python benchmarks/python/bench_e2e_train.py --compile           # + torch.compile(model) rows
    python benchmarks/python/bench_e2e_train.py --quick             # smoke test (2 layers, seq 1024)
    python benchmarks/python/bench_e2e_train.py --device cpu --quick  # CPU smoke test (tiny sizes)
    python benchmarks/python/bench_e2e_train.py --fused-add-norm both  # tigon rows with it on, off

The tigon rows use every kernel of apply_tigon_kernel_to_llama by default (RMSNorm, RoPE, SwiGLU,
fused linear cross-entropy: no [tokens, vocab] logits in training, the fused residual add +
RMSNorm); --kernels picks a subset. --fused-add-norm on|off|both sets the fused add-norm of every
tigon row (both: each tigon row twice, off then on, in the same run; losses should be equal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

PROVIDERS = ("hf", "tigon")
LABELS = {
    "hf": "HF eager",
    "tigon": "HF + tigon",
    "hf+compile": "torch.compile(HF)",
    "tigon+compile": "HF + tigon + torch.compile",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line; --quick shrinks every size not given explicitly."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", help="batch sizes (default 2 4)")
    p.add_argument("--seq", type=int, help="sequence length (default 4096)")
    p.add_argument("--layers", type=int, help="decoder layers (default 16)")
    p.add_argument("--hidden", type=int, help="hidden size (default 2048)")
    p.add_argument("--intermediate", type=int, help="MLP size (default 8192)")
    p.add_argument("--heads", type=int, help="attention heads (default 32)")
    p.add_argument("--kv-heads", type=int, help="key/value heads (default 8)")
    p.add_argument("--vocab", type=int, help="vocabulary (default 128256)")
    p.add_argument("--steps", type=int, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, help="untimed first steps (default 5; 8 with --compile)")
    p.add_argument("--compile", action="store_true", help="also torch.compile(model) rows")
    p.add_argument("--providers", nargs="+", choices=sorted(LABELS), help="default: hf tigon")
    p.add_argument(
        "--kernels",
        default="all",
        help="tigon kernels: 'all' (RMSNorm, RoPE, SwiGLU, fused linear cross-entropy) or a "
        "comma list of apply_tigon_kernel_to_llama flags, e.g. rms_norm,rope,swiglu",
    )
    p.add_argument(
        "--fused-add-norm",
        choices=["on", "off", "both"],
        help="the tigon rows' fused residual add + RMSNorm (default: as --kernels says); both: "
        "every tigon row with it off and on",
    )
    p.add_argument("--quick", action="store_true", help="smoke test: small sizes, few steps")
    p.add_argument(
        "--profile",
        action="store_true",
        help="after the timed steps, profile two more (torch.profiler) and write each row's "
        "table of GPU time by kernel next to the results (<out>/profile_<provider>_b<batch>.txt)",
    )
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--out", type=Path, default=Path("bench_results"))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return args
    full = {
        "batch": [2, 4],
        "seq": 4096,
        "layers": 16,
        "hidden": 2048,
        "intermediate": 8192,
        "heads": 32,
        "kv_heads": 8,
        "vocab": 128256,
        "steps": 20,
        "warmup": 8 if args.compile else 5,
    }
    quick = {"batch": [2], "seq": 1024, "layers": 2, "steps": 3, "warmup": 2}
    if args.quick and args.device == "cpu":
        quick |= {"batch": [1], "seq": 128, "hidden": 256, "intermediate": 1024}
        quick |= {"heads": 4, "kv_heads": 2, "vocab": 32000}
    for key, value in full.items():
        if getattr(args, key) is None:
            setattr(args, key, quick.get(key, value) if args.quick else value)
    if args.providers is None:
        args.providers = list(PROVIDERS)
        if args.compile:
            args.providers += ["hf+compile", "tigon+compile"]
    return args


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One provider at one batch size, in this process; returns its measurements."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import tigon.transformers as tt

    device = torch.device(spec["device"])
    on_gpu = device.type == "cuda"
    dtype = torch.bfloat16
    if spec["provider"].startswith("tigon"):
        wanted = spec["kernels"]
        flags = {} if wanted == "all" else {k: k in wanted for k in tt.kernel_flags("llama")}
        if spec.get("fused_add_norm") is not None:
            flags["fused_add_norm"] = spec["fused_add_norm"]
        tt.apply_tigon_kernel_to_llama(**flags)
    config = LlamaConfig(
        vocab_size=spec["vocab"],
        hidden_size=spec["hidden"],
        intermediate_size=spec["intermediate"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"],
        max_position_embeddings=max(spec["seq"], 8192),
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with device:
        model = LlamaForCausalLM(config).to(dtype)
    model.train()
    patched = tt.patched_modules(model)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=on_gpu)
    step_model = torch.compile(model) if spec["provider"].endswith("+compile") else model
    gen = torch.Generator(device=device).manual_seed(1)
    batch, seq = spec["batch"], spec["seq"]
    data = [
        torch.randint(0, spec["vocab"], (batch, seq), device=device, generator=gen)
        for _ in range(4)
    ]

    def step(i: int) -> torch.Tensor:
        ids = data[i % len(data)]
        loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    losses = []
    t0 = time.perf_counter()
    losses.append(step(0).item())
    first_step_s = time.perf_counter() - t0
    for i in range(1, spec["warmup"]):
        losses.append(step(i).item())
    ms: list[float] = []
    for i in range(spec["steps"]):
        if on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step(spec["warmup"] + i)
            end.record()
            end.synchronize()
            ms.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            loss = step(spec["warmup"] + i)
            ms.append(1e3 * (time.perf_counter() - t))
        losses.append(loss.item())
    median = statistics.median(ms)
    if spec.get("profile_to"):
        _profile(lambda i: step(spec["warmup"] + spec["steps"] + i), spec["profile_to"], on_gpu)
    return {
        "tokens_per_s": batch * seq / (median / 1e3),
        "ms_per_step": median,
        "ms_per_step_mean": statistics.fmean(ms),
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None,
        "first_step_s": first_step_s,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "parameters": n_params,
        "patched_modules": len(patched),
        "fused_add_norm_layers": sum("fused_add_rms_norm" in v for v in patched.values()),
    }


def _profile(step: Any, path: str, on_gpu: bool) -> None:
    """Two steps under torch.profiler; GPU (or CPU) time by kernel, largest first, into path."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        for i in range(2):
            step(i)
        if on_gpu:
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=40, max_name_column_width=90)
    Path(path).write_text(f"two training steps, sorted by {key}\n{table}\n")


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs ``worker(spec)`` in a fresh process; a failure becomes a row with its error."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        spec = {**spec, "result": str(out)}
        env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode == 0 and out.exists():
            return json.loads(out.read_text())
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": tail[-1][:200] if tail else f"exit code {proc.returncode}"}


def _variants(provider: str, fused_add_norm: str | None) -> list[tuple[str, bool | None]]:
    """(row label, fused_add_norm setting) for one provider: two rows for tigon with "both"."""
    if not provider.startswith("tigon") or fused_add_norm is None:
        return [(LABELS[provider], None)]
    settings = {"on": [True], "off": [False], "both": [False, True]}[fused_add_norm]
    return [(f"{LABELS[provider]} (add-norm {'on' if s else 'off'})", s) for s in settings]


def main(argv: list[str] | None = None) -> None:
    """Runs every provider at every batch size, prints the table, writes JSON and CSV."""
    args = parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        Path(spec["result"]).write_text(json.dumps(worker(spec)))
        return
    import harness

    env = harness.environment(args.device)
    shape = {
        k: getattr(args, k)
        for k in ("seq", "layers", "hidden", "intermediate", "heads", "kv_heads", "vocab")
    }
    print(
        f"end-to-end training step, Llama-style {shape}, bf16, fused AdamW, SDPA; "
        f"{args.warmup} warm-up + {args.steps} timed steps"
    )
    print(" | ".join(f"{k} {v}" for k, v in env.items()))
    rows: list[dict[str, Any]] = []
    for batch in args.batch:
        base: dict[str, Any] | None = None
        runs = [(p, *v) for p in args.providers for v in _variants(p, args.fused_add_norm)]
        for provider, label, fused_add_norm in runs:
            spec = {**shape, "provider": provider, "batch": batch, "device": args.device}
            spec["kernels"] = args.kernels if args.kernels == "all" else args.kernels.split(",")
            spec |= {"steps": args.steps, "warmup": args.warmup, "fused_add_norm": fused_add_norm}
            if args.profile:
                args.out.mkdir(parents=True, exist_ok=True)
                tag = provider.replace("+", "_")
                if fused_add_norm is not None:
                    tag += f"_addnorm_{'on' if fused_add_norm else 'off'}"
                spec["profile_to"] = str((args.out / f"profile_{tag}_b{batch}.txt").resolve())
            result = run(spec)
            row = {"batch": batch, "provider": label, **result}
            if provider == "hf" and "error" not in result:
                base = result
            if base is not None and "error" not in result:
                row["speedup"] = result["tokens_per_s"] / base["tokens_per_s"]
                if base["peak_gib"]:
                    row["memory_ratio"] = result["peak_gib"] / base["peak_gib"]
            rows.append(row)
            status = result.get("error") or (
                f"{result['tokens_per_s']:,.0f} tok/s, {result['ms_per_step']:.1f} ms/step"
            )
            print(f"  batch {batch} {label}: {status}", flush=True)
    print()
    harness.print_table(
        rows,
        ["batch", "provider", "tokens_per_s", "speedup", "ms_per_step", "peak_gib"]
        + ["memory_ratio", "first_loss", "last_loss", "patched_modules", "fused_add_norm_layers"]
        + ["error"],
    )
    harness.save(args.out, "e2e_train", {**env, **shape, "steps": args.steps}, rows)


if __name__ == "__main__":
    main()
