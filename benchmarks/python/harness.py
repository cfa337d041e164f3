"""Shared benchmark plumbing: timing, copy ceiling, environment, tables, CSV/JSON/PNG output."""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

PHASES = ("fwd", "bwd", "full")


def arg_parser(doc: str | None, *, with_providers: bool = False) -> argparse.ArgumentParser:
    """The options every op benchmark takes: --device, --dtype, --quick, --no-compile, --out
    (and --providers); a script adds its own before parse_args()."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and reps")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile providers")
    if with_providers:
        ap.add_argument("--providers", default="", help="comma-separated subset of provider names")
    ap.add_argument("--out", default="bench_results", type=Path)
    return ap


def select_providers(chosen: dict, subset: str) -> dict:
    """`chosen` restricted to the comma-separated names in `subset` (all of them when empty)."""
    if not subset:
        return chosen
    names = subset.split(",")
    return {k: v for k, v in chosen.items() if k in names}


def start(title: str, device: str, dtype: str, reps: int) -> tuple[dict, float]:
    """The run's environment (with dtype and the copy ceiling measured now), printed after
    `title`; returns it and the ceiling in GB/s."""
    env = environment(device)
    env["dtype"] = dtype
    ceiling = copy_ceiling_gbps(device, reps)
    env["copy_ceiling_GBps"] = ceiling
    print(f"{title} benchmark:", ", ".join(f"{k}={v}" for k, v in env.items()))
    return env, ceiling


def add_percent_of_ceiling(row: dict, ceiling: float, phases=PHASES) -> None:
    """row["<phase>_%ceil"]: the phase's GB/s as a percentage of the copy ceiling."""
    for phase in phases:
        row[f"{phase}_%ceil"] = 100 * row[f"{phase}_GBps"] / ceiling


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


# GPU clock cycles (about 1 ms at Hopper clocks) of spinning before each timed rep; see time_ms.
_HOST_HEAD_START_CYCLES = 2_000_000


def time_ms(fn: Callable[[], object], device: str, reps: int, warmup: int = 3) -> float:
    """Median wall time of fn in ms. On CUDA, the GPU time between CUDA events around each rep, L2
    flushed (clean) between, the host's launch overhead kept out of it."""
    for _ in range(warmup):
        fn()
    if device != "cuda":
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(samples)
    # L2 is flushed by *reading* 256 MB: that leaves it full of clean lines, so every rep reads
    # its inputs from HBM and pays no write-back. A zero_() flush (triton's do_bench) leaves ~50 MB
    # of dirty lines whose write-back lands in the timed region: on an H100 it cost a 64 MB copy
    # 13% of its bandwidth and the 16384x1024 RMSNorm forward 5 us of 35 (tools/l2_flush_probe.py).
    flush = torch.ones(64 * 1024 * 1024, dtype=torch.float32, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    for i in range(reps):
        flush.sum()
        # The GPU then spins for about a millisecond while the host enqueues fn, so the timed
        # region holds GPU work only: launching an autograd backward or a compiled graph's can
        # take the host longer than the flush takes the GPU, and that idle gap was timed.
        torch.cuda._sleep(_HOST_HEAD_START_CYCLES)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def time_phases(
    forward: Callable[[], object],
    backward: Callable[[], object],
    full: Callable[[], object],
    device: str,
    reps: int,
    fwd_bytes: float,
    bwd_bytes: float,
    overhead: Callable[[], object] | None = None,
) -> dict:
    """fwd/bwd/full_ms and _GBps of an op that moves fwd_bytes forward and bwd_bytes backward.
    `overhead` (work backward and full do that is not the op's, e.g. cloning gradients) is timed
    too and subtracted from them."""
    row = {"fwd_ms": time_ms(forward, device, reps)}
    extra_ms = time_ms(overhead, device, reps) if overhead is not None else 0.0
    row["bwd_ms"] = max(time_ms(backward, device, reps) - extra_ms, 1e-6)
    row["full_ms"] = max(time_ms(full, device, reps) - extra_ms, 1e-6)
    row["fwd_GBps"] = fwd_bytes / row["fwd_ms"] / 1e6
    row["bwd_GBps"] = bwd_bytes / row["bwd_ms"] / 1e6
    row["full_GBps"] = (fwd_bytes + bwd_bytes) / row["full_ms"] / 1e6
    return row


def time_ms_back_to_back(fn: Callable[[], object], reps: int, warmup: int = 3) -> float:
    """Mean CUDA time of fn in ms over `reps` calls issued back to back, with no L2 flush: the
    steady state of a kernel whose inputs may still sit in L2 (small shapes)."""
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


def host_us(
    fn: Callable[[], object], device: str, calls: int = 20, rounds: int = 5, warmup: int = 5
) -> float:
    """Host time of one call of fn in us: the wall time of `calls` calls issued back to back,
    divided by `calls`, the least of `rounds` such rounds (what other processes and GC pauses add
    is dropped), after `warmup` calls (which also compile a torch.compile provider). The device is
    synchronized before and after each round, outside the timed region, never between calls: on
    CUDA the figure is the host's launch path (Python, dispatcher, autograd, the library's own
    host code), not the kernels, as long as a round's launches do not fill the launch queue
    (about a thousand) and block the host, which a tiny shape ensures. On the CPU the op runs on
    the host, so the figure includes its compute."""
    for _ in range(warmup):
        fn()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    samples = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        sync()
    return min(samples)


def host_table(
    steps: dict[str, tuple], shape: str, device: str, env: dict, out_dir: Path, name: str
) -> list[dict]:
    """Rows {provider, shape, fwd_host_us, full_host_us}: host_us of each provider's
    (forward, forward+backward[, overhead]) callables at the tiny `shape`, forward None where not
    timed; `overhead` (work the full step does that is not the op's, e.g. restoring inputs) is
    timed too and subtracted. Printed under a heading and saved as `name` (CSV/JSON)."""
    rows = []
    for provider, (forward, full, *overhead) in steps.items():
        torch._dynamo.reset()  # compile afresh for this shape: no automatic-dynamic recompile
        extra = host_us(overhead[0], device) if overhead else 0.0
        rows.append(
            {
                "provider": provider,
                "shape": shape,
                "fwd_host_us": host_us(forward, device) if forward is not None else None,
                "full_host_us": host_us(full, device) - extra,
            }
        )
    what = "the launch path, no device sync between" if device == "cuda" else "compute included"
    print(f"\nhost time per call (us) at a tiny shape: calls issued back to back ({what})")
    print_table(rows, ["provider", "shape", "fwd_host_us", "full_host_us"])
    save(out_dir, name, env, rows)
    return rows


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


def print_results(rows: list[dict], columns: list[str], device: str, heading: str) -> None:
    """`heading`, then the table of `columns`, with the peak memory column on CUDA."""
    print(heading)
    print_table(rows, columns + (["peak_MB"] if device == "cuda" else []))


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


def plot_phases(
    rows: list[dict],
    path: Path,
    *,
    x: str,
    metric: str,
    title: str,
    xlabel: str,
    ylabel: str,
    ceiling: float | None = None,
    log_y: bool = False,
) -> None:
    """A PNG with one panel per phase: row[metric.format(phase=...)] against row[x] (log2 axis),
    one line per provider, and the copy ceiling as a dashed line when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, phase in zip(axes, PHASES, strict=True):
        for name in dict.fromkeys(r["provider"] for r in rows):
            pts = sorted(
                (r[x], r[metric.format(phase=phase)]) for r in rows if r["provider"] == name
            )
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        if ceiling is not None:
            ax.axhline(ceiling, color="k", ls="--", label="copy ceiling")
        ax.set_xscale("log", base=2)
        if log_y:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title.format(phase=phase))
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")
