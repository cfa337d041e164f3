"""A/B sweep of the cross-entropy kernel's developer overrides (TIGON_CROSS_ENTROPY_TUNING, read
once per process, so each setting runs in its own process): in-place forward+backward time of one
shape (or the loss alone, --loss-only), the main kernel's own time from the profiler, and both
against the copy ceiling of the run.

    python benchmarks/python/sweep_cross_entropy_tuning.py --device cuda \\
        --tunings "stages=1" "stages=2" "stages=1,max_cluster=8,slice_kb=32"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import harness
import torch

import tigon


def measure(n: int, v: int, reps: int, loss_only: bool) -> dict:
    """One setting (this process's environment): full step and kernel-only times."""
    logits = torch.randn(n, v, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, v, (n,), device="cuda")
    x = logits.clone().requires_grad_(not loss_only)

    def step() -> None:
        if loss_only:
            with torch.no_grad():
                tigon.ops.cross_entropy(x, target)
            return
        x.grad = None
        tigon.ops.cross_entropy(x, target, in_place=True).backward()

    full_ms = harness.time_ms(step, "cuda", reps)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    kernels: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(e.name, []).append(e.device_time_total / 1e3)
    name, times = max(kernels.items(), key=lambda kv: sum(kv[1]))
    return {"full_ms": full_ms, "kernel_ms": sum(times) / len(times), "kernel": name[:60]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda"])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--v", type=int, default=128256)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--tunings", nargs="+", default=["stages=1", "stages=2"])
    ap.add_argument("--loss-only", action="store_true", help="the forward without a gradient")
    ap.add_argument("--out", default=None, help="a JSON file for the rows")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.n, args.v, args.reps, args.loss_only)))
        return
    ceiling = harness.copy_ceiling_gbps("cuda", 20)
    # One read of the bf16 logits, and one write of the gradient unless loss-only.
    gb = (1 if args.loss_only else 2) * args.n * args.v * 2 / 1e9
    what = "loss only" if args.loss_only else "in place fwd+bwd"
    print(f"cross-entropy {args.n}x{args.v} bf16 {what}, copy ceiling {ceiling:.0f} GB/s")
    print(f"{'tuning':<40} {'full ms':>8} {'%ceil':>6} {'kernel ms':>9} {'%ceil':>6}")
    rows = []
    for t in args.tunings:
        print(f"  running {t}", file=sys.stderr, flush=True)
        env = dict(os.environ, TIGON_CROSS_ENTROPY_TUNING=t)
        cmd = [
            sys.executable,
            __file__,
            "--child",
            t,
            "--n",
            str(args.n),
            "--v",
            str(args.v),
            "--reps",
            str(args.reps),
        ] + (["--loss-only"] if args.loss_only else [])
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{t:<40} FAILED: {done.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        r["tuning"] = t
        r["full_pct"] = 100 * gb / r["full_ms"] * 1e3 / ceiling
        r["kernel_pct"] = 100 * gb / r["kernel_ms"] * 1e3 / ceiling
        rows.append(r)
        print(
            f"{t:<40} {r['full_ms']:8.3f} {r['full_pct']:6.1f} {r['kernel_ms']:9.3f} "
            f"{r['kernel_pct']:6.1f}   {r['kernel']}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"ceiling_GBps": ceiling, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
