"""tigon training demo: the same small model trained twice, Hugging Face as is and tigon-patched.

A randomly initialized model of a supported family (Llama by default) learns byte-level text
(vocabulary 256: one token per byte of examples/demo_corpus.txt). Both runs use the same seed,
data and optimizer; each runs in its own process so peak memory is measured cleanly. Prints the
loss agreement, tokens/s and peak memory side by side, and writes a loss-curve PNG and a JSON.

    python examples/train_demo.py                      # CPU: small model; CUDA: medium, bf16
    python examples/train_demo.py --family gemma2 --size tiny --steps 30
    python examples/train_demo.py --device cuda --size medium --dtype bfloat16 --out demo_out
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import ModelShape, corpus_windows

VARIANTS = ("hf", "tigon")
LABELS = {"hf": "HF transformers", "tigon": "HF + tigon"}


@dataclass(frozen=True)
class Size(ModelShape):
    """Model and batch shape of one --size preset."""

    seq: int
    batch: int


SIZES = {
    "tiny": Size(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=176, seq=64, batch=4),
    "small": Size(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=352, seq=128, batch=8),
    "medium": Size(hidden=512, layers=8, heads=8, kv_heads=4, intermediate=1408, seq=512, batch=8),
}

#: What a family's defaults need changed for a small byte-level model.
FAMILY_EXTRAS: dict[str, dict[str, Any]] = {
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line; defaults depend on whether a CUDA device is available."""
    from tigon.transformers import supported_model_types

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--family", default="llama", choices=supported_model_types())
    p.add_argument("--size", choices=sorted(SIZES), help="default: small on CPU, medium on CUDA")
    p.add_argument("--steps", type=int, help="default: 60 on CPU, 200 on CUDA")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="model weights and activations; default float32 on CPU, bfloat16 on CUDA",
    )
    p.add_argument("--batch", type=int, help="override the size preset's batch")
    p.add_argument("--seq", type=int, help="override the size preset's sequence length")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads",
        type=int,
        help="CPU threads (default: torch's, at most cores - 1 and 8: small models gain little "
        "from more, and a busy machine slows oversubscribed threads badly)",
    )
    p.add_argument("--log-every", type=int, help="progress line every N steps (default steps/10)")
    p.add_argument(
        "--kernels",
        default="all",
        help="tigon kernels: 'all' (the family's defaults: RMSNorm, RoPE, SwiGLU/GeGLU, fused "
        "linear cross-entropy) or a comma list, e.g. rms_norm,rope,swiglu,cross_entropy",
    )
    p.add_argument("--out", type=Path, default=Path("demo_out"))
    p.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    resolve_defaults(args)
    return args


def resolve_defaults(args: argparse.Namespace) -> None:
    """Fills the device-dependent defaults in place."""
    import torch

    import tigon

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() and tigon.has_cuda_kernels() else "cpu"
    if args.device == "cuda" and not tigon.has_cuda_kernels():
        sys.exit("--device cuda: this tigon build has no CUDA kernels (rebuild with nvcc present)")
    on_gpu = args.device == "cuda"
    args.size = args.size or ("medium" if on_gpu else "small")
    args.steps = args.steps or (200 if on_gpu else 60)
    if args.dtype == "auto":
        args.dtype = "bfloat16" if on_gpu else "float32"
    preset = SIZES[args.size]
    args.batch = args.batch or preset.batch
    args.seq = args.seq or preset.seq
    args.log_every = args.log_every or max(1, args.steps // 10)
    if args.threads is None:
        args.threads = min(torch.get_num_threads(), max(1, (os.cpu_count() or 1) - 1), 8)


def build_config(args: argparse.Namespace) -> Any:
    """The family's own Config class (through AutoConfig), sized by --size."""
    from transformers import AutoConfig

    s = SIZES[args.size]
    config = AutoConfig.for_model(
        args.family,
        vocab_size=256,
        max_position_embeddings=max(args.seq, 128),
        rms_norm_eps=1e-6,
        **s.config_kwargs(),
        **FAMILY_EXTRAS.get(args.family, {}),
    )
    if args.family == "gemma2":
        config._attn_implementation = "eager"  # attention soft-capping (HF's advice)
    return config


def batches(args: argparse.Namespace) -> list[Any]:
    """``steps`` batches of random corpus windows, the same for every run of the same seed."""
    return corpus_windows(args.seq, args.steps, args.batch, args.seed)


def kernel_flags(args: argparse.Namespace) -> dict[str, bool]:
    """--kernels as apply_tigon_kernel flags: the listed ones on, every other one off."""
    from tigon.transformers import kernel_flags as accepted

    if args.kernels == "all":
        return {}
    wanted = {k.strip() for k in args.kernels.split(",") if k.strip()}
    flags = accepted(args.family)
    unknown = wanted - set(flags)
    if unknown:
        sys.exit(f"--kernels: {sorted(unknown)} not among {args.family}'s: {', '.join(flags)}")
    return {k: k in wanted for k in flags}


def _rss_bytes() -> int:
    """Current resident set size (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if platform.system() == "Darwin" else peak * 1024


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One training run (``--worker hf|tigon``), in its own process; returns its measurements."""
    import torch
    from transformers import AutoModelForCausalLM

    import tigon.transformers as tt

    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    config = build_config(args)
    if args.worker == "tigon":
        # The usual way: patch the family's classes, then build (or load) the model.
        tt.apply_tigon_kernel(args.family, **kernel_flags(args))
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_config(config).to(device=device, dtype=dtype)
    patched = tt.patched_modules(model)
    n_params = sum(p.numel() for p in model.parameters())
    data = [b.to(device) for b in batches(args)]
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, args.steps // 10)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (args.steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start_mem = torch.cuda.memory_allocated() if device.type == "cuda" else _rss_bytes()
    model.train()
    losses: list[float] = []
    times: list[float] = []
    tokens = args.batch * args.seq
    tag = f"[{args.worker:>5}]"
    for step, ids in enumerate(data):
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # synchronizes
        times.append(time.perf_counter() - t0)
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            recent = times[max(0, step - args.log_every + 1) :]
            print(
                f"{tag} step {step + 1:>4}/{args.steps}  loss {losses[-1]:.4f}  "
                f"{tokens * len(recent) / sum(recent):>9,.0f} tok/s",
                flush=True,
            )
    if device.type == "cuda":
        peak, peak_kind = torch.cuda.max_memory_allocated(), "torch.cuda.max_memory_allocated"
    else:
        peak, peak_kind = _peak_rss_bytes(), "peak RSS of the process (ru_maxrss)"
    steady = times[min(3, len(times) - 1) :]  # the first steps warm up allocators and caches
    return {
        "variant": args.worker,
        "losses": losses,
        "step_seconds": times,
        "tokens_per_second": tokens * len(steady) / sum(steady),
        "ms_per_step": 1e3 * sum(steady) / len(steady),
        "peak_memory_bytes": peak,
        "memory_at_start_bytes": start_mem,
        "peak_memory_kind": peak_kind,
        "parameters": n_params,
        "patched_modules": patched,
    }


def run_variant(args: argparse.Namespace, variant: str, argv: list[str]) -> dict[str, Any]:
    """Runs one variant in a fresh Python process, streaming its progress lines."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv]
        cmd += ["--worker", variant, "--result", str(result)]
        cmd += ["--device", args.device, "--size", args.size, "--steps", str(args.steps)]
        cmd += ["--dtype", args.dtype, "--batch", str(args.batch), "--seq", str(args.seq)]
        cmd += ["--threads", str(args.threads), "--kernels", args.kernels]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TRANSFORMERS_VERBOSITY": "error"}
        proc = subprocess.run(cmd, env=env, check=False)
        if proc.returncode != 0:
            sys.exit(f"the {variant} run failed (exit code {proc.returncode})")
        return json.loads(result.read_text())


def environment(args: argparse.Namespace) -> dict[str, Any]:
    """Versions and hardware, for the JSON and the header."""
    import torch
    import transformers

    import tigon

    env = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tigon": tigon.__version__,
        "device": args.device,
    }
    if args.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["threads"] = args.threads
    return env


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def report(args: argparse.Namespace, env: dict[str, Any], runs: dict[str, dict[str, Any]]) -> dict:
    """Prints the side-by-side summary; returns it as a dict."""
    hf, tg = runs["hf"], runs["tigon"]
    diffs = [abs(a - b) for a, b in zip(hf["losses"], tg["losses"])]
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    rel = max(d / abs(a) for d, a in zip(diffs, hf["losses"]))
    kinds = sorted(set(tg["patched_modules"].values()))
    print()
    print(f"tigon patched {len(tg['patched_modules'])} modules: {', '.join(kinds)}")
    print(
        f"loss agreement over {len(diffs)} steps: max |HF - tigon| = {diffs[worst]:.3g} "
        f"(step {worst + 1}), mean {sum(diffs) / len(diffs):.3g}, max relative {rel:.3g}"
    )
    rows = [
        ("first loss", f"{hf['losses'][0]:.4f}", f"{tg['losses'][0]:.4f}", ""),
        ("final loss", f"{hf['losses'][-1]:.4f}", f"{tg['losses'][-1]:.4f}", ""),
        (
            "tokens/s",
            f"{hf['tokens_per_second']:,.0f}",
            f"{tg['tokens_per_second']:,.0f}",
            f"{tg['tokens_per_second'] / hf['tokens_per_second']:.2f}x",
        ),
        ("ms/step", f"{hf['ms_per_step']:.1f}", f"{tg['ms_per_step']:.1f}", ""),
        (
            "peak memory",
            _mib(hf["peak_memory_bytes"]),
            _mib(tg["peak_memory_bytes"]),
            f"{tg['peak_memory_bytes'] / hf['peak_memory_bytes']:.2f}x",
        ),
    ]
    if args.device == "cpu":
        rows.append(
            (
                "  above start",
                _mib(hf["peak_memory_bytes"] - hf["memory_at_start_bytes"]),
                _mib(tg["peak_memory_bytes"] - tg["memory_at_start_bytes"]),
                "",
            )
        )
    print()
    print(f"{'':14}{LABELS['hf']:>18}{LABELS['tigon']:>18}{'tigon/HF':>10}")
    for name, a, b, r in rows:
        print(f"{name:14}{a:>18}{b:>18}{r:>10}")
    print(f"(peak memory: {hf['peak_memory_kind']})")
    return {
        "environment": env,
        "args": {k: str(v) for k, v in vars(args).items() if k not in ("worker", "result")},
        "loss_agreement": {
            "max_abs_diff": diffs[worst],
            "max_abs_diff_step": worst + 1,
            "mean_abs_diff": sum(diffs) / len(diffs),
            "max_rel_diff": rel,
            "per_step_abs_diff": diffs,
        },
        "runs": runs,
    }


def plot(path: Path, args: argparse.Namespace, runs: dict[str, dict[str, Any]]) -> bool:
    """Loss curves of both runs and their difference; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True, height_ratios=[3, 1.3])
    steps = range(1, args.steps + 1)
    top.plot(steps, runs["hf"]["losses"], label=LABELS["hf"], lw=2.5, alpha=0.6)
    top.plot(steps, runs["tigon"]["losses"], label=LABELS["tigon"], lw=1.2, ls="--")
    top.set_ylabel("training loss (nats/byte)")
    top.set_title(
        f"{args.family} ({args.size}), {args.dtype} on {args.device}: HF vs tigon, same seed"
    )
    top.legend()
    top.grid(alpha=0.3)
    diffs = [abs(a - b) for a, b in zip(runs["hf"]["losses"], runs["tigon"]["losses"])]
    nonzero = [(i + 1, d) for i, d in enumerate(diffs) if d > 0]
    if nonzero:
        bottom.semilogy(*zip(*nonzero), "o", ms=3, color="tab:red")
    bottom.set_title(
        f"bitwise equal losses at {len(diffs) - len(nonzero)}/{len(diffs)} steps; "
        f"max |diff| {max(diffs):.2g}",
        fontsize=9,
    )
    bottom.set_ylabel("|HF - tigon|")
    bottom.set_xlabel("step")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> None:
    """Entry point: the two runs, the summary, the PNG and the JSON."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        result = worker(args)
        args.result.write_text(json.dumps(result))
        return
    env = environment(args)
    s = SIZES[args.size]
    print(
        f"tigon demo: {args.family} ({args.size}: hidden {s.hidden}, {s.layers} layers), "
        f"batch {args.batch} x seq {args.seq} bytes, {args.steps} AdamW steps, {args.dtype} on "
        f"{env.get('gpu', env.get('cpu'))}; torch {env['torch']}, transformers "
        f"{env['transformers']}, tigon {env['tigon']}"
    )
    passthrough = [a for a in argv if not a.startswith("--worker") and not a.startswith("--result")]
    runs = {v: run_variant(args, v, passthrough) for v in VARIANTS}
    summary = report(args, env, runs)
    summary["size"] = asdict(s)
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / "results.json"
    json_path.write_text(json.dumps(summary, indent=1))
    png_path = args.out / "loss_curve.png"
    wrote_png = plot(png_path, args, runs)
    print(
        f"\nwrote {json_path}" + (f" and {png_path}" if wrote_png else " (no matplotlib: no PNG)")
    )


if __name__ == "__main__":
    main()
