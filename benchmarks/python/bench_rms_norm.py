"""RMSNorm speed (forward, backward, full) and peak memory: tigon vs HF eager, torch.compile(HF),
torch.nn.functional.rms_norm. Prints a table with GB/s and the copy ceiling of the same run, and
writes CSV/JSON and a PNG plot; then host time per call at 4x4096 (harness.host_table).

    python benchmarks/python/bench_rms_norm.py --device cuda            # GPU tables (issue targets)
    python benchmarks/python/bench_rms_norm.py --device cpu --quick     # 2-core CPU check
"""

from __future__ import annotations

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


def steps(make, m: int, h: int, dtype, device: str):
    """Provider `make`'s forward, full step and backward (of one retained forward) at m x h, and
    the retained forward's output."""
    torch.manual_seed(0)
    module = make(h)
    inner = getattr(module, "_orig_mod", module)
    with torch.no_grad():
        inner.weight.copy_(torch.randn(h) * 0.1 + (0.0 if "Gemma" in type(inner).__name__ else 1.0))
    module = module.to(device=device, dtype=dtype)
    x = torch.randn(m, h, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(m, h, device=device, dtype=dtype)

    def forward():
        return module(x)

    y = forward()
    dy = dy.to(y.dtype)

    def backward():
        torch.autograd.grad(y, (x, inner.weight), dy, retain_graph=True)

    def full():
        torch.autograd.grad(module(x), (x, inner.weight), dy)

    return forward, full, backward, y


def bench_one(make, m: int, h: int, dtype, device: str, reps: int) -> dict:
    forward, full, backward, y = steps(make, m, h, dtype, device)
    size = dtype.itemsize
    fwd_bytes = m * h * (size + y.dtype.itemsize) + 4 * m
    bwd_bytes = m * h * (y.dtype.itemsize + 2 * size) + 4 * m
    row = {"M": m, "H": h}
    row |= harness.time_phases(forward, backward, full, device, reps, fwd_bytes, bwd_bytes)
    if device == "cuda":
        del y, backward  # the retained graph
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def main() -> None:
    ap = harness.arg_parser(__doc__, with_providers=True)
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
    chosen = harness.select_providers(chosen, args.providers)

    env, ceiling = harness.start("RMSNorm", device, args.dtype, reps)
    rows = []
    total = len(shapes) * len(chosen)
    for m, h in shapes:
        for name, make in chosen.items():
            print(f"[{len(rows) + 1}/{total}] {name} {m}x{h}", file=sys.stderr, flush=True)
            r = {"provider": name, **bench_one(make, m, h, dtype, device, reps)}
            harness.add_percent_of_ceiling(r, ceiling, ("fwd", "bwd"))
            rows.append(r)
            print(
                f"    fwd {r['fwd_ms']:.3f} ms ({r['fwd_%ceil']:.0f}%), bwd {r['bwd_ms']:.3f} ms "
                f"({r['bwd_%ceil']:.0f}%), full {r['full_ms']:.3f} ms",
                file=sys.stderr,
                flush=True,
            )
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
    harness.print_results(rows, cols, device, f"\ncopy ceiling (this run): {ceiling:.0f} GB/s")
    name = f"rms_norm_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    tiny = {k: steps(make, 4, 4096, dtype, device)[:2] for k, make in chosen.items()}
    harness.host_table(
        tiny, "4x4096", device, env, args.out, f"rms_norm_host_{device}_{args.dtype}"
    )
    harness.plot_phases(
        [r for r in rows if r["M"] == rows[0]["M"]],
        args.out / f"{name}.png",
        x="H",
        metric="{phase}_GBps",
        title="RMSNorm {phase}",
        xlabel=f"hidden (M={rows[0]['M']})",
        ylabel="GB/s",
        ceiling=ceiling,
    )


if __name__ == "__main__":
    main()
