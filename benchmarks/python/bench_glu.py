"""SwiGLU / GeGLU speed (forward, backward, full) and peak memory: tigon vs HF eager
(act(a) * b with autograd) and torch.compile of it. Prints a table with GB/s and the copy
ceiling of the same run, writes CSV/JSON; then host time per call at 4x14336 (harness.host_table).

    python benchmarks/python/bench_glu.py --device cuda            # GPU tables (issue targets)
    python benchmarks/python/bench_glu.py --device cuda --quick
    python benchmarks/python/bench_glu.py --device cpu --quick     # 2-core CPU check

Bytes counted (each tensor read or written once): forward 3·M·N·s (a, b in; y out), backward
5·M·N·s (dy, a, b in; da, db out). Peak memory: one fwd+bwd beyond a, b and dy; tigon writes the
gradients into a and b (in_place=True, as in the MLP modules).
"""

from __future__ import annotations

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


def steps(fn, m: int, n: int, dtype, device: str):
    """fn's forward, full step, the input restore the full step does first, and the backward of
    one retained forward, at m x n."""
    torch.manual_seed(0)
    a0 = torch.randn(m, n, device=device, dtype=dtype)
    b0 = torch.randn(m, n, device=device, dtype=dtype)
    dy = torch.randn(m, n, device=device, dtype=dtype)
    # The ops read non-leaf views of the leaves a, b (no copy). tigon's in-place backward writes
    # the gradients into those buffers, so every timed backward first restores a and b (through
    # .data: no version bump for autograd); the restore is timed on its own and subtracted.
    a = a0.clone().requires_grad_()
    b = b0.clone().requires_grad_()

    def inputs():
        return a.view_as(a), b.view_as(b)

    def restore():
        a.data.copy_(a0)
        b.data.copy_(b0)

    def forward():
        with torch.no_grad():
            return fn(a0, b0)

    y = fn(*inputs())

    def backward():
        restore()
        torch.autograd.grad(y, (a, b), dy, retain_graph=True)

    def full():
        restore()
        torch.autograd.grad(fn(*inputs()), (a, b), dy)

    return forward, full, restore, backward


def bench_one(fn, m: int, n: int, dtype, device: str, reps: int) -> dict:
    forward, full, restore, backward = steps(fn, m, n, dtype, device)
    size = dtype.itemsize
    fwd_bytes = 3 * m * n * size
    bwd_bytes = 5 * m * n * size
    row = {"M": m, "N": n}
    row |= harness.time_phases(
        forward, backward, full, device, reps, fwd_bytes, bwd_bytes, overhead=restore
    )
    if device == "cuda":
        del backward  # the retained forward
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def main() -> None:
    ap = harness.arg_parser(__doc__)
    ap.add_argument("--ops", default="swiglu,geglu")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    device = args.device
    if device == "cuda":
        shapes = [(t, 14336) for t in (4096, 8192, 16384)] + [(8192, 11008), (16384, 4096)]
        shapes += [(4096, 28672), (8192, 14335)]
        reps = 100
    else:
        # The training demo's small Llama MLP (1024 tokens x 352) and issue 42's 4096 x 4096.
        shapes = [(1024, 352), (4096, 4096), (2048, 11008)]
        reps = 5
    if args.quick:
        shapes = [(8192, 14336)] if device == "cuda" else [(1024, 352)]
        reps = 20 if device == "cuda" else 3

    env, ceiling = harness.start("GLU", device, args.dtype, reps)
    rows = []
    for op in args.ops.split(","):
        for m, n in shapes:
            for name, fn in providers(op, device == "cuda" and not args.no_compile).items():
                print(f"{op} {name} {m}x{n}", file=sys.stderr, flush=True)
                r = {"op": op, "provider": name, **bench_one(fn, m, n, dtype, device, reps)}
                harness.add_percent_of_ceiling(r, ceiling)
                rows.append(r)
    cols = ["op", "provider", "M", "N", "fwd_ms", "bwd_ms", "full_ms", "fwd_GBps", "bwd_GBps"]
    cols += ["full_GBps", "fwd_%ceil", "bwd_%ceil", "full_%ceil"]
    harness.print_results(rows, cols, device, f"\ncopy ceiling (this run): {ceiling:.0f} GB/s")
    harness.save(args.out, f"glu_{device}_{args.dtype}", env, rows)
    tiny = {
        f"{op} {name}": steps(fn, 4, 14336, dtype, device)[:3]
        for op in args.ops.split(",")
        for name, fn in providers(op, device == "cuda" and not args.no_compile).items()
    }
    harness.host_table(tiny, "4x14336", device, env, args.out, f"glu_host_{device}_{args.dtype}")


if __name__ == "__main__":
    main()
