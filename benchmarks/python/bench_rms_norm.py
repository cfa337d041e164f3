"""RMSNorm speed (forward, backward, full) and peak memory: tigon vs HF eager, torch.compile(HF),
torch.nn.functional.rms_norm. Prints a table with GB/s and the copy ceiling of the same run, and
writes CSV/JSON and a PNG plot.

    python benchmarks/python/bench_rms_norm.py --device cuda            # GPU tables (issue targets)
    python benchmarks/python/bench_rms_norm.py --device cpu --quick     # 2-core CPU check
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import tigon  # noqa: E402


def providers(device: str, with_compile: bool) -> dict:
    p = {
        "tigon llama": lambda h: tigon.nn.RMSNorm(h, casting_mode="llama"),
        "tigon gemma": lambda h: tigon.nn.RMSNorm(
            h, offset=1.0, casting_mode="gemma", init="zeros"
        ),
        "HF llama eager": lambda h: LlamaRMSNorm(h),
        "HF gemma eager": lambda h: GemmaRMSNorm(h),
        "torch F.rms_norm": lambda h: torch.nn.RMSNorm(h, eps=1e-6),
    }
    if with_compile:
        p["compile(HF llama)"] = lambda h: torch.compile(LlamaRMSNorm(h))
        p["compile(HF gemma)"] = lambda h: torch.compile(GemmaRMSNorm(h))
    return p


def bench_one(make, m: int, h: int, dtype, device: str, reps: int) -> dict:
    torch.manual_seed(0)
    module = make(h)
    inner = getattr(module, "_orig_mod", module)
    with torch.no_grad():
        inner.weight.copy_(torch.randn(h) * 0.1 + (0.0 if "Gemma" in type(inner).__name__ else 1.0))
    module = module.to(device=device, dtype=dtype)
    x = torch.randn(m, h, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(m, h, device=device, dtype=dtype)
    size = dtype.itemsize

    def forward():
        return module(x)

    y = forward()
    dy = dy.to(y.dtype)

    def backward():
        torch.autograd.grad(y, (x, inner.weight), dy, retain_graph=True)

    def full():
        torch.autograd.grad(module(x), (x, inner.weight), dy)

    row = {"M": m, "H": h}
    row["fwd_ms"] = harness.time_ms(forward, device, reps)
    row["bwd_ms"] = harness.time_ms(backward, device, reps)
    row["full_ms"] = harness.time_ms(full, device, reps)
    fwd_bytes = m * h * (size + y.dtype.itemsize) + 4 * m
    bwd_bytes = m * h * (y.dtype.itemsize + 2 * size) + 4 * m
    row["fwd_GBps"] = fwd_bytes / row["fwd_ms"] / 1e6
    row["bwd_GBps"] = bwd_bytes / row["bwd_ms"] / 1e6
    row["full_GBps"] = (fwd_bytes + bwd_bytes) / row["full_ms"] / 1e6
    if device == "cuda":
        del y
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def plot(rows: list[dict], ceiling: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, phase in zip(axes, ("fwd", "bwd", "full")):
        for name in dict.fromkeys(r["provider"] for r in rows):
            pts = sorted(
                (r["H"], r[f"{phase}_GBps"])
                for r in rows
                if r["provider"] == name and r["M"] == rows[0]["M"]
            )
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.axhline(ceiling, color="k", ls="--", label="copy ceiling")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"hidden (M={rows[0]['M']})")
        ax.set_ylabel("GB/s")
        ax.set_title(f"RMSNorm {phase}")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and reps")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile providers")
    ap.add_argument("--providers", default="", help="comma-separated subset of provider names")
    ap.add_argument("--out", default="bench_results", type=Path)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    device = args.device

    if device == "cuda":
        hiddens = [1024, 2048, 4096, 8192, 16384, 32768]
        shapes = [(16384, h) for h in hiddens] + [(4096, h) for h in hiddens] + [(65536, 8192)]
        reps = 100
    else:
        shapes = [(4096, h) for h in (1024, 2048, 4096, 8192, 16384)]
        reps = 5
    if args.quick:
        shapes = [(4096, 4096)] + ([(16384, 4096), (4096, 32768)] if device == "cuda" else [])
        reps = 20 if device == "cuda" else 3
    chosen = providers(device, with_compile=device == "cuda" and not args.no_compile)
    if args.providers:
        chosen = {k: v for k, v in chosen.items() if k in args.providers.split(",")}

    env = harness.environment(device)
    env["dtype"] = args.dtype
    ceiling = harness.copy_ceiling_gbps(device, reps)
    env["copy_ceiling_GBps"] = ceiling
    print("RMSNorm benchmark:", ", ".join(f"{k}={v}" for k, v in env.items()))
    rows = []
    total = len(shapes) * len(chosen)
    for m, h in shapes:
        for name, make in chosen.items():
            print(f"[{len(rows) + 1}/{total}] {name} {m}x{h}", file=sys.stderr, flush=True)
            r = {"provider": name, **bench_one(make, m, h, dtype, device, reps)}
            r["fwd_%ceil"] = 100 * r["fwd_GBps"] / ceiling
            r["bwd_%ceil"] = 100 * r["bwd_GBps"] / ceiling
            rows.append(r)
            torch._dynamo.reset()
    cols = [
        "provider",
        "M",
        "H",
        "fwd_ms",
        "bwd_ms",
        "full_ms",
        "fwd_GBps",
        "bwd_GBps",
        "full_GBps",
        "fwd_%ceil",
        "bwd_%ceil",
    ]
    if device == "cuda":
        cols.append("peak_MB")
    print(f"\ncopy ceiling (this run): {ceiling:.0f} GB/s")
    harness.print_table(rows, cols)
    name = f"rms_norm_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    plot(rows, ceiling, args.out / f"{name}.png")


if __name__ == "__main__":
    main()
