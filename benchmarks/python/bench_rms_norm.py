"""RMSNorm speed (forward, backward, full) and peak memory: tigon vs HF eager, torch.compile(HF),
torch.nn.functional.rms_norm. Prints a table with GB/s and the copy ceiling of the same run, and
writes CSV/JSON and a PNG plot; then the QK-norm table (RMSNorm over head_dim of a [B, T, heads,
D] view, as Qwen3's q_norm / k_norm, and of its [B, heads, T, D] transpose; peers HF's
Qwen3RMSNorm on the same view and torch.compile of it); then host time per call at 4x4096
(harness.host_table).

    python benchmarks/python/bench_rms_norm.py --device cuda            # GPU tables (issue targets)
    python benchmarks/python/bench_rms_norm.py --device cpu --quick     # 2-core CPU check
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

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


def qk_providers(with_compile: bool) -> dict:
    p = {
        "tigon llama": lambda d: tigon.nn.RMSNorm(d, casting_mode="llama"),
        "HF Qwen3RMSNorm": lambda d: Qwen3RMSNorm(d, eps=1e-6),
        "torch F.rms_norm": lambda d: torch.nn.RMSNorm(d, eps=1e-6),
    }
    if with_compile:
        p["compile(HF Qwen3RMSNorm)"] = lambda d: torch.compile(Qwen3RMSNorm(d, eps=1e-6))
    return p


def bench_qk(make, shape: tuple[int, int, int, int], layout: str, dtype, device, reps) -> dict:
    """RMSNorm over D of q = [B, T, heads, D] (layout "BTHD": HF Qwen3's q_norm input, a
    contiguous view of q_proj's output) or of q.transpose(1, 2) ("BHTD": rows not one stride apart;
    tigon's torch layer copies such a view today, docs/ops/rms_norm.md)."""
    b, t, heads, d = shape
    torch.manual_seed(0)
    module = make(d)
    inner = getattr(module, "_orig_mod", module)
    with torch.no_grad():
        inner.weight.copy_(torch.randn(d) * 0.1 + 1.0)
    module = module.to(device=device, dtype=dtype)
    base = torch.randn(b, t, heads, d, device=device, dtype=dtype, requires_grad=True)
    x = base if layout == "BTHD" else base.transpose(1, 2)
    y = module(x)
    dy = torch.randn_like(y)

    def forward():
        return module(x)

    def backward():
        torch.autograd.grad(y, (base, inner.weight), dy, retain_graph=True)

    def full():
        torch.autograd.grad(module(x), (base, inner.weight), dy)

    m = b * t * heads
    fwd_bytes = m * d * (dtype.itemsize + y.dtype.itemsize) + 4 * m
    bwd_bytes = m * d * (y.dtype.itemsize + 2 * dtype.itemsize) + 4 * m
    row = {"layout": layout, "M": m, "H": d}
    return row | harness.time_phases(forward, backward, full, device, reps, fwd_bytes, bwd_bytes)


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

    qk_shape = (1 if args.quick else 4, 4096, 32, 128) if device == "cuda" else (1, 512, 8, 128)
    qk_chosen = harness.select_providers(
        qk_providers(device == "cuda" and not args.no_compile), args.providers
    )
    qk_rows = []
    for layout in ("BTHD", "BHTD"):
        for pname, make in qk_chosen.items():
            print(f"[QK-norm] {pname} {layout} {qk_shape}", file=sys.stderr, flush=True)
            r = {"provider": pname, **bench_qk(make, qk_shape, layout, dtype, device, reps)}
            harness.add_percent_of_ceiling(r, ceiling, ("fwd", "bwd"))
            qk_rows.append(r)
            torch._dynamo.reset()
    harness.print_results(
        qk_rows,
        ["provider", "layout", *cols[1:]],
        device,
        f"\nQK-norm over D of {qk_shape} [B, T, heads, D] (BTHD) and its transpose (BHTD)",
    )
    harness.save(args.out, f"rms_norm_qk_{device}_{args.dtype}", env, qk_rows)
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
