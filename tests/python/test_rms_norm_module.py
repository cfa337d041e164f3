"""tigon.nn.RMSNorm: a drop-in for the Hugging Face RMSNorm modules."""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICES, FAMILIES, Family, assert_bitwise_mostly, hf_module, random_weight

import tigon


def _tigon_for(family: Family, hidden: int, **kwargs: object) -> tigon.nn.RMSNorm:
    return tigon.nn.RMSNorm(
        hidden,
        eps=1e-6,
        offset=family.offset,
        casting_mode=family.casting_mode,
        init=family.init,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_state_dict_round_trip_with_hf(family: Family, device: str) -> None:
    hidden = 96
    hf = hf_module(
        family, random_weight(family, hidden, torch.float32), 1e-6, device, torch.bfloat16
    )
    norm = _tigon_for(family, hidden, device=device, dtype=torch.bfloat16)
    norm.load_state_dict(hf.state_dict())  # strict: same keys and shapes
    assert list(norm.state_dict()) == ["weight"]
    x = torch.randn(4, 7, hidden, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        assert_bitwise_mostly(norm(x), hf(x))
    fresh = family.hf_class(hidden, eps=1e-6).to(device=device, dtype=torch.bfloat16)
    fresh.load_state_dict(norm.state_dict())
    assert torch.equal(fresh.weight, hf.weight)


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_initial_weights_match_hf(family: Family) -> None:
    hf = family.hf_class(32, eps=1e-5)
    norm = _tigon_for(family, 32)
    assert torch.equal(norm.weight, hf.weight)
    assert norm.weight.dtype == torch.float32 and norm.weight.requires_grad


def test_attributes_and_repr() -> None:
    norm = tigon.nn.RMSNorm(64, eps=1e-5, offset=1.0, casting_mode="gemma", init="zeros")
    assert norm.variance_epsilon == 1e-5 and norm.eps == 1e-5
    norm.eps = 1e-6
    assert norm.variance_epsilon == 1e-6
    assert (
        repr(norm) == "RMSNorm((64,), eps=1e-06, offset=1.0, casting_mode='gemma', in_place=True)"
    )
    hf_like = tigon.nn.RMSNorm(8, in_place=False)
    assert hf_like.extra_repr().startswith("(8,), eps=1e-06")
    plain = tigon.nn.RMSNorm(8, elementwise_affine=False)
    assert plain.weight is None and list(plain.parameters()) == []
    assert "elementwise_affine=False" in repr(plain)


def test_reset_parameters() -> None:
    for init, value in (("ones", 1.0), ("zeros", 0.0)):
        norm = tigon.nn.RMSNorm(16, init=init)
        with torch.no_grad():
            norm.weight.normal_()
        norm.reset_parameters()
        assert torch.equal(norm.weight, torch.full((16,), value))


def test_device_and_dtype_arguments() -> None:
    norm = tigon.nn.RMSNorm(16, device="meta", dtype=torch.bfloat16)
    assert norm.weight.device.type == "meta" and norm.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [True, False])
def test_training_step_matches_functional(in_place: bool, device: str) -> None:
    norm = tigon.nn.RMSNorm(48, in_place=in_place, device=device)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.2)
    x = torch.randn(5, 48, device=device, requires_grad=True)
    dy = torch.randn(5, 48, device=device)
    norm(x).backward(dy.clone())
    x2 = x.detach().clone().requires_grad_()
    w2 = norm.weight.detach().clone().requires_grad_()
    tigon.ops.rms_norm(x2, w2).backward(dy)
    assert torch.equal(x.grad, x2.grad) and torch.equal(norm.weight.grad, w2.grad)


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"hidden_size": 0}, ValueError, "hidden_size"),
        ({"hidden_size": -3}, ValueError, "hidden_size"),
        ({"hidden_size": 2.5}, ValueError, "hidden_size"),
        ({"hidden_size": True}, ValueError, "hidden_size"),
        ({"hidden_size": 8, "eps": -1e-6}, ValueError, "eps"),
        ({"hidden_size": 8, "eps": float("inf")}, ValueError, "eps"),
        ({"hidden_size": 8, "offset": float("nan")}, ValueError, "offset"),
        ({"hidden_size": 8, "casting_mode": "fp32"}, ValueError, "casting_mode"),
        ({"hidden_size": 8, "init": "normal"}, ValueError, "init"),
        ({"hidden_size": 8, "offset": 1.0, "elementwise_affine": False}, ValueError, "offset"),
    ],
    ids=[
        "hidden0",
        "hidden_negative",
        "hidden_float",
        "hidden_bool",
        "eps_negative",
        "eps_inf",
        "offset_nan",
        "casting_mode",
        "init",
        "offset_without_weight",
    ],
)
def test_constructor_errors_name_the_argument(
    kwargs: dict[str, object], error: type[Exception], names: str
) -> None:
    with pytest.raises(error, match=names):
        tigon.nn.RMSNorm(**kwargs)  # type: ignore[arg-type]


def test_forward_errors_name_the_argument() -> None:
    norm = tigon.nn.RMSNorm(8)
    with pytest.raises(ValueError, match="'weight'"):
        norm(torch.randn(2, 9))
    with pytest.raises(TypeError, match="'x'"):
        norm(torch.ones(2, 8, dtype=torch.int64))
