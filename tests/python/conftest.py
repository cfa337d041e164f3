"""pytest setup for tigon's Python tests: GPU markers skip cleanly without a device."""

from __future__ import annotations

import os

import pytest
import torch


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--expect-transformers",
        default=None,
        help="fail unless this transformers version is the one imported (make test-compat)",
    )


def pytest_configure(config: pytest.Config) -> None:
    expected = config.getoption("--expect-transformers")
    if expected is not None:
        import transformers

        if transformers.__version__ != expected:
            raise pytest.UsageError(
                f"--expect-transformers {expected}: imported transformers "
                f"{transformers.__version__} from {transformers.__file__}"
            )


def _cuda_device_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skips (never passes) `gpu` tests without a CUDA device, `multigpu` ones without two."""
    devices = _cuda_device_count()
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_multi = pytest.mark.skip(reason="needs two or more CUDA devices")
    for item in items:
        if devices == 0 and ("gpu" in item.keywords or "multigpu" in item.keywords):
            item.add_marker(skip_gpu)
        elif devices < 2 and "multigpu" in item.keywords:
            item.add_marker(skip_multi)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same seed ($TIGON_TEST_SEED, default 0)."""
    torch.manual_seed(int(os.environ.get("TIGON_TEST_SEED", "0")))
