"""RoPE speed (forward, backward, full) and peak memory: tigon vs HF eager apply_rotary_pos_emb
and torch.compile of it, on q and k as HF makes them (transposed views of the projections).
Prints a table with GB/s and the copy ceiling of the same run, and writes CSV/JSON and a PNG;
then host time per call at B=1, T=4 (harness.host_table).

    python benchmarks/python/bench_rope.py --device cuda            # GPU table (issue targets)
    python benchmarks/python/bench_rope.py --device cpu --quick     # 2-core CPU check
"""

from __future__ import annotations

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


def steps(fn, b: int, t: int, hq: int, hk: int, d: int, dtype, device: str):
    """fn's forward, full step, the gradient clones the full step makes, and the backward of one
    retained forward."""
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

    return forward, full, clones, backward


def bench_one(fn, b: int, t: int, hq: int, hk: int, d: int, dtype, device: str, reps: int):
    forward, full, clones, backward = steps(fn, b, t, hq, hk, d, dtype, device)
    size = dtype.itemsize
    elements = b * t * (hq + hk) * d
    table_bytes = 2 * b * t * d * size
    direction_bytes = elements * 2 * size + table_bytes
    row = {"B": b, "T": t, "Hq": hq, "Hkv": hk, "D": d}
    # The gradient clones are timed and subtracted: not part of the op.
    row |= harness.time_phases(
        forward, backward, full, device, reps, direction_bytes, direction_bytes, overhead=clones
    )
    if device == "cuda":
        del backward  # the retained forward
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def main() -> None:
    ap = harness.arg_parser(__doc__, with_providers=True)
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
    if device == "cpu":
        # The training demo's small Llama (B=8, T=128, 4/2 heads of 32) and issue 42's 4096 x 4096
        # (B=1, T=4096, 32 heads of 128; 8 KV heads).
        shapes = [(8, 128, 4, 2, 32), (1, 4096, 32, 8, 128)] + ([] if args.quick else shapes)
    chosen = providers(with_compile=device == "cuda" and not args.no_compile)
    chosen = harness.select_providers(chosen, args.providers)

    env, ceiling = harness.start("RoPE", device, args.dtype, reps)
    rows = []
    total = len(shapes) * len(chosen)
    for shape in shapes:
        for name, fn in chosen.items():
            print(f"[{len(rows) + 1}/{total}] {name} {shape}", file=sys.stderr, flush=True)
            r = {"provider": name, **bench_one(fn, *shape, dtype, device, reps)}
            harness.add_percent_of_ceiling(r, ceiling)
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
    harness.print_results(rows, cols, device, f"\ncopy ceiling (this run): {ceiling:.0f} GB/s")
    print(
        "targets (H200): full at T=4096 >= 1.3x compile(HF); full at T=8192 >= 2x HF eager "
        "(B=4 x T tokens)"
    )
    name = f"rope_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    tiny = {k: steps(fn, 1, 4, 32, 8, 128, dtype, device)[:3] for k, fn in chosen.items()}
    harness.host_table(
        tiny, "1x4 32/8x128", device, env, args.out, f"rope_host_{device}_{args.dtype}"
    )
    harness.plot_phases(
        rows,
        args.out / f"{name}.png",
        x="T",
        metric="{phase}_ms",
        title=f"RoPE {{phase}} (copy ceiling {ceiling:.0f} GB/s)",
        xlabel="tokens per sequence T (B=4, 32/8 heads, D=128)",
        ylabel="ms",
        log_y=True,
    )


if __name__ == "__main__":
    main()
