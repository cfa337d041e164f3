"""SwiGLU / GeGLU gate and down multipliers (Falcon-H1's ``mlp_multipliers``): the op against
PyTorch eager + autograd of ``act(a * gm) * b * dm``, tigon.nn.SwiGLUMLP against HF's
FalconH1MLP (bitwise forward, gradients no farther from float64 than HF's own autograd), opcheck,
gradcheck, torch.compile, the defaults' bits and the errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICES, assert_bitwise_mostly, assert_grad_not_worse
from transformers import FalconH1Config
from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1MLP

import tigon

OPS = torch.ops.tigon
NAMES = ["swiglu", "geglu"]
ACT = {"swiglu": F.silu, "geglu": lambda t: F.gelu(t, approximate="tanh")}
# Falcon-H1-0.5B's mlp_multipliers, and others: negative, not representable in bf16, large.
MULTIPLIERS = [(0.8927, 0.3921875), (1.0, 0.3921875), (0.6, 1.0), (-2.5, -0.1), (1e-3, 37.0)]


def _reference(name, a, b, dy, gm, dm):
    """HF's graph in T: act_fn(gate * gm) * up, then * dm (Liger's place for dm); returns y, da,
    db and the intermediates c = act(z) * b, dz = dL/dz with z = gate * gm."""
    a = a.detach().clone().requires_grad_()
    b = b.detach().clone().requires_grad_()
    z = a * gm
    z.retain_grad()
    c = ACT[name](z) * b
    c.retain_grad()
    y = c * dm if dm != 1.0 else c
    y.backward(dy)
    return y.detach(), a.grad, b.grad, c.detach(), z.grad


def _tigon(name, a, b, dy, gm, dm, in_place=False):
    a = a.detach().clone().requires_grad_()
    b = b.detach().clone().requires_grad_()
    y = getattr(tigon.ops, name)(
        a * 1, b * 1, in_place=in_place, gate_multiplier=gm, down_multiplier=dm
    )
    da, db = torch.autograd.grad(y, (a, b), dy)
    return y.detach(), da, db


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("multipliers", MULTIPLIERS, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_op_matches_torch_autograd(name, multipliers, dtype, in_place, device):
    gm, dm = multipliers
    torch.manual_seed(0)
    a = torch.randn(5, 1031, device=device, dtype=dtype) * 2
    if name == "geglu":  # PyTorch's CPU gelu tail (SLEEF tanhf): see test_glu_ops.py
        a = (a.float().clamp(-4.5, 4.5) / abs(gm)).clamp(-4e4, 4e4).to(dtype)
    b = torch.randn(5, 1031, device=device, dtype=dtype)
    dy = torch.randn(5, 1031, device=device, dtype=dtype)
    y, da, db = _tigon(name, a, b, dy, gm, dm, in_place)
    y_ref, da_ref, db_ref, c_ref, dz_ref = _reference(name, a, b, dy, gm, dm)
    if device != "cpu":  # CUDA: PyTorch's own kernels, bit for bit
        for g, w in ((y, y_ref), (da, da_ref), (db, db_ref)):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        return
    if dtype == torch.float32:
        for g, w in ((y, y_ref), (da, da_ref), (db, db_ref)):
            torch.testing.assert_close(g, w, rtol=2e-6, atol=1e-6 * max(1.0, abs(gm), abs(dm)))
        return
    # The multipliers' steps are PyTorch's T * float bit for bit: y, da, db are the plain op's c,
    # dz, db on z = a * gm and dc = dy * dm, scaled by torch's own multiplication.
    z, dc = a * gm, dy * dm
    c = getattr(OPS, f"{name}_fwd")(z, b)
    dz, db_plain = getattr(OPS, f"{name}_bwd")(dc, z, b)
    assert torch.equal(y, c * dm if dm != 1.0 else c)
    assert torch.equal(da, dz * gm)
    assert torch.equal(db, db_plain)
    # The plain op against PyTorch's CPU kernels (float32 exp/tanh: test_glu_ops.py). A 1-ulp
    # difference of c or dz is, once multiplied, |m| ulps of c, at most 2 ulps of the product's
    # binade: 3 after the two roundings (HF's graph rounds the same two places).
    for g, w in ((c, c_ref), (dz, dz_ref), (db, db_ref)):
        assert_bitwise_mostly(g, w, max_ulp=1, min_exact=0.99)
    for g, w in ((y, y_ref), (da, da_ref)):
        assert_bitwise_mostly(g, w, max_ulp=3, min_exact=0.99)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_unit_multipliers_are_the_plain_op(name, device):
    a = torch.randn(7, 300, device=device, dtype=torch.bfloat16)
    b = torch.randn(7, 300, device=device, dtype=torch.bfloat16)
    dy = torch.randn(7, 300, device=device, dtype=torch.bfloat16)
    plain = getattr(OPS, f"{name}_fwd")(a, b)
    for one in (1.0, 1 + 1e-12, 1):
        assert torch.equal(getattr(tigon.ops, name)(a, b, False, one, one), plain)
    da, db = getattr(OPS, f"{name}_bwd")(dy, a, b)
    da1, db1 = getattr(OPS, f"{name}_bwd")(dy, a, b, 1.0, 1.0)
    assert torch.equal(da, da1) and torch.equal(db, db1)


# ------------------------------------------------------------------------------ Falcon-H1


def _falcon_config(multipliers):
    return FalconH1Config(
        hidden_size=48,
        intermediate_size=72,
        num_attention_heads=4,
        num_key_value_heads=2,
        mlp_multipliers=list(multipliers),
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fuse_down_proj", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("multipliers", [(0.8927, 0.3921875), (1.7, -0.6), (1.0, 1.0)], ids=str)
def test_falcon_h1_mlp_matches_hf(multipliers, dtype, fuse_down_proj, device):
    torch.manual_seed(1)
    config = _falcon_config(multipliers)
    hf = FalconH1MLP(config).to(device=device, dtype=dtype)
    ours = tigon.nn.SwiGLUMLP(config, fuse_down_proj=fuse_down_proj).to(device=device, dtype=dtype)
    assert (ours.gate_multiplier, ours.down_multiplier) == tuple(multipliers)
    assert set(ours.state_dict()) == set(hf.state_dict())
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(3, 11, 48, device=device, dtype=dtype)
    x_hf, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_hf, y_ours = hf(x_hf), ours(x_ours)
    assert_bitwise_mostly(y_ours, y_hf, max_ulp=1, min_exact=0.99)
    dy = torch.randn_like(y_hf)
    y_hf.backward(dy)
    y_ours.backward(dy)

    # float64: HF's module on the same (rounded) weights and input.
    exact = FalconH1MLP(config).to(device="cpu", dtype=torch.float64)
    exact.load_state_dict({k: v.double().cpu() for k, v in hf.state_dict().items()})
    x64 = x.double().cpu().requires_grad_()
    exact(x64).backward(dy.double().cpu())
    assert_grad_not_worse(x_ours.grad, x_hf.grad, x64.grad, 0.0, "dx")
    hf_params = dict(hf.named_parameters())
    exact_params = dict(exact.named_parameters())
    for pname, p in ours.named_parameters():
        assert_grad_not_worse(p.grad, hf_params[pname].grad, exact_params[pname].grad, 0.0, pname)


def test_module_multipliers_from_arguments():
    config = _falcon_config((0.5, 2.0))
    m = tigon.nn.SwiGLUMLP(config, gate_multiplier=0.25)
    assert (m.gate_multiplier, m.down_multiplier) == (0.25, 2.0)
    assert "gate_multiplier=0.25" in repr(m)


# --------------------------------------------------- opcheck, gradcheck, torch.compile, errors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", NAMES)
def test_opcheck(name, dtype, device):
    a = torch.randn(3, 5, 40, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(3, 5, 40, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(3, 5, 40, device=device, dtype=dtype)
    for in_place in (False, True):
        torch.library.opcheck(getattr(OPS, f"{name}_fwd").default, (a, b, in_place, 0.7, -1.3))
    torch.library.opcheck(
        getattr(OPS, f"{name}_bwd").default, (dy, a.detach(), b.detach(), 0.7, 2.0)
    )
    torch.library.opcheck(
        getattr(OPS, f"{name}_bwd_inplace").default,
        (dy, a.detach().clone(), b.detach().clone(), 0.7, 2.0),
    )
    w = torch.randn(24, 40, device=device, dtype=dtype, requires_grad=True)
    torch.library.opcheck(getattr(OPS, f"{name}_down_proj_fwd").default, (a, b, w, None, True, 0.7))


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck(name):
    a = torch.randn(3, 4, 9, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 4, 9, dtype=torch.float64, requires_grad=True)

    def f(a, b):
        y = getattr(tigon.ops, name)(a.float(), b.float(), gate_multiplier=0.8, down_multiplier=1.5)
        return y.double()

    assert torch.autograd.gradcheck(f, (a, b), eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    torch._dynamo.reset()

    def mlp(x, wg, wu, wd, gm, dm):
        return (
            tigon.ops.swiglu(x @ wg, x @ wu, in_place=True, gate_multiplier=gm, down_multiplier=dm)
            @ wd
        )

    x = torch.randn(8, 16, device=device, requires_grad=True)
    wg, wu = torch.randn(16, 32, device=device), torch.randn(16, 32, device=device)
    wd = torch.randn(32, 16, device=device)
    compiled_fn = torch.compile(mlp, fullgraph=True)
    for gm, dm in ((0.7, 1.3), (1.0, 1.0)):
        eager = mlp(x, wg, wu, wd, gm, dm)
        (g_eager,) = torch.autograd.grad(eager.sum(), x)
        compiled = compiled_fn(x, wg, wu, wd, gm, dm)
        (g_comp,) = torch.autograd.grad(compiled.sum(), x)
        torch.testing.assert_close(compiled, eager)
        torch.testing.assert_close(g_comp, g_eager)

    module = tigon.nn.SwiGLUMLP(_falcon_config((0.8927, 0.3921875))).to(device)
    x = torch.randn(8, 48, device=device, requires_grad=True)
    y_eager = module(x)
    (g_e,) = torch.autograd.grad(y_eager.sum(), x)
    y = torch.compile(module, fullgraph=True)(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(y, y_eager)
    torch.testing.assert_close(g, g_e)


@pytest.mark.parametrize("name", NAMES)
def test_errors_name_the_argument(name):
    a = torch.randn(2, 8)
    for bad in (float("inf"), float("nan"), 1e39):
        with pytest.raises(ValueError, match="argument 'gate_multiplier'"):
            getattr(tigon.ops, name)(a, a, gate_multiplier=bad)
        with pytest.raises(ValueError, match="argument 'down_multiplier'"):
            getattr(OPS, f"{name}_fwd")(a, a, False, 1.0, bad)
        with pytest.raises(ValueError, match="argument 'down_multiplier'"):
            getattr(OPS, f"{name}_bwd")(a, a, a, 1.0, bad)
    with pytest.raises(TypeError, match="argument 'gate_multiplier'"):
        getattr(tigon.ops, name)(a, a, gate_multiplier="2")
    with pytest.raises(TypeError, match="argument 'down_multiplier'"):
        getattr(tigon.ops, name)(a, a, down_multiplier=torch.tensor(2.0))
