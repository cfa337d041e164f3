"""Shared benchmark plumbing: timing, copy ceiling, environment, tables, CSV/JSON/PNG output."""

from __future__ import annotations

import csv
import datetime as _dt
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch


def environment(device: str) -> dict:
    """What a result means nothing without: hardware, versions, date."""
    import transformers

    import tigon

    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tigon": tigon.__version__,
        "python": platform.python_version(),
    }
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
        try:
            import triton

            env["triton"] = triton.__version__
        except ImportError:
            pass
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["threads"] = torch.get_num_threads()
    return env


def time_ms(fn: Callable[[], object], device: str, reps: int, warmup: int = 3) -> float:
    """Median wall time of fn in ms. On CUDA, CUDA events around each rep, L2 flushed between."""
    for _ in range(warmup):
        fn()
    if device != "cuda":
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(samples)
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    for i in range(reps):
        flush.zero_()  # evict L2 so every rep reads from HBM
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def time_ms_back_to_back(fn: Callable[[], object], reps: int, warmup: int = 3) -> float:
    """Mean CUDA time of fn in ms over `reps` calls issued back to back, with no L2 flush: the
    steady state of a kernel whose inputs may still sit in L2 (small shapes), and without the
    write-back of a flush's dirty lines that `time_ms` charges to the first kernel after it."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def copy_ceiling_gbps(device: str, reps: int) -> float:
    """Device-to-device copy bandwidth (bytes read + written) measured in this run."""
    n = (1 << 30) if device == "cuda" else (1 << 27)
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, reps)
    return 2 * n / ms / 1e6


def peak_memory_mb(fn: Callable[[], object]) -> float:
    """Peak CUDA memory allocated by fn beyond what was allocated before it (MB)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.rjust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).rjust(widths[c]) for c in columns))


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if v < 100 else f"{v:.0f}"
    return str(v)


def save(out_dir: Path, name: str, env: dict, rows: list[dict]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / f"{name}.json", "w") as f:
        json.dump({"environment": env, "results": rows}, f, indent=1)
    keys = sorted(
        {k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99
    )
    with open(out_dir / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out_dir / name}.json and .csv")
