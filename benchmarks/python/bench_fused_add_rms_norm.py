"""Fused residual add + RMSNorm speed (forward, backward, full) and peak memory: tigon's fused op
vs torch's add followed by tigon's RMSNorm, torch's add followed by HF's LlamaRMSNorm,
torch.compile of that add + norm, and Liger-Kernel's LigerFusedAddRMSNorm where importable.
Prints a table with GB/s (the fused op's bytes for every provider: the unfused ones move more),
the percent of the copy ceiling of the same run and the full step's speedup over add + tigon
RMSNorm, and writes CSV/JSON and a PNG plot.

    python benchmarks/python/bench_fused_add_rms_norm.py --device cuda            # GPU tables
    python benchmarks/python/bench_fused_add_rms_norm.py --device cuda --quick    # ~1 minute
    python benchmarks/python/bench_fused_add_rms_norm.py --device cpu --quick     # 2-core check
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import tigon  # noqa: E402

BASELINE = "add + tigon RMSNorm"


class AddThenNorm(nn.Module):
    """A decoder layer's ``hidden_states = residual + hidden_states`` then ``norm(hidden_states)``,
    returning ``(y, h)`` like the fused modules."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = residual + x
        return self.norm(h), h


def _liger():
    try:
        from liger_kernel.transformers import LigerFusedAddRMSNorm
    except ImportError:
        return None
    return LigerFusedAddRMSNorm


def providers(device: str, with_compile: bool) -> dict:
    p = {
        "tigon fused": lambda h: tigon.nn.FusedAddRMSNorm(h, in_place=False),
        BASELINE: lambda h: AddThenNorm(tigon.nn.RMSNorm(h)),
        "add + HF llama eager": lambda h: AddThenNorm(LlamaRMSNorm(h)),
    }
    if with_compile:
        p["compile(add + HF llama)"] = lambda h: torch.compile(AddThenNorm(LlamaRMSNorm(h)))
    liger = _liger() if device == "cuda" else None
    if liger is not None:
        p["liger fused add"] = lambda h: liger(h, eps=1e-6, in_place=False)
    return p


def _weight(module: nn.Module) -> torch.Tensor:
    inner = getattr(module, "_orig_mod", module)
    return inner.norm.weight if isinstance(inner, AddThenNorm) else inner.weight


def steps(make, m: int, h: int, dtype, device: str):
    """Provider `make`'s forward, full step and backward (of one retained forward) at m x h, and
    the retained forward's y."""
    torch.manual_seed(0)
    module = make(h)
    weight = _weight(module)
    with torch.no_grad():
        weight.copy_(torch.randn(h) * 0.1 + 1.0)
    module = module.to(device=device, dtype=dtype)
    weight = _weight(module)
    x = torch.randn(m, h, device=device, dtype=dtype, requires_grad=True)
    residual = (4 * torch.randn(m, h, device=device)).to(dtype).requires_grad_()
    dh = torch.randn(m, h, device=device, dtype=dtype)

    def forward():
        return module(x, residual)

    y, s = forward()
    dy = torch.randn(m, h, device=device).to(y.dtype)
    inputs = (x, residual, weight)

    def backward():
        torch.autograd.grad((y, s), inputs, (dy, dh), retain_graph=True)

    def full():
        torch.autograd.grad(module(x, residual), inputs, (dy, dh))

    return forward, full, backward, y


def bench_one(make, m: int, h: int, dtype, device: str, reps: int) -> dict:
    forward, full, backward, y = steps(make, m, h, dtype, device)
    size = dtype.itemsize
    # The fused op's traffic: forward reads x and residual, writes h and y (and rstd); backward
    # reads dy, dh and h, writes dx (the gradient of x and of residual alike).
    fwd_bytes = m * h * (3 * size + y.dtype.itemsize) + 4 * m
    bwd_bytes = m * h * (y.dtype.itemsize + 3 * size) + 4 * m
    row = {"M": m, "H": h}
    row |= harness.time_phases(forward, backward, full, device, reps, fwd_bytes, bwd_bytes)
    if device == "cuda":
        del y, backward  # the retained graph
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def add_speedups(rows: list[dict]) -> None:
    """full_x: the baseline's full-step time over this provider's, shape by shape."""
    base = {(r["M"], r["H"]): r["full_ms"] for r in rows if r["provider"] == BASELINE}
    for r in rows:
        b = base.get((r["M"], r["H"]))
        r[f"full_x_vs_{BASELINE}"] = b / r["full_ms"] if b else float("nan")


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
        shapes = [(16384, 4096)] + ([(4096, 4096), (4096, 32768)] if device == "cuda" else [])
        reps = 20 if device == "cuda" else 3
        if device == "cpu":
            shapes = [(1024, 4096)]
    chosen = providers(device, with_compile=device == "cuda" and not args.no_compile)
    chosen = harness.select_providers(chosen, args.providers)

    env, ceiling = harness.start("fused add + RMSNorm", device, args.dtype, reps)
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
    add_speedups(rows)
    cols = [
        "provider",
        "M",
        "H",
        "fwd_ms",
        "bwd_ms",
        "full_ms",
        "fwd_GBps",
        "bwd_GBps",
        "fwd_%ceil",
        "bwd_%ceil",
        f"full_x_vs_{BASELINE}",
    ]
    harness.print_results(rows, cols, device, f"\ncopy ceiling (this run): {ceiling:.0f} GB/s")
    name = f"fused_add_rms_norm_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    harness.plot_phases(
        [r for r in rows if r["M"] == rows[0]["M"]],
        args.out / f"{name}.png",
        x="H",
        metric="{phase}_GBps",
        title="fused add + RMSNorm {phase}",
        xlabel=f"hidden (M={rows[0]['M']})",
        ylabel="GB/s (the fused op's bytes)",
        ceiling=ceiling,
    )


if __name__ == "__main__":
    main()
