"""A ModelSpec from a Hugging Face ``config.json``.

The architectures name the same things differently (``n_layer`` in GPT-2 and BLOOM,
``num_hidden_layers`` elsewhere; ``n_inner``, ``ffn_dim``, ``intermediate_size``), and some of
what matters is not in the file at all but in the modelling code of the ``model_type``: whether
the MLP is gated (Llama-style gate/up/down, whatever the activation: Gemma's GeGLU is gated
too), LayerNorm or RMSNorm, linear biases, learned positions, ALiBi, and the default of
``tie_word_embeddings`` when the file leaves it out. Those come from ``FAMILIES`` below, the
registry of the ``model_type`` values simcluster reads; any other ``model_type`` (or none) is
refused with the list, not guessed. Fields a config class defaults and a file may leave out
(Gemma 2 and 3, Llama 4, MPT, gpt-oss, Mistral, Cohere2, OLMo 3, OLMoE, Falcon, GPTBigCode,
Qwen2/3 and their MoEs, DeepSeek-V2/V3) come from ``CONFIG_DEFAULTS``, each as its transformers
configuration class sets it. Layers that are not softmax
attention (linear attention, Mamba) are refused with the field that says so, and so is tanh
soft-capping of the attention scores (Gemma 2's ``attn_logit_softcapping``), which changes the
fused attention kernel by an amount no published measurement gives (:func:`_refuse_softcapping`);
the soft-capping of the output logits (``final_logit_softcapping``) is read as
``model.logit_softcap``, a memory-bound pass over the logits.

The parallel attention + MLP block (``model.parallel_block`` and ``parallel_norms``) comes
from :func:`_parallel_block_fields`, as each ``model_type``'s modelling code decides it; local
attention (a sliding window, or Llama 4's chunks) from :func:`_window_fields`.

gpt-oss's attention sinks (``sinks`` in transformers' GptOssAttention, one learned logit per
head and layer; the same per-head sinks where a config sets ``use_sinks``, as an OLMo 3 draft's
Olmo3Attention reads it) are ``model.attention_sinks``: their weights,
no modelled time, and a kernel that cannot train them is refused (:mod:`simcluster.attention_sinks`).

Parameter shapes follow each ``model_type``'s modelling code part by part: which linears carry
a bias (``model.bias``: GPT-J's and CodeGen's MLP and LM head only, Phi's every linear and its LM
head, a Llama-style ``attention_bias`` on q, k, v and o_proj, GPT-NeoX's ``attention_bias``
false leaving the MLP's; :func:`_bias_fields`), Cohere's LayerNorm without a bias
(``norm_bias``), the query/key norm's weights (``qk_norm``: shared, per head, over the whole
projection as OLMo 2's and OLMoE's, or none at all as Llama 4's L2 norm; :data:`QK_NORM_TYPES`),
BLOOM's embedding LayerNorm (``embedding_norm``) and Qwen2-MoE's shared-expert gate
(``shared_expert_gate``). DeepSeek-V2/V3's group-limited gate (``n_group`` / ``topk_group``,
unless ``topk_method`` is ``greedy``) is ``model.router_groups`` / ``group_topk``. Not modelled:
DeepSeek-V3's ``e_score_correction_bias`` (a routing buffer of one value per expert and layer,
no FLOPs).
GPT-NeoX's partial rotary (``rotary_pct``, ``partial_rotary_factor``) is costed as full rotary:
a fused rotary kernel reads and writes all of Q and K either way (TransformerEngine's fused
RoPE writes a whole output, copying the unrotated part), and the eager code's ``torch.cat`` of
the rotated and passed-through parts rewrites all of them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from simcluster.errors import UserError, did_you_mean, read_text
from simcluster.model_parts import bias_parts


@dataclass(frozen=True)
class Family:
    """What a ``model_type``'s modelling code fixes that its config.json may not say."""

    gated: bool
    norm: str  # layernorm | rmsnorm
    bias: bool | tuple[str, ...]  # true: every linear of the layers; or model.bias's parts
    position: str  # rope | learned | alibi
    tied_default: bool
    position_offset: int = 0  # extra learned position rows (OPT keeps 2)
    norm_bias: bool = True  # a LayerNorm's bias (CohereLayerNorm has none)


_LLAMA = Family(gated=True, norm="rmsnorm", bias=False, position="rope", tied_default=False)
FAMILIES: dict[str, Family] = {
    # Llama-style decoders: gated SiLU MLP, RMSNorm, rotary, no linear biases, untied unless the
    # file says so (each config class's tie_word_embeddings default is False)
    "llama": _LLAMA, "mistral": _LLAMA, "mixtral": _LLAMA, "granite": _LLAMA,
    "qwen2": _LLAMA, "qwen2_moe": _LLAMA, "qwen3": _LLAMA, "qwen3_moe": _LLAMA,
    "deepseek_v2": _LLAMA, "deepseek_v3": _LLAMA, "llama4_text": _LLAMA,
    # Phi-3 (Phi3ForCausalLM): fused qkv_proj and gate_up_proj, the same weights as Llama's
    "phi3": _LLAMA,
    # OLMo 2 (Olmo2DecoderLayer): its norms follow the attention and the MLP instead of
    # preceding them (the same count and traffic), q_norm/k_norm over the whole projection
    "olmo2": _LLAMA, "olmo3": _LLAMA,
    # OLMoE (OlmoeForCausalLM): Llama-style, routed experts of intermediate_size, q_norm/k_norm
    "olmoe": _LLAMA,
    # ChatGLM's own code (THUDM/chatglm3-6b): RMSNorm, SwiGLU, separate output layer
    "chatglm": _LLAMA,
    # GLM-4.5 / 4.6 (Glm4MoeForCausalLM): Llama-style GQA (q/k/v biased as attention_bias says,
    # o_proj never), DeepSeek-style routed + shared experts after first_k_dense_replace dense
    # layers, one MTP layer (num_nextn_predict_layers); its partial rotary costed as full
    "glm4_moe": _LLAMA,
    # MiniMax-M2 (MiniMaxM2ForCausalLM): Mixtral-style experts of intermediate_size with a
    # sigmoid router, GQA whose q/k norms (use_qk_norm) span the whole projection (its attention
    # is FlexOlmo's); partial rotary costed as full. Its config's MTP modules (num_mtp_modules)
    # are not in transformers' model and are not counted
    "minimax_m2": _LLAMA,
    # Apertus (ApertusMLP): up and down projections with xIELU, a two-matrix MLP
    "apertus": Family(False, "rmsnorm", False, "rope", False),
    # StableLM (StableLmDecoderLayer): nn.LayerNorm, gated SiLU MLP
    "stablelm": Family(True, "layernorm", False, "rope", False),
    # Cohere (CohereDecoderLayer): gated SiLU MLP, a mean-subtracting LayerNorm with a weight
    # and no bias (CohereLayerNorm; Cohere2LayerNorm the same), tied by default
    "cohere": Family(True, "layernorm", False, "rope", True, norm_bias=False),
    "cohere2": Family(True, "layernorm", False, "rope", True, norm_bias=False),
    # CodeGen (modeling_codegen.py): CodeGenAttention's qkv_proj and out_proj have bias=False,
    # CodeGenMLP's fc_in/fc_out (gelu_new) and CodeGenForCausalLM's lm_head the nn.Linear
    # default bias; LayerNorm, rotary_dim
    "codegen": Family(False, "layernorm", ("mlp", "lm_head"), "rope", False),
    "gpt2": Family(False, "layernorm", True, "learned", True),
    "gpt_bigcode": Family(False, "layernorm", True, "learned", True),
    "opt": Family(False, "layernorm", True, "learned", True, position_offset=2),
    "bloom": Family(False, "layernorm", True, "alibi", True),
    "mpt": Family(False, "layernorm", False, "alibi", True),
    # GPT-NeoX (GPTNeoXAttention): query_key_value and dense biased as config.attention_bias
    # says (GPTNeoXConfig default true), GPTNeoXMLP always; embed_out without a bias
    "gpt_neox": Family(False, "layernorm", True, "rope", False),
    # GPT-J (modeling_gptj.py): GPTJAttention's q/k/v/out_proj bias=False, GPTJMLP's
    # fc_in/fc_out and GPTJForCausalLM's lm_head with the nn.Linear default bias
    "gptj": Family(False, "layernorm", ("mlp", "lm_head"), "rope", False),
    "falcon": Family(False, "layernorm", False, "rope", True),
    "starcoder2": Family(False, "layernorm", True, "rope", True),
    # Phi (modeling_phi.py): PhiAttention's q/k/v_proj and dense, PhiMLP's fc1/fc2 and
    # PhiForCausalLM's lm_head (bias=True) all biased
    "phi": Family(False, "layernorm", ("qkv", "attn_out", "mlp", "lm_head"), "rope", False),
    # Nemotron-4 / Minitron (transformers' NemotronForCausalLM): up and down projections only,
    # squared ReLU, LayerNorm1P
    "nemotron": Family(False, "layernorm", False, "rope", False),
    "gemma": Family(True, "rmsnorm", False, "rope", True),
    "gemma2": Family(True, "rmsnorm", False, "rope", True),
    "gemma3_text": Family(True, "rmsnorm", False, "rope", True),
    # gpt-oss (transformers' GptOssForCausalLM): its experts always carry biases
    # (gate_up_proj_bias, down_proj_bias) and its attention does with attention_bias, true in
    # both released configs; SwiGLU (clamped) experts
    "gpt_oss": Family(True, "rmsnorm", True, "rope", False),
}

# Falcon's checkpoints from before transformers 4.33 name their type RefinedWeb (40B/180B: the
# new decoder architecture, KV heads in n_head_kv) and RefinedWebModel (7B: multi-query)
FAMILIES["RefinedWeb"] = FAMILIES["RefinedWebModel"] = FAMILIES["falcon"]

# what a model_type's configuration class fills in when config.json leaves a field out: Google's
# Gemma 3 configs give little beyond the shapes that differ from Gemma3TextConfig's defaults
# (google/gemma-3-4b-it's text_config has no vocab_size, heads, KV heads, head_dim or
# sliding_window_pattern; gemma-3-27b-it's none of vocab_size and sliding_window_pattern)
CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "sliding_window": 4096, "sliding_window_pattern": 6},
    # GemmaConfig: head_dim 256 whatever hidden / heads is (gemma-7b: 3072 / 16)
    "gemma": {"head_dim": 256},
    # Gemma2Config: both soft-caps on unless the file sets them to null
    "gemma2": {"vocab_size": 256000, "head_dim": 256, "sliding_window": 4096,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    # Llama4TextConfig: chunks of 8192 tokens on the rotary layers, every fourth layer NoPE
    # and global (no_rope_layers, when empty, built from no_rope_layer_interval); one expert a
    # token
    "llama4_text": {"attention_chunk_size": 8192, "no_rope_layer_interval": 4, "num_experts_per_tok": 1},
    # MptConfig: expansion_ratio 4, no_bias true
    "mpt": {"expansion_ratio": 4, "no_bias": True},
    # GptOssConfig: 4 experts a token, a 128-token window, layer_types (when absent) sliding on
    # the even layers and full on the odd ones: one global layer in two
    "gpt_oss": {"num_experts_per_tok": 4, "head_dim": 64, "sliding_window": 128, "sliding_window_pattern": 2},
    # MistralConfig: sliding_window 4096 unless the file sets it (Mistral 7B v0.2 on: null)
    "mistral": {"sliding_window": 4096},
    # Cohere2Config and Olmo3Config: a 4096-token window, layer_types (when absent) with every
    # fourth layer full ((i + 1) % 4 == 0; Cohere2's older files: sliding_window_pattern 4)
    "cohere2": {"sliding_window": 4096, "sliding_window_pattern": 4},
    "olmo3": {"sliding_window": 4096, "sliding_window_pattern": 4},
    # FalconConfig and GPTBigCodeConfig: multi_query true (one K/V head) unless the file says not
    "falcon": {"multi_query": True},
    "gpt_bigcode": {"multi_query": True},
    # Qwen2MoeConfig: 4 of 60 experts of 1408, a shared expert of 5632
    "qwen2_moe": {"num_experts_per_tok": 4, "shared_expert_intermediate_size": 5632, "max_window_layers": 28},
    # OlmoeConfig: 8 of 64 experts a token
    "olmoe": {"num_experts_per_tok": 8},
    # Qwen3MoeConfig: 8 of 128 experts a token; Qwen3Config: head_dim 128 (not hidden / heads);
    # Qwen2Config, Qwen2MoeConfig, Qwen3Config: with use_sliding_window, layers from 28 on local
    "qwen3_moe": {"num_experts_per_tok": 8},
    "qwen3": {"head_dim": 128, "max_window_layers": 28},
    "qwen2": {"max_window_layers": 28},
    # DeepseekV3Config and DeepseekV2Config: their MLA ranks and dimensions, shared experts,
    # leading dense layers (V3: 8 of 256 experts a token; V2's num_experts_per_tok has no default)
    "deepseek_v3": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "n_shared_experts": 1, "first_k_dense_replace": 3, "num_experts_per_tok": 8},
    "deepseek_v2": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "n_shared_experts": 2},
}  # fmt: skip

# a multimodal config's language model, when its text_config leaves its own model_type out
_TEXT_TYPES = {
    "llama4": "llama4_text", "gemma3": "gemma3_text", "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text", "kimi_k25": "kimi_k2",
}  # fmt: skip
# model types whose language model is another type's modelling code: Kimi K2's config names
# DeepseekV3ForCausalLM (its architectures and auto_map); Qwen3-VL's text models are Qwen3's
# and Qwen3-MoE's decoders (multimodal rotary costed as rotary)
_SAME_CODE = {"kimi_k2": "deepseek_v3", "qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3_moe"}

# model types whose attention normalises queries and keys unconditionally, and the kind
# (model.qk_norm): Qwen3Attention's, Gemma3Attention's and ApertusAttention's q_norm/k_norm are
# RMSNorm(head_dim), shared by the heads; Olmo2Attention's (Olmo3Attention's the same) are
# Olmo2RMSNorm(heads * head_dim) and (kv_heads * head_dim), OlmoeAttention's RMSNorm(hidden)
# and (hidden / heads * kv_heads): over the whole projection
QK_NORM_TYPES: dict[str, str] = {
    "qwen3": "shared", "qwen3_moe": "shared", "qwen3_next": "shared", "gemma3_text": "shared", "apertus": "shared",
    "olmo2": "whole", "olmo3": "whole", "olmoe": "whole",
}  # fmt: skip
# the kind where a config turns it on (qk_layernorm, use_qk_norm), when not shared (Phi's
# nn.LayerNorm(head_dim)): StableLmAttention's StableLmLayerNormPerHead (a LayerNorm of
# head_dim, bias=False, per head), CohereAttention's CohereLayerNorm((heads, head_dim)),
# Llama4TextAttention's Llama4TextL2Norm (no weights), MiniMaxM2Attention's (FlexOlmoAttention's)
# RMSNorm over the whole query and key projections
_QK_NORM_WHEN_SET = {
    "stablelm": "per_head", "cohere": "per_head", "llama4_text": "weightless", "minimax_m2": "whole",
}  # fmt: skip

# config.json key -> ModelSpec field; the first key present wins
_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"),
    "ffn": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "head_dim": ("head_dim", "kv_channels"),  # kv_channels: ChatGLM's per-head width
    "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok",),
    "expert_ffn": ("moe_intermediate_size",),
    "shared_experts": ("n_shared_experts",),
    "dense_layers": ("first_k_dense_replace",),
    "moe_every": ("interleave_moe_layer_step", "decoder_sparse_step"),
    "max_positions": ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"),
    "mtp_layers": ("num_nextn_predict_layers", "mtp_num_layers"),
}
# the layer kinds of a ``layer_types`` list simcluster costs: softmax attention over the whole
# sequence, a sliding window or an aligned chunk (Llama 4)
_ATTENTION_KINDS = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
_LOCAL_KINDS = frozenset({"sliding_attention", "chunked_attention"})
_DROPOUT_KEYS = ("resid_pdrop", "attn_pdrop", "embd_pdrop", "hidden_dropout", "attention_dropout", "dropout")


class Unsupported(ValueError):
    """A config.json whose architecture simcluster cannot express (the message says what)."""


def _first(cfg: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def read_config(path: str | Path, field_name: str) -> dict[str, Any]:
    """The JSON object of a config.json; a missing or malformed file is a one-line error.

    A model's folder (a checkpoint or a ``huggingface-cli download`` target) means its
    config.json, as ``from_pretrained`` reads a folder."""
    p = Path(path)
    if p.is_dir() and (p / "config.json").is_file():
        p = p / "config.json"
    elif p.is_dir():
        raise UserError(field_name, f"'{path}' is a folder without a config.json; give the model's config.json")
    elif not p.is_file():
        raise UserError(field_name, f"file '{path}' not found; {_where_to_get(str(path))}")
    try:
        cfg = json.loads(read_text(p, field_name, "config"))
    except json.JSONDecodeError as exc:
        raise UserError(field_name, f"'{path}' is not valid JSON (line {exc.lineno})") from None
    if not isinstance(cfg, dict):
        raise UserError(field_name, f"'{path}' is not a config object")
    return cfg


# 'org/name' as the Hub writes a repository (its names may hold dots: Qwen/Qwen2.5-7B)
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _where_to_get(text: str) -> str:
    """The fix for an hf_config that is not a file: a Hub id is downloaded first (simcluster
    reads files, it never fetches), a path is checked."""
    if _HUB_ID.fullmatch(text) and not text.endswith(".json"):
        from simcluster.model import preset_names, resolve_preset_name  # model imports this module

        preset = resolve_preset_name(text)
        if preset in preset_names():
            return f"that repository's model is shipped: write model.preset: {preset} (or model: {text})"
        return (
            f"a Hugging Face repository id is not read from the Hub: download its config.json "
            f"(huggingface-cli download {text} config.json --local-dir DIR) and give DIR/config.json, "
            "or name a shipped model as model.preset (simcluster list)"
        )
    return "check the path (in a scenario a relative path is read from the scenario's folder)"


def fields_from_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """ModelSpec fields (as ``model:`` keys) of a config.json's contents (a multimodal
    config's language model: its ``text_config``, as Llama 4's and Gemma 3's nest it)."""
    cfg, model_type, family = _resolved(cfg)
    data: dict[str, Any] = {}
    for ours, keys in _KEYS.items():
        value = _first(cfg, keys)
        if value is not None:
            data[ours] = value
    family = _shape_fields(cfg, model_type, family, data)
    _layer_fields(cfg, model_type, family, data)
    _attention_fields(cfg, model_type, data)
    _moe_fields(cfg, model_type, data)
    data.update(_window_fields(cfg, model_type))
    # Llama4TextAttention rotates (and, with use_qk_norm, normalises) only on its chunked
    # layers; Cohere2Attention applies its rotary embedding only with a sliding window
    if model_type in ("llama4_text", "cohere2") and data.get("global_every"):
        data["nope_global"] = True
    data.update(_parallel_block_fields(cfg, model_type))
    return data


def _resolved(cfg: dict[str, Any]) -> tuple[dict[str, Any], str, Family]:
    """The language model's config with its class's defaults filled in, its ``model_type`` and
    family; a config that is not softmax attention, or not a family read here, is refused."""
    if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" not in cfg:
        outer = str(cfg.get("model_type", ""))
        # the composite model ties its LM head as its own config says, where the text one is silent
        tied = {"tie_word_embeddings": cfg["tie_word_embeddings"]} if "tie_word_embeddings" in cfg else {}
        cfg = {"model_type": _TEXT_TYPES.get(outer, outer), **tied, **cfg["text_config"]}
    model_type = str(cfg.get("model_type", ""))
    model_type = _SAME_CODE.get(model_type, model_type)
    _refuse_other_mixers(cfg)
    family = FAMILIES.get(model_type)
    if family is None:
        raise Unsupported(_unknown_type(model_type))
    defaults = CONFIG_DEFAULTS.get(model_type, {})
    if "_sliding_window_pattern" in cfg:  # the name newer transformers save Gemma 3's pattern under
        defaults = {**defaults, "sliding_window_pattern": cfg["_sliding_window_pattern"]}
    # a default fills a key the file leaves out; a key the file sets to null stays unset
    cfg = {**{k: v for k, v in defaults.items() if k not in cfg}, **{k: v for k, v in cfg.items() if v is not None}}
    _refuse_softcapping(cfg)
    return cfg, model_type, family


def _shape_fields(cfg: dict[str, Any], model_type: str, family: Family, data: dict[str, Any]) -> Family:
    """Key/value heads and the MLP's width where an architecture's code fixes them; returns
    the family with Falcon-RW's ALiBi positions."""
    if model_type == "chatglm" and not cfg.get("multi_query_attention"):
        data.pop("kv_heads", None)  # ChatGLM's multi_query_group_num counts only with it
    if model_type == "opt" and cfg.get("word_embed_proj_dim") not in (None, data.get("hidden")):
        # OPTDecoder's project_in / project_out between a narrower embedding and the layers
        raise Unsupported(
            f"word_embed_proj_dim {cfg['word_embed_proj_dim']}: OPT's projections between an embedding "
            "narrower than hidden_size and the layers are not modelled"
        )
    if model_type in _FALCON_TYPES:
        data.update(_falcon_kv_heads(cfg, model_type))
    elif cfg.get("multi_query"):  # GPTBigCodeConfig: num_key_value_heads = 1 if multi_query
        data["kv_heads"] = 1
    if model_type in ("falcon", "RefinedWebModel", "RefinedWeb") and cfg.get("alibi"):  # Falcon-RW
        family = replace(family, position="alibi")
    if model_type == "mpt" and "hidden" in data:
        data["ffn"] = int(cfg["expansion_ratio"] * data["hidden"])
    if "hidden" in data and "ffn" not in data and not family.gated:
        data["ffn"] = 4 * data["hidden"]  # GPT-2's n_inner null, Falcon, BLOOM
    return family


def _layer_fields(cfg: dict[str, Any], model_type: str, family: Family, data: dict[str, Any]) -> None:
    """The layer's kinds: MLP, norms, biases, positions, tied embeddings, dropout."""
    act = str(cfg.get("hidden_act") or cfg.get("hidden_activation") or cfg.get("activation_function") or "silu")
    # "swiglu" = any gated MLP (3 matrices); squared ReLU costs what GeLU does but is named
    data["mlp"] = "swiglu" if family.gated else ("relu2" if act == "relu2" else "gelu")
    data["norm"] = family.norm
    if not family.norm_bias:
        data["norm_bias"] = False
    data["bias"] = _bias_fields(cfg, model_type, family)
    if model_type == "chatglm":
        # ChatGLMConfig (THUDM/chatglm3-6b): rmsnorm true, else LayerNorm
        data["norm"] = "rmsnorm" if cfg.get("rmsnorm", True) else "layernorm"
    if model_type == "bloom":  # BloomModel's word_embeddings_layernorm
        data["embedding_norm"] = True
    data["position"] = family.position
    if family.position == "learned":
        data["max_positions"] = int(data.get("max_positions", 0)) + family.position_offset
    else:
        data.pop("max_positions", None)
    tied = cfg.get("tie_word_embeddings")
    data["tied_embeddings"] = family.tied_default if tied is None else bool(tied)
    data["dropout"] = any((cfg.get(k) or 0) > 0 for k in _DROPOUT_KEYS)


def _attention_fields(cfg: dict[str, Any], model_type: str, data: dict[str, Any]) -> None:
    """Output norms, final-logit soft-capping, attention sinks and the query/key norm."""
    if model_type in ("gemma2", "gemma3_text"):  # Gemma2DecoderLayer, Gemma3DecoderLayer
        data["post_norms"] = True
    cap = cfg.get("final_logit_softcapping")
    if cap:  # Gemma2ForCausalLM: logits = c * tanh(logits / c)
        if isinstance(cap, bool) or not isinstance(cap, (int, float)):
            raise Unsupported(f"final_logit_softcapping {cap!r} is not a number")
        data["logit_softcap"] = float(cap)
    # GptOssAttention always holds sinks (one logit per head); a config's use_sinks the same
    if model_type == "gpt_oss" or cfg.get("use_sinks"):
        data["attention_sinks"] = True
    if model_type in QK_NORM_TYPES:
        data["qk_norm"] = QK_NORM_TYPES[model_type]
    elif cfg.get("qk_layernorm") or cfg.get("use_qk_norm"):
        data["qk_norm"] = _QK_NORM_WHEN_SET.get(model_type, "shared")


#: the linears ``attention_bias`` biases where not LlamaAttention's q, k, v and o_proj:
#: Glm4MoeAttention's q/k/v_proj only (its o_proj has bias=False)
_ATTENTION_BIAS_PARTS = {"glm4_moe": {"qkv"}}


def _bias_fields(cfg: dict[str, Any], model_type: str, family: Family) -> tuple[str, ...]:
    """``model.bias`` as the ``model_type``'s modelling code reads its config: StarCoder2's
    ``use_bias``, Falcon's ``bias``, OPT's ``enable_bias``, ChatGLM's ``add_bias_linear`` and
    MPT's ``no_bias`` (negated) on every linear of the layers; LlamaAttention's ``attention_bias``
    (Qwen3's, OLMo 2's, Cohere's, Gemma's, gpt-oss's the same) on q, k, v and o_proj, GPT-NeoX's
    on query_key_value and dense; LlamaMLP's ``mlp_bias`` on the MLP's; Qwen2Attention's q/k/v_proj
    always (bias=True in its code; Qwen2MoeAttention's as config.qkv_bias, true by default),
    ChatGLM's ``add_qkv_bias`` and StableLM's ``use_qkv_bias`` on them alone."""
    said = _first(cfg, ("use_bias", "bias", "enable_bias", "add_bias_linear"))
    if model_type == "mpt":
        said = not cfg["no_bias"]
    parts = set(bias_parts(family.bias if said is None else bool(said)))
    if model_type == "gpt_neox" and cfg.get("attention_bias") is False:
        parts -= {"qkv", "attn_out"}
    elif cfg.get("attention_bias"):
        parts |= _ATTENTION_BIAS_PARTS.get(model_type, {"qkv", "attn_out"})
    if cfg.get("mlp_bias"):
        parts.add("mlp")
    qwen2 = model_type == "qwen2" or (model_type == "qwen2_moe" and cfg.get("qkv_bias", True))
    if qwen2 or cfg.get("add_qkv_bias") or cfg.get("use_qkv_bias"):
        parts.add("qkv")
    return bias_parts(sorted(parts))


#: model types whose decoder layer always runs attention and MLP in parallel off one norm:
#: transformers' GPTJBlock and CodeGenBlock (``ln_1`` feeds both), PhiDecoderLayer (phi-1,
#: 1.5, 2: ``input_layernorm`` feeds both), CohereDecoderLayer and Cohere2DecoderLayer
#: (``residual + attention + mlp`` off one ``input_layernorm``)
_PARALLEL_ONE_NORM = frozenset({"gptj", "codegen", "phi", "cohere", "cohere2"})
_FALCON_TYPES = frozenset({"falcon", "RefinedWeb", "RefinedWebModel"})


def _parallel_block_fields(cfg: dict[str, Any], model_type: str) -> dict[str, Any]:
    """``parallel_block`` / ``parallel_norms`` from a config, as its modelling code reads it:
    GPT-NeoX's ``use_parallel_residual`` (GPTNeoXConfig default true; its layer then feeds the
    MLP from ``post_attention_layernorm(x)`` and the attention from ``input_layernorm(x)``: two
    norms); StableLM's ``use_parallel_residual`` (default false; ``input_layernorm`` then feeds
    both, ``post_attention_layernorm`` is None); Falcon's ``parallel_attn`` (FalconConfig
    default true) or ``new_decoder_architecture`` (FalconDecoderLayer adds the MLP and
    attention outputs whenever either is set; with the new architecture
    ``num_ln_in_parallel_attn``, None read as 2, gives ``ln_attn`` and ``ln_mlp``, else one
    ``input_layernorm``); the always-parallel types of :data:`_PARALLEL_ONE_NORM`."""
    if model_type in _PARALLEL_ONE_NORM:
        return _parallel(True, 1)
    if model_type == "gpt_neox":
        return _parallel(bool(cfg.get("use_parallel_residual", True)), 2)
    if model_type == "stablelm":
        return _parallel(bool(cfg.get("use_parallel_residual", False)), 1)
    if model_type in _FALCON_TYPES:
        # the checkpoints' own code before transformers 4.33: RefinedWeb (40B/180B) is the new
        # decoder architecture (modelling_RW.py's ln_attn and ln_mlp), RefinedWebModel (7B) not
        new = bool(cfg.get("new_decoder_architecture")) or model_type == "RefinedWeb"
        norms = 2 if new and cfg.get("num_ln_in_parallel_attn") in (None, 2) else 1
        return _parallel(new or bool(cfg.get("parallel_attn", True)), norms)
    return {}


def _parallel(block: bool, norms: int) -> dict[str, Any]:
    return {"parallel_block": True, "parallel_norms": norms} if block else {}


def _falcon_kv_heads(cfg: dict[str, Any], model_type: str) -> dict[str, Any]:
    """Falcon's K/V heads as FalconAttention takes them: ``num_kv_heads`` (``n_head_kv`` in
    newer files; FalconConfig defaults it to the query heads) with the new decoder architecture
    or without ``multi_query``, else one (FalconConfig's multi_query defaults to true). The
    checkpoints' own RefinedWeb code (40B/180B) is the new architecture."""
    new = bool(cfg.get("new_decoder_architecture")) or model_type == "RefinedWeb"
    if new or not cfg.get("multi_query"):
        kv = cfg.get("num_kv_heads") or cfg.get("n_head_kv")
        return {"kv_heads": kv} if kv else {}
    return {"kv_heads": 1}


def supported_types() -> list[str]:
    """The ``model_type`` values simcluster reads (multimodal wrappers by their text model)."""
    return sorted({*FAMILIES, *_TEXT_TYPES, *_SAME_CODE}, key=str.lower)


def _unknown_type(model_type: str) -> str:
    if not model_type:
        said = "has no model_type"
    else:
        said = f"model_type '{model_type}' is not one simcluster reads{did_you_mean(model_type, supported_types())}"
    return (
        f"{said}; supported: {', '.join(supported_types())} (or give the shape as model fields: "
        "layers, hidden, heads, kv_heads, ffn, vocab, ...)"
    )


def _refuse_softcapping(cfg: dict[str, Any]) -> None:
    """tanh soft-capping of the attention scores (Gemma2Attention's ``attn_logit_softcapping``)
    runs inside the fused kernel: flash-attn 2 since 2.6 (``softcap``, one tanh per score
    before the mask, Dao-AILab/flash-attention#1025), FlexAttention's ``score_mod``; not cuDNN's
    fused attention (TransformerEngine's ``get_attention_backend`` disqualifies FusedAttention
    with a softcap and steers to FA2, NVIDIA/TransformerEngine#3391, Megatron-LM#6590). No
    published measurement gives the kernel's rate with the cap against without it (the
    flash-attn PR and release notes give none; attention-gym#22 compares FlexAttention's softcap
    with eager PyTorch only), so there is no rate factor to apply: refused, not dropped."""
    cap = cfg.get("attn_logit_softcapping")
    if cap:
        raise Unsupported(
            f"attn_logit_softcapping {cap}: tanh soft-capping of the attention scores changes the "
            "fused attention kernel by an unmeasured amount; set it to null in a copy of the file "
            "to cost the model without it (an underestimate)"
        )


#: config keys of state-space (Mamba) mixers: NemotronH's layer pattern and Mamba-2 state
#: (``hybrid_override_pattern``, ``ssm_state_size``, also Mamba2Config's and Bamba's), Jamba's and
#: Falcon-H1's ``mamba_d_state``, Falcon-H1's ``mamba_n_heads``, MambaConfig's ``state_size``,
#: Zamba's ``layers_block_type``
_STATE_SPACE_KEYS = (
    "hybrid_override_pattern", "ssm_state_size", "mamba_d_state", "mamba_num_heads", "mamba_n_heads",
    "state_size", "layers_block_type",
)  # fmt: skip


def _refuse_other_mixers(cfg: dict[str, Any]) -> None:
    """Layers that mix tokens by something other than softmax attention (Qwen3-Next's Gated
    DeltaNet, MiniMax's lightning attention, Mamba) are refused, not costed as attention."""
    for key in _STATE_SPACE_KEYS:
        if cfg.get(key) is not None:
            raise Unsupported(f"{key}: state-space (Mamba) layers are not modelled; simcluster models softmax attention only")
    if cfg.get("index_topk") is not None:  # DeepSeek-V3.2's and GLM-5's lightning indexer
        raise Unsupported(
            f"index_topk {cfg['index_topk']}: DeepSeek sparse attention (an indexer picks the keys each "
            "query attends to) is not modelled; simcluster models attention over every earlier key"
        )
    types = cfg.get("layer_types")
    other = sorted({str(t) for t in types} - _ATTENTION_KINDS) if isinstance(types, list) else []
    if other:
        raise Unsupported(f"layer_types has {', '.join(other)} layers; simcluster models softmax attention only")
    if cfg.get("linear_num_value_heads") or cfg.get("linear_num_key_heads"):  # Qwen3-Next
        raise Unsupported("linear_num_value_heads: linear-attention layers are not modelled (softmax attention only)")
    kinds = cfg.get("attn_type_list")  # MiniMax: 0 = lightning (linear) attention
    if isinstance(kinds, list) and 0 in kinds:
        raise Unsupported("attn_type_list has linear-attention (0) layers; simcluster models softmax attention only")
    if cfg.get("use_bidirectional_attention") is True:  # EmbeddingGemma (Gemma3TextModel, an encoder)
        raise Unsupported(
            "use_bidirectional_attention: an encoder (every query attends to every key, no LM head) is not "
            "modelled; simcluster costs causal decoders trained on next-token prediction"
        )


def _window_fields(cfg: dict[str, Any], model_type: str) -> dict[str, Any]:
    """``sliding_window`` / ``attention_chunk`` / ``global_every`` from a config: an explicit
    ``layer_types`` list (gpt-oss, newer Gemma and Llama 4 files; periodic with the global layer
    last), Llama 4's ``no_rope_layers`` or ``no_rope_layer_interval`` (its rotary layers are the
    chunked ones), Gemma 2's alternation (its modelling code makes even layers local), Gemma 3's
    ``sliding_window_pattern``, or a window on every layer (Mistral, StarCoder2, Phi-3). Qwen2
    and Qwen3 apply their window only with ``use_sliding_window``, and then to the layers from
    ``max_window_layers`` on."""
    if model_type == "llama4_text":
        return _chunk_fields(cfg)
    window = cfg.get("sliding_window")
    if not window:
        return {}
    layers = int(_first(cfg, _KEYS["layers"]) or 0)
    if model_type.startswith("qwen"):
        first_local = int(cfg.get("max_window_layers") or 0)
        if not cfg.get("use_sliding_window") or first_local >= layers:
            return {}
        if first_local:
            raise Unsupported(
                f"max_window_layers {first_local}: global layers before the sliding-window ones "
                "cannot be expressed (model.global_every places one global layer in every k)"
            )
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return _local_pattern([str(t) in _LOCAL_KINDS for t in types], "sliding_window", int(window))
    if model_type == "gemma2":
        return {"sliding_window": int(window), "global_every": 2}
    pattern = cfg.get("sliding_window_pattern")
    if pattern:
        return {"sliding_window": int(window), "global_every": int(pattern)}
    return {"sliding_window": int(window)}


def _chunk_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """Llama 4's chunked attention (``attention_chunk_size``) on its rotary layers: the
    ``layer_types`` list (chunked_attention / full_attention), else ``no_rope_layers`` (1 =
    rotary and chunked, 0 = NoPE and global), else one NoPE layer every
    ``no_rope_layer_interval`` (Llama4TextConfig: layer i is NoPE when (i + 1) % interval == 0)."""
    chunk = cfg.get("attention_chunk_size")
    if not chunk:
        return {}
    types, rope = cfg.get("layer_types"), cfg.get("no_rope_layers")
    if isinstance(types, list) and types:
        local = [str(t) in _LOCAL_KINDS for t in types]
    elif isinstance(rope, list) and rope:
        local = [bool(r) for r in rope]
    else:
        every = int(cfg["no_rope_layer_interval"])
        layers = int(_first(cfg, _KEYS["layers"]) or 0)
        local = [(i + 1) % every != 0 for i in range(layers)]
    return _local_pattern(local, "attention_chunk", int(chunk))


def _local_pattern(local: list[bool], field: str, size: int) -> dict[str, Any]:
    """``field`` (the window or chunk) and ``global_every`` of a per-layer list of which layers
    are local: none, all, or one global layer closing every period (what ModelSpec expresses)."""
    if not any(local):
        return {}
    if all(local):
        return {field: size}
    every = local.index(False) + 1
    if all(local[i] == ((i + 1) % every != 0) for i in range(len(local))):
        return {field: size, "global_every": every}
    raise Unsupported("layer_types is not a periodic pattern with the global layer last")


def _llama4_moe(cfg: dict[str, Any], data: dict[str, Any]) -> None:
    """Llama 4's expert widths, shared expert and MoE layer pattern."""
    # Llama4TextMoe: routed experts and one shared expert of intermediate_size; the dense
    # layers between them (interleave_moe_layer_step) are intermediate_size_mlp wide
    data["expert_ffn"] = cfg.get("intermediate_size") or 0
    data["ffn"] = cfg.get("intermediate_size_mlp") or data["expert_ffn"]
    data["shared_experts"] = 1
    # Llama4TextConfig.moe_layers, when given, replaces interleave_moe_layer_step's
    # range(step - 1, layers, step): only that pattern is model.moe_every
    listed, step = cfg.get("moe_layers"), int(cfg.get("interleave_moe_layer_step") or 1)
    layers = int(data.get("layers") or 0)
    if isinstance(listed, list) and sorted(listed) != list(range(step - 1, layers, step)):
        raise Unsupported(
            f"moe_layers {listed}: only every interleave_moe_layer_step-th layer ({step}) can be "
            "expressed (model.moe_every)"
        )


def _qwen_shared_expert(cfg: dict[str, Any], model_type: str, data: dict[str, Any]) -> None:
    """Qwen-MoE's shared expert, counted in routed-expert widths, and its gate."""
    # Qwen2MoeSparseMoeBlock: one shared expert of shared_expert_intermediate_size, costed
    # as that many routed-expert widths (Qwen1.5-MoE-A2.7B: 5632 = 4 x 1408)
    shared = cfg.get("shared_expert_intermediate_size") or 0
    if data["expert_ffn"] and shared % data["expert_ffn"]:
        raise Unsupported(
            f"shared_expert_intermediate_size {shared} is not a multiple of moe_intermediate_size "
            f"{data['expert_ffn']}; model.shared_experts counts experts of that width"
        )
    data["shared_experts"] = shared // data["expert_ffn"] if data["expert_ffn"] else 0
    # its shared_expert_gate: nn.Linear(hidden, 1, bias=False), sigmoid-scaling the output
    data["shared_expert_gate"] = model_type == "qwen2_moe" and data["shared_experts"] > 0


def _mlp_only_layers(cfg: dict[str, Any], data: dict[str, Any]) -> None:
    """An MoE model's ``mlp_only_layers`` as model.dense_layers (leading layers only)."""
    only = cfg.get("mlp_only_layers") or []
    if only and data.get("experts"):  # Qwen2/3-MoE: these layers keep a dense MLP
        if sorted(only) != list(range(len(only))):
            raise Unsupported(
                f"mlp_only_layers {only}: only leading dense layers can be expressed (model.dense_layers)"
            )
        data["dense_layers"] = len(only)


def _router_groups(cfg: dict[str, Any], data: dict[str, Any]) -> None:
    """Group-limited routing (DeepSeek-V2's ``group_limited_greedy``, V3's ``noaux_tc``): its
    ``n_group`` and ``topk_group`` where there is more than one group and the gate uses them
    (transformers' DeepseekV2/V3 MoEGate; ``greedy``, V2-Lite's, ignores them)."""
    groups = int(cfg.get("n_group") or 0)
    if groups > 1 and cfg.get("topk_method") != "greedy":
        data["router_groups"] = groups
        data["group_topk"] = int(cfg.get("topk_group") or 0)


def _moe_fields(cfg: dict[str, Any], model_type: str, data: dict[str, Any]) -> None:
    if model_type.startswith("llama4") and data.get("experts"):
        _llama4_moe(cfg, data)
    if model_type.startswith("qwen") and "expert_ffn" in data and "shared_expert_intermediate_size" in cfg:
        _qwen_shared_expert(cfg, model_type, data)
    freq = cfg.get("moe_layer_freq")
    if model_type.startswith("deepseek") and data.get("experts") and freq not in (None, 1):
        # DeepseekV3DecoderLayer: MoE when layer_idx % moe_layer_freq == 0, a phase
        # model.moe_every ((i + 1) % k == 0, Llama 4's and Qwen2-MoE's) does not have
        raise Unsupported(f"moe_layer_freq {freq}: only 1 (every layer after first_k_dense_replace) is modelled")
    _mlp_only_layers(cfg, data)
    if model_type.startswith("mixtral") or ("experts" in data and "expert_ffn" not in data):
        data["expert_ffn"] = data.get("ffn", 0)
    if model_type.startswith("deepseek") and cfg.get("kv_lora_rank"):
        data["mla"] = {
            "q_lora_rank": cfg.get("q_lora_rank") or 0,
            "kv_lora_rank": cfg["kv_lora_rank"],
            "qk_nope_head_dim": cfg["qk_nope_head_dim"],
            "qk_rope_head_dim": cfg["qk_rope_head_dim"],
            "v_head_dim": cfg["v_head_dim"],
        }
        data["head_dim"] = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    if data.get("experts"):
        data.setdefault("top_k", 2)
        _router_groups(cfg, data)
    else:
        for key in ("dense_layers", "moe_every", "top_k", "expert_ffn", "shared_experts", "experts"):
            data.pop(key, None)
