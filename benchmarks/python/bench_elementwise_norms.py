"""DyT and PolyNorm speed (forward, backward, full) and peak memory: tigon vs the reference module
in eager PyTorch, torch.compile of it, and Liger-Kernel's LigerDyT / LigerPolyNorm where
importable. Prints a table per op with GB/s and the copy ceiling of the same run, and writes
CSV/JSON and a PNG plot per op.

    python benchmarks/python/bench_elementwise_norms.py --device cuda            # issue targets
    python benchmarks/python/bench_elementwise_norms.py --device cuda --quick    # about a minute
    python benchmarks/python/bench_elementwise_norms.py --device cpu --quick --op dyt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import tigon  # noqa: E402


class DyTReference(nn.Module):
    """The peer's test reference: ``gamma * tanh(alpha * x) + beta``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), 0.5))
        self.gamma = nn.Parameter(torch.ones(hidden))
        self.beta = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gamma * torch.tanh(self.alpha * x) + self.beta


class PolyNormReference(nn.Module):
    """The peer's test reference (naive PolyCom): ``w0 norm(x^3) + w1 norm(x^2) + w2 norm(x) + b``."""

    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((3,), 1.0 / 3.0))
        self.bias = nn.Parameter(torch.tensor(1.0))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def norm(u: torch.Tensor) -> torch.Tensor:
            return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + self.eps)

        w = self.weight
        return w[0] * norm(x**3) + w[1] * norm(x**2) + w[2] * norm(x) + self.bias


def _liger(name: str):
    try:
        import liger_kernel.transformers as lk  # noqa: PLC0415
    except Exception:  # noqa: BLE001 (any import failure: the peer is absent)
        return None
    return getattr(lk, name, None)


def providers(op: str, device: str, with_compile: bool) -> dict:
    if op == "dyt":
        p = {"tigon DyT": lambda h: tigon.nn.DyT(h), "torch eager (ref)": DyTReference}
        if with_compile:
            p["compile(ref)"] = lambda h: torch.compile(DyTReference(h))
        liger = _liger("LigerDyT") if device == "cuda" else None
        if liger is not None:
            p["liger LigerDyT"] = lambda h: liger(h)
    else:
        p = {
            "tigon PolyNorm": lambda h: tigon.nn.PolyNorm(),
            "torch eager (ref)": PolyNormReference,
        }
        if with_compile:
            p["compile(ref)"] = lambda h: torch.compile(PolyNormReference(h))
        liger = _liger("LigerPolyNorm") if device == "cuda" else None
        if liger is not None:
            p["liger LigerPolyNorm"] = lambda h: liger()
    return p


def steps(make, m: int, h: int, dtype, device: str):
    """Provider `make`'s forward, full step and backward (of one retained forward) at m x h."""
    torch.manual_seed(0)
    module = make(h)
    inner = getattr(module, "_orig_mod", module)
    module = module.to(device=device, dtype=dtype)
    params = [p for p in inner.parameters()]
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
    row = {"M": m, "H": h}
    row |= harness.time_phases(
        forward, backward, full, device, reps, 2 * m * h * size, 3 * m * h * size
    )
    if device == "cuda":
        del y, backward
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def run_op(op: str, args, dtype, device: str) -> None:
    if device == "cuda":
        # 16M elements for H 1024..16384 (the targets), then 64M at 4096.
        shapes = [(16 * 1024 * 1024 // h, h) for h in (1024, 2048, 4096, 8192, 16384)]
        shapes += [(16384, 4096)]
        reps = 100
    else:
        shapes = [(1024, h) for h in (1024, 4096)]
        reps = 5
    if args.quick:
        shapes = [(16384, 1024), (4096, 4096), (1024, 16384)] if device == "cuda" else [(256, 1024)]
        reps = 20 if device == "cuda" else 3
    chosen = providers(op, device, with_compile=device == "cuda" and not args.no_compile)
    chosen = harness.select_providers(chosen, args.providers)
    title = "DyT" if op == "dyt" else "PolyNorm"
    env, ceiling = harness.start(title, device, args.dtype, reps)
    rows = []
    total = len(shapes) * len(chosen)
    for m, h in shapes:
        for name, make in chosen.items():
            print(f"[{len(rows) + 1}/{total}] {name} {m}x{h}", file=sys.stderr, flush=True)
            r = {"provider": name, **bench_one(make, m, h, dtype, device, reps)}
            harness.add_percent_of_ceiling(r, ceiling, ("fwd", "bwd"))
            rows.append(r)
            torch._dynamo.reset()
    cols = ["provider", "M", "H", "fwd_ms", "bwd_ms", "full_ms", "fwd_GBps", "bwd_GBps"]
    cols += ["full_GBps", "fwd_%ceil", "bwd_%ceil"]
    if device == "cuda":
        cols.append("peak_MB")
    harness.print_results(
        rows, cols, device, f"\n{title}: copy ceiling (this run) {ceiling:.0f} GB/s"
    )
    name = f"{op}_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    sixteen_m = [r for r in rows if r["M"] * r["H"] == 16 * 1024 * 1024] or rows
    harness.plot_phases(
        sixteen_m,
        args.out / f"{name}.png",
        x="H",
        metric="{phase}_GBps",
        title=f"{title} {{phase}}",
        xlabel="hidden (16M elements)",
        ylabel="GB/s",
        ceiling=ceiling,
    )


def main() -> None:
    ap = harness.arg_parser(__doc__, with_providers=True)
    ap.add_argument("--op", default="both", choices=["dyt", "poly_norm", "both"])
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    for op in ("dyt", "poly_norm") if args.op == "both" else (args.op,):
        run_op(op, args, dtype, args.device)


if __name__ == "__main__":
    main()
