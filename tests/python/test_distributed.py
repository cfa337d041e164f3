"""tigon inside PyTorch's distributed engines: DDP, FSDP2 and DTensor (tensor parallelism).

On the CPU (CI), 2 processes with the gloo backend: the training script
(examples/distributed/train_fsdp.py) under DDP and FSDP2, HF vs tigon, fp32; DTensor-sharded
RMSNorm (Shard on rows, on the sequence, on the normalized dimension; torch's SequenceParallel)
against the unsharded op. Marker ``multigpu`` (2 GPUs, NCCL): the same in bf16 with FSDP2's
mixed precision, 20 steps. Marker ``gpu``: a quick single-GPU run of the script.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from test_convergence import BF16, FP32

import tigon

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "distributed" / "train_fsdp.py"

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch built without torch.distributed"
)


def _env() -> dict[str, str]:
    # The workers import the tigon this process imported: the installed package under
    # `make test`, the source tree (with $TIGON_TORCH_LIBRARY, inherited) in a development build.
    python_dir = str(Path(tigon.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": python_dir + (os.pathsep + path if path else ""),
        "PYTHONUNBUFFERED": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "OMP_NUM_THREADS": "1",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_script(tmp_path: Path, nproc: int, *args: str, timeout: int = 600) -> dict[str, Any]:
    """torchrun of the training script; returns its --out JSON."""
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={nproc}", str(SCRIPT), "--compare", "--out", str(out), *args]
    proc = subprocess.run(
        cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    print(proc.stdout)
    return json.loads(out.read_text())


def _assert_losses_close(result: dict[str, Any], tol: tuple[float, float], steps: int) -> None:
    hf = torch.tensor(result["runs"]["hf"][0]["losses"], dtype=torch.float64)
    ours = torch.tensor(result["runs"]["tigon"][0]["losses"], dtype=torch.float64)
    assert hf.numel() == ours.numel() == steps
    assert torch.isfinite(hf).all() and torch.isfinite(ours).all()
    assert hf[-1] < hf[0], f"HF did not learn: {hf.tolist()}"
    # Every rank reports the same (all-reduced) losses.
    for variant in ("hf", "tigon"):
        per_rank = [r["losses"] for r in result["runs"][variant]]
        assert all(losses == per_rank[0] for losses in per_rank), per_rank
    torch.testing.assert_close(ours, hf, atol=tol[0], rtol=tol[1])


@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_cpu_two_processes_tigon_matches_hf(tmp_path: Path, wrap: str) -> None:
    """2 gloo processes, fp32: tigon's losses equal HF's within the fp32 convergence bounds."""
    steps = 6
    result = _run_script(
        tmp_path, 2, "--device", "cpu", "--wrap", wrap, "--steps", str(steps), "--seq", "64"
    )
    assert result["environment"]["world_size"] == 2
    _assert_losses_close(result, FP32.loss, steps)


@pytest.mark.multigpu
def test_two_gpus_fsdp2_bf16_tigon_matches_hf(tmp_path: Path) -> None:
    """2 GPUs, NCCL, FSDP2 with bf16 mixed precision, 20 steps: within the bf16 bounds."""
    steps = 20
    result = _run_script(
        tmp_path, 2, "--device", "cuda", "--wrap", "fsdp", "--dtype", "bf16", "--steps", str(steps)
    )
    _assert_losses_close(result, BF16.loss, steps)
    assert all(r["peak_memory_bytes"] > 0 for r in result["runs"]["tigon"])


@pytest.mark.multigpu
def test_two_gpus_ddp_bf16_grad_ckpt_tigon_matches_hf(tmp_path: Path) -> None:
    """2 GPUs, DDP with bf16 autocast and activation checkpointing."""
    steps = 10
    args = ["--device", "cuda", "--wrap", "ddp", "--dtype", "bf16", "--grad-ckpt"]
    result = _run_script(tmp_path, 2, *args, "--steps", str(steps))
    _assert_losses_close(result, BF16.loss, steps)


@pytest.mark.gpu
def test_single_gpu_script(tmp_path: Path) -> None:
    """World size 1 with NCCL: the script runs end to end (FSDP2, bf16)."""
    steps = 4
    result = _run_script(tmp_path, 1, "--device", "cuda", "--steps", str(steps), "--seq", "128")
    _assert_losses_close(result, BF16.loss, steps)


# --- DTensor ---------------------------------------------------------------------------------


def _dtensor_worker(rank: int, world: int, port: int, device_type: str) -> None:
    """One rank: every DTensor check (run by torch.multiprocessing.spawn)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_num_threads(1)
    backend = "nccl" if device_type == "cuda" else "gloo"
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        mesh = init_device_mesh(device_type, (world,))
        _check_rms_norm_placements(mesh, device_type)
        _check_sequence_parallel_module(mesh, device_type)
        _check_inplace_backward_refuses_last_dim(mesh, device_type)
        # Both ranks leave together: a rank that tears gloo down while its peer is still in
        # the last collective's traffic can abort the peer ("terminate called without an
        # active exception", seen once in CI).
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _reference(x, weight, dy, eps=1e-6, **kw):  # type: ignore[no-untyped-def]
    x = x.detach().clone().requires_grad_()
    w = None if weight is None else weight.detach().clone().requires_grad_()
    y = tigon.ops.rms_norm(x, w, eps, **kw)
    y.backward(dy)
    return y.detach(), x.grad, None if w is None else w.grad


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got, want, msg=lambda m: f"{what}: {m}")


def _close_dw(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """dW: per-shard partial sums added across ranks (another summation order, and in bf16 one
    more rounding of each partial sum)."""
    if want.dtype == torch.float32:
        atol, rtol = 1e-5 * want.abs().max().item(), 1e-5
    else:
        atol, rtol = 1e-2 * want.abs().max().item(), 1e-2
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


def _check_rms_norm_placements(mesh: Any, device_type: str) -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    gen = torch.Generator().manual_seed(0)  # the same tensors on every rank
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(4, 6, 32, generator=gen).to(device_type, dtype)
        dy = torch.randn(4, 6, 32, generator=gen).to(device_type, dtype)
        weight = (1 + 0.1 * torch.randn(32, generator=gen)).to(device_type, dtype)
        for has_weight in (True, False):
            for in_place in (True, False):
                w = weight if has_weight else None
                y_ref, dx_ref, dw_ref = _reference(x, w, dy.clone(), in_place=in_place)
                for placement in (Shard(0), Shard(1), Shard(2), Replicate()):
                    what = f"{dtype} {placement} weight={has_weight} in_place={in_place}"
                    xd = distribute_tensor(x, mesh, [placement]).requires_grad_()
                    wd = None
                    if has_weight:
                        wd = distribute_tensor(weight, mesh, [Replicate()]).requires_grad_()
                    y = tigon.ops.rms_norm(xd, wd, 1e-6, in_place=in_place)
                    # Rows run where they are; the normalized dimension is gathered first.
                    local = placement if placement != Shard(2) else Replicate()
                    assert y.placements == (local,), (what, y.placements)
                    # A copy: the in-place backward writes dx into the gradient it is given.
                    y.backward(distribute_tensor(dy.clone(), mesh, [placement]))
                    _close(y.full_tensor(), y_ref, f"y {what}")
                    _close(xd.grad.full_tensor(), dx_ref, f"dx {what}")
                    if has_weight:
                        partial = placement.is_shard() and placement != Shard(2)
                        assert wd.grad.placements == (Partial() if partial else Replicate(),)
                        _close_dw(wd.grad.full_tensor(), dw_ref, f"dw {what}")
                if has_weight:
                    _check_partial_input(mesh, x, weight, dy, y_ref, dw_ref)


def _check_partial_input(mesh, x, weight, dy, y_ref, dw_ref):  # type: ignore[no-untyped-def]
    """A Partial() input is reduced first (halving is exact, so the sum is x again)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, distribute_tensor

    xd = DTensor.from_local(x / 2, mesh, [Partial()])
    wd = distribute_tensor(weight, mesh, [Replicate()]).requires_grad_()
    y = tigon.ops.rms_norm(xd, wd, 1e-6)
    _close(y.full_tensor(), y_ref, f"y Partial {x.dtype}")
    y.backward(distribute_tensor(dy.clone(), mesh, y.placements))
    _close_dw(wd.grad.full_tensor(), dw_ref, f"dw Partial {x.dtype}")


def _check_sequence_parallel_module(mesh: Any, device_type: str) -> None:
    """torch's SequenceParallel style on tigon.nn.RMSNorm: input and output sharded on the
    sequence, weight replicated."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 64, generator=gen).to(device_type)
    dy = torch.randn(2, 8, 64, generator=gen).to(device_type)
    norm = tigon.nn.RMSNorm(64, eps=1e-5, device=device_type)
    with torch.no_grad():
        norm.weight.add_(0.1 * torch.randn(64, generator=gen).to(device_type))
    y_ref, dx_ref, dw_ref = _reference(x, norm.weight, dy.clone(), eps=1e-5)
    parallelize_module(norm, mesh, SequenceParallel())
    assert isinstance(norm.weight, DTensor)
    rank, world = dist.get_rank(), dist.get_world_size()
    x_local = x.chunk(world, dim=1)[rank].clone().requires_grad_()
    y = norm(x_local)
    assert isinstance(y, DTensor) and y.placements == (Shard(1),)
    y.backward(DTensor.from_local(dy.chunk(world, dim=1)[rank].contiguous(), mesh, [Shard(1)]))
    _close(y.full_tensor(), y_ref, "SequenceParallel y")
    _close(x_local.grad, dx_ref.chunk(world, dim=1)[rank], "SequenceParallel dx")
    _close_dw(norm.weight.grad.full_tensor(), dw_ref, "SequenceParallel dw")


def _check_inplace_backward_refuses_last_dim(mesh: Any, device_type: str) -> None:
    """A direct in-place backward on a dy sharded on the normalized dimension would write into
    a gathered copy: refused."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    x = torch.randn(4, 32, device=device_type)
    w = torch.ones(32, device=device_type)
    _, rstd = torch.ops.tigon.rms_norm_fwd(x, w, 1e-6, 0.0, "llama")
    args = [distribute_tensor(t, mesh, [p]) for t, p in ((x, Shard(1)), (w, Replicate()))]
    dy = distribute_tensor(torch.randn(4, 32, device=device_type), mesh, [Shard(1)])
    rstd_d = distribute_tensor(rstd, mesh, [Replicate()])
    with pytest.raises(RuntimeError, match="argument 'dy'"):
        torch.ops.tigon.rms_norm_bwd_inplace(dy, *args, rstd_d, 0.0, "llama")


def _spawn_dtensor_checks(device_type: str) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_dtensor_worker, args=(2, _free_port(), device_type), nprocs=2, join=True)


def test_dtensor_rms_norm_cpu() -> None:
    """2 gloo processes: sharded RMSNorm forward and backward equal the unsharded op."""
    _spawn_dtensor_checks("cpu")


@pytest.mark.multigpu
def test_dtensor_rms_norm_two_gpus() -> None:
    """The same on 2 GPUs (NCCL), through tigon's CUDA kernels."""
    _spawn_dtensor_checks("cuda")


# --- import cost -----------------------------------------------------------------------------

_STRATEGY_REGISTERED = (
    "from torch.distributed.tensor import DTensor\n"
    "funcs = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs\n"
    "assert torch.ops.tigon.rms_norm_fwd.default in funcs\n"
    "assert torch.ops.tigon.rms_norm_bwd_inplace.default in funcs\n"
)


@pytest.mark.parametrize("dtensor_first", [False, True], ids=["tigon-first", "dtensor-first"])
def test_strategies_registered_in_either_import_order(dtensor_first: bool) -> None:
    """``import tigon`` does not import DTensor (about a second), yet the strategies are there
    once DTensor is imported, whichever comes first."""
    first = "import torch.distributed.tensor\n" if dtensor_first else ""
    code = (
        f"import sys, torch\n{first}import tigon\n"
        + ("" if dtensor_first else "assert 'torch.distributed.tensor' not in sys.modules\n")
        + _STRATEGY_REGISTERED
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
