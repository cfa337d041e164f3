"""RoPE speed (forward, backward, full) and peak memory: tigon vs HF eager apply_rotary_pos_emb
and torch.compile of it, on q and k as HF makes them (transposed views of the projections).
Prints a table with GB/s and the copy ceiling of the same run, and writes CSV/JSON and a PNG.

    python benchmarks/python/bench_rope.py --device cuda            # GPU table (issue targets)
    python benchmarks/python/bench_rope.py --device cpu --quick     # 2-core CPU check
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as hf_rope

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import tigon  # noqa: E402


def providers(with_compile: bool) -> dict:
    p = {
        "tigon": tigon.ops.apply_rotary_pos_emb,
        "tigon in_place": lambda q, k, c, s: tigon.ops.rope(q, k, c, s, in_place=True),
        "HF eager": hf_rope,
    }
    if with_compile:
        p["compile(HF)"] = torch.compile(hf_rope)
    return p


def bench_one(fn, b: int, t: int, hq: int, hk: int, d: int, dtype, device: str, reps: int):
    torch.manual_seed(0)
    q_proj = torch.randn(b, t, hq * d, device=device, dtype=dtype, requires_grad=True)
    k_proj = torch.randn(b, t, hk * d, device=device, dtype=dtype, requires_grad=True)
    angles = torch.arange(t, device=device, dtype=torch.float32)[:, None] * torch.rand(
        d // 2, device=device
    )
    emb = torch.cat((angles, angles), -1)[None].expand(b, t, d)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)

    def forward():
        q = q_proj.view(b, t, hq, d).transpose(1, 2)
        k = k_proj.view(b, t, hk, d).transpose(1, 2)
        return fn(q, k, cos, sin)

    qe, ke = forward()
    dq, dk = torch.randn_like(qe), torch.randn_like(ke)

    def backward():
        # Fresh gradient buffers each rep: the in-place provider overwrites them.
        torch.autograd.grad((qe, ke), (q_proj, k_proj), (dq.clone(), dk.clone()), retain_graph=True)

    def full():
        a, c = forward()
        torch.autograd.grad((a, c), (q_proj, k_proj), (dq.clone(), dk.clone()))

    def clones():
        dq.clone(), dk.clone()

    size = dtype.itemsize
    elements = b * t * (hq + hk) * d
    table_bytes = 2 * b * t * d * size
    row = {"B": b, "T": t, "Hq": hq, "Hkv": hk, "D": d}
    row["fwd_ms"] = harness.time_ms(forward, device, reps)
    clone_ms = harness.time_ms(clones, device, reps)  # subtracted: not part of the op
    row["bwd_ms"] = max(harness.time_ms(backward, device, reps) - clone_ms, 1e-6)
    row["full_ms"] = max(harness.time_ms(full, device, reps) - clone_ms, 1e-6)
    direction_bytes = elements * 2 * size + table_bytes
    row["fwd_GBps"] = direction_bytes / row["fwd_ms"] / 1e6
    row["bwd_GBps"] = direction_bytes / row["bwd_ms"] / 1e6
    row["full_GBps"] = 2 * direction_bytes / row["full_ms"] / 1e6
    if device == "cuda":
        del qe, ke
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def plot(rows: list[dict], ceiling: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, phase in zip(axes, ("fwd", "bwd", "full"), strict=True):
        for name in dict.fromkeys(r["provider"] for r in rows):
            pts = sorted((r["T"], r[f"{phase}_ms"]) for r in rows if r["provider"] == name)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens per sequence T (B=4, 32/8 heads, D=128)")
        ax.set_ylabel("ms")
        ax.set_title(f"RoPE {phase} (copy ceiling {ceiling:.0f} GB/s)")
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
        tokens, reps = [1024, 2048, 4096, 8192], 100
        if args.quick:
            tokens, reps = [4096, 8192], 30
    else:
        tokens, reps = [256, 512, 1024], 5
        if args.quick:
            tokens, reps = [256], 3
    shapes = [(4, t, 32, 8, 128) for t in tokens]
    chosen = providers(with_compile=device == "cuda" and not args.no_compile)
    if args.providers:
        chosen = {k: v for k, v in chosen.items() if k in args.providers.split(",")}

    env = harness.environment(device)
    env["dtype"] = args.dtype
    ceiling = harness.copy_ceiling_gbps(device, reps)
    env["copy_ceiling_GBps"] = ceiling
    print("RoPE benchmark:", ", ".join(f"{k}={v}" for k, v in env.items()))
    rows = []
    total = len(shapes) * len(chosen)
    for shape in shapes:
        for name, fn in chosen.items():
            print(f"[{len(rows) + 1}/{total}] {name} {shape}", file=sys.stderr, flush=True)
            r = {"provider": name, **bench_one(fn, *shape, dtype, device, reps)}
            for phase in ("fwd", "bwd", "full"):
                r[f"{phase}_%ceil"] = 100 * r[f"{phase}_GBps"] / ceiling
            rows.append(r)
    # Speedups of tigon's full step against each peer on the same shape.
    for r in rows:
        if r["provider"] != "tigon":
            continue
        for peer in rows:
            if peer["T"] == r["T"] and peer["provider"] in ("HF eager", "compile(HF)"):
                r[f"x_vs_{peer['provider']}"] = peer["full_ms"] / r["full_ms"]
    cols = ["provider", "T", "fwd_ms", "bwd_ms", "full_ms", "fwd_GBps", "bwd_GBps", "full_GBps"]
    cols += ["fwd_%ceil", "bwd_%ceil", "full_%ceil", "x_vs_HF eager", "x_vs_compile(HF)"]
    if device == "cuda":
        cols.append("peak_MB")
    print(f"\ncopy ceiling (this run): {ceiling:.0f} GB/s")
    harness.print_table(rows, cols)
    print(
        "targets (H200): full at T=4096 >= 1.3x compile(HF); full at T=8192 >= 2x HF eager "
        "(B=4 x T tokens)"
    )
    name = f"rope_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    plot(rows, ceiling, args.out / f"{name}.png")


if __name__ == "__main__":
    main()
