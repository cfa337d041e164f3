"""SwiGLU / GeGLU speed (forward, backward, full) and peak memory: tigon vs HF eager
(act(a) * b with autograd) and torch.compile of it. Prints a table with GB/s and the copy
ceiling of the same run, writes CSV/JSON.

    python benchmarks/python/bench_glu.py --device cuda            # GPU tables (issue targets)
    python benchmarks/python/bench_glu.py --device cuda --quick
    python benchmarks/python/bench_glu.py --device cpu --quick     # 2-core CPU check

Bytes counted (each tensor read or written once): forward 3·M·N·s (a, b in; y out), backward
5·M·N·s (dy, a, b in; da, db out). Peak memory: one fwd+bwd beyond a, b and dy; tigon writes the
gradients into a and b (in_place=True, as in the MLP modules).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import tigon  # noqa: E402

ACTS = {"swiglu": F.silu, "geglu": lambda t: F.gelu(t, approximate="tanh")}


def providers(op: str, with_compile: bool) -> dict:
    act = ACTS[op]

    def eager(a, b):
        return act(a) * b

    p = {
        "tigon": lambda a, b: getattr(tigon.ops, op)(a, b, in_place=True),
        "HF eager": eager,
    }
    if with_compile:
        p["torch.compile(HF)"] = torch.compile(eager)
    return p


def bench_one(fn, m: int, n: int, dtype, device: str, reps: int) -> dict:
    torch.manual_seed(0)
    a0 = torch.randn(m, n, device=device, dtype=dtype)
    b0 = torch.randn(m, n, device=device, dtype=dtype)
    dy = torch.randn(m, n, device=device, dtype=dtype)
    size = dtype.itemsize
    # Leaves feed the op through `* 1`-free detach: each rep gets fresh non-leaf inputs so the
    # in-place backward may overwrite them.
    a = a0.clone().requires_grad_()
    b = b0.clone().requires_grad_()

    def inputs():
        return a.view_as(a), b.view_as(b)  # non-leaf views of the leaves: no copy

    def forward():
        with torch.no_grad():
            return fn(a0, b0)

    y = fn(*inputs())

    def backward():
        torch.autograd.grad(y, (a, b), dy, retain_graph=True)

    def full():
        torch.autograd.grad(fn(*inputs()), (a, b), dy)

    row = {"M": m, "N": n}
    row["fwd_ms"] = harness.time_ms(forward, device, reps)
    row["bwd_ms"] = harness.time_ms(backward, device, reps)
    row["full_ms"] = harness.time_ms(full, device, reps)
    fwd_bytes = 3 * m * n * size
    bwd_bytes = 5 * m * n * size
    row["fwd_GBps"] = fwd_bytes / row["fwd_ms"] / 1e6
    row["bwd_GBps"] = bwd_bytes / row["bwd_ms"] / 1e6
    row["full_GBps"] = (fwd_bytes + bwd_bytes) / row["full_ms"] / 1e6
    if device == "cuda":
        del y
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--ops", default="swiglu,geglu")
    ap.add_argument("--quick", action="store_true", help="fewer shapes and reps")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--out", default="bench_results", type=Path)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    device = args.device
    if device == "cuda":
        shapes = [(t, 14336) for t in (4096, 8192, 16384)] + [(8192, 11008), (16384, 4096)]
        shapes += [(4096, 28672), (8192, 14335)]
        reps = 100
    else:
        shapes = [(1024, 4096), (2048, 11008)]
        reps = 5
    if args.quick:
        shapes = [(8192, 14336)] if device == "cuda" else [(512, 4096)]
        reps = 20 if device == "cuda" else 3

    env = harness.environment(device)
    env["dtype"] = args.dtype
    ceiling = harness.copy_ceiling_gbps(device, reps)
    env["copy_ceiling_GBps"] = ceiling
    print("GLU benchmark:", ", ".join(f"{k}={v}" for k, v in env.items()))
    rows = []
    for op in args.ops.split(","):
        for m, n in shapes:
            for name, fn in providers(op, device == "cuda" and not args.no_compile).items():
                print(f"{op} {name} {m}x{n}", file=sys.stderr, flush=True)
                r = {"op": op, "provider": name, **bench_one(fn, m, n, dtype, device, reps)}
                r["fwd_%ceil"] = 100 * r["fwd_GBps"] / ceiling
                r["bwd_%ceil"] = 100 * r["bwd_GBps"] / ceiling
                r["full_%ceil"] = 100 * r["full_GBps"] / ceiling
                rows.append(r)
    cols = ["op", "provider", "M", "N", "fwd_ms", "bwd_ms", "full_ms", "fwd_GBps", "bwd_GBps"]
    cols += ["full_GBps", "fwd_%ceil", "bwd_%ceil", "full_%ceil"]
    if device == "cuda":
        cols.append("peak_MB")
    print(f"\ncopy ceiling (this run): {ceiling:.0f} GB/s")
    harness.print_table(rows, cols)
    harness.save(args.out, f"glu_{device}_{args.dtype}", env, rows)


if __name__ == "__main__":
    main()
