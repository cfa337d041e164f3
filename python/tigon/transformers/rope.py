"""``rope=``: each family's module-level ``apply_rotary_pos_emb`` becomes ``tigon.ops.rope``.

The attention classes look the function up in their modeling module at call time, so this is a
replacement of a module global: it is **process-wide** even when a ``model=`` is given (every model
of that family in the process, built before or after, uses tigon's RoPE until
:func:`tigon.transformers.revert_patches`). Calls the kernel does not cover exactly (mixed dtypes,
q/k not 4-D) run HF's original function, so the numerics are never changed silently.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from tigon.transformers import _ops
from tigon.transformers._common import class_key, drift, import_family_module, skip_parity
from tigon.transformers.families import FamilySpec, RopeSpec

RopeFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]

#: (HF module, function name) -> HF's original function, recorded when first replaced.
_ORIGINALS: dict[tuple[str, str], RopeFn] = {}
_VERIFIED: set[tuple[str, int]] = set()


def _covered(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    return (
        q.dim() == 4
        and k.dim() == 4
        and q.dtype == k.dtype == cos.dtype == sin.dtype
        and q.device == k.device == cos.device == sin.device
        and cos.shape == sin.shape
        and cos.shape[-1] % 2 == 0
    )


def _make_rope(family: FamilySpec, original: RopeFn) -> RopeFn:
    spec = family.rope
    assert spec is not None
    partial = spec.variant == "partial"

    def apply_rotary_pos_emb(
        q: torch.Tensor,
        k: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        unsqueeze_dim: int = 1,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not _covered(q, k, cos, sin):
            return original(q, k, cos, sin, unsqueeze_dim)
        rotary = cos.shape[-1]
        if rotary == q.shape[-1] == k.shape[-1]:
            return _ops.rope(q, k, cos, sin, unsqueeze_dim)
        if not partial or rotary > min(q.shape[-1], k.shape[-1]):
            return original(q, k, cos, sin, unsqueeze_dim)
        # Phi3: rotate the first `rotary` dims, pass the rest through (HF's torch.cat order).
        q_rot, k_rot = _ops.rope(q[..., :rotary], k[..., :rotary], cos, sin, unsqueeze_dim)
        return (
            torch.cat([q_rot, q[..., rotary:]], dim=-1),
            torch.cat([k_rot, k[..., rotary:]], dim=-1),
        )

    apply_rotary_pos_emb.__doc__ = f"tigon.ops.rope standing in for {family.module}.{spec.fn}."
    apply_rotary_pos_emb.tigon_family = family.name  # type: ignore[attr-defined]
    apply_rotary_pos_emb.tigon_original = original  # type: ignore[attr-defined]
    return apply_rotary_pos_emb


def _is_ours(fn: Any) -> bool:
    return callable(fn) and hasattr(fn, "tigon_original")


def _original(family: FamilySpec) -> RopeFn:
    spec = family.rope
    assert spec is not None
    module = import_family_module(family)
    current = getattr(module, spec.fn, None)
    if current is None or not callable(current):
        raise drift(family.name, f"{family.module} has no function {spec.fn}")
    return current.tigon_original if _is_ours(current) else current


def _probe(
    family: FamilySpec, head_dim: int, rotary: int, gen: torch.Generator
) -> tuple[torch.Tensor, ...]:
    q = torch.randn(2, 2, 5, head_dim, generator=gen)
    k = torch.randn(2, 1, 5, head_dim, generator=gen)
    freqs = torch.randn(2, 5, rotary // 2, generator=gen) * 3
    angles = torch.cat([freqs, freqs], dim=-1)  # HF's duplicated [f, f] layout
    return q, k, angles.cos(), angles.sin()


def check_parity(family: FamilySpec, original: RopeFn) -> None:
    """Once per function: tigon's replacement must match HF's (outputs and gradients, float32)."""
    spec = family.rope
    assert spec is not None
    key = (family.module, id(original))
    if key in _VERIFIED or skip_parity():
        return
    ours = _make_rope(family, original)
    gen = torch.Generator().manual_seed(20260103)
    head_dim = 16
    rotary = 8 if spec.variant == "partial" else head_dim
    q, k, cos, sin = _probe(family, head_dim, rotary, gen)
    results = []
    for fn in (original, ours):
        qq, kk = q.clone().requires_grad_(), k.clone().requires_grad_()
        try:
            q_out, k_out = fn(qq, kk, cos, sin)
        except Exception as exc:
            raise drift(family.name, f"{spec.fn}(q, k, cos, sin) failed: {exc!r}") from exc
        (q_out.square().sum() + (k_out * 3).sum()).backward()
        results.append((q_out.detach(), k_out.detach(), qq.grad, kk.grad))
    for want, got in zip(*results):
        if want is None or got is None or not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
            raise drift(
                family.name,
                f"{spec.fn} no longer matches tigon.ops.rope ({spec.variant!r} variant) in "
                f"float32. Set TIGON_SKIP_PARITY_CHECK=1 to patch anyway",
            )
    _VERIFIED.add(key)


def describe(family: FamilySpec) -> str:
    spec = family.rope
    assert spec is not None
    return f"tigon.ops.rope (process-wide {family.module.rsplit('.', 1)[-1]}.{spec.fn})"


def is_patched(family: FamilySpec) -> bool:
    spec = family.rope
    module = sys.modules.get(family.module)
    return spec is not None and module is not None and _is_ours(getattr(module, spec.fn, None))


def replace_function(family: FamilySpec) -> dict[str, str]:
    """``modeling_<x>.apply_rotary_pos_emb`` becomes tigon's (process-wide)."""
    spec = family.rope
    assert spec is not None
    _ops.require("rope")
    original = _original(family)
    check_parity(family, original)
    module = import_family_module(family)
    if not _is_ours(getattr(module, spec.fn)):
        _ORIGINALS.setdefault((family.module, spec.fn), original)
        setattr(module, spec.fn, _make_rope(family, original))
    return {f"{family.module}.{spec.fn}": describe(family)}


def attention_modules(family: FamilySpec, model: nn.Module) -> list[str]:
    spec: RopeSpec | None = family.rope
    assert spec is not None
    wanted = (family.module, spec.attention)
    return [n for n, m in model.named_modules() if class_key(m) == wanted]


def patch_model(family: FamilySpec, model: nn.Module) -> dict[str, str]:
    """model=...: the same (process-wide) replacement; reports the model's attention modules."""
    spec = family.rope
    assert spec is not None
    names = attention_modules(family, model)
    if not names:
        raise RuntimeError(
            f"tigon.transformers[{family.name}]: rope=True found nothing to patch in this "
            f"{type(model).__name__}: no {spec.attention} module."
        )
    replace_function(family)
    return dict.fromkeys(names, describe(family))


def revert(family: FamilySpec) -> list[str]:
    spec = family.rope
    if spec is None:
        return []
    module = sys.modules.get(family.module)
    original = _ORIGINALS.get((family.module, spec.fn))
    if module is None or original is None or not _is_ours(getattr(module, spec.fn, None)):
        return []
    setattr(module, spec.fn, original)
    return [f"{family.module}.{spec.fn}"]
