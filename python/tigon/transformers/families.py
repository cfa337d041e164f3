"""Per-family tables: which Hugging Face classes tigon replaces, and with what semantics.

Every entry was read off the modeling file of transformers 5.17 (``transformers/models/<family>/
modeling_<family>.py``). When transformers changes one of these classes, patching fails with a
clear error (missing class, changed constructor, or a forward whose numerics no longer match the
mode below: see :mod:`tigon.transformers.patching`), and this table is what must be updated.

How the RMSNorm columns are chosen:

* ``casting_mode``: where the forward rounds to the activation dtype. ``"llama"``:
  ``weight * (x.float() * rstd).to(x.dtype)`` (round, then multiply by the weight).
  ``"gemma"``: everything in float32 including the weight, one rounding at the end:
  ``(x.float() * rstd * (offset + weight.float())).to(x.dtype)``.
* ``offset``: 1.0 where HF computes ``1 + weight`` (weights stored zero-centered).
* ``init``: the HF constructor's initial weight (``zeros`` for the ``1 + weight`` norms).
* ``in_place``: whether the backward may write dx into the incoming gradient's buffer (a
  permission: it does so only when nothing else can observe that buffer, checked at run time, so
  it is on everywhere, including the post-norms whose output is added straight to the residual
  stream and whose gradient autograd therefore shares with the residual branch).
* ``eps_attr``: the attribute holding epsilon on the HF module (``variance_epsilon`` or ``eps``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "FAMILIES",
    "MODEL_TYPE_TO_FAMILY",
    "AddNormSpec",
    "FamilySpec",
    "LossSpec",
    "MlpSpec",
    "MoeSpec",
    "NormSpec",
    "RopeSpec",
]


@dataclass(frozen=True)
class NormSpec:
    """How one HF RMSNorm class maps onto :class:`tigon.nn.RMSNorm`."""

    casting_mode: str
    offset: float
    init: str
    in_place: bool
    eps_attr: str
    #: One line for the docs: why these settings.
    why: str = ""


@dataclass(frozen=True)
class MlpSpec:
    """The family's gated MLP and how tigon's GLU op replaces its activation-times-up product.

    ``layout``: ``"split"`` (``down(act(gate_proj(x)) * up_proj(x))``: Llama and most),
    ``"fused"`` (Phi3: ``gate, up = gate_up_proj(x).chunk(2, -1)``), ``"experts"`` (Mixtral 5.x:
    one module holding every expert as 3-D ``gate_up_proj`` / ``down_proj`` Parameters, gate and up
    concatenated; the kernel replaces ``act(gate) * up`` inside every experts implementation).
    """

    cls: str
    #: ``"swiglu"`` (``silu(gate) * up``) or ``"geglu"`` (``gelu_tanh(gate) * up``): the flag name.
    kind: str
    layout: str
    #: Config attribute naming the activation (``hidden_act``, or ``hidden_activation``); None
    #: where the forward calls a fixed activation (LFM2's ``F.silu``).
    act_attr: str | None = "hidden_act"
    #: Attribute of the MLP module holding a dropout probability applied to its output (Seed-OSS's
    #: ``residual_dropout``), or None.
    dropout_attr: str | None = None
    #: The ``"split"`` layout's gate, up and down projections (LFM2: ``w1``, ``w3``, ``w2``).
    proj: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
    #: Attributes of the MLP module holding Falcon-H1's ``(gate_multiplier, down_multiplier)``
    #: (``up(x) * act(gate(x) * gm)``, then ``down(...) * dm``), or None.
    multipliers: tuple[str, str] | None = None


@dataclass(frozen=True)
class MoeSpec:
    """The family's stacked MoE experts module (transformers 5: ``gate_up_proj [E, 2I, H]``,
    ``down_proj [E, H, I]``, ``forward(hidden_states, top_k_index, top_k_weights)``), replaced by
    ``tigon.ops.moe_experts`` (the ``moe`` flag). The router stays HF's module."""

    cls: str
    #: Config attribute naming the experts' gate activation.
    act_attr: str = "hidden_act"


@dataclass(frozen=True)
class RopeSpec:
    """The family's module-level ``apply_rotary_pos_emb`` and the attention class calling it.

    ``variant``: ``"plain"`` (HF's half-split rotation over the whole head), ``"partial"`` (Phi3:
    rotates the first ``cos.shape[-1]`` dims, passes the rest through), ``"cast"`` (Olmo2: result
    cast back to q's / k's dtype).
    """

    attention: str
    variant: str = "plain"
    fn: str = "apply_rotary_pos_emb"


@dataclass(frozen=True)
class LossSpec:
    """What the causal-LM head does to the logits before HF's loss (read off its forward)."""

    #: Config attribute of a final tanh soft-capping ``cap * tanh(logits / cap)`` (Gemma2/3).
    softcap_attr: str | None = None
    #: Config attribute the logits are divided by (Granite's ``logits_scaling``).
    logit_divisor_attr: str | None = None
    #: Attribute path on the causal-LM module the logits are multiplied by (Falcon-H1's
    #: ``self.model.lm_head_multiplier``, copied from the config at construction).
    logit_multiplier_attr: str | None = None
    #: Mixtral: the forward takes ``output_router_logits`` and adds the router's aux loss.
    router_aux_loss: bool = False


@dataclass(frozen=True)
class AddNormSpec:
    """The decoder layer whose attention-branch residual add is fused with the norm after it.

    ``layout``: ``"pre"`` (Llama: ``h = residual + attn(input_norm(x))``, then ``norm(h)``
    before the MLP) or ``"sandwich"`` (Gemma2/3, GLM-4: each branch output is normed by
    ``branch_norms`` before its add). Every name is an attribute of the decoder layer.
    """

    layer: str
    #: The norm right after the attention add (the one fused with it).
    norm: str = "post_attention_layernorm"
    layout: str = "pre"
    input_norm: str = "input_layernorm"
    attn: str = "self_attn"
    mlp: str = "mlp"
    #: ``"sandwich"``: the norms applied to (attention output, MLP output) before their adds.
    branch_norms: tuple[str, str] | None = None
    #: Phi3: dropouts applied to (attention output, MLP output) before their adds.
    branch_dropouts: tuple[str, str] | None = None
    #: Granite: attribute multiplying each branch output before its add.
    residual_multiplier: str | None = None
    #: What mixes the tokens before the first add: ``"attention"`` (``attn``), ``"lfm2"``
    #: (attention, or the short conv ``conv`` where ``is_attention_layer`` is False),
    #: ``"falcon_h1"`` (attention and the Mamba2 mixer side by side, scaled and summed).
    mixer: str = "attention"
    #: Falcon-H1: the layer returns ``(hidden_states,)``.
    returns_tuple: bool = False
    #: Layer types of the parity probe's 2-layer model (LFM2: one of each).
    probe_layer_types: tuple[str, ...] | None = None


@dataclass(frozen=True)
class FamilySpec:
    """One model family (= one HF ``model_type`` and its modeling module)."""

    #: Family name, used in ``apply_tigon_kernel_to_<name>``; equal to its HF ``model_type``.
    name: str
    #: The modeling module whose classes are replaced (``transformers.models.<x>.modeling_<x>``).
    module: str
    #: The causal-LM class name (documentation and tests).
    causal_lm: str
    #: RMSNorm class name in ``module`` -> how it is mapped.
    norms: Mapping[str, NormSpec] = field(default_factory=dict)
    #: Further HF ``model_type`` values served by this family's patch.
    aliases: tuple[str, ...] = ()
    mlp: MlpSpec | None = None
    rope: RopeSpec | None = None
    loss: LossSpec = LossSpec()
    #: Config overrides for the tiny models of the parity probes (beyond the common ones).
    probe_config: Mapping[str, object] = field(default_factory=dict)
    #: The decoder layer whose residual add + norm is fused (None: no such add, see
    #: docs/transformers.md "Fused residual add + RMSNorm").
    add_norm: AddNormSpec | None = None
    #: The stacked MoE experts module, or None.
    moe: MoeSpec | None = None


def _llama(why: str = "pre-norm; forward rounds x*rstd before the weight multiply") -> NormSpec:
    return NormSpec("llama", 0.0, "ones", True, "variance_epsilon", why)


_GEMMA1 = NormSpec(
    "gemma", 1.0, "zeros", True, "eps", "fp32 `x*rstd*(1 + w.float())`, one rounding; pre-norm"
)
_GEMMA_SANDWICH = NormSpec(
    "gemma",
    1.0,
    "zeros",
    True,
    "eps",
    "as Gemma; post-attention/post-feedforward norms feed the residual sum, so dy is shared",
)
_OLMO2 = NormSpec(
    "gemma",
    0.0,
    "ones",
    True,
    "variance_epsilon",
    "`(w * x.float()*rstd).to(dtype)`: the weight multiply is in fp32 with one rounding, i.e. "
    "gemma casting with offset 0 (not llama); post-norms feed the residual sum",
)


def _family(
    name: str,
    module: str,
    causal_lm: str,
    norms: dict[str, NormSpec],
    *,
    mlp: MlpSpec | None,
    rope: RopeSpec | None,
    loss: LossSpec = LossSpec(),
    probe_config: dict[str, object] | None = None,
    add_norm: AddNormSpec | None = None,
    moe: MoeSpec | None = None,
) -> FamilySpec:
    return FamilySpec(
        name,
        module,
        causal_lm,
        MappingProxyType(norms),
        (),
        mlp,
        rope,
        loss,
        MappingProxyType(probe_config or {}),
        add_norm,
        moe,
    )


def _swiglu(cls: str, layout: str = "split") -> MlpSpec:
    return MlpSpec(cls, "swiglu", layout)


def _rope(attention: str, variant: str = "plain") -> RopeSpec:
    return RopeSpec(attention, variant)


#: GLM / ERNIE rotate interleaved pairs (``x[..., 0::2]``, ``x[..., 1::2]``), a layout tigon's
#: RoPE op does not have yet: those families keep HF's rotary (no ``rope`` flag).
_INTERLEAVED_ROPE = None


def _pre(layer: str, **kwargs: object) -> AddNormSpec:
    return AddNormSpec(layer, **kwargs)  # type: ignore[arg-type]


_SOFTCAP = LossSpec(softcap_attr="final_logit_softcapping")


_M = "transformers.models"

#: Every supported family, by name (= HF model_type).
FAMILIES: Mapping[str, FamilySpec] = MappingProxyType(
    {
        f.name: f
        for f in (
            _family("llama", f"{_M}.llama.modeling_llama", "LlamaForCausalLM",
                    {"LlamaRMSNorm": _llama()},
                    mlp=_swiglu("LlamaMLP"), rope=_rope("LlamaAttention"),
                    add_norm=_pre("LlamaDecoderLayer")),
            _family("mistral", f"{_M}.mistral.modeling_mistral", "MistralForCausalLM",
                    {"MistralRMSNorm": _llama()},
                    mlp=_swiglu("MistralMLP"), rope=_rope("MistralAttention"),
                    add_norm=_pre("MistralDecoderLayer")),
            _family("mixtral", f"{_M}.mixtral.modeling_mixtral", "MixtralForCausalLM",
                    {"MixtralRMSNorm": _llama()},
                    mlp=_swiglu("MixtralExperts", "experts"), rope=_rope("MixtralAttention"),
                    loss=LossSpec(router_aux_loss=True),
                    probe_config={"num_local_experts": 4, "num_experts_per_tok": 2,
                                  "output_router_logits": True},
                    add_norm=_pre("MixtralDecoderLayer"),
                    moe=MoeSpec("MixtralExperts")),
            # Qwen3-MoE: every layer sparse (decoder_sparse_step 1, no mlp_only_layers) in the
            # configs people train; its dense Qwen3MoeMLP keeps HF's MLP (no swiglu flag).
            _family("qwen3_moe", f"{_M}.qwen3_moe.modeling_qwen3_moe", "Qwen3MoeForCausalLM",
                    {"Qwen3MoeRMSNorm": _llama(
                        "llama casting; also q_norm/k_norm over head_dim")},
                    mlp=None, rope=_rope("Qwen3MoeAttention"),
                    loss=LossSpec(router_aux_loss=True),
                    probe_config={"num_experts": 4, "num_experts_per_tok": 2,
                                  "moe_intermediate_size": 24, "output_router_logits": True,
                                  "norm_topk_prob": True},
                    add_norm=_pre("Qwen3MoeDecoderLayer"),
                    moe=MoeSpec("Qwen3MoeExperts")),
            _family("qwen2", f"{_M}.qwen2.modeling_qwen2", "Qwen2ForCausalLM",
                    {"Qwen2RMSNorm": _llama()},
                    mlp=_swiglu("Qwen2MLP"), rope=_rope("Qwen2Attention"),
                    add_norm=_pre("Qwen2DecoderLayer")),
            _family("qwen3", f"{_M}.qwen3.modeling_qwen3", "Qwen3ForCausalLM",
                    {"Qwen3RMSNorm": _llama(
                        "llama casting; also q_norm/k_norm over head_dim, whose output gradient "
                        "comes from RoPE's backward (a private buffer)")},
                    mlp=_swiglu("Qwen3MLP"), rope=_rope("Qwen3Attention"),
                    add_norm=_pre("Qwen3DecoderLayer")),
            _family("gemma", f"{_M}.gemma.modeling_gemma", "GemmaForCausalLM",
                    {"GemmaRMSNorm": _GEMMA1},
                    mlp=MlpSpec("GemmaMLP", "geglu", "split"), rope=_rope("GemmaAttention"),
                    add_norm=_pre("GemmaDecoderLayer")),
            _family("gemma2", f"{_M}.gemma2.modeling_gemma2", "Gemma2ForCausalLM",
                    {"Gemma2RMSNorm": _GEMMA_SANDWICH},
                    mlp=MlpSpec("Gemma2MLP", "geglu", "split", "hidden_activation"),
                    rope=_rope("Gemma2Attention"), loss=_SOFTCAP,
                    add_norm=_pre("Gemma2DecoderLayer", norm="pre_feedforward_layernorm", layout="sandwich", branch_norms=("post_attention_layernorm", "post_feedforward_layernorm"))),
            _family("gemma3_text", f"{_M}.gemma3.modeling_gemma3", "Gemma3ForCausalLM",
                    {"Gemma3RMSNorm": _GEMMA_SANDWICH},
                    mlp=MlpSpec("Gemma3MLP", "geglu", "split", "hidden_activation"),
                    rope=_rope("Gemma3Attention"), loss=_SOFTCAP,
                    probe_config={"final_logit_softcapping": 30.0},
                    add_norm=_pre("Gemma3DecoderLayer", norm="pre_feedforward_layernorm", layout="sandwich", branch_norms=("post_attention_layernorm", "post_feedforward_layernorm"))),
            _family("phi3", f"{_M}.phi3.modeling_phi3", "Phi3ForCausalLM",
                    {"Phi3RMSNorm": _llama()},
                    mlp=_swiglu("Phi3MLP", "fused"), rope=_rope("Phi3Attention", "partial"),
                    probe_config={"partial_rotary_factor": 0.5},
                    add_norm=_pre("Phi3DecoderLayer", branch_dropouts=("resid_attn_dropout", "resid_mlp_dropout"))),
            _family("granite", f"{_M}.granite.modeling_granite", "GraniteForCausalLM",
                    {"GraniteRMSNorm": _llama()},
                    mlp=_swiglu("GraniteMLP"), rope=_rope("GraniteAttention"),
                    loss=LossSpec(logit_divisor_attr="logits_scaling"),
                    probe_config={"logits_scaling": 4.0},
                    add_norm=_pre("GraniteDecoderLayer", residual_multiplier="residual_multiplier")),
            _family("olmo2", f"{_M}.olmo2.modeling_olmo2", "Olmo2ForCausalLM",
                    {"Olmo2RMSNorm": _OLMO2},
                    mlp=_swiglu("Olmo2MLP"), rope=_rope("Olmo2Attention", "cast")),
            _family("olmo3", f"{_M}.olmo3.modeling_olmo3", "Olmo3ForCausalLM",
                    {"Olmo3RMSNorm": _OLMO2},
                    mlp=_swiglu("Olmo3MLP"), rope=_rope("Olmo3Attention", "cast")),
            _family("smollm3", f"{_M}.smollm3.modeling_smollm3", "SmolLM3ForCausalLM",
                    {"SmolLM3RMSNorm": _llama()},
                    mlp=_swiglu("SmolLM3MLP"), rope=_rope("SmolLM3Attention"),
                    add_norm=_pre("SmolLM3DecoderLayer")),
            _family("ministral", f"{_M}.ministral.modeling_ministral", "MinistralForCausalLM",
                    {"MinistralRMSNorm": _llama()},
                    mlp=_swiglu("MinistralMLP"), rope=_rope("MinistralAttention"),
                    add_norm=_pre("MinistralDecoderLayer")),
            _family("exaone4", f"{_M}.exaone4.modeling_exaone4", "Exaone4ForCausalLM",
                    {"Exaone4RMSNorm": _llama(
                        "llama casting; post-norms feed the residual sum; q_norm/k_norm")},
                    mlp=_swiglu("Exaone4MLP"), rope=_rope("Exaone4Attention")),
            _family("hunyuan_v1_dense", f"{_M}.hunyuan_v1_dense.modeling_hunyuan_v1_dense",
                    "HunYuanDenseV1ForCausalLM",
                    {"HunYuanDenseV1RMSNorm": _llama(
                        "llama casting; also query_layernorm/key_layernorm over head_dim")},
                    mlp=_swiglu("HunYuanDenseV1MLP"), rope=_rope("HunYuanDenseV1Attention"),
                    add_norm=_pre("HunYuanDenseV1DecoderLayer")),
            _family("seed_oss", f"{_M}.seed_oss.modeling_seed_oss", "SeedOssForCausalLM",
                    {"SeedOssRMSNorm": _llama()},
                    mlp=MlpSpec("SeedOssMLP", "swiglu", "split", dropout_attr="residual_dropout"),
                    rope=_rope("SeedOssAttention"),
                    probe_config={"residual_dropout": 0.0, "attention_dropout": 0.0},
                    add_norm=_pre("SeedOssDecoderLayer")),
            _family("ernie4_5", f"{_M}.ernie4_5.modeling_ernie4_5", "Ernie4_5ForCausalLM",
                    {"Ernie4_5RMSNorm": _llama()},
                    mlp=_swiglu("Ernie4_5MLP"), rope=_INTERLEAVED_ROPE,
                    add_norm=_pre("Ernie4_5DecoderLayer")),
            _family("apertus", f"{_M}.apertus.modeling_apertus", "ApertusForCausalLM",
                    {"ApertusRMSNorm": _llama(
                        "llama casting; attention/feedforward pre-norms, q_norm/k_norm")},
                    mlp=None,  # not gated: down(xielu(up(x)))
                    rope=_rope("ApertusAttention"),
                    add_norm=_pre("ApertusDecoderLayer", input_norm="attention_layernorm", norm="feedforward_layernorm")),
            _family("lfm2", f"{_M}.lfm2.modeling_lfm2", "Lfm2ForCausalLM",
                    {"Lfm2RMSNorm": _llama(
                        "llama casting; operator/FFN pre-norms, q/k layernorms, embedding norm")},
                    mlp=MlpSpec("Lfm2MLP", "swiglu", "split", act_attr=None,
                                proj=("w1", "w3", "w2")),
                    rope=_rope("Lfm2Attention"),
                    add_norm=_pre("Lfm2DecoderLayer", input_norm="operator_norm",
                                  norm="ffn_norm", mlp="feed_forward", mixer="lfm2",
                                  probe_layer_types=("conv", "full_attention"))),
            _family("glm4", f"{_M}.glm4.modeling_glm4", "Glm4ForCausalLM",
                    {"Glm4RMSNorm": _llama(
                        "llama casting; post-self-attention/post-MLP norms feed the residual sum")},
                    mlp=_swiglu("Glm4MLP", "fused"), rope=_INTERLEAVED_ROPE,
                    add_norm=_pre("Glm4DecoderLayer", layout="sandwich", branch_norms=("post_self_attn_layernorm", "post_mlp_layernorm"))),
            _family("falcon_h1", f"{_M}.falcon_h1.modeling_falcon_h1", "FalconH1ForCausalLM",
                    {"FalconH1RMSNorm": _llama(
                        "llama casting; input/pre-FF norms, final norm (the Mamba mixer's "
                        "FalconH1RMSNormGated stays HF's)")},
                    mlp=MlpSpec("FalconH1MLP", "swiglu", "split",
                                multipliers=("gate_multiplier", "down_multiplier")),
                    rope=_rope("FalconH1Attention"),
                    add_norm=_pre("FalconH1DecoderLayer", norm="pre_ff_layernorm",
                                  mlp="feed_forward", mixer="falcon_h1", returns_tuple=True),
                    loss=LossSpec(logit_multiplier_attr="model.lm_head_multiplier"),
                    probe_config={"mamba_d_ssm": 32, "mamba_n_heads": 2, "mamba_d_state": 8,
                                  "mamba_chunk_size": 8, "mlp_multipliers": [0.7, 1.3],
                                  "lm_head_multiplier": 0.3}),
        )
    }
)  # fmt: skip

#: HF ``model_type`` -> family name.
MODEL_TYPE_TO_FAMILY: Mapping[str, str] = MappingProxyType(
    {t: f.name for f in FAMILIES.values() for t in (f.name, *f.aliases)}
)
