"""Model architecture (:class:`ModelSpec`) from presets, Hugging Face ``config.json`` or fields.

Parameter counts follow the layer structure (not a rule of thumb), so they reproduce the
published totals: GPT-3 175B (174.6B), Llama-3-8B (8.03B), Llama-3-70B (70.6B), Mixtral-8x7B
(46.7B total / 12.9B active), DeepSeek-V3 (671B / 37B, without the MTP module).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from simcluster import yamlio
from simcluster.divisors import divisors, one_of
from simcluster.errors import UserError, did_you_mean
from simcluster.limits import MAX_LAYERS
from simcluster.model_parts import BIAS_PARTS, QK_NORMS, bias_parts
from simcluster.names import loose_lookup
from simcluster.stated_params import check_stated_params


@dataclass(frozen=True)
class MLASpec:
    """DeepSeek multi-head latent attention dimensions."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer (dense or mixture-of-experts)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    # gelu and relu2 (squared ReLU) cost the same: two matrices and one elementwise pass
    mlp: Literal["gelu", "relu2", "swiglu"] = "swiglu"
    head_dim: int = 0  # 0 -> hidden // heads
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    dense_layers: int = 0  # leading layers with a dense MLP in a MoE model
    # after them, every moe_every-th layer routes to experts, the others keep the dense MLP:
    # layer i is MoE when (i + 1) % moe_every == 0 (Llama 4 Maverick's interleave_moe_layer_step
    # 2: layers 1, 3, 5, ...; Qwen2-MoE's decoder_sparse_step); 0 or 1 = every layer
    moe_every: int = 0
    # group-limited routing (DeepSeek-V2/V3's n_group / topk_group, Megatron-Core's
    # --moe-router-num-groups / --moe-router-group-topk): the experts split into router_groups
    # equal contiguous groups, each token picks group_topk of them by the sum of its top
    # top_k / group_topk scores in each, then its top_k experts inside those; 0 = no groups
    router_groups: int = 0
    group_topk: int = 0
    tied_embeddings: bool = False
    position: Literal["rope", "learned", "alibi"] = "rope"
    max_positions: int = 0
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    # whether a LayerNorm has a bias beside its weight (torch's nn.LayerNorm does; Cohere's
    # CohereLayerNorm, transformers' modeling_cohere.py, has a weight only); RMSNorm has none
    norm_bias: bool = True
    # which linears carry a bias (:data:`BIAS_PARTS`): ``qkv`` the Q/K/V projections,
    # ``attn_out`` the attention's output projection, ``mlp`` the MLP's (and a router's)
    # linears, ``lm_head`` the output head. Given as true (every linear of the layers: GPT-2,
    # OPT, BLOOM, Falcon's bias, StarCoder2's use_bias), false, or a list (GPT-J and CodeGen:
    # [mlp, lm_head]; Qwen2: [qkv]); ``qkv_bias: true`` is the older spelling of [qkv]. A bias
    # add runs in its GEMM's epilogue (no time of its own), so it is weights only. Multi-head
    # latent attention's projections are counted without biases (DeepSeek's have none)
    bias: tuple[str, ...] = ()
    dropout: bool = False
    mla: MLASpec | None = None
    # DeepSeek-V3's multi-token prediction modules (report Sec. 2.2): each adds two input
    # norms, a 2h -> h projection, one transformer layer (MoE when the model is) and a norm
    # before the output head; the embedding and the output head are the main model's
    mtp_layers: int = 0
    # sliding-window (local) attention: a query attends to the last ``sliding_window`` keys (0:
    # every layer attends to the whole sequence); with ``global_every`` k, layer i (0-based)
    # attends globally when (i + 1) % k == 0 (Gemma 2: 2, Gemma 3: 6, gpt-oss: 2), otherwise
    # every layer is local (Mistral 7B, StarCoder2)
    sliding_window: int = 0
    global_every: int = 0
    # chunked local attention (Llama 4's attention_chunk_size, iRoPE: transformers'
    # Llama4TextAttention masks a rotary layer's queries to the keys of their own aligned chunk
    # of this many tokens): the local layers of ``global_every`` attend within chunks instead of
    # a sliding window (Llama 4: 8192, every fourth layer global); 0 = no chunking
    attention_chunk: int = 0
    # the global layers of ``global_every`` have no rotary embedding and no query/key norm
    # (Llama 4's NoPE layers: Llama4TextAttention's use_rope false, its qk_norm only with rope;
    # Cohere2's global layers, rotary only on its sliding ones)
    nope_global: bool = False
    # a norm on the queries and on the keys before the rotary embedding (:data:`QK_NORMS`):
    # one more memory-bound pass over Q and K each way, and their pre-norm values kept for
    # the backward, whatever its weights. ``shared``: each head normalised with one head_dim
    # weight all heads share (Qwen3, Gemma 3, Apertus, Phi's qk_layernorm; Megatron-Core's
    # --qk-layernorm; ``true`` is this); ``per_head``: each head with weights of its own
    # (Cohere's CohereLayerNorm((heads, head_dim)), StableLM's StableLmLayerNormPerHead);
    # ``whole``: the whole projection normalised at once, a weight per channel (OLMo 2's and
    # OLMo 3's Olmo2RMSNorm(heads * head_dim), OLMoE's); ``weightless``: an L2 norm without
    # weights (Llama 4's Llama4TextL2Norm); ``none`` (or false)
    qk_norm: Literal["none", "shared", "per_head", "whole", "weightless"] = "none"
    # the parallel attention + MLP block, y = x + Attn(LN1(x)) + MLP(LN2(x)) (GPT-J, GPT-NeoX's
    # use_parallel_residual, Falcon's parallel_attn, PaLM, Cohere, Phi-2): both branches read
    # the layer input; ``parallel_norms`` 1 = one norm feeds both (GPT-J, Falcon-7B, PaLM,
    # Cohere), 2 = a norm each (GPT-NeoX, Falcon-40B/180B). Same weights and FLOPs as the
    # sequential block but one norm fewer with a shared one; the TP collectives depend on the
    # implementation (``parallel.parallel_block_comm``, parallelism/parallel_block.py)
    parallel_block: bool = False
    parallel_norms: int = 1
    # a norm on each block's output before the residual add, beside the pre-block norms
    # (Gemma 2 and 3: transformers' Gemma2DecoderLayer post_attention_layernorm and
    # post_feedforward_layernorm): two more norms' weights, passes and kept inputs a layer
    post_norms: bool = False
    # tanh soft-capping of the output logits, logits = c * tanh(logits / c) after the LM head
    # (Gemma 2's final_logit_softcapping 30: transformers' Gemma2ForCausalLM.forward): a
    # memory-bound pass over the b*s*V logits each way and a 16-bit tensor kept for the
    # backward, none inside a fused loss (Liger-Kernel's cross-entropy takes ``softcap``);
    # no matmul, so no model FLOPs. 0 = no cap
    logit_softcap: float = 0.0
    # learned attention sinks (gpt-oss: transformers' GptOssAttention ``sinks``, one logit per
    # query head and layer): each head's logit joins every query row's softmax denominator and
    # takes no probability mass to a value, so the scores and the value product are unchanged
    # (attention_sinks.py: which fused kernels run it, and why it costs no modelled time)
    attention_sinks: bool = False
    # a norm on the token embeddings before the first layer (BLOOM's word_embeddings_layernorm,
    # transformers' BloomModel): its weights (and bias) and one norm pass over the hidden state
    embedding_norm: bool = False
    # Qwen2-MoE's shared-expert gate (transformers' Qwen2MoeSparseMoeBlock.shared_expert_gate,
    # nn.Linear(hidden, 1, bias=False)): a sigmoid of one h-wide row scales the shared expert's
    # output, h weights and a matmul of h a token on every MoE layer
    shared_expert_gate: bool = False

    def __post_init__(self) -> None:
        # the older spellings, read as the sets they mean: bias true/false, qk_norm true/false
        object.__setattr__(self, "bias", bias_parts(self.bias))
        if isinstance(self.qk_norm, bool) or self.qk_norm is None:
            object.__setattr__(self, "qk_norm", "shared" if self.qk_norm else "none")

    # --- shape helpers ------------------------------------------------------------------
    def has_bias(self, part: str) -> bool:
        """Whether the ``part`` linears (one of :data:`BIAS_PARTS`) carry a bias."""
        return part in self.bias

    @property
    def has_qk_norm(self) -> bool:
        """Whether queries and keys are normalised (a memory-bound pass, weights or not)."""
        return self.qk_norm != "none"

    def qk_norm_params(self) -> int:
        """One layer's query and key norm weights (``qk_norm``): a head_dim-wide weight each
        when shared (and a bias with a biased LayerNorm: Phi's nn.LayerNorm(head_dim)); a
        weight per channel of Q and of K when per head or whole (no bias: StableLM's per-head
        norms are built with bias=False, Cohere's and OLMo's norms have none); none when
        weightless."""
        d = self.d_head
        if self.qk_norm == "shared":
            return 2 * d * (2 if self.norm == "layernorm" and self.norm_bias else 1)
        if self.qk_norm in ("per_head", "whole"):
            return (self.heads + self.kv_heads) * d
        return 0

    @property
    def d_head(self) -> int:
        """Per-head dimension of Q/K/V."""
        return self.head_dim or self.hidden // self.heads

    @property
    def qk_v_head_dims(self) -> tuple[int, int]:
        """(query/key, value) head dimensions of the attention core; multi-latent attention's
        differ (its no-position and rotary parts together against its value dim)."""
        if self.mla is not None:
            return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim, self.mla.v_head_dim
        return self.d_head, self.d_head

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        return sum(1 for i in range(self.layers) if self.is_moe_layer(i))

    @property
    def first_moe_layer(self) -> int:
        """Index of the first MoE layer (a representative one; 0 for a dense model)."""
        return next((i for i in range(self.layers) if self.is_moe_layer(i)), 0)

    def attention_span(self, index: int, seq_len: float) -> float:
        """Keys a query of layer ``index`` can attend to at most: the window (or chunk) of a
        local layer, else the sequence (the MTP modules' layers attend globally)."""
        window = self.sliding_window or self.attention_chunk
        local = (
            window > 0
            and index < self.layers
            and not (self.global_every and (index + 1) % self.global_every == 0)
        )
        return min(seq_len, window) if local else seq_len

    def is_global_layer(self, index: int) -> bool:
        """Whether layer ``index`` is one of ``global_every``'s global layers among local ones."""
        return bool(self.global_every) and index < self.layers and (index + 1) % self.global_every == 0

    def is_moe_layer(self, index: int) -> bool:
        """True when layer ``index`` (0-based) has a routed-expert MLP (the MTP modules' layers,
        past the main model's, do in a MoE model)."""
        if not self.is_moe or index < self.dense_layers:
            return False
        return index >= self.layers or self.moe_every <= 1 or (index + 1) % self.moe_every == 0

    def up_width(self, width: float) -> float:
        """Output width of an MLP's first GEMM for hidden width ``width`` (gate + up for SwiGLU)."""
        return 2 * width if self.mlp == "swiglu" else width

    # --- parameter counts ---------------------------------------------------------------
    def attention_params(self) -> int:
        """Weights (+biases) of one attention block including its input norm (and its output
        norm, ``post_norms``)."""
        h, a, kv, d = self.hidden, self.heads, self.kv_heads, self.d_head
        norm = self.norm_params()
        if self.mla is not None:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            q = (
                h * a * qk
                if not m.q_lora_rank
                else h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * qk
            )
            kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv_b = m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
            return norm + q + kv_a + kv_b + a * m.v_head_dim * h + self.post_norm_params() + self.sink_params()
        weights = h * a * d + 2 * h * kv * d + a * d * h
        biases = (a * d + 2 * kv * d if self.has_bias("qkv") else 0) + (h if self.has_bias("attn_out") else 0)
        return norm + weights + biases + self.qk_norm_params() + self.post_norm_params() + self.sink_params()

    def sink_params(self) -> int:
        """One layer's attention sinks (``attention_sinks``: a logit per query head), else none."""
        return self.heads if self.attention_sinks else 0

    def post_norm_params(self) -> int:
        """One block's output norm (``post_norms``), else nothing."""
        return self.norm_params() if self.post_norms else 0

    def mlp_params(self, ffn: int) -> int:
        """One dense MLP of inner width ``ffn`` (no norm)."""
        h, biased = self.hidden, self.has_bias("mlp")
        if self.mlp == "swiglu":
            return 3 * h * ffn + ((2 * ffn + h) if biased else 0)
        return 2 * h * ffn + ((ffn + h) if biased else 0)

    @property
    def shared_norm(self) -> bool:
        """Whether one norm feeds both branches of a parallel block (no pre-MLP norm)."""
        return self.parallel_block and self.parallel_norms == 1

    def mlp_norm_params(self) -> int:
        """The pre-MLP norm's weights (none when a parallel block shares its input norm) and
        the MLP's output norm (``post_norms``)."""
        if self.shared_norm:
            return 0
        return self.norm_params() + self.post_norm_params()

    def expert_params(self) -> int:
        """One routed expert."""
        return self.mlp_params(self.expert_ffn)

    def layer_params(self, index: int, active: bool = False) -> int:
        """All parameters of layer ``index``; ``active`` counts only top_k routed experts."""
        total = self.attention_params() + self.mlp_norm_params()
        if self.is_moe_layer(index):
            routed = self.top_k if active else self.experts
            total += routed * self.expert_params()
            total += self.shared_experts * self.expert_params()
            # router; with linear biases it has one too (gpt-oss's GptOssTopKRouter.bias)
            total += self.hidden * self.experts + (self.experts if self.has_bias("mlp") else 0)
            total += self.hidden if self.shared_expert_gate else 0
        else:
            total += self.mlp_params(self.ffn)
        return total

    def embedding_params(self) -> int:
        pos = self.max_positions * self.hidden if self.position == "learned" else 0
        norm = self.norm_params() if self.embedding_norm else 0
        return self.vocab * self.hidden + pos + norm

    def head_params(self) -> int:
        """Final norm + LM head (0 weights when tied to the embedding; its bias, ``lm_head`` in
        ``bias``, is the head's own either way: GPT-J's, CodeGen's and Phi's lm_head)."""
        bias = self.vocab if self.has_bias("lm_head") else 0
        return self.norm_params() + (0 if self.tied_embeddings else self.vocab * self.hidden) + bias

    @property
    def norm_tensors(self) -> int:
        """Parameter tensors of one norm: a weight, and a bias for a biased LayerNorm."""
        return 2 if self.norm == "layernorm" and self.norm_bias else 1

    def norm_params(self) -> int:
        """One norm's weights (+ bias for a biased LayerNorm)."""
        return self.norm_tensors * self.hidden

    def mtp_layer_index(self, depth: int) -> int:
        """Layer index of the transformer layer of MTP module ``depth`` (0-based): after the
        main model's layers, so it is a MoE layer in a MoE model."""
        return self.layers + depth

    def mtp_params(self, active: bool = False) -> int:
        """The multi-token prediction modules' own parameters (embedding and head shared)."""
        per = 3 * self.norm_params() + 2 * self.hidden * self.hidden
        return sum(per + self.layer_params(self.mtp_layer_index(d), active) for d in range(self.mtp_layers))

    def mtp_routed_params(self) -> int:
        """The MTP layers' routed-expert weights (sharded over ep, not tp)."""
        if not self.is_moe:
            return 0
        return sum(
            self.experts * self.expert_params()
            for d in range(self.mtp_layers)
            if self.is_moe_layer(self.mtp_layer_index(d))
        )

    def params_total(self) -> int:
        """Total parameter count (the MTP modules included)."""
        layers = sum(self.layer_params(i) for i in range(self.layers))
        return self.embedding_params() + layers + self.head_params() + self.mtp_params()

    def params_active(self) -> int:
        """Parameters touched per token (MoE: top_k routed + shared experts)."""
        layers = sum(self.layer_params(i, active=True) for i in range(self.layers))
        return self.embedding_params() + layers + self.head_params() + self.mtp_params(active=True)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_FIELDS = {f for f in ModelSpec.__dataclass_fields__}  # noqa: C416
#: the older spelling of a bias on the Q/K/V projections alone (``bias: [qkv]``): Megatron's
#: --add-qkv-bias, ChatGLM's add_qkv_bias, the presets written before ``bias`` took a list
LEGACY_KEYS = frozenset({"qkv_bias"})
MODEL_KEYS = sorted((_FIELDS | LEGACY_KEYS) - {"name"}) + ["preset", "hf_config"]


def _presets_dir() -> Path:
    return Path(str(resources.files("simcluster") / "presets"))


def preset_names() -> list[str]:
    """Shipped model presets."""
    return sorted(p.stem for p in _presets_dir().glob("*.yaml"))


_INT_FIELDS = (
    "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "experts", "top_k",
    "expert_ffn", "shared_experts", "dense_layers", "moe_every", "router_groups", "group_topk",
    "max_positions", "mtp_layers", "sliding_window", "global_every", "attention_chunk", "parallel_norms",
)  # fmt: skip
_MLA_FIELDS = tuple(MLASpec.__dataclass_fields__)


def _check_types(data: dict[str, Any], prefix: str) -> None:
    """Whole-number fields are whole numbers (a config.json may hold strings or floats)."""
    for key in _INT_FIELDS:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UserError(f"{prefix}.{key}", f"must be a whole number, got {value!r}")
    cap = data.get("logit_softcap")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))):
        raise UserError(f"{prefix}.logit_softcap", f"must be a number (Gemma 2: 30), got {cap!r}")


def _mla_spec(raw: Any, prefix: str, base: MLASpec | None = None) -> MLASpec:
    """``mla:`` as an MLASpec: a partial mapping overrides the base model's MLA dimensions."""
    field = f"{prefix}.mla"
    if isinstance(raw, MLASpec):
        return raw
    if not isinstance(raw, dict):
        raise UserError(field, f"must be a mapping of {', '.join(_MLA_FIELDS)}, got {raw!r}")
    for key, value in raw.items():
        if key not in _MLA_FIELDS:
            raise UserError(
                f"{field}.{key}",
                f"unknown MLA field{did_you_mean(str(key), _MLA_FIELDS)}; "
                f"the fields are {', '.join(_MLA_FIELDS)}",
            )
        least = 0 if key == "q_lora_rank" else 1  # q_lora_rank 0: queries not compressed
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            what = "0 (no query compression) or more" if least == 0 else "a positive whole number"
            raise UserError(f"{field}.{key}", f"must be {what}, got {value!r}")
    merged = {**(base.__dict__ if base else {}), **raw}
    missing = [k for k in _MLA_FIELDS if k not in merged]
    if missing:
        raise UserError(
            f"{field}.{missing[0]}", f"missing; multi-head latent attention needs all of {', '.join(_MLA_FIELDS)}"
        )
    return MLASpec(**merged)


def default_ffn(hidden: int, mlp: str) -> int:
    """The MLP's inner width when a model gives none, as Megatron-LM sets it (``arguments.py``,
    ``--ffn-hidden-size`` unset): 4h for a two-matrix MLP; for a gated one 2/3 of that, rounded
    down to a multiple of 64, which keeps the parameter count of the 4h MLP."""
    if mlp == "swiglu":
        return int(4 * hidden * 2 / 3 / 64) * 64
    return 4 * hidden


def _read_legacy(data: dict[str, Any], base: tuple[str, ...], prefix: str) -> None:
    """``qkv_bias`` (the older spelling) folded into ``bias``: true adds ``qkv`` to the parts
    ``bias`` gives (or the base model has), false takes it off."""
    if "qkv_bias" not in data:
        return
    qkv = data.pop("qkv_bias")
    if qkv is None:
        return
    if not isinstance(qkv, bool):
        raise UserError(f"{prefix}.qkv_bias", f"must be true or false, got {qkv!r}")
    parts = bias_parts(data["bias"]) if data.get("bias") is not None else base
    if "bias" in data and data["bias"] is True and qkv:
        raise UserError(f"{prefix}.qkv_bias", "is implied by bias: true (every linear has one); drop qkv_bias")
    data["bias"] = tuple(p for p in parts if p != "qkv") + (("qkv",) if qkv else ())


def _from_fields(name: str, data: dict[str, Any], field_prefix: str = "model") -> ModelSpec:
    data = dict(data)
    _read_legacy(data, (), field_prefix)
    mla = data.pop("mla", None)
    unknown = set(data) - _FIELDS
    if unknown:
        key = sorted(unknown)[0]
        raise UserError(f"{field_prefix}.{key}", f"unknown model field{did_you_mean(key, _FIELDS)}")
    _check_types(data, field_prefix)
    required = ("layers", "hidden", "heads", "vocab")
    for key in required:
        if key not in data:
            raise UserError(
                f"{field_prefix}.{key}", "missing; give it, or use model.preset / model.hf_config"
            )
    data.setdefault("kv_heads", data["heads"])
    if data.get("experts"):
        data.setdefault("ffn", data.get("expert_ffn", 0))
    else:
        data.setdefault("ffn", default_ffn(data["hidden"], data.get("mlp", ModelSpec.mlp)))
    spec = ModelSpec(name=name, mla=_mla_spec(mla, field_prefix) if mla else None, **data)
    _check(spec, field_prefix)
    return spec


def _check(spec: ModelSpec, prefix: str) -> None:
    """The model's fields, checked one concern at a time; each error names the field under
    ``prefix`` (``model`` or a preset's name) and the fix."""
    _check_signs(spec, prefix)
    _check_blocks(spec, prefix)
    _check_mlp_kind(spec, prefix)
    _check_attention_pattern(spec, prefix)
    _check_shapes(spec, prefix)
    if spec.is_moe:
        _check_routing(spec, prefix)
        _check_router_groups(spec, prefix)


def _check_signs(spec: ModelSpec, prefix: str) -> None:
    """The counts: the sizes every model has are positive, the optional ones 0 or more."""
    for key in ("layers", "hidden", "heads", "kv_heads", "vocab"):
        if getattr(spec, key) <= 0:
            raise UserError(
                f"{prefix}.{key}", f"must be a positive integer, got {getattr(spec, key)}"
            )
    for key in ("head_dim", "ffn", "experts", "top_k", "expert_ffn", "shared_experts",
                "dense_layers", "moe_every", "router_groups", "group_topk", "max_positions",
                "sliding_window", "global_every", "attention_chunk", "mtp_layers"):  # fmt: skip
        if getattr(spec, key) < 0:
            raise UserError(f"{prefix}.{key}", f"must be 0 or more, got {getattr(spec, key)}")


def _check_blocks(spec: ModelSpec, prefix: str) -> None:
    """The layer's parts: biases, norms, and a parallel attention + MLP block's limits."""
    unknown = [p for p in spec.bias if p not in BIAS_PARTS]
    if unknown:
        raise UserError(
            f"{prefix}.bias",
            f"unknown part '{unknown[0]}'{did_you_mean(unknown[0], BIAS_PARTS)}; give true, false or a list of "
            f"{', '.join(BIAS_PARTS)}",
        )
    if spec.qk_norm not in QK_NORMS:
        raise UserError(
            f"{prefix}.qk_norm",
            f"'{spec.qk_norm}' is not a query/key norm{did_you_mean(str(spec.qk_norm), QK_NORMS)}; give one of "
            f"{', '.join(QK_NORMS)} (true: shared)",
        )
    if spec.has_qk_norm and spec.mla is not None:
        raise UserError(
            f"{prefix}.qk_norm",
            "multi-head latent attention normalises its compressed latents itself (model.mla); drop qk_norm",
        )
    if spec.parallel_norms not in (1, 2):
        raise UserError(
            f"{prefix}.parallel_norms",
            f"must be 1 (one norm feeds attention and MLP) or 2 (a norm each), got {spec.parallel_norms}",
        )
    if spec.parallel_norms == 2 and not spec.parallel_block:
        # a sequential layer always has a norm per block: a second norm would change nothing
        raise UserError(
            f"{prefix}.parallel_norms",
            "counts a parallel attention + MLP block's norms, but the model's layers are sequential; "
            "drop it, or set parallel_block: true",
        )
    if spec.shared_expert_gate and not spec.shared_experts:
        raise UserError(
            f"{prefix}.shared_expert_gate",
            "gates a shared expert's output, but the model has none; set shared_experts or drop it",
        )
    if spec.parallel_block and spec.post_norms:
        raise UserError(
            f"{prefix}.post_norms",
            "output norms are modelled for sequential layers only; drop post_norms or parallel_block",
        )
    if spec.parallel_block and spec.is_moe:
        raise UserError(
            f"{prefix}.parallel_block",
            "parallel attention + MLP blocks are modelled for dense models only; drop parallel_block or experts",
        )


def _check_mlp_kind(spec: ModelSpec, prefix: str) -> None:
    """The expert fields need experts, and a dense MLP its width."""
    if not spec.is_moe:
        for key in ("top_k", "expert_ffn", "shared_experts", "dense_layers", "moe_every", "router_groups", "group_topk"):
            if getattr(spec, key) > 0:
                raise UserError(
                    f"{prefix}.{key}",
                    f"is for mixture-of-experts models but experts is {spec.experts}; "
                    f"set {prefix}.experts or drop {key}",
                )
    if spec.ffn == 0 and (not spec.is_moe or spec.dense_layers > 0 or spec.moe_every > 1):
        raise UserError(f"{prefix}.ffn", "the dense MLP needs ffn > 0; give its inner width")


def _check_attention_pattern(spec: ModelSpec, prefix: str) -> None:
    """The layer count's bound and the attention pattern: local and global layers, soft-capping."""
    if spec.layers > MAX_LAYERS:
        raise UserError(
            f"{prefix}.layers", f"{spec.layers} layers is more than the {MAX_LAYERS:,} simcluster can simulate"
        )
    if spec.global_every and not (spec.sliding_window or spec.attention_chunk):
        raise UserError(
            f"{prefix}.global_every",
            "places global layers among sliding-window (or chunked) ones; set sliding_window "
            "or attention_chunk too, or drop it",
        )
    if spec.nope_global and not (spec.global_every and spec.position == "rope"):
        raise UserError(
            f"{prefix}.nope_global",
            "takes the rotary embedding off the global layers of global_every among rotary local ones; "
            "set global_every (with sliding_window or attention_chunk) and position: rope, or drop it",
        )
    if not (math.isfinite(spec.logit_softcap) and spec.logit_softcap >= 0):
        raise UserError(
            f"{prefix}.logit_softcap",
            f"must be a positive cap c of c * tanh(logits / c) (Gemma 2: 30), or 0 for none; got {spec.logit_softcap}",
        )
    if spec.sliding_window and spec.attention_chunk:
        raise UserError(
            f"{prefix}.attention_chunk",
            "local layers attend either within a sliding window or within chunks; drop "
            "attention_chunk or sliding_window",
        )


def _check_shapes(spec: ModelSpec, prefix: str) -> None:
    """The heads: query groups and head width, and the prediction modules against the layers."""
    if spec.mtp_layers > spec.layers:
        raise UserError(
            f"{prefix}.mtp_layers",
            f"{spec.mtp_layers} prediction modules for {spec.layers} layers; use at most layers (DeepSeek-V3: 1)",
        )
    if spec.heads % spec.kv_heads:
        raise UserError(
            f"{prefix}.kv_heads", f"{spec.kv_heads} must divide heads={spec.heads}; use {one_of(divisors(spec.heads))}"
        )
    if spec.mla is None and spec.head_dim == 0 and spec.hidden % spec.heads:
        raise UserError(
            f"{prefix}.heads", f"{spec.heads} must divide hidden={spec.hidden} (or set head_dim)"
        )


def _check_routing(spec: ModelSpec, prefix: str) -> None:
    """A mixture of experts' routing: top-k among the experts, the experts' width, its dense layers."""
    if not (0 < spec.top_k <= spec.experts):
        raise UserError(
            f"{prefix}.top_k",
            f"{spec.top_k} must be in 1..experts={spec.experts} (the experts each token is routed to)",
        )
    if spec.expert_ffn <= 0:
        raise UserError(f"{prefix}.expert_ffn", "MoE models need expert_ffn > 0")
    if not 0 <= spec.dense_layers < spec.layers:
        # the message names the value and the fix: a bare "must be in 0..0" (a preset's
        # dense_layers over a model cut to one layer) read as a riddle
        raise UserError(
            f"{prefix}.dense_layers",
            f"{spec.dense_layers} must be in 0..{spec.layers - 1}, fewer than the model's "
            f"{spec.layers} layers (a mixture of experts keeps at least one MoE layer); "
            f"lower dense_layers or raise {prefix}.layers",
        )


def _check_router_groups(spec: ModelSpec, prefix: str) -> None:
    """Group-limited routing: the groups split the experts evenly, a token picks at most all of
    them, and the picked groups hold at least its top_k experts (Megatron-Core's
    ``group_limited_topk`` views the scores as [tokens, groups, experts / groups])."""
    groups, picked = spec.router_groups, spec.group_topk
    if not groups and not picked:
        return
    if not groups or not picked:
        given, missing = ("router_groups", "group_topk") if groups else ("group_topk", "router_groups")
        raise UserError(
            f"{prefix}.{missing}",
            f"group-limited routing needs both router_groups and group_topk, but only {given} is set; "
            f"give {missing} too (DeepSeek-V3: 8 and 4) or drop {given}",
        )
    if spec.experts % groups:
        raise UserError(
            f"{prefix}.router_groups",
            f"{groups} groups do not split the {spec.experts} experts evenly; give a divisor of experts",
        )
    if picked > groups:
        raise UserError(f"{prefix}.group_topk", f"{picked} must be in 1..router_groups={groups}")
    if spec.top_k > picked * (spec.experts // groups):
        raise UserError(
            f"{prefix}.group_topk",
            f"{picked} picked of {groups} groups hold {picked * (spec.experts // groups)} experts, fewer than "
            f"top_k={spec.top_k}; raise group_topk",
        )


#: names of the same architecture as a shipped preset (Llama 3.1 8B/70B keep Llama 3's shapes;
#: 3.1 only changed the rotary scaling and context; Llama 3's 405B is Llama 3.1's)
PRESET_ALIASES = {
    "llama3.1-8b": "llama3-8b", "llama3.1-70b": "llama3-70b", "llama3-405b": "llama3.1-405b",
    # NVIDIA's performance tables (Nemotron-15B, Nemotron-340B) and transformers' repo names
    "nemotron-15b": "nemotron4-15b", "nemotron-340b": "nemotron4-340b",
    "llama-4-scout-17b-16e": "llama4-scout", "llama-4-maverick-17b-128e": "llama4-maverick",
    "qwen3-moe-30b": "qwen3-30b-a3b", "qwen3-moe-235b": "qwen3-235b-a22b",
    # the names the models' own papers and repositories give them: GPT-3's Table 2.1 calls the
    # 175B "GPT-3" and the 1.3B "GPT-3 XL"; bigscience/bloom is the 176B's checkpoint; Smith et
    # al. 2022 title the 530B "Megatron-Turing NLG" (MT-NLG)
    "gpt3": "gpt3-175b", "gpt3-xl": "gpt3-1.3b", "bloom": "bloom-176b",
    "mt-nlg": "mt-nlg-530b", "megatron-turing-nlg": "mt-nlg-530b",
    # LLaMA v1's 32.5B is "33B" in its paper and "30B" in Meta's download and huggyllama's repos
    "llama-30b": "llama-33b",
}  # fmt: skip

#: what a repository id or a table adds around a model's name: the organisation
#: ('meta-llama/'), Meta's own prefix ('Meta-Llama-3-8B'), a checkpoint or table suffix
#: ('-hf', '-Base', '-v0.1', NVIDIA's '-LLM') and a trailing size ('Grok-1 314B')
_SIZE = re.compile(r"[-_ ](\d+(\.\d+)?)b$", re.IGNORECASE)
_DECORATIONS = (
    re.compile(r"^.*/"),
    re.compile(r"^meta[-_ ]", re.IGNORECASE),
    # a tuned checkpoint keeps its base model's shapes ('Llama-2-7b-chat-hf', '-Instruct')
    # ('-V3' in 'DeepSeek-V3-Base' is the name's, so a bare 'vN' goes only when it ends the name)
    re.compile(r"([-_ ](hf|base|llm|instruct|chat|v\d+\.\d+(\.\d+)*))+$|[-_ ]v\d+$", re.IGNORECASE),
    _SIZE,
)


def _size_agrees(written: str, preset: str) -> bool:
    """Whether the parameter count ``written`` ends with is the preset's, when its name has one
    ('MT-NLG 530B' is mt-nlg-530b; 'GPT-3 1B' is no GPT-3 that is shipped)."""
    given, shipped = _SIZE.search(written), re.search(r"-(\d+(\.\d+)?)b$", preset)
    return given is None or shipped is None or float(given.group(1)) == float(shipped.group(1))


def resolve_preset_name(name: str) -> str:
    """The shipped preset a name means: exact, an alias, or equal up to case and separators,
    also once a repository's organisation, Meta's prefix, a checkpoint suffix or a trailing
    parameter count is taken off ('meta-llama/Meta-Llama-3-8B', 'DeepSeek V3 671B')."""
    names = preset_names()
    if name in names:
        return name
    candidates = (*names, *PRESET_ALIASES)
    stripped = name
    for decoration in (None, *_DECORATIONS):
        written = stripped
        if decoration is not None:
            stripped = decoration.sub("", stripped).strip()
        found = loose_lookup(stripped, candidates)
        if found:
            preset = PRESET_ALIASES.get(found, found)
            if decoration is _SIZE and not _size_agrees(written, preset):
                return name
            return preset
    return name


def load_preset(name: str, field_name: str = "model.preset") -> ModelSpec:
    """A shipped preset by name (see :func:`resolve_preset_name`)."""
    name = resolve_preset_name(name)
    path = _presets_dir() / f"{name}.yaml"
    if not path.is_file():
        names = preset_names()
        raise UserError(
            field_name,
            f"unknown preset '{name}'{did_you_mean(name, names)}; shipped: {', '.join(names)}",
        )
    data = yamlio.safe_load(path.read_text())
    data.pop("source", None)
    return _from_fields(name, data, field_prefix=field_name)


def from_hf_config(
    path: str | Path,
    field_name: str = "model.hf_config",
    fill: dict[str, Any] | None = None,
    parsed: dict[str, Any] | None = None,
) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` (Llama/Mistral/Qwen/Gemma-style, MoE
    Mixtral/Qwen-MoE/DeepSeek-V3, and GPT-2, OPT, BLOOM, GPT-NeoX, Falcon, ...; see
    :mod:`simcluster.hf_import`). ``fill``: the scenario's own shape fields, which stand in for
    ones the file leaves out. ``parsed``: the file's JSON object when the caller has read it
    already (``simcluster import --hf-config`` reads it once, for its own error)."""
    from simcluster.hf_import import _KEYS, Unsupported, fields_from_config, read_config

    cfg = parsed if parsed is not None else read_config(path, field_name)
    p = Path(path)
    name = str(cfg.get("_name_or_path") or p.parent.name or p.stem)
    try:
        fields = fields_from_config(cfg)
    except Unsupported as exc:
        raise UserError(field_name, f"'{path}': {exc}") from None
    except (TypeError, ValueError, KeyError, ZeroDivisionError) as exc:
        raise UserError(
            field_name,
            f"'{path}' has a missing or mistyped field ({type(exc).__name__}: {exc}); "
            "is this a Hugging Face config.json?",
        ) from None
    for key in ("layers", "hidden", "heads", "vocab"):
        if key not in fields and (fill or {}).get(key) is not None:
            fields[key] = fill[key]  # type: ignore[index]
        if key not in fields:
            raise UserError(
                field_name,
                f"'{path}' gives no {' / '.join(_KEYS[key])}; add it to the file, or set model.{key} beside hf_config",
            )
    return _from_fields(name, fields, field_prefix=field_name)


def _names_preset_without_shape(section: dict[str, Any]) -> bool:
    """The section's ``name`` is a shipped preset and a required shape field is missing."""
    name = section.get("name")
    if not isinstance(name, str) or resolve_preset_name(name) not in preset_names():
        return False
    return any(section.get(key) is None for key in ("layers", "hidden", "heads", "vocab"))


def build_model(section: dict[str, Any], hf_parsed: dict[str, Any] | None = None) -> ModelSpec:
    """A ModelSpec from a scenario's ``model:`` section (preset / hf_config / fields, + overrides);
    ``hf_parsed``: its hf_config's JSON object, when the caller has read the file already."""
    section = dict(section)
    stated = section.pop("params", None)
    spec = _build_model(section, hf_parsed)
    if stated is not None:
        check_stated_params(float(stated), spec.params_total(), spec.params_active())
    return spec


def _check_unknown_name(section: dict[str, Any]) -> None:
    """A model given by ``name`` alone that names no shipped preset is refused on its name, not
    on the first shape field it lacks (the writer meant a preset, not a shape left out)."""
    name = section.get("name")
    if not isinstance(name, str) or any(section.get(k) is not None for k in ("layers", "hidden", "heads", "vocab")):
        return
    names = preset_names()
    raise UserError(
        "model.name",
        f"'{name}' is not a shipped preset{did_you_mean(name, names)}; give its shape (layers, hidden, "
        f"heads, vocab, ffn ...), model.hf_config, or one of: {', '.join(names)}",
    )


def _build_model(section: dict[str, Any], hf_parsed: dict[str, Any] | None = None) -> ModelSpec:
    preset = section.pop("preset", None)
    hf = section.pop("hf_config", None)
    if preset and hf:
        raise UserError("model", "give either preset or hf_config, not both")
    if preset:
        base = load_preset(str(preset))
    elif hf:
        fill = {k: section.get(k) for k in ("layers", "hidden", "heads", "vocab")}
        base = from_hf_config(hf, fill=fill, parsed=hf_parsed)
    elif _names_preset_without_shape(section):
        # `model: {name: llama3-8b}` reads as the preset: the fields alone could not build a
        # model, so a name that is a preset can only mean it (given shapes still override)
        base = load_preset(str(section.pop("name")), "model.name")
    else:
        _check_unknown_name(section)
        return _from_fields(section.pop("name", "custom"), section)
    overrides = {k: v for k, v in section.items() if v is not None}
    if not overrides:
        return base
    unknown = set(overrides) - _FIELDS - LEGACY_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise UserError(f"model.{key}", f"unknown model field{did_you_mean(key, MODEL_KEYS)}")
    _check_types(overrides, "model")
    _read_legacy(overrides, base.bias, "model")
    if "mla" in overrides:
        overrides["mla"] = _mla_spec(overrides["mla"], "model", base.mla)
    spec = replace(base, **overrides)
    _check(spec, "model")
    return spec


__all__ = ["ModelSpec", "MLASpec", "build_model", "load_preset", "from_hf_config", "preset_names"]
_ = field
