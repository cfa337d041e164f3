"""Distillation losses kl_div, jsd, tvd: tigon vs the torch reference (F.kl_div and the peer's
JSD / TVD definitions, in float32 as the loss is computed), torch.compile of it and Liger's
LigerKLDIVLoss / LigerJSD / LigerTVDLoss (if installed). Forward (no gradient) and full
(forward + backward of the input) time, GB/s against the copy ceiling of the same run, counting
the least traffic each phase needs (forward: read input and target; full: read both once, write
the gradient once), and peak memory above the inputs.

    python benchmarks/python/bench_divergence.py --device cuda [--op kl_div,jsd,tvd] [--quick]
"""

from __future__ import annotations

import sys

import harness
import torch
import torch.nn.functional as F

import tigon

OPS = ("kl_div", "jsd", "tvd")
BETA = 0.5


def kl_reference(x, t, labels):
    return F.kl_div(x.float(), t.float(), reduction="batchmean", log_target=True)


def jsd_reference(x, t, labels, beta=BETA, ignore_index=-100):
    """The peer's generalized JSD in float32, rows with label ignore_index left out."""
    log_q, log_p = x.float(), t.float()
    q, p = log_q.exp(), log_p.exp()
    m = beta * p + (1 - beta) * q
    log_m = m.log()
    per_row = (beta * p * (log_p - log_m) + (1 - beta) * q * (log_q - log_m)).sum(-1)
    keep = labels != ignore_index
    return (per_row * keep).sum() / keep.sum()


def tvd_reference(x, t, labels, ignore_index=-100):
    per_row = 0.5 * (x.float() - t.float()).abs().sum(-1)
    keep = labels != ignore_index
    return (per_row * keep).sum() / keep.sum()


REFERENCES = {"kl_div": kl_reference, "jsd": jsd_reference, "tvd": tvd_reference}


def tigon_loss(op: str):
    if op == "kl_div":
        return lambda x, t, labels: tigon.ops.kl_div(x, t, reduction="batchmean", log_target=True)
    if op == "jsd":
        return lambda x, t, labels: tigon.ops.jsd(x, t, labels, beta=BETA)
    return lambda x, t, labels: tigon.ops.tvd(x, t, labels, reduction="batchmean")


def liger_loss(op: str):
    try:
        from liger_kernel.transformers import LigerJSD, LigerKLDIVLoss, LigerTVDLoss
    except ImportError:
        return None
    if op == "kl_div":
        module = LigerKLDIVLoss(reduction="batchmean", log_target=True)
        return lambda x, t, labels: module(x, t)
    if op == "jsd":
        module = LigerJSD(beta=BETA)
        return lambda x, t, labels: module(x, t, labels)
    module = LigerTVDLoss(reduction="batchmean")
    return lambda x, t, labels: module(x, t, labels)


def providers(op: str, device: str, with_compile: bool) -> dict:
    p = {"torch": REFERENCES[op], "tigon": tigon_loss(op)}
    if with_compile:
        p["torch.compile(torch)"] = torch.compile(REFERENCES[op])
    liger = liger_loss(op) if device == "cuda" else None
    if liger is not None:
        p["liger"] = liger
    return p


def inputs(op: str, n: int, v: int, dtype, device: str):
    """Input and target (log-probabilities, or probabilities for tvd) and labels, a tenth of them
    ignored."""
    torch.manual_seed(0)
    x = torch.randn(n, v, device=device, dtype=torch.float32).log_softmax(-1)
    t = torch.randn(n, v, device=device, dtype=torch.float32).log_softmax(-1)
    if op == "tvd":
        x, t = x.exp(), t.exp()
    labels = torch.randint(0, v, (n,), device=device)
    labels[::10] = -100
    return x.to(dtype), t.to(dtype), labels


def bench(op: str, n: int, v: int, dtype, device: str, reps: int, chosen: dict) -> list[dict]:
    rows = []
    x, t, labels = inputs(op, n, v, dtype, device)
    size = x.element_size()
    fwd_bytes, full_bytes = 2 * x.numel() * size, 3 * x.numel() * size
    for name, fn in chosen.items():
        print(f"  {op} {name} {n}x{v}", file=sys.stderr, flush=True)
        leaf = x.clone().requires_grad_()

        def fwd(fn=fn):
            with torch.no_grad():
                fn(x, t, labels)

        def full(fn=fn, leaf=leaf):
            leaf.grad = None
            fn(leaf, t, labels).backward()

        r = {"op": op, "provider": name, "N": n, "V": v}
        r["fwd_ms"] = harness.time_ms(fwd, device, reps)
        r["full_ms"] = harness.time_ms(full, device, reps)
        r["fwd_GBps"] = fwd_bytes / r["fwd_ms"] / 1e6
        r["full_GBps"] = full_bytes / r["full_ms"] / 1e6
        if device == "cuda":
            leaf.grad = None
            r["peak_MB"] = harness.peak_memory_mb(full)
        rows.append(r)
        del leaf
        torch._dynamo.reset()
    return rows


def plot(rows: list[dict], shape: tuple[int, int], ceiling: float, path) -> None:
    """Bars of GB/s per op and provider at `shape`, forward and full, with the copy ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if (r["N"], r["V"]) == shape]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    names = list(dict.fromkeys(r["provider"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(len(names), 1)
    for ax, phase in zip(axes, ("fwd", "full"), strict=True):
        for k, name in enumerate(names):
            got = {r["op"]: r[f"{phase}_GBps"] for r in rows if r["provider"] == name}
            xs = [i + k * width for i, op in enumerate(ops) if op in got]
            ax.bar(xs, [got[op] for op in ops if op in got], width, label=name)
        ax.axhline(ceiling, color="k", ls="--", label="copy ceiling")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(ops))], ops)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{phase}, {shape[0]} x {shape[1]}")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    ap = harness.arg_parser(__doc__, with_providers=True)
    ap.add_argument("--op", default=",".join(OPS), help="comma-separated subset of " + str(OPS))
    args = ap.parse_args()
    dtype, device = getattr(torch, args.dtype), args.device
    cuda = device == "cuda"
    shapes = [(8192, 128256), (4096, 32000)] if cuda else [(512, 32000), (2048, 4096)]
    reps = (10 if args.quick else 50) if cuda else 3
    if args.quick:
        shapes = shapes[:1]
    ops = [o for o in args.op.split(",") if o]
    env, ceiling = harness.start("divergence", device, args.dtype, reps)
    rows = []
    for op in ops:
        chosen = providers(op, device, cuda and not args.no_compile)
        chosen = harness.select_providers(chosen, args.providers)
        for n, v in shapes:
            rows += bench(op, n, v, dtype, device, reps, chosen)
    for r in rows:
        harness.add_percent_of_ceiling(r, ceiling, ("fwd", "full"))
    cols = ["op", "provider", "N", "V", "fwd_ms", "full_ms", "fwd_GBps", "full_GBps"]
    cols += ["fwd_%ceil", "full_%ceil"]
    heading = f"\ndivergences, copy ceiling (this run): {ceiling:.0f} GB/s"
    harness.print_results(rows, cols, device, heading)
    name = f"divergence_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    plot(rows, shapes[0], ceiling, args.out / f"{name}.png")


if __name__ == "__main__":
    main()
