"""RoPE operators: registration (opcheck), gradients (gradcheck, cos/sin gradients),
torch.compile(fullgraph=True), in-place modes, empty inputs and argument errors."""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICES
from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb as hf_phi3

import tigon

OPS = torch.ops.tigon


def _qk_tables(device, dtype=torch.float32, cos_dtype=None, rotary=16, dim=16, requires_grad=False):
    q = torch.randn(2, 5, 4, dim, device=device, dtype=dtype).transpose(1, 2)
    k = torch.randn(2, 5, 2, dim, device=device, dtype=dtype).transpose(1, 2)
    angles = torch.randn(2, 5, rotary // 2)
    emb = torch.cat((angles, angles), -1)
    cos_dtype = cos_dtype or dtype
    cos, sin = emb.cos().to(device, cos_dtype), emb.sin().to(device, cos_dtype)
    if requires_grad:
        q.requires_grad_()
        k.requires_grad_()
    return q, k, cos, sin


# ---------------------------------------------------------------------------------- opcheck

OPCHECK_CASES = [
    pytest.param(torch.float32, torch.float32, 16, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, 16, id="bf16"),
    pytest.param(torch.bfloat16, torch.float32, 16, id="bf16-cosfp32"),
    pytest.param(torch.float16, torch.float16, 8, id="fp16-partial"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "cos_dtype", "rotary"), OPCHECK_CASES)
def test_opcheck_fwd(dtype, cos_dtype, rotary, device):
    q, k, cos, sin = _qk_tables(device, dtype, cos_dtype, rotary, requires_grad=True)
    torch.library.opcheck(OPS.rope_fwd.default, (q, k, cos, sin, 1, False))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "cos_dtype", "rotary"), OPCHECK_CASES)
def test_opcheck_bwd(dtype, cos_dtype, rotary, device):
    q, k, cos, sin = _qk_tables(device, dtype, cos_dtype, rotary)
    out = torch.promote_types(dtype, cos_dtype)
    dq, dk = torch.randn_like(q, dtype=out), torch.randn_like(k, dtype=out)
    torch.library.opcheck(OPS.rope_bwd.default, (dq, dk, cos, sin, 1, dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", ["rope_fwd_inplace", "rope_bwd_inplace"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_inplace(dtype, op_name, device):
    q, k, cos, sin = _qk_tables(device, dtype, rotary=8)
    torch.library.opcheck(getattr(OPS, op_name).default, (q, k, cos, sin, 1))


# The table forms HF's models pass besides [B | 1, S, R] (tests/python/test_rope.py checks their
# values against HF): (q shape, k shape, table shape, unsqueeze_dim).
TABLE_FORMS = [
    pytest.param((7, 4, 16), (7, 2, 16), (7, 16), 1, id="vision-SHD"),
    pytest.param((7, 4, 16), (7, 2, 16), (7, 16), -2, id="vision-SHD-neg"),
    pytest.param((2, 7, 4, 16), (2, 7, 2, 16), (7, 16), 1, id="BSHD-2d"),
    pytest.param((2, 4, 7, 16), (2, 2, 7, 16), (7, 8), 0, id="BHSD-2d-partial"),
    pytest.param((4, 7, 16), (2, 7, 16), (7, 16), 0, id="HSD-2d"),
]


def _table_form(device, q_shape, k_shape, table_shape, dtype=torch.float32):
    q = torch.randn(q_shape, device=device, dtype=dtype)
    k = torch.randn(k_shape, device=device, dtype=dtype)
    angles = torch.randn(*table_shape[:-1], table_shape[-1] // 2)
    emb = torch.cat((angles, angles), -1)
    return q, k, emb.cos().to(device, dtype), emb.sin().to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("q_shape", "k_shape", "table_shape", "unsqueeze_dim"), TABLE_FORMS)
def test_opcheck_table_forms(q_shape, k_shape, table_shape, unsqueeze_dim, device):
    q, k, cos, sin = _table_form(device, q_shape, k_shape, table_shape)
    args = (cos, sin, unsqueeze_dim)
    torch.library.opcheck(
        OPS.rope_fwd.default, (q.requires_grad_(), k.requires_grad_(), *args, False)
    )
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    torch.library.opcheck(OPS.rope_bwd.default, (dq, dk, *args, torch.float32))
    torch.library.opcheck(
        OPS.rope_fwd_inplace.default, (q.detach().clone(), k.detach().clone(), *args)
    )
    torch.library.opcheck(OPS.rope_bwd_inplace.default, (dq, dk, *args))


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("q_shape", "k_shape", "table_shape", "unsqueeze_dim"), TABLE_FORMS)
def test_compile_table_forms_match_eager(q_shape, k_shape, table_shape, unsqueeze_dim, device):
    torch._dynamo.reset()
    q, k, cos, sin = _table_form(device, q_shape, k_shape, table_shape)

    def f(q, k, cos, sin):
        a, b = tigon.ops.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
        return (a * 2).sum() + (b * 3).sum()

    grads = []
    for fn in (f, torch.compile(f, fullgraph=True)):
        qq, kk = q.clone().requires_grad_(), k.clone().requires_grad_()
        fn(qq, kk, cos, sin).backward()
        grads.append((qq.grad, kk.grad))
    for eager, compiled in zip(*grads, strict=True):
        torch.testing.assert_close(compiled, eager, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("q_shape", "k_shape", "table_shape", "unsqueeze_dim"), TABLE_FORMS)
def test_in_place_table_forms(q_shape, k_shape, table_shape, unsqueeze_dim, device):
    q, k, cos, sin = _table_form(device, q_shape, k_shape, table_shape, torch.bfloat16)
    ref = tigon.ops.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
    with torch.no_grad():
        a, b = tigon.ops.rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, in_place=True)
    assert a is q and b is k
    assert torch.equal(q, ref[0]) and torch.equal(k, ref[1])


# -------------------------------------------------------------------------------- gradcheck


@pytest.mark.parametrize("rotary", [16, 8], ids=["full", "partial"])
def test_gradcheck(rotary):
    """Analytical vs numerical gradients for q, k, cos and sin.

    tigon has no float64 kernels: gradcheck runs in float64 around the float32 kernel (inputs
    rounded to float32, outputs widened back), with tolerances sized for float32 arithmetic.
    """
    q = torch.randn(2, 3, 5, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, 5, 16, dtype=torch.float64, requires_grad=True)
    cos = torch.randn(2, 5, rotary, dtype=torch.float64, requires_grad=True)
    sin = torch.randn(2, 5, rotary, dtype=torch.float64, requires_grad=True)

    def f(q, k, cos, sin):
        a, b = tigon.ops.rope(q.float(), k.float(), cos.float(), sin.float())
        return a.double(), b.double()

    assert torch.autograd.gradcheck(f, (q, k, cos, sin), eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
def test_table_gradients_match_hf_autograd(in_place):
    """cos / sin that require grad get HF's gradients (plain torch ops, float32 close), also when
    the backward reuses the incoming gradients (read for the tables before being overwritten)."""
    q, k, cos, sin = _qk_tables("cpu", torch.float32, rotary=8, requires_grad=True)
    cos.requires_grad_()
    sin.requires_grad_()
    dq_e, dk_e = torch.randn_like(q), torch.randn_like(k)
    ours = tigon.ops.rope(q, k, cos, sin, in_place=in_place)
    got = torch.autograd.grad([o * 1 for o in ours], (q, k, cos, sin), (dq_e, dk_e))
    ref = torch.autograd.grad(hf_phi3(q, k, cos, sin), (q, k, cos, sin), (dq_e, dk_e))
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r)


# ---------------------------------------------------------------------------- torch.compile


class _Attention(torch.nn.Module):
    """HF's attention prologue: projections, transposed views, RoPE, then a stand-in for SDPA."""

    def __init__(self, hidden=64, heads=4, kv_heads=2, in_place=False):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, hidden // heads
        self.q_proj = torch.nn.Linear(hidden, heads * self.dim)
        self.k_proj = torch.nn.Linear(hidden, kv_heads * self.dim)
        self.in_place = in_place

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        q, k = tigon.ops.rope(q, k, cos, sin, in_place=self.in_place)
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        return (q * k).sum(-1).tanh()


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
def test_compile_fullgraph_matches_eager(in_place, device):
    torch._dynamo.reset()
    model = _Attention(in_place=in_place).to(device)
    x = torch.randn(2, 7, 64, device=device)
    angles = torch.randn(2, 7, 8)
    emb = torch.cat((angles, angles), -1).to(device)
    cos, sin = emb.cos(), emb.sin()
    dy = torch.randn(2, 4, 7, device=device)

    y_eager = model(x, cos, sin)
    y_eager.backward(dy)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    compiled = torch.compile(model, fullgraph=True)
    y = compiled(x, cos, sin)
    y.backward(dy)
    torch.testing.assert_close(y, y_eager)
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compile_inference_in_place(device):
    torch._dynamo.reset()
    q, k, cos, sin = _qk_tables(device, rotary=8)
    ref = tigon.ops.rope(q, k, cos, sin)

    @torch.compile(fullgraph=True)
    def f(q, k, cos, sin):
        return tigon.ops.rope(q, k, cos, sin, in_place=True)

    q2, k2 = q.clone(), k.clone()
    with torch.no_grad():
        a, b = f(q2, k2, cos, sin)
    torch.testing.assert_close(a, ref[0], rtol=0, atol=0)
    torch.testing.assert_close(q2, ref[0], rtol=0, atol=0)
    torch.testing.assert_close(k2, ref[1], rtol=0, atol=0)


# ------------------------------------------------------------------------------- in place


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_in_place_forward_without_autograd(dtype, device):
    q, k, cos, sin = _qk_tables(device, dtype, rotary=8)
    ref = tigon.ops.rope(q, k, cos, sin)
    q_ptr, k_ptr = q.data_ptr(), k.data_ptr()
    with torch.no_grad():
        a, b = tigon.ops.rope(q, k, cos, sin, in_place=True)
    assert a.data_ptr() == q_ptr and b.data_ptr() == k_ptr
    assert torch.equal(a, ref[0]) and torch.equal(b, ref[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_in_place_backward_reuses_unshared_gradients(dtype, device):
    """dq, dk are written into the incoming gradients when nothing else holds them (here the
    fresh gradients of ``q_embed * 1``), never into the caller's buffers."""
    q, k, cos, sin = _qk_tables(device, dtype)
    dq_e = torch.randn_like(q)  # q's (transposed) layout: AccumulateGrad adopts it as .grad
    dk_e = torch.randn_like(k)

    def run(in_place):
        qr = q.detach().clone().requires_grad_()
        kr = k.detach().clone().requires_grad_()
        bq, bk = dq_e.clone(), dk_e.clone()
        seen = []
        qe, ke = tigon.ops.rope(qr, kr, cos, sin, in_place=in_place)
        qe.register_hook(lambda g: seen.append(g.data_ptr()))  # the pointer only: no reference
        torch.autograd.backward((qe * 1, ke * 1), (bq, bk))
        return bq, bk, qr.grad, kr.grad, seen[0] == qr.grad.data_ptr()

    bq, bk, dq, dk, reused = run(True)
    ref_bq, ref_bk, ref_dq, ref_dk, ref_reused = run(False)
    for b, ref in ((bq, dq_e), (bk, dk_e), (ref_bq, dq_e), (ref_bk, dk_e)):
        assert torch.equal(b, ref), "the caller's gradients are kept"
    assert reused and not ref_reused, "in place: q.grad is the incoming gradient's buffer"
    assert torch.equal(dq, ref_dq) and torch.equal(dk, ref_dk)


def test_in_place_needs_the_result_dtype():
    q, k, cos, sin = _qk_tables("cpu", torch.bfloat16, torch.float32)
    with pytest.raises(TypeError, match="argument 'in_place'"):
        tigon.ops.rope(q, k, cos, sin, in_place=True)


# ---------------------------------------------------------------------------------- edges


@pytest.mark.parametrize("device", DEVICES)
def test_empty_inputs(device):
    q = torch.randn(2, 4, 0, 16, device=device, requires_grad=True)
    k = torch.randn(2, 2, 0, 16, device=device, requires_grad=True)
    cos = torch.randn(2, 0, 16, device=device)
    a, b = tigon.ops.rope(q, k, cos, cos)
    assert a.shape == q.shape and b.shape == k.shape
    (a.sum() + b.sum()).backward()
    assert q.grad.shape == q.shape


@pytest.mark.gpu
def test_cuda_unaligned_and_strided_views_match_cpu():
    """Views the vector path cannot take (odd offsets, last-dim stride 2) use the scalar path."""
    base = torch.randn(2, 9, 5, 130, dtype=torch.bfloat16)
    views = {
        "offset": lambda t: t[..., 1:129].transpose(1, 2),
        "stride2": lambda t: t[..., ::2].transpose(1, 2),
    }
    cos = torch.randn(2, 9, 64, dtype=torch.bfloat16)
    sin = torch.randn(2, 9, 64, dtype=torch.bfloat16)
    for name, make in views.items():
        q = make(base)
        k = make(base[:, :, :2])
        cpu = tigon.ops.rope(q, k, cos, sin)
        gpu = tigon.ops.rope(make(base.cuda()), make(base[:, :, :2].cuda()), cos.cuda(), sin.cuda())
        for a, b in zip(gpu, cpu, strict=True):
            assert torch.equal(a.cpu().view(torch.int16), b.view(torch.int16)), name


@pytest.mark.gpu
def test_cuda_deterministic():
    q, k, cos, sin = _qk_tables("cuda", torch.bfloat16)
    first = tigon.ops.rope(q, k, cos, sin)
    for _ in range(3):
        again = tigon.ops.rope(q, k, cos, sin)
        assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


# --------------------------------------------------------------------------------- errors


def test_errors_name_the_argument():
    q, k, cos, sin = _qk_tables("cpu", torch.float32)
    with pytest.raises(ValueError, match=r"argument 'cos'.*even last dimension"):
        tigon.ops.rope(q, k, cos[..., :15], sin[..., :15])
    with pytest.raises(ValueError, match=r"argument 'q'.*last dimension >= the rotary dim 32"):
        tigon.ops.rope(q, k, torch.cat([cos, cos], -1), torch.cat([sin, sin], -1))
    with pytest.raises(ValueError, match=r"argument 'cos'.*broadcasts to q"):
        tigon.ops.rope(q, k, cos[:, :3], sin[:, :3])
    with pytest.raises(TypeError, match=r"argument 'k'.*dtype float32 \(q's dtype\)"):
        tigon.ops.rope(q, k.half(), cos, sin)
    with pytest.raises(TypeError, match=r"argument 'sin'.*cos's dtype"):
        tigon.ops.rope(q, k, cos, sin.half())
    with pytest.raises(ValueError, match=r"argument 'unsqueeze_dim'"):
        tigon.ops.rope(q, k, cos, sin, unsqueeze_dim=5)
    with pytest.raises(ValueError, match=r"argument 'cos'.*fewer dimensions"):
        tigon.ops.rope(q, k, cos[None], sin[None])
    with pytest.raises(ValueError, match=r"argument 'q'.*2 to 4 dimensions"):
        tigon.ops.rope(q[None], k[None], cos, sin)
    with pytest.raises(TypeError, match=r"argument 'q'.*dtype float32, float16 or bfloat16"):
        tigon.ops.rope(q.double(), k.double(), cos, sin)
