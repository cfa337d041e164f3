"""Shared helpers of the Python tests: devices, bit-level comparisons, reference modules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

#: Every device a test runs on; CUDA ones carry the `gpu` marker (skipped without a device).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu, id="cuda")]

LOW_PRECISION = (torch.bfloat16, torch.float16)
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

#: Float32 rounding unit: the floor below which two float32 computations cannot be ranked.
FLOAT32_EPS = 2.0**-24


def ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Integers in the order of the float values: adjacent floats differ by 1 (+0 == -0)."""
    if t.dtype in LOW_PRECISION:
        bits, magnitude = t.contiguous().view(torch.int16).to(torch.int64), 0x7FFF
    elif t.dtype == torch.float32:
        bits, magnitude = t.contiguous().view(torch.int32).to(torch.int64), 0x7FFFFFFF
    else:
        raise TypeError(f"no ulp distance for {t.dtype}")
    return torch.where(bits < 0, -(bits & magnitude), bits)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many representable values of the (common) dtype lie between a and b, elementwise."""
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    return (ordered_bits(a) - ordered_bits(b)).abs()


def assert_bitwise_mostly(
    actual: torch.Tensor, expected: torch.Tensor, *, max_ulp: int = 1, min_exact: float = 0.99
) -> None:
    """At least `min_exact` of the elements have identical bits, none is `max_ulp` ulps away."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if actual.numel() == 0:
        return
    dist = ulp_distance(actual.cpu(), expected.cpu())
    exact = (dist == 0).double().mean().item()
    worst = int(dist.max())
    assert exact >= min_exact and worst <= max_ulp, (
        f"{exact:.5%} of elements bitwise equal (need {min_exact:.0%}), worst {worst} ulp "
        f"(allowed {max_ulp})"
    )


def assert_grad_not_worse(
    actual: torch.Tensor,
    peer: torch.Tensor,
    exact: torch.Tensor,
    scale: float,
    what: str,
    peer_exact: torch.Tensor | None = None,
) -> None:
    """actual's error vs the float64 `exact` is at most the peer's (Frobenius norms).

    `peer_exact` is the peer's own oracle when its forward rounded differently (default: exact).

    `scale` is the norm of the terms the gradient sums; 8 float32 rounding units of it is the
    floor below which two float32 computations cannot be ranked. It only matters for float32
    inputs and for the total cancellation of hidden size 1; bf16/fp16 errors are 1000x larger.
    """
    err = (actual.double().cpu() - exact).norm().item()
    peer_exact = exact if peer_exact is None else peer_exact
    peer_err = (peer.double().cpu() - peer_exact).norm().item()
    floor = 8 * FLOAT32_EPS * scale
    assert err <= peer_err + floor, (
        f"{what}: tigon error {err:.3e} > reference implementation error {peer_err:.3e} "
        f"(+ float32 floor {floor:.1e})"
    )


def assert_compiled_matches_eager(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], dy: torch.Tensor
) -> None:
    """``torch.compile(model, fullgraph=True)`` gives eager's output and parameter gradients."""
    torch._dynamo.reset()
    model(*inputs).backward(dy.clone())
    grads = [p.grad.clone() for p in model.parameters()]
    y_eager = model(*inputs).detach()
    model.zero_grad()
    y = torch.compile(model, fullgraph=True)(*inputs)
    y.backward(dy.clone())
    torch.testing.assert_close(y, y_eager)
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g)


@dataclass(frozen=True)
class Family:
    """A Hugging Face RMSNorm and the tigon options that reproduce it."""

    name: str
    hf_class: Callable[..., nn.Module]
    offset: float
    casting_mode: str
    init: str  # tigon.nn.RMSNorm init that matches the HF module's initial weight
    weight_mean: float  # random weights are weight_mean + 0.5 * randn


FAMILIES = [
    Family("llama", LlamaRMSNorm, 0.0, "llama", "ones", 1.0),
    Family("gemma", GemmaRMSNorm, 1.0, "gemma", "zeros", 0.0),
    Family("gemma3", Gemma3RMSNorm, 1.0, "gemma", "zeros", 0.0),
]
FAMILY_IDS = [f.name for f in FAMILIES]


def random_weight(family: Family, hidden: int, dtype: torch.dtype) -> torch.Tensor:
    """Random weights of the family's typical size, rounded to `dtype`.

    For Gemma they sit near 0, where bf16(w) + 1 != float32(w) + 1: forming 1 + w in the weight
    dtype (the classic Gemma bug) would change the output.
    """
    return (family.weight_mean + 0.5 * torch.randn(hidden)).to(dtype)


def hf_module(
    family: Family, weight: torch.Tensor, eps: float, device: str, dtype: torch.dtype
) -> nn.Module:
    """The family's Hugging Face module with the given weight, on `device` in `dtype`."""
    module = family.hf_class(weight.numel(), eps=eps)
    with torch.no_grad():
        module.weight.copy_(weight.float())
    return module.to(device=device, dtype=dtype)


def rms_norm_float64(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float
) -> torch.Tensor:
    """The formula every mode implements, in float64 (the gradient oracle)."""
    x = x.double()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * (offset + weight.double())


def rms_norm_eager(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float
) -> torch.Tensor:
    """Eager PyTorch in x's dtype: casting_mode="none".

    The reciprocal square root is taken in float32 and rounded once. torch.rsqrt on a 16-bit CPU
    tensor does exactly that for the elements its vectorized loop covers (multiples of 32), but
    its scalar tail rounds sqrt to 16 bits first (1 / round(sqrt(v))), so plain eager results
    depend on the row count modulo 32. tigon follows the vectorized (correctly rounded) path.
    """
    variance = x.pow(2).mean(-1, keepdim=True) + eps
    rstd = torch.rsqrt(variance.float()).to(x.dtype)
    y = x * rstd
    return y if weight is None else y * (offset + weight)


def restore_transformers() -> Iterator[None]:
    """Body of an autouse fixture: runs a test single-threaded and leaves transformers' classes as
    it found them."""
    import tigon.transformers as tt

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        tt.revert_patches()


def token_ids(batch: int = 2, seq: int = 16) -> torch.Tensor:
    """A fixed batch of byte-level token ids for the tiny test models."""
    return torch.randint(3, 256, (batch, seq), generator=torch.Generator().manual_seed(7))
