"""Real Hugging Face config.json files read by simcluster/hf_import.py: the architecture fields
as published (other keys left out), checked against the model cards' parameter counts."""

import json

import pytest

from simcluster.errors import UserError
from simcluster.model import build_model, from_hf_config, load_preset

# https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json
GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "experts_per_token": 4, "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2880, "intermediate_size": 2880, "layer_types":
    ["sliding_attention", "full_attention"] * 18, "max_position_embeddings": 131072, "model_type": "gpt_oss",
    "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "num_local_experts": 128, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
    "vocab_size": 201088,
}  # fmt: skip

# https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json and gemma-3-27b-it: Google's
# text_config states only what differs from transformers' Gemma3TextConfig defaults
GEMMA3_4B_TEXT = {
    "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
}  # fmt: skip
GEMMA3_27B_TEXT = {
    "head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
}  # fmt: skip

# the original tiiuae/falcon-40b config.json (model_type RefinedWeb, before transformers 4.33)
FALCON_40B_REFINEDWEB = {
    "alibi": False, "architectures": ["RWForCausalLM"], "bias": False, "hidden_size": 8192,
    "model_type": "RefinedWeb", "n_head": 128, "n_head_kv": 8, "n_layer": 60, "parallel_attn": True,
    "vocab_size": 65024,
}  # fmt: skip
# https://huggingface.co/tiiuae/falcon-40b/blob/main/config.json (model_type falcon)
FALCON_40B = {
    "alibi": False, "bias": False, "hidden_size": 8192, "model_type": "falcon", "multi_query": True,
    "new_decoder_architecture": True, "num_attention_heads": 128, "num_hidden_layers": 60, "num_kv_heads": 8,
    "parallel_attn": True, "vocab_size": 65024,
}  # fmt: skip

# https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
QWEN3_30B_A3B = {
    "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "tie_word_embeddings": False, "vocab_size": 151936,
}  # fmt: skip


def load(tmp_path, cfg, **scenario):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return build_model({"hf_config": str(path), **scenario})


def test_gpt_oss_carries_its_attention_and_expert_biases(tmp_path):
    """OpenAI's gpt-oss-120b model card: 116.8B parameters. transformers' GptOssExperts has
    gate_up_proj_bias and down_proj_bias, its attention attention_bias (true): the shipped preset's
    bias: true, which the import left out."""
    model = load(tmp_path, GPT_OSS_120B)
    assert model.bias
    assert model.params_total() == load_preset("gpt-oss-120b").params_total()
    assert model.params_total() / 1e9 == pytest.approx(116.8, rel=0.001)


@pytest.mark.parametrize(
    "text, embedding_m, other_m",
    [(GEMMA3_4B_TEXT, 675, 3209), (GEMMA3_27B_TEXT, 1416, 25600)],
)
def test_gemma3_configs_take_gemma3textconfigs_defaults(tmp_path, text, embedding_m, other_m):
    """Gemma 3 technical report, Table 1: 4B = 675M embedding + 3,209M non-embedding parameters,
    27B = 1,416M + 25,600M (the vision encoder's 417M apart). What the file leaves out is
    Gemma3TextConfig's: vocab 262208, 8 heads, 4 KV heads, head_dim 256, and one global layer
    in six (sliding_window_pattern 6), not every layer local."""
    model = load(tmp_path, {"model_type": "gemma3", "text_config": text, "vision_config": {}})
    assert model.vocab == 262208 and model.tied_embeddings and model.qk_norm
    assert (model.sliding_window, model.global_every) == (1024, 6)
    embedding = model.vocab * model.hidden
    assert embedding / 1e6 == pytest.approx(embedding_m, rel=0.01)
    assert (model.params_total() - embedding) / 1e6 == pytest.approx(other_m, rel=0.001)


def test_gemma3_1b_pattern_under_its_newer_name(tmp_path):
    cfg = {**GEMMA3_4B_TEXT, "_sliding_window_pattern": 4}
    assert load(tmp_path, cfg).global_every == 4


def test_falcon_40b_refinedweb_config_is_falcon(tmp_path):
    """Falcon-40B's original config (RefinedWeb) is the same model as its model_type falcon one:
    two-matrix GeLU MLP of 4h, LayerNorm, 8 KV heads (n_head_kv), tied embeddings; it was read
    as a Llama (gated MLP, RMSNorm, 128 KV heads: 49.4B)."""
    legacy, current = load(tmp_path, FALCON_40B_REFINEDWEB), load(tmp_path, FALCON_40B)
    assert (legacy.mlp, legacy.norm, legacy.kv_heads, legacy.ffn) == ("gelu", "layernorm", 8, 4 * 8192)
    assert legacy.params_total() == current.params_total()
    # the model card's 41.8B counts the stored lm_head copy that transformers ties to the embedding
    assert (legacy.params_total() + 65024 * 8192) / 1e9 == pytest.approx(41.8, rel=0.002)


def test_falcon_rw_alibi(tmp_path):
    cfg = {**FALCON_40B, "alibi": True, "new_decoder_architecture": False, "multi_query": False}
    assert load(tmp_path, cfg).position == "alibi"


def test_a_field_the_file_leaves_out_is_named_and_can_be_given_beside_it(tmp_path):
    cfg = {k: v for k, v in GPT_OSS_120B.items() if k != "vocab_size"}
    with pytest.raises(UserError) as err:
        load(tmp_path, cfg)
    assert err.value.field == "model.hf_config"
    assert "vocab_size" in str(err.value) and "model.vocab" in str(err.value)
    assert load(tmp_path, cfg, vocab=201088).params_total() == load_preset("gpt-oss-120b").params_total()


def test_qwen_moe_mlp_only_layers(tmp_path):
    """Qwen3MoeDecoderLayer keeps a dense MLP on the layers of mlp_only_layers: leading ones are
    model.dense_layers; others cannot be expressed and are refused by name."""
    assert load(tmp_path, QWEN3_30B_A3B).dense_layers == 0
    model = load(tmp_path, {**QWEN3_30B_A3B, "mlp_only_layers": [0, 1]})
    assert model.dense_layers == 2 and model.moe_layers == 46
    with pytest.raises(UserError, match="mlp_only_layers"):
        load(tmp_path, {**QWEN3_30B_A3B, "mlp_only_layers": [5]})


@pytest.mark.parametrize(
    "extra, named",
    [
        # Qwen/Qwen3-Next-80B-A3B config.json: Gated DeltaNet on three layers in four
        ({"model_type": "qwen3_next", "linear_num_value_heads": 32, "linear_num_key_heads": 16}, "linear"),
        ({"layer_types": ["linear_attention"] * 3 + ["full_attention"]}, "linear_attention"),
        # MiniMaxAI/MiniMax-M1 config.json: attn_type_list, 0 = lightning attention
        ({"attn_type_list": [0] * 7 + [1]}, "attn_type_list"),
        # nvidia/Nemotron-H-8B-Base-8K config.json (model_type nemotron_h): Mamba-2 mixers where
        # the pattern says M, attention at *; refused before "did you mean 'nemotron'" could say
        # its name is one letter off a transformer
        ({"model_type": "nemotron_h", "hybrid_override_pattern": "M-M-M-M*-", "ssm_state_size": 128},
         "hybrid_override_pattern"),
        # state-spaces/mamba2 (Mamba2Config) and ai21labs Jamba (mamba_d_state) config.json files
        ({"model_type": "mamba2", "ssm_state_size": 128}, "ssm_state_size"),
        ({"model_type": "jamba", "mamba_d_state": 16}, "mamba_d_state"),
        # deepseek-ai/DeepSeek-V3.2 config.json: its indexer's top 2,048 keys per query
        ({"model_type": "deepseek_v32", "index_topk": 2048, "index_n_heads": 64}, "index_topk"),
        # google/embeddinggemma-300m config.json (Gemma3TextModel): an encoder
        ({"model_type": "gemma3_text", "use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ],
)
def test_other_token_mixers_are_refused_not_costed_as_attention(tmp_path, extra, named):
    with pytest.raises(UserError) as err:
        load(tmp_path, {**QWEN3_30B_A3B, **extra})
    assert err.value.field == "model.hf_config" and named in str(err.value)


def test_from_hf_config_reads_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_OSS_120B))
    assert from_hf_config(path).bias
