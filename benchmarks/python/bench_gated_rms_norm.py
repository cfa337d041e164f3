"""Gated RMSNorm speed (forward, backward, full) and peak memory: tigon vs HF's
Qwen3NextRMSNormGated eager and torch.compile of it. Prints a table with GB/s and the copy ceiling
of the same run, and writes CSV/JSON and a PNG plot. Qwen3-Next gates the delta-net output per
value head: rows of head_v_dim = 128 elements, B * T * heads of them.

    python benchmarks/python/bench_gated_rms_norm.py --device cuda           # GPU tables
    python benchmarks/python/bench_gated_rms_norm.py --device cuda --quick   # about a minute
    python benchmarks/python/bench_gated_rms_norm.py --device cpu --quick    # 2-core CPU check
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNormGated

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import tigon  # noqa: E402


def providers(with_compile: bool) -> dict:
    p = {
        "tigon": lambda h: tigon.nn.RMSNormGated(h, eps=1e-6),
        "HF eager": lambda h: Qwen3NextRMSNormGated(h, eps=1e-6),
    }
    if with_compile:
        p["compile(HF)"] = lambda h: torch.compile(Qwen3NextRMSNormGated(h, eps=1e-6))
    return p


def steps(make, m: int, h: int, dtype, device: str):
    """Provider `make`'s forward, full step and backward (of one retained forward) at m x h, and
    the retained forward's output."""
    torch.manual_seed(0)
    module = make(h)
    inner = getattr(module, "_orig_mod", module)
    with torch.no_grad():
        inner.weight.copy_(torch.randn(h) * 0.1 + 1.0)
    module = module.to(device=device, dtype=dtype)
    x = torch.randn(m, h, device=device, dtype=dtype, requires_grad=True)
    gate = torch.randn(m, h, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(m, h, device=device, dtype=dtype)
    wrt = (x, gate, inner.weight)

    def forward():
        return module(x, gate)

    y = forward()

    def backward():
        torch.autograd.grad(y, wrt, dy, retain_graph=True)

    def full():
        torch.autograd.grad(module(x, gate), wrt, dy)

    return forward, full, backward, y


def bench_one(make, m: int, h: int, dtype, device: str, reps: int) -> dict:
    forward, full, backward, y = steps(make, m, h, dtype, device)
    size = dtype.itemsize
    fwd_bytes = m * h * 3 * size + 4 * m  # x, gate in; y out
    bwd_bytes = m * h * 5 * size + 4 * m  # dy, x, gate in; dx, dgate out
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
        # B * T * value heads rows of head_v_dim 128 (Qwen3-Next: 32 value heads), then wider rows.
        shapes = [(b * 4096 * 32, 128) for b in (1, 2, 4)] + [(16384, h) for h in (1024, 4096)]
        shapes += [(4096, 16384), (4096, 32768)]
        reps = 50
    else:
        shapes = [(65536, 128), (4096, 1024), (4096, 4096)]
        reps = 5
    if args.quick:
        shapes = [(4 * 4096 * 32, 128), (16384, 4096)] if device == "cuda" else [(16384, 128)]
        reps = 20 if device == "cuda" else 3
    chosen = providers(with_compile=device == "cuda" and not args.no_compile)
    chosen = harness.select_providers(chosen, args.providers)

    env, ceiling = harness.start("gated RMSNorm", device, args.dtype, reps)
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
    cols = ["provider", "M", "H", "fwd_ms", "bwd_ms", "full_ms", "fwd_GBps", "bwd_GBps"]
    cols += ["full_GBps", "fwd_%ceil", "bwd_%ceil"]
    harness.print_results(rows, cols, device, f"\ncopy ceiling (this run): {ceiling:.0f} GB/s")
    name = f"gated_rms_norm_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    heads = [r for r in rows if r["H"] == 128]  # the Qwen3-Next rows, over the batch
    harness.plot_phases(
        heads or rows,
        args.out / f"{name}.png",
        x="M",
        metric="{phase}_GBps",
        title="gated RMSNorm {phase}",
        xlabel="rows of 128 (B * T * heads)",
        ylabel="GB/s",
        ceiling=ceiling,
    )


if __name__ == "__main__":
    main()
