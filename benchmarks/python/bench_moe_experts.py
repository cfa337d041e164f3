"""MoE routed experts speed (forward, backward, full), TFLOP/s and peak memory: tigon vs HF's
experts implementations (the eager loop, ``grouped_mm``, ``batched_mm``) on a Qwen3-30B-A3B-shaped
layer (hidden 2048, 128 experts, top-8, intermediate 768) and a Mixtral-shaped one (4096, 8,
top-2, 14336). Prints a table with the dense GEMM throughput (a bf16 matmul) and the copy ceiling
of the same run, writes CSV/JSON and a PNG; then host time per call at a tiny shape.

tigon's experts run on the CPU only in this slice (issue 38: CUDA next); on a GPU its rows are
skipped, so the GPU tables are HF's implementations against the GEMM ceiling.

    python benchmarks/python/bench_moe_experts.py --device cuda            # GPU tables
    python benchmarks/python/bench_moe_experts.py --device cpu --quick     # 2-core CPU check
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import MixtralConfig, Qwen3MoeConfig
from transformers.models.mixtral.modeling_mixtral import MixtralExperts
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import tigon  # noqa: E402
from tigon.transformers.moe import KERNEL_DEVICES  # noqa: E402

#: name -> (family, hidden, experts, top_k, intermediate)
LAYERS = {
    "qwen3-30b-a3b": ("qwen3_moe", 2048, 128, 8, 768),
    "mixtral-8x7b": ("mixtral", 4096, 8, 2, 14336),
}
#: Tiny CPU stand-ins with the same routing shapes (experts, top-k).
CPU_LAYERS = {
    "qwen3-like": ("qwen3_moe", 256, 32, 8, 96),
    "mixtral-like": ("mixtral", 256, 8, 2, 512),
}


def hf_experts(family: str, h: int, e: int, k: int, i: int, implementation: str):
    if family == "mixtral":
        config = MixtralConfig(
            hidden_size=h, intermediate_size=i, num_local_experts=e, num_experts_per_tok=k
        )
        module = MixtralExperts(config)
    else:
        config = Qwen3MoeConfig(
            hidden_size=h, moe_intermediate_size=i, num_experts=e, num_experts_per_tok=k
        )
        module = Qwen3MoeExperts(config)
    config._experts_implementation = implementation
    return module


def providers(device: str) -> dict:
    p = {f"HF {impl}": impl for impl in ("eager", "grouped_mm", "batched_mm")}
    if device in KERNEL_DEVICES:
        p["tigon"] = "tigon"
    return p


def routing(n: int, e: int, k: int, family: str, dtype, device: str, gen: torch.Generator):
    """Router outputs as each family's router gives them: softmax in float32, top-k, renormalized;
    Mixtral keeps float32 weights, Qwen3-MoE casts them to the activations' dtype."""
    logits = torch.randn(n, e, generator=gen).to(device)
    probs = torch.softmax(logits, dim=-1)
    weights, ids = torch.topk(probs, k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    return ids, weights.to(dtype) if family == "qwen3_moe" else weights


def steps(provider: str, layer: tuple, n: int, dtype, device: str):
    family, h, e, k, i = layer
    gen = torch.Generator().manual_seed(0)
    impl = "eager" if provider == "tigon" else provider
    module = hf_experts(family, h, e, k, i, impl)
    with torch.no_grad():
        module.gate_up_proj.copy_(torch.randn(module.gate_up_proj.shape, generator=gen) / h**0.5)
        module.down_proj.copy_(torch.randn(module.down_proj.shape, generator=gen) / i**0.5)
    module = module.to(device=device, dtype=dtype)
    if provider == "tigon":
        module = tigon.nn.MoEExperts.from_hf(module)
    x = torch.randn(n, h, generator=gen).to(device=device, dtype=dtype).requires_grad_()
    ids, weights = routing(n, e, k, family, dtype, device, gen)
    weights.requires_grad_()
    dy = torch.randn(n, h, generator=gen).to(device=device, dtype=dtype)
    params = (x, weights, module.gate_up_proj, module.down_proj)

    def forward():
        return module(x, ids, weights)

    y = forward()

    def backward():
        torch.autograd.grad(y, params, dy, retain_graph=True)

    def full():
        torch.autograd.grad(module(x, ids, weights), params, dy)

    return forward, full, backward, y


def gemm_tflops(device: str, dtype, reps: int) -> float:
    """Dense GEMM throughput of this run (the ceiling for a grouped GEMM)."""
    s = 8192 if device == "cuda" else 1024
    a = torch.randn(s, s, device=device, dtype=dtype)
    b = torch.randn(s, s, device=device, dtype=dtype)
    ms = harness.time_ms(lambda: a @ b, device, reps)
    return 2 * s**3 / ms / 1e9


def bench_one(provider: str, layer: tuple, n: int, dtype, device: str, reps: int) -> dict:
    forward, full, backward, y = steps(provider, layer, n, dtype, device)
    family, h, e, k, i = layer
    flops_fwd = 6.0 * n * k * h * i  # two GEMMs: 2 * (h x 2i) + 2 * (i x h) per routed token
    row = {"N": n, "H": h, "E": e, "K": k, "I": i}
    row["fwd_ms"] = harness.time_ms(forward, device, reps)
    row["bwd_ms"] = harness.time_ms(backward, device, reps)
    row["full_ms"] = harness.time_ms(full, device, reps)
    row["fwd_TFLOPs"] = flops_fwd / row["fwd_ms"] / 1e9
    row["bwd_TFLOPs"] = 2 * flops_fwd / row["bwd_ms"] / 1e9
    row["full_TFLOPs"] = 3 * flops_fwd / row["full_ms"] / 1e9
    if device == "cuda":
        del y, backward
        row["peak_MB"] = harness.peak_memory_mb(full)
    return row


def main() -> None:
    ap = harness.arg_parser(__doc__, with_providers=True)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    device = args.device
    if device == "cuda":
        layers, tokens, reps = LAYERS, [8192, 32768], 10
        if args.quick:
            tokens, reps = [8192], 5
    else:
        layers, tokens, reps = CPU_LAYERS, [512, 2048], 3
        if args.quick:
            tokens, reps = [256], 2
    chosen = harness.select_providers(providers(device), args.providers)
    env, ceiling = harness.start("MoE experts", device, args.dtype, reps)
    gemm = gemm_tflops(device, dtype, reps)
    env["gemm_TFLOPs"] = gemm
    rows = []
    for layer_name, layer in layers.items():
        for n in tokens:
            for name, provider in chosen.items():
                print(f"{name} {layer_name} N={n}", file=sys.stderr, flush=True)
                try:
                    r = {"provider": name, "layer": layer_name}
                    r |= bench_one(provider, layer, n, dtype, device, reps)
                except (RuntimeError, NotImplementedError, torch.OutOfMemoryError) as exc:
                    print(f"    skipped: {str(exc).splitlines()[0]}", file=sys.stderr)
                    continue
                for phase in ("fwd", "bwd", "full"):
                    r[f"{phase}_%gemm"] = 100 * r[f"{phase}_TFLOPs"] / gemm
                rows.append(r)
                print(
                    f"    fwd {r['fwd_ms']:.2f} ms, bwd {r['bwd_ms']:.2f} ms, full "
                    f"{r['full_ms']:.2f} ms ({r['full_%gemm']:.0f}% of the GEMM ceiling)",
                    file=sys.stderr,
                    flush=True,
                )
    cols = ["provider", "layer", "N", "fwd_ms", "bwd_ms", "full_ms", "full_TFLOPs", "full_%gemm"]
    if device == "cuda":
        cols.append("peak_MB")
    heading = (
        f"\ndense GEMM (this run): {gemm:.1f} TFLOP/s; copy ceiling (this run): {ceiling:.0f} GB/s"
    )
    harness.print_results(rows, cols, device, heading)
    name = f"moe_experts_{device}_{args.dtype}"
    harness.save(args.out, name, env, rows)
    first = next(iter(layers.values()))
    tiny_layer = (first[0], 64, first[2], first[3], 32)
    tiny = {k: steps(p, tiny_layer, 8, dtype, device)[:2] for k, p in chosen.items()}
    harness.host_table(
        tiny, "8 tokens, H 64", device, env, args.out, f"moe_experts_host_{device}_{args.dtype}"
    )
    first_name = next(iter(layers))
    harness.plot_phases(
        [r for r in rows if r["layer"] == first_name],
        args.out / f"{name}.png",
        x="N",
        metric="{phase}_TFLOPs",
        title=f"MoE experts {{phase}} ({first_name})",
        xlabel="tokens",
        ylabel="TFLOP/s",
    )


if __name__ == "__main__":
    main()
