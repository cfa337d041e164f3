"""tigon.nn gated MLPs vs the Hugging Face modules they replace: same parameters and state dict,
outputs and gradients bitwise equal in bf16 (CPU), close in float32; MoE experts."""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICES
from transformers import GemmaConfig, LlamaConfig, MixtralConfig, Phi3Config, Qwen2MoeConfig
from transformers.models.gemma.modeling_gemma import GemmaMLP
from transformers.models.llama.modeling_llama import LlamaMLP
from transformers.models.mixtral.modeling_mixtral import MixtralExperts
from transformers.models.phi3.modeling_phi3 import Phi3MLP
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeExperts, Qwen2MoeMLP

import tigon


def _small(cls, **kw):
    return cls(
        hidden_size=48, intermediate_size=72, num_attention_heads=4, num_key_value_heads=2, **kw
    )


CASES = [
    ("llama", lambda: _small(LlamaConfig), LlamaMLP, tigon.nn.SwiGLUMLP),
    ("llama_bias", lambda: _small(LlamaConfig, mlp_bias=True), LlamaMLP, tigon.nn.SwiGLUMLP),
    ("gemma", lambda: _small(GemmaConfig), GemmaMLP, tigon.nn.GeGLUMLP),
    ("phi3", lambda: _small(Phi3Config), Phi3MLP, tigon.nn.Phi3SwiGLUMLP),
    (
        "qwen2moe_shared",
        lambda: _small(Qwen2MoeConfig),
        lambda c: Qwen2MoeMLP(c, intermediate_size=40),
        lambda c: tigon.nn.SwiGLUMLP(c, intermediate_size=40),
    ),
]


def _assert_equal(dtype, got, want):
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(got, want), (got - want).abs().max()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_module_matches_hf(case, dtype, device):
    _, make_config, hf_cls, tigon_cls = case
    config = make_config()
    hf = hf_cls(config).to(device=device, dtype=dtype)
    ours = tigon_cls(config).to(device=device, dtype=dtype)
    assert set(ours.state_dict()) == set(hf.state_dict())
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(3, 11, 48, device=device, dtype=dtype)
    x_hf, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_hf, y_ours = hf(x_hf), ours(x_ours)
    _assert_equal(dtype, y_ours, y_hf)
    dy = torch.randn_like(y_hf)
    y_hf.backward(dy)
    y_ours.backward(dy)
    _assert_equal(dtype, x_ours.grad, x_hf.grad)
    hf_params = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        _assert_equal(dtype, p.grad, hf_params[name].grad)


def test_state_dict_round_trip():
    config = _small(LlamaConfig)
    hf = LlamaMLP(config)
    ours = tigon.nn.SwiGLUMLP(config)
    ours.load_state_dict(hf.state_dict())
    back = LlamaMLP(config)
    back.load_state_dict(ours.state_dict())
    for k, v in hf.state_dict().items():
        assert torch.equal(back.state_dict()[k], v)


def test_unsupported_activation_is_rejected():
    with pytest.raises(ValueError, match="activation"):
        tigon.nn.SwiGLUMLP(_small(LlamaConfig, hidden_act="gelu_pytorch_tanh"))
    with pytest.raises(ValueError, match="activation"):
        tigon.nn.GeGLUMLP(_small(GemmaConfig, hidden_act="gelu"))


def _experts_config(cls, implementation):
    if cls is MixtralExperts:
        config = MixtralConfig(
            hidden_size=32,
            intermediate_size=24,
            num_local_experts=4,
            num_experts_per_tok=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    else:
        config = Qwen2MoeConfig(
            hidden_size=32,
            moe_intermediate_size=24,
            num_experts=4,
            num_experts_per_tok=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    config._experts_implementation = implementation
    return config


@pytest.mark.parametrize("implementation", ["eager", "batched_mm", "grouped_mm"])
@pytest.mark.parametrize("cls", [MixtralExperts, Qwen2MoeExperts])
def test_moe_experts(cls, implementation):
    """use_tigon_experts: same outputs and gradients as the HF experts module, for each
    experts implementation transformers dispatches to (bf16, CPU: bitwise)."""
    torch.manual_seed(0)
    config = _experts_config(cls, implementation)
    dtype = torch.bfloat16
    hf = cls(config)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.2)
    hf = hf.to(dtype)
    ours = cls(config).to(dtype)
    ours.load_state_dict(hf.state_dict())
    tigon.nn.use_tigon_experts(ours)
    tokens = 13
    x = torch.randn(tokens, 32, dtype=dtype)
    top_k_index = torch.stack([torch.randperm(4)[:2] for _ in range(tokens)])
    top_k_weights = torch.rand(tokens, 2, dtype=dtype)
    x_hf, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_hf = hf(x_hf, top_k_index, top_k_weights)
    y_ours = ours(x_ours, top_k_index, top_k_weights)
    assert torch.equal(y_ours, y_hf)
    dy = torch.randn_like(y_hf)
    y_hf.backward(dy)
    y_ours.backward(dy)
    assert torch.equal(x_ours.grad, x_hf.grad)
    for (name, p), q in zip(ours.named_parameters(), hf.parameters()):
        assert torch.equal(p.grad, q.grad), name
