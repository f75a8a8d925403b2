"""2025's open-weight model types (simcluster/hf_import.py ``_SAME_CODE``, ``_TEXT_TYPES``,
``FAMILIES["glm4_moe"]``, ``FAMILIES["minimax_m2"]``): types read through another's modelling
code, GLM-4.5's MoE and MiniMax-M2.

Kimi K2's config.json names ``DeepseekV3ForCausalLM`` (architectures, auto_map) under
``model_type`` kimi_k2, and Kimi K2.5 nests it as a ``text_config``; Qwen3-VL's language models
are Qwen3's and Qwen3-MoE's decoders (``qwen3_vl_text``, ``qwen3_vl_moe_text``); GLM-4.5's
``Glm4MoeForCausalLM`` is a Llama-style GQA decoder with DeepSeek-style routed and shared experts;
``MiniMaxM2ForCausalLM`` Mixtral-style experts under GQA with whole-projection q/k norms.
"""

import json

import pytest

from simcluster.model import build_model, load_preset

# huggingface.co/moonshotai/Kimi-K2-Instruct config.json, the architecture keys
KIMI_K2 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
    "intermediate_size": 18432, "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
    "vocab_size": 163840, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 384, "num_experts_per_tok": 8,
    "n_shared_experts": 1, "moe_intermediate_size": 2048, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "num_nextn_predict_layers": 0, "tie_word_embeddings": False, "topk_method": "noaux_tc", "n_group": 1,
    "topk_group": 1,
}  # fmt: skip
# GLM-4.5-Air's architecture keys (zai-org/GLM-4.5-Air config.json; model card: 106B total, 12B active)
GLM45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True, "head_dim": 128, "hidden_size": 4096,
    "intermediate_size": 10944, "model_type": "glm4_moe", "moe_intermediate_size": 1408,
    "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 1, "num_hidden_layers": 46, "num_key_value_heads": 8,
    "partial_rotary_factor": 0.5, "tie_word_embeddings": False, "vocab_size": 151552,
    "num_nextn_predict_layers": 1,
}  # fmt: skip
# MiniMaxAI/MiniMax-M2 config.json's architecture keys (model card: 230B total, 10B active)
MINIMAX_M2 = {
    "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "hidden_size": 3072,
    "intermediate_size": 1536, "num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8,
    "head_dim": 128, "rotary_dim": 64, "num_local_experts": 256, "num_experts_per_tok": 8,
    "shared_intermediate_size": 0, "scoring_func": "sigmoid", "use_qk_norm": True, "qk_norm_type": "per_layer",
    "vocab_size": 200064, "num_mtp_modules": 3, "mtp_transformer_layers": 1, "attention_bias": False,
    "tie_word_embeddings": False,
}  # fmt: skip
# Qwen3-235B-A22B's decoder as Qwen3-VL-235B-A22B nests it (the composite's own tie_word_embeddings)
QWEN3_VL_TEXT = {
    "head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288, "mlp_only_layers": [],
    "model_type": "qwen3_vl_moe_text", "moe_intermediate_size": 1536, "num_attention_heads": 64,
    "num_experts_per_tok": 8, "num_hidden_layers": 94, "num_key_value_heads": 4, "num_experts": 128,
    "vocab_size": 151936,
}  # fmt: skip


def load(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return build_model({"hf_config": str(path)})


@pytest.mark.parametrize("nested", [False, True])
def test_kimi_k2_is_deepseek_v3s_code_and_the_shipped_preset(tmp_path, nested):
    """Kimi K2 (flat) and K2.5 (its text_config): DeepSeek-V3's MLA and MoE, the kimi-k2 preset's
    parameters (model card: 1T total, 32B activated)."""
    cfg = {"model_type": "kimi_k25", "text_config": KIMI_K2} if nested else KIMI_K2
    model = load(tmp_path, cfg)
    assert model.mla is not None and model.experts == 384 and model.dense_layers == 1
    assert model.params_total() == load_preset("kimi-k2").params_total()


def test_glm45_air_biases_qkv_only_and_counts_the_model_cards_parameters(tmp_path):
    """Glm4MoeAttention: q/k/v_proj biased as attention_bias says, o_proj bias=False; 128 routed
    experts of 1408 + one shared after one dense layer: 106B total (model card; its one MTP
    layer beside them, about 2.4B, is in the checkpoint, not in that count)."""
    model = load(tmp_path, GLM45_AIR)
    assert model.has_bias("qkv") and not model.has_bias("attn_out")
    assert (model.experts, model.shared_experts, model.dense_layers, model.mtp_layers) == (128, 1, 1, 1)
    assert (model.params_total() - model.mtp_params()) / 1e9 == pytest.approx(106, rel=0.01)


def test_qwen3_vl_text_is_qwen3_moe_tied_as_the_composite_says(tmp_path):
    """Qwen3-VL-235B-A22B's language model is Qwen3-235B-A22B's (its q/k norms included); the
    composite config's tie_word_embeddings applies where the text config is silent."""
    composite = {"model_type": "qwen3_vl_moe", "tie_word_embeddings": False, "text_config": QWEN3_VL_TEXT}
    model = load(tmp_path, composite)
    assert model.qk_norm == "shared" and not model.tied_embeddings
    assert model.params_total() == load_preset("qwen3-235b-a22b").params_total()
    tied = load(tmp_path, {**composite, "tie_word_embeddings": True})
    assert tied.tied_embeddings


def test_minimax_m2_counts_the_model_cards_parameters(tmp_path):
    """256 experts of intermediate_size (top 8), no shared expert, q/k norms over the whole
    projections (MiniMaxM2Attention is FlexOlmoAttention): 230B total (model card)."""
    model = load(tmp_path, MINIMAX_M2)
    assert (model.experts, model.top_k, model.expert_ffn, model.shared_experts) == (256, 8, 1536, 0)
    assert model.qk_norm == "whole" and model.mtp_layers == 0
    assert model.params_total() / 1e9 == pytest.approx(230, rel=0.01)
