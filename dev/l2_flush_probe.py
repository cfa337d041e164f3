"""How much of a kernel's measured time is the write-back of the L2 flush's dirty lines.

Until 2026-12-05 harness.time_ms flushed L2 with zero_() of 256 MB (as triton.testing.do_bench
does), which leaves dirty lines that the timed kernel writes back; it now flushes by reading. This
times a device copy and the RMSNorm ops after the zero-fill ("zero"), after a flush that leaves
clean lines ("zero+read": the dirty lines are written back before the timed region) and after a
read alone, so the difference can be put in numbers (H100 figures: docs/benchmarks.md).

    TIGON_TORCH_LIBRARY=build/gpu/bindings/torch/_tigon_torch*.so PYTHONPATH=python \
        python dev/l2_flush_probe.py
"""

import statistics

import torch

import tigon  # noqa: F401  (loads the operator library)


def timed(fn, flush_kind, reps=50):
    buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    src = torch.ones(64 << 20, dtype=torch.float32, device="cuda")
    for _ in range(3):
        fn()
    st = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    en = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    for i in range(reps):
        if flush_kind == "zero":
            buf.zero_()
        elif flush_kind == "zero+read":
            buf.zero_()
            src.sum()
        elif flush_kind == "read":
            src.sum()
        st[i].record()
        fn()
        en[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(st, en))


print(torch.cuda.get_device_name())
for mb in [64, 128, 256, 1024]:
    n = mb << 20
    a = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    b = torch.empty_like(a)
    row = [f"copy {mb}MB"]
    for k in ["zero", "zero+read", "read"]:
        ms = timed(lambda: b.copy_(a), k)
        row.append(f"{k}: {ms * 1e3:.1f}us {2 * n / ms / 1e6:.0f}GB/s")
    print(" | ".join(row))
for m, h in [(16384, 1024), (16384, 4096), (4096, 32768)]:
    x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    y, rstd = torch.ops.tigon.rms_norm_fwd(x, w, 1e-6, 0.0, "llama", False)
    dy = torch.randn_like(y)
    fb = m * h * 4 + 4 * m
    bb = m * h * 6 + 4 * m
    for name, fn, by in [
        ("tigon fwd", lambda: torch.ops.tigon.rms_norm_fwd(x, w, 1e-6, 0.0, "llama", False), fb),
        ("tigon bwd", lambda: torch.ops.tigon.rms_norm_bwd(dy, x, w, rstd, 0.0, "llama"), bb),
        ("F.rms_norm fwd", lambda: torch.nn.functional.rms_norm(x, (h,), w, 1e-6), fb),
    ]:
        row = [f"{m}x{h} {name}"]
        for k in ["zero", "zero+read", "read"]:
            ms = timed(fn, k)
            row.append(f"{k}: {ms * 1e3:.1f}us {by / ms / 1e6:.0f}GB/s")
        print(" | ".join(row))
