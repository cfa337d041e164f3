"""Sweeps the RMSNorm CUDA launch choices (struct Tuning in src/cuda/rms_norm/layout.cuh) on this
GPU: each configuration runs in its own process with TIGON_RMS_NORM_TUNING set, timing the forward
and backward operators alone (torch.ops.tigon.rms_norm_*), and the table shows each one's share of
the copy ceiling, so the defaults can be chosen from data.

    TIGON_TORCH_LIBRARY=build/gpu/bindings/torch/_tigon_torch*.so PYTHONPATH=python \\
        python tools/tune_rms_norm.py --config "" --config "bwd_block_threads=512" --out results
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "python"))
import harness  # noqa: E402

DEFAULT_SHAPES = [
    (4096, 1024),
    (4096, 4096),
    (16384, 1024),
    (16384, 2048),
    (16384, 4096),
    (16384, 8192),
    (8192, 16384),
    (4096, 32768),
    (256, 65536),
    (1024, 65536),
]


def measure(shapes: list[tuple[int, int]], modes: list[str], reps: int) -> list[dict]:
    import tigon  # noqa: F401  (loads the operator library)

    rows = []
    for m, h in shapes:
        for mode in modes:
            torch.manual_seed(0)
            x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
            offset = 1.0 if mode == "gemma" else 0.0
            y, rstd = torch.ops.tigon.rms_norm_fwd(x, w, 1e-6, offset, mode, False)
            dy = torch.randn_like(y)
            fwd = harness.time_ms(
                lambda: torch.ops.tigon.rms_norm_fwd(x, w, 1e-6, offset, mode, False), "cuda", reps
            )
            bwd = harness.time_ms(
                lambda: torch.ops.tigon.rms_norm_bwd(dy, x, w, rstd, offset, mode), "cuda", reps
            )
            bwd_warm = harness.time_ms_back_to_back(
                lambda: torch.ops.tigon.rms_norm_bwd(dy, x, w, rstd, offset, mode), reps
            )
            fwd_bytes = m * h * 4 + 4 * m
            bwd_bytes = m * h * 6 + 4 * m + 2 * h
            rows.append(
                {
                    "M": m,
                    "H": h,
                    "mode": mode,
                    "fwd_us": fwd * 1e3,
                    "bwd_us": bwd * 1e3,
                    "bwd_back_to_back_us": bwd_warm * 1e3,
                    "fwd_GBps": fwd_bytes / fwd / 1e6,
                    "bwd_GBps": bwd_bytes / bwd / 1e6,
                }
            )
            print(
                f"  {m}x{h} {mode}: fwd {fwd * 1e3:.1f} us, bwd {bwd * 1e3:.1f} us "
                f"(back to back: {bwd_warm * 1e3:.1f} us)",
                flush=True,
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--config", action="append", help="a TIGON_RMS_NORM_TUNING value ('' = defaults)"
    )
    ap.add_argument("--shape", action="append", help="MxH (default: a standard list)")
    ap.add_argument("--modes", default="llama,gemma")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("tune_results"))
    ap.add_argument(
        "--config-timeout",
        type=float,
        default=None,
        help="seconds one configuration may run before it is killed and the sweep goes on",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    shapes = (
        [tuple(int(v) for v in s.split("x")) for s in args.shape] if args.shape else DEFAULT_SHAPES
    )
    modes = args.modes.split(",")
    if args.child:
        print("RESULT " + json.dumps(measure(shapes, modes, args.reps)), flush=True)
        return

    configs = args.config if args.config else [""]
    ceiling = harness.copy_ceiling_gbps("cuda", 20)
    print(f"copy ceiling (this run): {ceiling:.0f} GB/s", flush=True)
    results: dict[str, list[dict]] = {}
    for i, config in enumerate(configs):
        print(f"[{i + 1}/{len(configs)}] TIGON_RMS_NORM_TUNING={config!r}", flush=True)
        cmd = [sys.executable, __file__, "--child", "--modes", args.modes, "--reps", str(args.reps)]
        for m, h in shapes:
            cmd += ["--shape", f"{m}x{h}"]
        env = dict(os.environ, TIGON_RMS_NORM_TUNING=config)
        # The child's lines (stderr merged, so neither pipe can fill and stall it) are echoed as
        # they come, so a sweep cut short still shows what it measured.
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        # A kernel that hangs under an experimental configuration costs its own time, not the
        # rest of the sweep's.
        killer = threading.Timer(args.config_timeout, proc.kill) if args.config_timeout else None
        if killer:
            killer.start()
        lines = []
        for line in proc.stdout:
            if line.startswith("RESULT "):
                lines.append(line)
            else:
                print(line, end="", flush=True)
        proc.wait()
        timed_out = killer is not None and not killer.is_alive() and proc.returncode != 0
        if killer:
            killer.cancel()
        if timed_out:
            print(f"  killed after --config-timeout {args.config_timeout:g} s", flush=True)
            continue
        if proc.returncode != 0 or not lines:
            print(f"  failed (exit {proc.returncode}), its output above", flush=True)
            continue
        results[config] = json.loads(lines[-1][len("RESULT ") :])

    names = list(results)
    print("\n% of the copy ceiling, forward / backward; configurations:")
    for i, name in enumerate(names):
        print(f"  c{i}: {name or '(defaults)'}")
    header = f"{'M x H':>12} {'mode':>6} " + " ".join(
        f"{'c' + str(i):>11}" for i in range(len(names))
    )
    print(header)
    for r, row in enumerate(results[names[0]] if names else []):
        cells = []
        for name in names:
            other = results[name][r]
            cells.append(
                f"{100 * other['fwd_GBps'] / ceiling:4.0f}/{100 * other['bwd_GBps'] / ceiling:4.0f}"
            )
        label = f"{row['M']}x{row['H']}"
        print(f"{label:>12} {row['mode']:>6} " + " ".join(f"{c:>11}" for c in cells))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tune_rms_norm.json").write_text(
        json.dumps({"ceiling_GBps": ceiling, "results": results}, indent=1)
    )


if __name__ == "__main__":
    main()
