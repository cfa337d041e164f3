"""The tigon package: import, build information, library loading."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import torch

import tigon
from tigon import _load


def test_version_matches_the_project() -> None:
    """One place holds the version (CMakeLists.txt); the library and the installed package's
    metadata (read from it by scikit-build-core) agree with it."""
    root = Path(__file__).resolve().parents[2]
    cmake = (root / "CMakeLists.txt").read_text()
    cmake_version = re.search(r"project\(tigon VERSION ([0-9.]+)", cmake)
    assert cmake_version
    assert tigon.__version__ == cmake_version.group(1)
    try:
        installed = importlib.metadata.version("tigon")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tigon is imported from the source tree, not installed")
    assert installed == tigon.__version__


def test_has_cuda_kernels_is_a_bool() -> None:
    assert isinstance(tigon.has_cuda_kernels(), bool)
    assert tigon.has_cuda_kernels() == torch.ops.tigon.has_cuda_kernels()


@pytest.mark.gpu
def test_gpu_builds_have_cuda_kernels() -> None:
    assert tigon.has_cuda_kernels(), "a CUDA device is present but tigon was built without CUDA"


def test_public_api() -> None:
    assert callable(tigon.ops.rms_norm)
    assert issubclass(tigon.nn.RMSNorm, torch.nn.Module)
    assert callable(tigon.ops.layer_norm)
    assert issubclass(tigon.nn.LayerNorm, torch.nn.Module)
    for name in ("kl_div", "jsd", "tvd"):
        assert callable(getattr(tigon.ops, name))
    for module in (tigon.nn.KLDivLoss, tigon.nn.JSD, tigon.nn.TVDLoss):
        assert issubclass(module, torch.nn.Module)
    assert callable(tigon.ops.fused_add_rms_norm)
    assert issubclass(tigon.nn.FusedAddRMSNorm, torch.nn.Module)
    assert callable(tigon.ops.dyt)
    assert issubclass(tigon.nn.DyT, torch.nn.Module)
    assert callable(tigon.ops.poly_norm)
    assert issubclass(tigon.nn.PolyNorm, torch.nn.Module)
    assert callable(tigon.ops.gated_rms_norm)
    assert issubclass(tigon.nn.RMSNormGated, torch.nn.Module)
    assert callable(tigon.ops.moe_experts)
    assert callable(tigon.ops.moe_router)
    assert issubclass(tigon.nn.MoEExperts, torch.nn.Module)
    for name in (
        "rms_norm_fwd",
        "rms_norm_bwd",
        "rms_norm_bwd_inplace",
        "layer_norm_fwd",
        "layer_norm_bwd",
        "layer_norm_bwd_inplace",
        "kl_div_fwd",
        "kl_div_bwd",
        "jsd_fwd",
        "jsd_bwd",
        "tvd_fwd",
        "tvd_bwd",
        "fused_add_rms_norm_fwd",
        "fused_add_rms_norm_bwd",
        "fused_add_rms_norm_bwd_inplace",
        "dyt_fwd",
        "dyt_bwd",
        "poly_norm_fwd",
        "poly_norm_bwd",
        "gated_rms_norm_fwd",
        "gated_rms_norm_bwd",
        "gated_rms_norm_bwd_inplace",
        "moe_experts_fwd",
        "moe_experts_bwd",
        "moe_router_fwd",
        "moe_router_bwd",
    ):
        assert hasattr(torch.ops.tigon, name)


def test_library_path_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(_load.LIBRARY_ENV, str(tmp_path / "missing.so"))
    with pytest.raises(ImportError, match=_load.LIBRARY_ENV):
        _load.library_path()
    fake = tmp_path / "_tigon_torch.so"
    fake.write_bytes(b"")
    monkeypatch.setenv(_load.LIBRARY_ENV, str(fake))
    assert _load.library_path() == fake


def test_load_library_is_idempotent() -> None:
    assert _load.load_library() == _load.load_library()
