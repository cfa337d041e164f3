"""GroupNorm speed (forward, backward, full) and peak memory: tigon vs torch.nn.GroupNorm,
torch.compile of it, and Liger-Kernel's LigerGroupNorm (if installed). Prints a table with GB/s
and the copy ceiling of the same run, and writes CSV/JSON and a PNG plot; then host time per call
at [4, 64, 16] (harness.host_table).

    python benchmarks/python/bench_group_norm.py --device cuda            # GPU tables
    python benchmarks/python/bench_group_norm.py --device cuda --quick    # about a minute
    python benchmarks/python/bench_group_norm.py --device cpu --quick     # 2-core CPU check
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import tigon  # noqa: E402


def _liger_group_norm():
    try:
        from liger_kernel.transformers.group_norm import LigerGroupNorm
    except ImportError:
        return None
    return LigerGroupNorm


def providers(device: str, with_compile: bool) -> dict:
    p = {
        "tigon": lambda g, c: tigon.nn.GroupNorm(g, c),
        "torch GroupNorm": lambda g, c: torch.nn.GroupNorm(g, c),
    }
    if with_compile:
        p["compile(GroupNorm)"] = lambda g, c: torch.compile(torch.nn.GroupNorm(g, c))
    liger = _liger_group_norm()
    if liger is not None and device == "cuda":
        p["liger"] = lambda g, c: liger(num_channels=c, num_groups=g, eps=1e-5, bias=True)
    return p


def steps(make, shape: tuple[int, ...], groups: int, dtype, device: str):
    """Provider `make`'s forward, full step and backward (of one retained forward), and the
    retained forward's output."""
    torch.manual_seed(0)
    channels = shape[1]
    module = make(groups, channels)
    inner = getattr(module, "_orig_mod", module)
    with torch.no_grad():
        inner.weight.copy_(torch.randn(channels) * 0.1 + 1.0)
        inner.bias.copy_(torch.randn(channels) * 0.1)
    module = module.to(device=device, dtype=dtype)
    params = (inner.weight, inner.bias)
    x = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(shape, device=device, dtype=dtype)
    y = module(x)

    def backward():
        torch.autograd.grad(y, (x, *params), dy, retain_graph=True)

    def full():
        torch.autograd.grad(module(x), (x, *params), dy)

    return (lambda: module(x)), full, backward, y


def bench_one(make, shape, groups: int, dtype, device: str, reps: int) -> dict:
    forward, full, backward, y = steps(make, shape, groups, dtype, device)
    n, size = math.prod(shape), dtype.itemsize
    stats = 8 * shape[0] * groups
    # Necessary bytes: forward reads x and writes y (and mean, rstd); backward reads dy and x and
    # writes dx (the per-channel parameters and gradients are O(C)).
    row = {"shape": "x".join(map(str, shape)), "G": groups, "elements": n}
    row |= harness.time_phases(
        forward, backward, full, device, reps, 2 * n * size + stats, 3 * n * size + stats
    )
    if device == "cuda":
        del y, backward
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def main() -> None:
    ap = harness.arg_parser(__doc__, with_providers=True)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    device = args.device
    if device == "cuda":
        cases = [((32, 512, 32, 32), 32), ((16, 256, 64, 64), 32), ((8, 128, 128, 128), 32),
                 ((64, 1024, 16, 16), 32), ((16384, 1024), 32), ((4096, 4096), 64)]  # fmt: skip
        reps = 100
    else:
        cases = [((8, 64, 32, 32), 8), ((1024, 512), 8)]
        reps = 5
    if args.quick:
        cases = cases[:2]
        reps = 20 if device == "cuda" else 3
    chosen = providers(device, with_compile=device == "cuda" and not args.no_compile)
    chosen = harness.select_providers(chosen, args.providers)

    env, ceiling = harness.start("GroupNorm", device, args.dtype, reps)
    rows = []
    total = len(cases) * len(chosen)
    for shape, groups in cases:
        for name, make in chosen.items():
            print(
                f"[{len(rows) + 1}/{total}] {name} {shape} G={groups}", file=sys.stderr, flush=True
            )
            r = {"provider": name, **bench_one(make, shape, groups, dtype, device, reps)}
            harness.add_percent_of_ceiling(r, ceiling, ("fwd", "bwd"))
            rows.append(r)
            torch._dynamo.reset()
    cols = ["provider", "shape", "G", "fwd_ms", "bwd_ms", "full_ms", "fwd_GBps", "bwd_GBps",
            "full_GBps", "fwd_%ceil", "bwd_%ceil"]  # fmt: skip
    harness.print_results(rows, cols, device, f"\ncopy ceiling (this run): {ceiling:.0f} GB/s")
    name = f"group_norm_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    tiny = {k: steps(make, (4, 64, 16), 8, dtype, device)[:2] for k, make in chosen.items()}
    harness.host_table(
        tiny, "4x64x16", device, env, args.out, f"group_norm_host_{device}_{args.dtype}"
    )
    harness.plot_phases(
        rows,
        args.out / f"{name}.png",
        x="elements",
        metric="{phase}_GBps",
        title="GroupNorm {phase}",
        xlabel="elements (the shapes of the table)",
        ylabel="GB/s",
        ceiling=ceiling,
    )


if __name__ == "__main__":
    main()
