"""What limits each RMSNorm kernel: profiles tigon's forward and backward, torch.nn.functional.rms_norm and torch.compile of the HF module at
one shape with Nsight Compute, and prints one table, a row per kernel: time, DRAM throughput and
bytes, XU and ALU pipe use, registers, block and grid, occupancy (theoretical and achieved) and
the three largest warp stall reasons. Each case runs in its own `ncu --clock-control none`
process, profiling that one op call (setup and warm-up, compilation included, happen outside the
profiled range); ncu flushes the caches before each kernel.

    TIGON_TORCH_LIBRARY=build/gpu/bindings/torch/_tigon_torch*.so PYTHONPATH=python \\
        python dev/profile_rms_norm.py --shape 16384x4096 --out prof
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

CASES = ["tigon fwd", "tigon bwd", "torch fwd", "torch bwd", "compile fwd", "compile bwd"]
SECTIONS = ["SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis"]
STALL = re.compile(r"smsp__average_warps?_issue_stalled_(\w+)_per_issue_active\.ratio$")


def run_case(case: str, m: int, h: int) -> None:
    """The profiled program: one call of `case`, between cudaProfilerStart and Stop."""
    import torch

    torch.manual_seed(0)
    x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    provider, phase = case.split()
    if provider == "tigon":
        import tigon  # noqa: F401  (loads the operator library)

        ops = torch.ops.tigon
        y, rstd = ops.rms_norm_fwd(x, w, 1e-6, 0.0, "llama", False)
        if phase == "fwd":
            op = lambda: ops.rms_norm_fwd(x, w, 1e-6, 0.0, "llama", False)  # noqa: E731
        else:
            op = lambda: ops.rms_norm_bwd(dy, x, w, rstd, 0.0, "llama")  # noqa: E731
    else:
        if provider == "torch":
            module = torch.nn.RMSNorm(h, eps=1e-6)
        else:
            from transformers.models.llama.modeling_llama import LlamaRMSNorm

            module = torch.compile(LlamaRMSNorm(h, eps=1e-6))
        module = module.to(device="cuda", dtype=torch.bfloat16)
        xg = x.clone().requires_grad_()
        params = (xg, *module.parameters())
        if phase == "fwd":
            op = lambda: module(xg)  # noqa: E731
        else:
            y = module(xg)
            op = lambda: torch.autograd.grad(y, params, dy, retain_graph=True)  # noqa: E731
    for _ in range(3):
        op()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    op()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def parse_raw_csv(text: str) -> list[dict]:
    """ncu --csv --page raw: a header row, a units row, then a row per kernel."""
    start = text.find('"ID"')
    if start < 0:
        return []
    rows = list(csv.reader(io.StringIO(text[start:])))
    header, kernels = rows[0], rows[2:]
    return [dict(zip(header, r)) for r in kernels if len(r) == len(header)]


def number(row: dict, key: str) -> float | None:
    try:
        return float(row[key].replace(",", ""))
    except (KeyError, ValueError):
        return None


def summarize(case: str, row: dict) -> dict:
    stalls = sorted(
        ((STALL.match(k).group(1), number(row, k) or 0.0) for k in row if STALL.match(k)),
        key=lambda kv: -kv[1],
    )
    name = row.get("Kernel Name", "?")
    seconds = (number(row, "gpu__time_duration.sum") or 0.0) / 1e9
    short_name = re.sub(r"\(.*$", "", name.split("<")[0].split("::")[-1]).removeprefix("void ")
    return {
        "case": case,
        "kernel": short_name[:40],
        "us": seconds * 1e6,
        "dram_%": number(row, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        # Bytes that reached DRAM while the kernel ran: written lines still in L2 at its end are
        # not counted, so a kernel whose output fits in L2 shows less than it moves.
        "dram_MB": (number(row, "dram__bytes.sum.per_second") or 0.0) * seconds / 1e6,
        # The XU pipe (conversions, MUFU, integer division) is narrow: a busy one caps the kernel.
        "xu_%": number(row, "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed"),
        "alu_%": number(row, "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed"),
        "regs": number(row, "launch__registers_per_thread"),
        "block": number(row, "launch__block_size"),
        "grid": number(row, "launch__grid_size"),
        "occ_theory_%": number(row, "sm__maximum_warps_per_active_cycle_pct"),
        "occ_achieved_%": number(row, "sm__warps_active.avg.pct_of_peak_sustained_active"),
        "stalls": ", ".join(f"{k} {v:.1f}" for k, v in stalls[:3]),
    }


def cell(v) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def profile(case: str, m: int, h: int, out: Path) -> list[dict]:
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw"]
    for s in SECTIONS:
        cmd += ["--section", s]
    cmd += [sys.executable, __file__, "--child", case, "--shape", f"{m}x{h}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    tag = re.sub(r"[^A-Za-z0-9]+", "_", case).strip("_")
    (out / f"{tag}.csv").write_text(done.stdout)
    rows = parse_raw_csv(done.stdout)
    if done.returncode != 0 or not rows:
        print(f"  {case}: ncu failed (exit {done.returncode})\n{done.stderr[-1500:]}")
        return []
    return [summarize(case, r) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shape", default="16384x4096", help="MxH")
    ap.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated subset of " + str(CASES)
    )
    ap.add_argument("--out", type=Path, default=Path("profile_results"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    m, h = (int(v) for v in args.shape.split("x"))
    if args.child:
        run_case(args.child, m, h)
        return

    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for case in args.cases.split(","):
        print(f"profiling {case} at {m}x{h}", flush=True)
        results += profile(case, m, h, args.out)
    (args.out / "profile_rms_norm.json").write_text(json.dumps(results, indent=1))
    cols = ["case", "kernel", "us", "dram_%", "dram_MB", "xu_%", "alu_%", "regs"]
    cols += ["block", "grid"]
    cols += ["occ_theory_%", "occ_achieved_%", "stalls"]
    cells = [[cell(r[c]) for c in cols] for r in results]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print(f"\nRMSNorm kernels at {m}x{h} bf16 (stalls: cycles per issued instruction)")
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


if __name__ == "__main__":
    main()
