"""Multi-GPU training with tigon inside PyTorch's own engines: FSDP2 (fully_shard) or DDP.

A Llama-style model (random init) learns byte-level text (examples/demo_corpus.txt), with its
norms patched by tigon (``--tigon``), plain Hugging Face (``--no-tigon``) or both, one after the
other from the same weights and data (``--compare``). Each rank trains on its own slice of every
global batch. Prints progress from rank 0 and one summary line per rank: loss, tokens/s, peak
memory; ``--out`` writes everything as JSON.

    torchrun --nproc-per-node 2 examples/distributed/train_fsdp.py --compare
    torchrun --nproc-per-node 2 examples/distributed/train_fsdp.py --model-size 1b --grad-ckpt
    torchrun --nproc-per-node 2 examples/distributed/train_fsdp.py --device cpu --wrap ddp

NCCL's NVLink multicast (NVLS) is switched off for every run (NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import os

# Before torch creates any communicator: NVLink multicast stays off (NVLS, symmetric memory and
# NVSHMEM multicast), as the machines this runs on require.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import ModelShape, corpus_windows  # noqa: E402

VARIANTS = {"hf": "HF transformers", "tigon": "HF + tigon"}


@dataclass(frozen=True)
class ModelSize(ModelShape):
    """Llama configuration of one --model-size."""

    vocab: int


MODEL_SIZES = {
    "tiny": ModelSize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=176, vocab=256),
    "small": ModelSize(hidden=512, layers=8, heads=8, kv_heads=4, intermediate=1408, vocab=256),
    # Llama 3.2 1B's shapes (the vocabulary too: the bytes use its first 256 ids).
    "1b": ModelSize(hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192, vocab=128256),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    cuda = torch.cuda.is_available()
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if cuda else "cpu")
    p.add_argument("--backend", choices=["nccl", "gloo"], help="default: nccl on cuda, else gloo")
    p.add_argument("--wrap", choices=["fsdp", "ddp"], default="fsdp", help="FSDP2 or DDP")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tigon", dest="variants", action="store_const", const=["tigon"])
    which.add_argument("--no-tigon", dest="variants", action="store_const", const=["hf"])
    which.add_argument(
        "--compare",
        dest="variants",
        action="store_const",
        const=["hf", "tigon"],
        help="train HF, then tigon, from the same weights and data; report the loss agreement",
    )
    p.add_argument("--model-size", choices=sorted(MODEL_SIZES), default="tiny")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seq", type=int, default=256, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=4, help="sequences per rank and step")
    p.add_argument(
        "--dtype",
        choices=["bf16", "fp32"],
        help="bf16: FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), DDP "
        "autocast(bf16); fp32 master weights either way. Default: bf16 on cuda, fp32 on cpu",
    )
    p.add_argument("--grad-ckpt", action="store_true", help="activation checkpointing")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup-steps", type=int, help="steps left out of tokens/s (default 3)")
    p.add_argument("--log-every", type=int, help="progress line every N steps (default steps/10)")
    p.add_argument("--out", type=Path, help="write the results of every rank as JSON")
    args = p.parse_args(argv)
    args.variants = args.variants or ["tigon"]
    args.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    args.log_every = args.log_every or max(1, args.steps // 10)
    if args.warmup_steps is None:
        args.warmup_steps = min(3, args.steps // 2)
    return args


def build_model(args: argparse.Namespace, variant: str, device: torch.device) -> torch.nn.Module:
    """The Llama model, same seed for every variant and rank; tigon patches it in place."""
    from transformers import LlamaConfig, LlamaForCausalLM

    import tigon.transformers as tt

    s = MODEL_SIZES[args.model_size]
    config = LlamaConfig(
        vocab_size=s.vocab,
        max_position_embeddings=max(args.seq, 128),
        rms_norm_eps=1e-5,
        tie_word_embeddings=args.model_size == "1b",
        **s.config_kwargs(),
    )
    torch.manual_seed(args.seed)
    with device:
        model = LlamaForCausalLM(config)
    if variant == "tigon":
        patched = tt.apply_tigon_kernel_to_llama(model=model)
        assert patched, "tigon patched nothing"
    if args.grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def wrap(args: argparse.Namespace, model: torch.nn.Module, device: torch.device) -> Any:
    """FSDP2 (every decoder layer, then the root) or DDP."""
    if args.wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # The mesh on the training device: FSDP's default mesh takes CUDA whenever torch sees a GPU,
    # and a CPU run on a machine with fewer GPUs than ranks then fails in set_device.
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    kwargs: dict[str, Any] = {"mesh": mesh}
    if args.dtype == "bf16":
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    for layer in model.model.layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def local_batches(args: argparse.Namespace, rank: int, world: int) -> list[torch.Tensor]:
    """This rank's slice of ``steps`` global batches of random corpus windows (seeded)."""
    return corpus_windows(args.seq, args.steps, args.batch, args.seed, rank, world)


def train(args: argparse.Namespace, variant: str, device: torch.device) -> dict[str, Any]:
    """One run; returns this rank's measurements (losses are averaged over all ranks)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if device.type == "cuda":
        gc.collect()  # the previous variant's model, optimizer and DDP buckets
        torch.cuda.empty_cache()
    model = build_model(args, variant, device)
    n_params = sum(p.numel() for p in model.parameters())
    step_model = wrap(args, model, device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    batches = [b.to(device) for b in local_batches(args, rank, world)]
    autocast = args.wrap == "ddp" and args.dtype == "bf16"
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    losses: list[float] = []
    times: list[float] = []
    tokens = args.batch * args.seq
    dist.barrier()
    for step, ids in enumerate(batches):
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        mean_loss = loss.detach().float().clone()
        dist.all_reduce(mean_loss)
        losses.append(mean_loss.item() / world)  # synchronizes
        times.append(time.perf_counter() - t0)
        if rank == 0 and ((step + 1) % args.log_every == 0 or step + 1 == args.steps):
            recent = times[max(0, step - args.log_every + 1) :]
            print(
                f"[{variant:>5}] step {step + 1:>4}/{args.steps}  loss {losses[-1]:.4f}  "
                f"{world * tokens * len(recent) / sum(recent):>10,.0f} tok/s (all ranks)",
                flush=True,
            )
    steady = times[args.warmup_steps :] or times
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    result = {
        "variant": variant,
        "rank": rank,
        "losses": losses,
        "step_seconds": times,
        "tokens_per_second": tokens * len(steady) / sum(steady),
        "peak_memory_bytes": peak,
        "parameters": n_params,
    }
    del step_model, model, opt, batches
    return result


def _mib(n: int | None) -> str:
    return "n/a (cpu)" if n is None else f"{n / 2**20:,.0f} MiB"


def summarize(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Rank 0: the comparison (with --compare) and the run totals."""
    summary: dict[str, Any] = {}
    for variant, per_rank in runs.items():
        total = sum(r["tokens_per_second"] for r in per_rank)
        peaks = [r["peak_memory_bytes"] for r in per_rank]
        summary[variant] = {
            "final_loss": per_rank[0]["losses"][-1],
            "tokens_per_second_all_ranks": total,
            "max_peak_memory_bytes": None if None in peaks else max(peaks),
        }
        print(
            f"{VARIANTS[variant]}: final loss {per_rank[0]['losses'][-1]:.4f}, "
            f"{total:,.0f} tok/s over {len(per_rank)} ranks, "
            f"peak memory {_mib(summary[variant]['max_peak_memory_bytes'])} (max over ranks)"
        )
    if "hf" in runs and "tigon" in runs:
        hf, tg = runs["hf"][0]["losses"], runs["tigon"][0]["losses"]
        diffs = [abs(a - b) for a, b in zip(hf, tg)]
        worst = max(range(len(diffs)), key=diffs.__getitem__)
        speedup = (
            summary["tigon"]["tokens_per_second_all_ranks"]
            / (summary["hf"]["tokens_per_second_all_ranks"])
        )
        summary["loss_max_abs_diff"] = diffs[worst]
        summary["tigon_speedup"] = speedup
        print(
            f"loss agreement over {len(diffs)} steps: max |HF - tigon| = {diffs[worst]:.3g} "
            f"(step {worst + 1}); tigon/HF tokens/s {speedup:.3f}x"
        )
    return summary


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.device == "cuda" and args.backend != "nccl":
        sys.exit("--device cuda needs --backend nccl")
    if args.device == "cpu" and args.backend != "gloo":
        sys.exit("--device cpu needs --backend gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, device_id=device if args.device == "cuda" else None)
    import tigon

    rank, world = dist.get_rank(), dist.get_world_size()
    if args.device == "cuda" and not tigon.has_cuda_kernels():
        sys.exit("--device cuda: this tigon build has no CUDA kernels")
    if rank == 0:
        print(
            f"tigon {tigon.__version__}, torch {torch.__version__}: {args.wrap} on {world} x "
            f"{args.device} ({args.backend}), llama-{args.model_size}, {args.dtype}, "
            f"batch {args.batch} x seq {args.seq} per rank, {args.steps} steps"
            + (", gradient checkpointing" if args.grad_ckpt else ""),
            flush=True,
        )
    runs: dict[str, list[dict[str, Any]]] = {}
    for variant in args.variants:
        mine = train(args, variant, device)
        print(
            f"[rank {rank}] {VARIANTS[variant]}: final loss {mine['losses'][-1]:.4f}, "
            f"{mine['tokens_per_second']:,.0f} tok/s, peak memory {_mib(mine['peak_memory_bytes'])}",
            flush=True,
        )
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, mine)
        runs[variant] = gathered
    if rank == 0:
        summary = summarize(args, runs)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            env = {"torch": torch.__version__, "tigon": tigon.__version__, "world_size": world}
            if args.device == "cuda":
                env["gpu"] = torch.cuda.get_device_name(device)
            doc = {"environment": env, "args": {k: str(v) for k, v in vars(args).items()}}
            args.out.write_text(json.dumps({**doc, "summary": summary, "runs": runs}, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    if args.backend == "gloo":
        # Gloo's transport threads can abort the interpreter's teardown ("terminate called
        # without an active exception", seen once in 2-process CPU runs) after all the work is
        # done and reported; leave without running it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
