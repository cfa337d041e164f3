"""LayerNorm speed (forward, backward, full) and peak memory: tigon vs torch.nn.LayerNorm
(F.layer_norm), torch.compile of it, and Liger-Kernel's LigerLayerNorm (if installed). Prints a
table with GB/s and the copy ceiling of the same run, and writes CSV/JSON and a PNG plot; then
host time per call at 4x4096 (harness.host_table).

    python benchmarks/python/bench_layer_norm.py --device cuda            # GPU tables (issue targets)
    python benchmarks/python/bench_layer_norm.py --device cuda --quick    # about a minute
    python benchmarks/python/bench_layer_norm.py --device cpu --quick     # 2-core CPU check
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import tigon  # noqa: E402


def _liger_layer_norm():
    try:
        from liger_kernel.transformers.layer_norm import LigerLayerNorm
    except ImportError:
        return None
    return LigerLayerNorm


def providers(device: str, with_compile: bool) -> dict:
    p = {
        "tigon": lambda h: tigon.nn.LayerNorm(h),
        "torch LayerNorm": lambda h: torch.nn.LayerNorm(h),
    }
    if with_compile:
        p["compile(LayerNorm)"] = lambda h: torch.compile(torch.nn.LayerNorm(h))
    liger = _liger_layer_norm()
    if liger is not None and device == "cuda":
        p["liger"] = lambda h: liger(h, eps=1e-5, bias=True)  # its defaults: 1e-6, no bias
    return p


def steps(make, m: int, h: int, dtype, device: str):
    """Provider `make`'s forward, full step and backward (of one retained forward) at m x h, and
    the retained forward's output."""
    torch.manual_seed(0)
    module = make(h)
    inner = getattr(module, "_orig_mod", module)
    with torch.no_grad():
        inner.weight.copy_(torch.randn(h) * 0.1 + 1.0)
        inner.bias.copy_(torch.randn(h) * 0.1)
    module = module.to(device=device, dtype=dtype)
    params = (inner.weight, inner.bias)
    x = torch.randn(m, h, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(m, h, device=device, dtype=dtype)

    def forward():
        return module(x)

    y = forward()

    def backward():
        torch.autograd.grad(y, (x, *params), dy, retain_graph=True)

    def full():
        torch.autograd.grad(module(x), (x, *params), dy)

    return forward, full, backward, y


def bench_one(make, m: int, h: int, dtype, device: str, reps: int) -> dict:
    forward, full, backward, y = steps(make, m, h, dtype, device)
    size = dtype.itemsize
    # The bytes a LayerNorm must move: forward reads x, writes y, mean and rstd; backward reads
    # dy, x, mean and rstd and writes dx (the parameters and dW/dB are O(H)).
    fwd_bytes = 2 * m * h * size + 8 * m
    bwd_bytes = 3 * m * h * size + 8 * m
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
        shapes = [(16384, h) for h in hiddens] + [(4096, h) for h in hiddens]
        reps = 100
    else:
        shapes = [(4096, h) for h in (1024, 4096, 16384)]
        reps = 5
    if args.quick:
        shapes = [(4096, 4096)] + ([(16384, 4096), (4096, 32768)] if device == "cuda" else [])
        reps = 20 if device == "cuda" else 3
    chosen = providers(device, with_compile=device == "cuda" and not args.no_compile)
    chosen = harness.select_providers(chosen, args.providers)

    env, ceiling = harness.start("LayerNorm", device, args.dtype, reps)
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
    name = f"layer_norm_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    tiny = {k: steps(make, 4, 4096, dtype, device)[:2] for k, make in chosen.items()}
    harness.host_table(
        tiny, "4x4096", device, env, args.out, f"layer_norm_host_{device}_{args.dtype}"
    )
    harness.plot_phases(
        [r for r in rows if r["M"] == rows[0]["M"]],
        args.out / f"{name}.png",
        x="H",
        metric="{phase}_GBps",
        title="LayerNorm {phase}",
        xlabel=f"hidden (M={rows[0]['M']})",
        ylabel="GB/s",
        ceiling=ceiling,
    )


if __name__ == "__main__":
    main()
