"""tigon: fused, exact C++/CUDA kernels for training large language models.

``import tigon`` loads the compiled operators (``torch.ops.tigon.*``) and registers their fake
implementations and autograd formulas. Public API: :mod:`tigon.ops` (functions) and
:mod:`tigon.nn` (modules that are drop-in replacements for Hugging Face's).
"""

from __future__ import annotations

import torch

from tigon._load import load_library

load_library()

from tigon import distributed as _distributed  # noqa: E402
from tigon import nn, ops  # noqa: E402  (the operators must be loaded first)

# DTensor sharding strategies: registered now if DTensor is loaded, else when it is imported.
_distributed.install()

__version__: str = torch.ops.tigon.version()


def has_cuda_kernels() -> bool:
    """True when this build contains the CUDA kernels (there may still be no GPU at run time)."""
    return bool(torch.ops.tigon.has_cuda_kernels())


__all__ = ["__version__", "has_cuda_kernels", "nn", "ops"]
