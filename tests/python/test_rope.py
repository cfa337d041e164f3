"""RoPE numerics: bit-for-bit parity with Hugging Face's ``apply_rotary_pos_emb`` (Llama) and
Phi3's partial-rotary one, forward and backward, on every dtype pair, GQA, HF's transposed views,
the (B, S, H, D) layout, batched / broadcast / 2-D cos and sin, and head dims 32..256."""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICES
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as hf_llama
from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb as hf_phi3

import tigon

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# (q dtype, cos dtype): HF's rotary embedding returns cos/sin in the activation dtype; float32
# tables with 16-bit activations make HF compute and return float32.
DTYPE_CASES = [
    pytest.param(_DTYPES[x], _DTYPES[c], id=f"{x}-cos{c}")
    for x, c in [
        ("fp32", "fp32"),
        ("fp16", "fp16"),
        ("bf16", "bf16"),
        ("bf16", "fp32"),
        ("fp16", "fp32"),
        ("fp32", "bf16"),
        ("bf16", "fp16"),
    ]
]
# (B, S, Hq, Hkv, D)
SHAPES = [
    pytest.param((1, 128, 32, 32, 64), id="mha-d64"),
    pytest.param((2, 128, 32, 8, 64), id="gqa-d64"),
    pytest.param((3, 41, 7, 5, 92), id="odd-heads-d92"),
    pytest.param((1, 64, 8, 2, 128), id="gqa-d128"),
    pytest.param((2, 9, 3, 1, 32), id="mqa-d32"),
    pytest.param((1, 16, 4, 2, 256), id="d256"),
]


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns (so -0 and +0 differ, and NaNs compare)."""
    view = torch.int32 if t.dtype == torch.float32 else torch.int16
    return t.detach().contiguous().view(view)


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.dtype == expected.dtype, (what, actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    same = bits(actual.cpu()) == bits(expected.cpu())
    assert bool(same.all()), (
        f"{what}: {int((~same).sum())} of {same.numel()} elements differ from HF bitwise; "
        f"max abs diff {(actual.double() - expected.double()).abs().max().item():.3e}"
    )


def tables(
    batch: int, seq: int, rotary: int, dtype: torch.dtype, device: str, batched: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's LlamaRotaryEmbedding: float32 angles, [f, f] halves, cast to the table dtype."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rotary, 2, dtype=torch.float32) / rotary))
    rows = batch if batched else 1
    positions = torch.stack([torch.randperm(4 * seq)[:seq] for _ in range(rows)]).float()
    freqs = positions[:, :, None] * inv_freq[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(device, dtype), emb.sin().to(device, dtype)


def hf_projections(
    batch: int, seq: int, heads: int, dim: int, dtype: torch.dtype, device: str
) -> torch.Tensor:
    """q as HF makes it: q_proj(x).view(B, S, H, D).transpose(1, 2) (a non-contiguous view)."""
    flat = torch.randn(batch, seq, heads * dim).to(device, dtype)
    return flat.view(batch, seq, heads, dim).transpose(1, 2).requires_grad_()


def run_both(reference, q, k, cos, sin, unsqueeze_dim=1, what=""):
    """Forward and backward through HF and tigon on the same inputs; compares bits."""
    q_ref = q.detach().clone().requires_grad_()
    k_ref = k.detach().clone().requires_grad_()
    qe, ke = tigon.ops.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    qe_ref, ke_ref = reference(q_ref, k_ref, cos, sin, unsqueeze_dim=unsqueeze_dim)
    assert_same_bits(qe, qe_ref, f"q_embed{what}")
    assert_same_bits(ke, ke_ref, f"k_embed{what}")
    dq_embed = torch.randn_like(qe)
    dk_embed = torch.randn_like(ke)
    dq_embed[(0,) * (dq_embed.dim() - 1)][:7] = 0.0  # signed zeros: HF gives +0 there
    torch.autograd.backward((qe, ke), (dq_embed, dk_embed))
    torch.autograd.backward((qe_ref, ke_ref), (dq_embed, dk_embed))
    assert_same_bits(q.grad, q_ref.grad, f"dq{what}")
    assert_same_bits(k.grad, k_ref.grad, f"dk{what}")
    return qe, qe_ref


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("dtype", "cos_dtype"), DTYPE_CASES)
def test_matches_hf_llama_bitwise(shape, dtype, cos_dtype, device):
    batch, seq, hq, hkv, dim = shape
    q = hf_projections(batch, seq, hq, dim, dtype, device)
    k = hf_projections(batch, seq, hkv, dim, dtype, device)
    cos, sin = tables(batch, seq, dim, cos_dtype, device)
    qe, qe_ref = run_both(hf_llama, q, k, cos, sin)
    assert qe.stride() == qe_ref.stride(), "q_embed keeps q's layout, as HF's eager ops do"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "cos_dtype"), DTYPE_CASES)
@pytest.mark.parametrize(
    ("dim", "rotary"), [(96, 32), (128, 64), (33, 16), (64, 2)], ids=["phi3", "half", "odd", "r2"]
)
def test_partial_rotary_matches_hf_phi3_bitwise(dim, rotary, dtype, cos_dtype, device):
    q = hf_projections(2, 19, 6, dim, dtype, device)
    k = hf_projections(2, 19, 2, dim, dtype, device)
    cos, sin = tables(2, 19, rotary, cos_dtype, device)
    run_both(hf_phi3, q, k, cos, sin)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "cos_dtype"), DTYPE_CASES[:4])
@pytest.mark.parametrize(
    "layout",
    [
        "broadcast_cos",
        "contiguous_q",
        "bshd_unsqueeze2",
        "bshd_unsqueeze_neg2",
        "bshd_cos_2d",
        "cos_2d",
        "vision_3d",
        "vision_3d_neg",
        "vision_3d_views",
        "unbatched_hsd",
        "expanded_cos",
        "sliced_cos",
    ],
)
def test_layouts_match_hf_bitwise(layout, dtype, cos_dtype, device):
    batch, seq, hq, hkv, dim = 2, 17, 4, 2, 64
    unsqueeze_dim = 1
    if layout == "broadcast_cos":  # one table for the whole batch: [1, S, D]
        q = hf_projections(batch, seq, hq, dim, dtype, device)
        k = hf_projections(batch, seq, hkv, dim, dtype, device)
        cos, sin = tables(batch, seq, dim, cos_dtype, device, batched=False)
    elif layout == "contiguous_q":  # [B, H, S, D] dense
        q = torch.randn(batch, hq, seq, dim).to(device, dtype).requires_grad_()
        k = torch.randn(batch, hkv, seq, dim).to(device, dtype).requires_grad_()
        cos, sin = tables(batch, seq, dim, cos_dtype, device)
    elif layout == "bshd_unsqueeze2":  # [B, S, H, D] with unsqueeze_dim=2
        q = torch.randn(batch, seq, hq, dim).to(device, dtype).requires_grad_()
        k = torch.randn(batch, seq, hkv, dim).to(device, dtype).requires_grad_()
        cos, sin = tables(batch, seq, dim, cos_dtype, device)
        unsqueeze_dim = 2
    elif layout == "bshd_unsqueeze_neg2":  # the same with a negative dimension
        q = torch.randn(batch, seq, hq, dim).to(device, dtype).requires_grad_()
        k = torch.randn(batch, seq, hkv, dim).to(device, dtype).requires_grad_()
        cos, sin = tables(batch, seq, dim, cos_dtype, device)
        unsqueeze_dim = -2
    elif layout == "bshd_cos_2d":  # [B, S, H, D] with an [S, D] table and the default dim 1
        q = torch.randn(batch, seq, hq, dim).to(device, dtype).requires_grad_()
        k = torch.randn(batch, seq, hkv, dim).to(device, dtype).requires_grad_()
        cos, sin = (t[0] for t in tables(1, seq, dim, cos_dtype, device))
    elif layout == "cos_2d":  # [S, D] tables broadcast over the batch (unsqueeze_dim=0 in HF)
        q = hf_projections(batch, seq, hq, dim, dtype, device)
        k = hf_projections(batch, seq, hkv, dim, dtype, device)
        cos, sin = (t[0] for t in tables(1, seq, dim, cos_dtype, device))
        unsqueeze_dim = 0
    elif layout.startswith("vision_3d"):  # vision towers: q [S, H, D], cos [S, D], dim 1
        if layout == "vision_3d_views":  # qkv(x).reshape(S, 3, H, D).permute(1, 0, 2, 3).unbind(0)
            qkv = torch.randn(seq, 3, hq, dim).to(device, dtype).permute(1, 0, 2, 3)
            q = qkv[0].requires_grad_()
            k = qkv[1].detach().clone().requires_grad_()
        else:
            q = torch.randn(seq, hq, dim).to(device, dtype).requires_grad_()
            k = torch.randn(seq, hkv, dim).to(device, dtype).requires_grad_()
        cos, sin = (t[0] for t in tables(1, seq, dim, cos_dtype, device))
        if layout == "vision_3d_neg":  # apply_rotary_pos_emb_vision's cos.unsqueeze(-2)
            unsqueeze_dim = -2
    elif layout == "unbatched_hsd":  # q [H, S, D] without the batch, cos [S, D], dim 0
        q = torch.randn(hq, seq, dim).to(device, dtype).requires_grad_()
        k = torch.randn(hkv, seq, dim).to(device, dtype).requires_grad_()
        cos, sin = (t[0] for t in tables(1, seq, dim, cos_dtype, device))
        unsqueeze_dim = 0
    elif layout == "expanded_cos":  # one table expanded over the batch (stride 0)
        q = hf_projections(batch, seq, hq, dim, dtype, device)
        k = hf_projections(batch, seq, hkv, dim, dtype, device)
        cos, sin = (t.expand(batch, seq, dim) for t in tables(1, seq, dim, cos_dtype, device))
    else:  # sliced_cos: the first D channels of a wider table (a strided view)
        q = hf_projections(batch, seq, hq, dim, dtype, device)
        k = hf_projections(batch, seq, hkv, dim, dtype, device)
        cos, sin = (t[..., :dim] for t in tables(batch, seq, 2 * dim, cos_dtype, device))
    run_both(hf_llama, q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, what=f" ({layout})")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "cos_dtype"), DTYPE_CASES[:4])
@pytest.mark.parametrize("layout", ["vision_3d", "cos_2d", "bshd_cos_2d"])
def test_2d_tables_partial_rotary_match_hf_phi3_bitwise(layout, dtype, cos_dtype, device):
    """A head dim larger than the table's rotary dim passes through with every 2-D table form."""
    seq, dim, rotary = 13, 48, 16
    shapes = {
        "vision_3d": (seq, 3, dim),
        "cos_2d": (2, 3, seq, dim),
        "bshd_cos_2d": (2, seq, 3, dim),
    }
    q = torch.randn(shapes[layout]).to(device, dtype).requires_grad_()
    k = torch.randn(shapes[layout]).to(device, dtype).requires_grad_()
    cos, sin = (t[0] for t in tables(1, seq, rotary, cos_dtype, device))
    run_both(hf_phi3, q, k, cos, sin, unsqueeze_dim=0 if layout == "cos_2d" else 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_vision_function_forward_is_float32_tables_then_cast(dtype, device):
    """HF's apply_rotary_pos_emb_vision (float32 math, one rounding to q's dtype) is tigon's
    float32-table result cast to q's dtype (docs/ops/rope.md, the table forms)."""
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb_vision

    q = torch.randn(23, 4, 64).to(device, dtype)
    k = torch.randn(23, 2, 64).to(device, dtype)
    cos, sin = (t[0] for t in tables(1, 23, 64, torch.float32, device))
    want_q, want_k = apply_rotary_pos_emb_vision(q, k, cos, sin)
    got_q, got_k = tigon.ops.apply_rotary_pos_emb(q, k, cos, sin)
    assert_same_bits(got_q.to(dtype), want_q, "q_embed (vision)")
    assert_same_bits(got_k.to(dtype), want_k, "k_embed (vision)")


@pytest.mark.parametrize("device", DEVICES)
def test_2d_table_with_bhsd_q_needs_unsqueeze_dim_0(device):
    """[B, H, S, D] q with an [S, D] table and the default unsqueeze_dim=1 is an error in HF (S
    lands on the heads); tigon raises too, naming the fix."""
    q = torch.randn(2, 4, 6, 8, device=device)
    cos, sin = torch.randn(6, 8, device=device), torch.randn(6, 8, device=device)
    with pytest.raises(RuntimeError):
        hf_llama(q, q, cos, sin)
    with pytest.raises(ValueError, match=r"argument 'cos'.*broadcasts to q.*unsqueeze_dim=0"):
        tigon.ops.apply_rotary_pos_emb(q, q, cos, sin)
    batched = cos.expand(2, 6, 8)
    with pytest.raises(ValueError, match=r"argument 'cos'.*broadcasts to k's \[1, 2, 6, 8\]"):
        tigon.ops.rope(q, torch.randn(1, 2, 6, 8, device=device), batched, batched)
    run_both(hf_llama, q.requires_grad_(), q.detach().clone().requires_grad_(), cos, sin, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_general_tables_not_duplicated_halves(device):
    """cos/sin need not be HF's [f, f]: every index is used as HF uses it."""
    q = hf_projections(2, 11, 4, 64, torch.bfloat16, device)
    k = hf_projections(2, 11, 2, 64, torch.bfloat16, device)
    cos = torch.randn(2, 11, 64).to(device, torch.bfloat16)
    sin = torch.randn(2, 11, 64).to(device, torch.bfloat16)
    run_both(hf_llama, q, k, cos, sin)


@pytest.mark.parametrize("device", DEVICES)
def test_rope_signature_and_position_ids(device):
    """tigon.ops.rope takes Liger's / older HF's (q, k, cos, sin, position_ids, unsqueeze_dim)."""
    q = hf_projections(1, 8, 4, 32, torch.float32, device)
    k = hf_projections(1, 8, 2, 32, torch.float32, device)
    cos, sin = tables(1, 8, 32, torch.float32, device)
    positions = torch.arange(8, device=device)[None]
    a = tigon.ops.rope(q, k, cos, sin, positions, 1)
    b = tigon.ops.apply_rotary_pos_emb(q, k, cos, sin)
    c = hf_llama(q, k, cos, sin)
    for x, y, z in zip(a, b, c, strict=True):
        assert_same_bits(x, z, "rope")
        assert_same_bits(y, z, "apply_rotary_pos_emb")


@pytest.mark.gpu
def test_cuda_matches_cpu_bitwise_large():
    """The CUDA kernels against the CPU backend on a Llama-sized problem (vector path)."""
    q = hf_projections(2, 512, 32, 128, torch.bfloat16, "cpu")
    k = hf_projections(2, 512, 8, 128, torch.bfloat16, "cpu")
    cos, sin = tables(2, 512, 128, torch.bfloat16, "cpu")
    cpu = tigon.ops.rope(q, k, cos, sin)
    gpu = tigon.ops.rope(q.cuda(), k.cuda(), cos.cuda(), sin.cuda())
    for a, b in zip(gpu, cpu, strict=True):
        assert_same_bits(a, b, "cuda vs cpu")
