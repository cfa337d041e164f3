"""DTensor support: sharding strategies for tigon's operators (tensor/sequence parallelism).

RMSNorm works row by row over the last dimension, so a DTensor input sharded on any other
dimension runs locally on each shard (weight replicated); the weight gradient of a shard is a
partial sum over its rows (``Partial()``, summed when it is materialized). An input sharded on the
normalized (last) dimension is gathered to ``Replicate()`` first, so the result is exact.

FSDP2 and DDP need none of this (FSDP2 all-gathers its DTensor parameters into plain tensors
before the forward). The strategies are registered when ``torch.distributed.tensor`` is imported,
before or after ``import tigon``, so importing tigon stays cheap: :func:`install` only adds an
import hook unless DTensor is already loaded.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch

__all__ = ["install", "is_dtensor", "register_dtensor_sharding", "runs_locally_in_place"]

_DTENSOR_MODULE = "torch.distributed.tensor"
_registered = False


def is_dtensor(t: object) -> bool:
    """True if ``t`` is a DTensor (without importing DTensor when nothing has)."""
    module = sys.modules.get(_DTENSOR_MODULE)
    cls = getattr(module, "DTensor", None)
    return cls is not None and isinstance(t, cls)


def _locally_normalizable(placement: Any, ndim: int) -> bool:
    """Replicate, or Shard on a dimension other than the normalized (last) one."""
    if placement.is_replicate():
        return True
    return placement.is_shard() and placement.dim < ndim - 1


def runs_locally_in_place(dy: torch.Tensor) -> bool:
    """Whether ``rms_norm_bwd_inplace`` may write dx into ``dy``: always for plain tensors; for
    a DTensor only when no redistribution of ``dy`` is needed (a redistributed copy would
    receive the write instead)."""
    if not is_dtensor(dy):
        return True
    return all(_locally_normalizable(p, dy.ndim) for p in dy.placements)


def _row_strategies(
    ndim: int, n_row_outputs: int, weight: object, n_row_inputs_after_weight: int
) -> list[tuple[list[Any], list[Any]]]:
    """(outputs, inputs) placement lists for one mesh dimension.

    Outputs: ``n_row_outputs`` row-shaped tensors, then dW when ``weight`` is given to a
    backward (``n_row_inputs_after_weight`` > 0). Inputs: the row-shaped tensors before the
    weight, the weight, then ``n_row_inputs_after_weight`` row-shaped tensors (rstd).
    """
    from torch.distributed.tensor import Partial, Replicate, Shard

    is_backward = n_row_inputs_after_weight > 0
    has_weight = weight is not None
    strategies = []
    for placement in [Replicate(), *(Shard(d) for d in range(ndim - 1))]:
        rows_before = [placement] * (2 if is_backward else 1)
        w = Replicate() if has_weight else None
        outputs: list[Any] = [placement] * n_row_outputs
        if is_backward:
            # dW: a partial sum over this shard's rows; empty (replicated) without a weight.
            sharded = placement.is_shard()
            outputs.append(Partial() if has_weight and sharded else Replicate())
        inputs = [*rows_before, w, *([placement] * n_row_inputs_after_weight)]
        strategies.append((outputs, inputs))
    return strategies


def _fwd_strategies(x: Any, weight: Any, *_args: Any, **_kwargs: Any) -> Sequence[Any]:
    # outputs (y, rstd); inputs (x, weight)
    return _row_strategies(x.ndim, 2, weight, 0)


def _bwd_strategies(dy: Any, x: Any, weight: Any, *_args: Any, **_kwargs: Any) -> Sequence[Any]:
    # outputs (dx, dw); inputs (dy, x, weight, rstd)
    return _row_strategies(x.ndim, 1, weight, 1)


def _bwd_inplace_strategies(
    dy: Any, x: Any, weight: Any, *_args: Any, **_kwargs: Any
) -> Sequence[Any]:
    # outputs (dw,); inputs (dy, x, weight, rstd). dx is written into dy's local shard, so dy
    # must run where it is: only the strategies that keep its placement are offered.
    if not all(_locally_normalizable(p, x.ndim) for p in dy.placements):
        raise RuntimeError(
            "tigon::rms_norm_bwd_inplace: argument 'dy': expected a DTensor replicated or sharded "
            f"on a dimension other than the last, got placements {dy.placements}; use "
            "tigon::rms_norm_bwd (out of place) instead"
        )
    wanted = set(dy.placements)
    return [
        (outputs[1:], inputs)  # without dx: the op returns dw only
        for outputs, inputs in _row_strategies(x.ndim, 1, weight, 1)
        if inputs[0] in wanted
    ]


def register_dtensor_sharding() -> None:
    """Registers the DTensor sharding strategies of tigon's operators (idempotent)."""
    global _registered
    if _registered:
        return
    from torch.distributed.tensor.experimental import register_sharding

    ops = torch.ops.tigon
    register_sharding(ops.rms_norm_fwd.default)(_fwd_strategies)
    register_sharding(ops.rms_norm_bwd.default)(_bwd_strategies)
    register_sharding(ops.rms_norm_bwd_inplace.default)(_bwd_inplace_strategies)
    _registered = True


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Runs :func:`register_dtensor_sharding` right after ``torch.distributed.tensor`` loads."""

    def __init__(self) -> None:
        self._finding = False

    def find_spec(self, name: str, path: Any, target: ModuleType | None = None) -> Any:
        if name != _DTENSOR_MODULE or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _LoaderThen(spec.loader)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        return spec


class _LoaderThen(importlib.abc.Loader):
    """Delegates to ``loader``, then registers the strategies."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        try:
            register_dtensor_sharding()
        except Exception as e:  # never break `import torch.distributed.tensor` itself
            warnings.warn(
                f"tigon: DTensor sharding strategies not registered ({type(e).__name__}: {e}); "
                "tigon's operators will reject DTensor inputs",
                RuntimeWarning,
                stacklevel=2,
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def install() -> None:
    """Registers the strategies now if DTensor is loaded, else when it is first imported.

    Does nothing where PyTorch is built without distributed support.
    """
    if not torch.distributed.is_available():
        return
    if _DTENSOR_MODULE in sys.modules:
        register_dtensor_sharding()
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
