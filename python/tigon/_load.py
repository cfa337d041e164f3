"""Finds and loads the compiled operator library (``torch.ops.tigon``)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

#: Environment variable naming a ``_tigon_torch*.so`` to load instead of the packaged one
#: (development builds: ``cmake --build build`` then point this at the result).
LIBRARY_ENV = "TIGON_TORCH_LIBRARY"

_PACKAGE_DIR = Path(__file__).resolve().parent
_loaded: Path | None = None


def library_path() -> Path:
    """Returns the operator library to load: ``$TIGON_TORCH_LIBRARY``, else the packaged one."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise ImportError(f"tigon: {LIBRARY_ENV}={override!r} is not a file")
        return path
    candidates = sorted(_PACKAGE_DIR.glob("_tigon_torch*.so"))
    if not candidates:
        raise ImportError(
            f"tigon: no compiled operator library (_tigon_torch*.so) in {_PACKAGE_DIR}. "
            "Install the package with `pip install --no-build-isolation .`, or build it with "
            f"CMake (-DTIGON_BUILD_TORCH=ON) and set {LIBRARY_ENV} to the built file."
        )
    return candidates[0]


def load_library() -> Path:
    """Loads the operator library once (later calls return the path loaded first)."""
    global _loaded
    if _loaded is None:
        path = library_path()
        torch.ops.load_library(str(path))
        _loaded = path
    return _loaded
