"""Cross-entropy and fused linear cross-entropy benchmark: tigon vs Hugging Face's loss
(logits.float() + F.cross_entropy), torch.compile of it and Liger (if installed), forward+backward
time, GB/s against the copy ceiling of the same run (CE: one read of the logits and one write of
the gradient), effective TFLOP/s (FLCE: 6*N*H*V) and peak memory above the inputs; then host
time per call at 4 rows (harness.host_table).

    python benchmarks/python/bench_cross_entropy.py --device cuda [--op ce|flce|both] [--quick]
"""

from __future__ import annotations

import sys

import harness
import torch
import torch.nn.functional as F

import tigon


def hf_ce(logits, target):
    return F.cross_entropy(logits.float(), target)


def _liger():
    try:
        from liger_kernel.transformers.functional import liger_cross_entropy
        from liger_kernel.transformers.fused_linear_cross_entropy import (
            LigerFusedLinearCrossEntropyLoss,
        )
    except ImportError:
        return None, None
    return liger_cross_entropy, LigerFusedLinearCrossEntropyLoss()


def ce_providers(device: str, with_compile: bool) -> dict:
    liger_ce, _ = _liger()
    p = {
        "hf": (hf_ce, False),
        "tigon": (lambda x, t: tigon.ops.cross_entropy(x, t), False),
        "tigon_inplace": (lambda x, t: tigon.ops.cross_entropy(x, t, in_place=True), True),
        # the argmax in the same pass (the training loop's accuracy metric without logits)
        "tigon +accuracy": (lambda x, t: _with_metrics(tigon.ops.cross_entropy, x, t), False),
    }
    if with_compile:
        p["torch.compile(hf)"] = (torch.compile(hf_ce), False)
    if liger_ce is not None and device == "cuda":
        p["liger"] = (lambda x, t: liger_ce(x, t), True)  # writes the gradient into x
    return p


def _with_metrics(loss_fn, *args):
    out = loss_fn(*args, return_token_accuracy=True, return_predicted_tokens=True)
    return out.loss


def loss_steps(fn, inputs, target):
    """The forward (no grad) and the forward+backward of loss fn(*leaves, target), the leaves being
    copies of `inputs` that require grad; and the leaves."""
    leaves = [t.clone().requires_grad_() for t in inputs]

    def fwd():
        with torch.no_grad():
            fn(*leaves, target)

    def full():
        for t in leaves:
            t.grad = None
        fn(*leaves, target).backward()

    return fwd, full, leaves


def ce_inputs(n, v, dtype, device):
    return torch.randn(n, v, device=device, dtype=dtype), torch.randint(0, v, (n,), device=device)


def bench_ce(n, v, dtype, device, reps, providers):
    rows = []
    logits, target = ce_inputs(n, v, dtype, device)
    bytes_full = 2 * logits.numel() * logits.element_size()
    for name, (fn, clobbers) in providers.items():
        print(f"  ce {name} {n}x{v}", file=sys.stderr, flush=True)
        fwd, full, _ = loss_steps(fn, [logits], target)
        r = {"op": "cross_entropy", "provider": name, "N": n, "V": v}
        r["full_ms"] = harness.time_ms(full, device, reps)
        r["fwd_ms"] = harness.time_ms(fwd, device, reps) if not clobbers else None
        r["full_GBps"] = bytes_full / r["full_ms"] / 1e6
        if device == "cuda":
            x2 = logits.clone().requires_grad_()
            r["peak_MB"] = harness.peak_memory_mb(lambda: fn(x2, target).backward())
        rows.append(r)
    return rows


def unfused_flce(h, w, t):
    return F.cross_entropy((h @ w.T).float(), t)


def flce_providers(device: str, with_compile: bool) -> dict:
    _, liger_flce = _liger()
    p = {
        "torch (matmul + fp32 CE)": unfused_flce,
        "tigon (dW fp32)": lambda h, w, t: tigon.ops.fused_linear_cross_entropy(h, w, t),
        "tigon (dW in weight dtype)": lambda h, w, t: tigon.ops.fused_linear_cross_entropy(
            h, w, t, accum_dtype=w.dtype
        ),
        "tigon +accuracy": lambda h, w, t: _with_metrics(
            tigon.ops.fused_linear_cross_entropy, h, w, t
        ),
        # per-token losses with their gradients (the backward recomputes the logits)
        "tigon reduction=none": lambda h, w, t: tigon.ops.fused_linear_cross_entropy(
            h, w, t, reduction="none"
        ).sum(),
    }
    if with_compile:
        p["torch.compile(unfused)"] = torch.compile(unfused_flce)
    if liger_flce is not None and device == "cuda":
        p["liger"] = lambda h, w, t: liger_flce(w, h, t)
    return p


def flce_inputs(n, hsz, v, dtype, device):
    hidden = torch.randn(n, hsz, device=device, dtype=dtype)
    weight = (torch.randn(v, hsz, device=device) / hsz**0.5).to(dtype)
    return [hidden, weight], torch.randint(0, v, (n,), device=device)


def bench_flce(n, hsz, v, dtype, device, reps, providers):
    rows = []
    inputs, target = flce_inputs(n, hsz, v, dtype, device)
    flops = 6 * n * hsz * v
    for name, fn in providers.items():
        print(f"  flce {name} {n}x{hsz}x{v}", file=sys.stderr, flush=True)
        _, full, (h, w) = loss_steps(fn, inputs, target)
        r = {"op": "fused_linear_cross_entropy", "provider": name, "N": n, "H": hsz, "V": v}
        r["full_ms"] = harness.time_ms(full, device, reps)
        r["TFLOPs"] = flops / r["full_ms"] / 1e9
        if device == "cuda":
            h.grad = w.grad = None
            r["peak_MB"] = harness.peak_memory_mb(
                lambda h=h, w=w, fn=fn: fn(h, w, target).backward()
            )
        rows.append(r)
        del h, w
        torch._dynamo.reset()
    base = rows[0]["full_ms"]
    for r in rows:
        r["vs_unfused"] = r["full_ms"] / base
    return rows


def main() -> None:
    ap = harness.arg_parser(__doc__)
    ap.add_argument("--op", default="both", choices=["ce", "flce", "both"])
    args = ap.parse_args()
    dtype, device = getattr(torch, args.dtype), args.device
    cuda = device == "cuda"
    reps = (20 if args.quick else 100) if cuda else 3
    ce_shapes = [(8192, 128256), (4096, 32000)] if cuda else [(4096, 4096), (512, 32000)]
    # CPU: the demo's loss (examples/train_demo.py, small: 8 x 128 tokens, hidden 128, 256 bytes)
    # and a 4096-hidden one.
    flce_shapes = (
        [(8192, 4096, 128256), (16384, 4096, 128256)]
        if cuda
        else [(1024, 128, 256), (512, 4096, 8192)]
    )
    if args.quick:
        ce_shapes, flce_shapes = ce_shapes[:1], flce_shapes[:1]
    compile_ok = cuda and not args.no_compile
    env, ceiling = harness.start("cross-entropy", device, args.dtype, reps)
    if args.op in ("ce", "both"):
        rows = []
        for n, v in ce_shapes:
            rows += bench_ce(n, v, dtype, device, reps, ce_providers(device, compile_ok))
        for r in rows:
            r["%ceil"] = 100 * r["full_GBps"] / ceiling
        cols = ["provider", "N", "V", "fwd_ms", "full_ms", "full_GBps", "%ceil"]
        heading = f"\ncross-entropy, copy ceiling (this run): {ceiling:.0f} GB/s"
        harness.print_results(rows, cols, device, heading)
        harness.save(args.out, f"cross_entropy_{device}_{args.dtype}", env, rows)
        v = ce_shapes[0][1]
        logits, target = ce_inputs(4, v, dtype, device)
        tiny = {}
        for name, (fn, clobbers) in ce_providers(device, compile_ok).items():
            fwd, full, _ = loss_steps(fn, [logits], target)
            tiny[name] = (None if clobbers else fwd, full)
        name = f"cross_entropy_host_{device}_{args.dtype}"
        harness.host_table(tiny, f"4x{v}", device, env, args.out, name)
    if args.op in ("flce", "both"):
        rows = []
        for n, hsz, v in flce_shapes:
            rows += bench_flce(n, hsz, v, dtype, device, reps, flce_providers(device, compile_ok))
        cols = ["provider", "N", "H", "V", "full_ms", "TFLOPs", "vs_unfused"]
        heading = "\nfused linear cross-entropy (peak_MB: above the inputs, gradients included)"
        harness.print_results(rows, cols, device, heading)
        harness.save(args.out, f"fused_linear_cross_entropy_{device}_{args.dtype}", env, rows)
        _, hsz, v = flce_shapes[0]
        inputs, target = flce_inputs(4, hsz, v, dtype, device)
        tiny = {
            name: loss_steps(fn, inputs, target)[:2]
            for name, fn in flce_providers(device, compile_ok).items()
        }
        name = f"fused_linear_cross_entropy_host_{device}_{args.dtype}"
        harness.host_table(tiny, f"4x{hsz}x{v}", device, env, args.out, name)


if __name__ == "__main__":
    main()
