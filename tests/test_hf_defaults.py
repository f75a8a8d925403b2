"""What a config.json means where it is silent or ambiguous, read as transformers' configuration
and modelling classes read it (simcluster/hf_import.py ``CONFIG_DEFAULTS`` and the per-type
rules), checked on published configs (tests/fixtures/hf/) and their parameter counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simcluster.errors import UserError
from simcluster.model import ModelSpec, from_hf_config

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def published(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def read(tmp_path: Path, cfg: dict[str, Any]) -> ModelSpec:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return from_hf_config(path)


def without(cfg: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in keys}


def test_falcon_7b_is_multi_query_whatever_else_the_file_holds(tmp_path):
    """tiiuae/falcon-7b: 6,921,720,704 parameters from FalconForCausalLM's modules (71 query
    heads of 64, one K/V head, one LayerNorm a layer, a 4h GeLU MLP, no biases, tied
    embeddings). FalconAttention takes
    config.num_kv_heads only with new_decoder_architecture or without multi_query, else one head;
    FalconConfig's multi_query defaults to true. A file saved with n_head_kv 71 beside
    multi_query true (FalconConfig fills n_head_kv with the query heads) was read as 71 K/V
    heads, and one without multi_query as multi-head."""
    cfg = published("falcon-7b")
    h, d, v, layers = 4544, 64, 65024, 32
    per_layer = h * (h + 2 * d) + h * h + 2 * h * 4 * h + 2 * h  # query_key_value, dense, MLP, ln
    assert v * h + layers * per_layer + 2 * h == 6_921_720_704  # word_embeddings, blocks, ln_f
    for variant in (cfg, {**cfg, "n_head_kv": 71}, {**cfg, "num_kv_heads": 71}, without(cfg, "multi_query")):
        m = read(tmp_path, variant)
        assert m.kv_heads == 1 and m.params_total() == 6_921_720_704
    assert read(tmp_path, {**cfg, "multi_query": False}).kv_heads == 71


def test_starcoder_is_multi_query_by_default(tmp_path):
    """bigcode/starcoder: 15.5B parameters (Li et al. 2023, StarCoder, Sec. 1; 15,517,456,384
    from GPTBigCode's modules: one K/V head, learned positions of 8192, tied head).
    GPTBigCodeConfig: num_key_value_heads = 1 if multi_query else n_head, multi_query true by
    default."""
    cfg = published("starcoder")
    h, d, ffn, v, layers, positions = 6144, 128, 24576, 49152, 40, 8192
    attn = h * (h + 2 * d) + (h + 2 * d) + h * h + h  # c_attn (fused Q and one K/V head), c_proj
    per_layer = 2 * 2 * h + attn + (h * ffn + ffn) + (ffn * h + h)  # ln_1, ln_2, attention, MLP
    assert v * h + positions * h + layers * per_layer + 2 * h == 15_517_456_384  # wte, wpe, h, ln_f
    for variant in (cfg, without(cfg, "multi_query")):
        m = read(tmp_path, variant)
        assert (m.kv_heads, m.position, m.tied_embeddings) == (1, "learned", True)
        assert m.params_total() == 15_517_456_384
        assert m.params_total() == pytest.approx(15.5e9, rel=0.0033)
    assert read(tmp_path, {**cfg, "multi_query": False}).kv_heads == 48


def test_gpt_j_biases_are_on_its_mlp_and_lm_head_only():
    """GPTJAttention's q/k/v/out_proj have bias=False, its fc_in/fc_out and lm_head biases
    (transformers' modeling_gptj.py): module by module 6,050,882,784 for EleutherAI/gpt-j-6b,
    model.bias [mlp, lm_head]."""
    m = from_hf_config(FIXTURES / "gpt-j-6b.json")
    h, v, layers, ffn = 4096, 50400, 28, 4 * 4096
    per_layer = 2 * h + 4 * h * h + (h * ffn + ffn) + (ffn * h + h)  # ln_1, attention, fc_in, fc_out
    modules = v * h + layers * per_layer + 2 * h + (v * h + v)  # wte, blocks, ln_f, lm_head
    assert modules == 6_050_882_784
    assert m.params_total() == modules and m.bias == ("mlp", "lm_head")
    assert m.parallel_block and m.parallel_norms == 1


def test_mistral_window_defaults_to_4096_and_null_turns_it_off(tmp_path):
    """MistralConfig: sliding_window 4096 when the file leaves it out; Mistral 7B v0.2 on set
    it to null (no window)."""
    cfg = published("mistral-7b-v0.1")
    assert read(tmp_path, without(cfg, "sliding_window")).sliding_window == 4096
    assert read(tmp_path, {**cfg, "sliding_window": None}).sliding_window == 0


@pytest.mark.parametrize("model_type", ["olmo3", "cohere2"])
def test_every_fourth_layer_global_when_layer_types_is_absent(tmp_path, model_type):
    """Olmo3Config and Cohere2Config build layer_types, when the file has none, as sliding
    except where (i + 1) % 4 == 0, over a 4096-token window: not a window on every layer."""
    cfg = {**published("olmo-2-7b"), "model_type": model_type}
    m = read(tmp_path, cfg)
    assert (m.sliding_window, m.global_every) == (4096, 4)
    types = ["sliding_attention"] * 3 + ["full_attention"]
    m = read(tmp_path, {**cfg, "sliding_window": 1024, "layer_types": types * 8})
    assert (m.sliding_window, m.global_every) == (1024, 4)


def test_gpt_oss_takes_gptossconfigs_defaults(tmp_path):
    """GptOssConfig: 4 experts a token, head_dim 64, a 128-token window, layer_types (absent)
    alternating sliding and full, sliding first."""
    cfg = published("gpt-oss-20b")
    full = read(tmp_path, cfg)
    m = read(tmp_path, without(cfg, "layer_types", "num_experts_per_tok", "experts_per_token", "head_dim", "sliding_window"))
    assert (m.top_k, m.d_head, m.sliding_window, m.global_every) == (4, 64, 128, 2)
    assert m.params_total() == full.params_total() and m.params_active() == full.params_active()


def test_llama4_one_expert_a_token_and_moe_layers(tmp_path):
    """Llama4TextConfig: num_experts_per_tok 1; moe_layers, when given, replaces
    range(interleave_moe_layer_step - 1, layers, step)."""
    text = published("llama4-maverick")["text_config"]
    assert read(tmp_path, without(text, "num_experts_per_tok")).top_k == 1
    same = read(tmp_path, {**text, "moe_layers": list(range(1, 48, 2))})
    assert same.moe_every == 2 and same.moe_layers == 24
    with pytest.raises(UserError) as err:
        read(tmp_path, {**text, "moe_layers": list(range(0, 48, 2))})
    assert "moe_layers" in str(err.value)


def test_qwen2_moe_shared_expert_and_qkv_bias_defaults(tmp_path):
    """Qwen2MoeConfig: shared_expert_intermediate_size 5632 (four 1408-wide experts) and 4
    experts a token when the file leaves them out; Qwen2MoeAttention's Q/K/V bias follows
    config.qkv_bias where a config has one."""
    cfg = published("qwen1.5-moe-a2.7b")
    m = read(tmp_path, without(cfg, "shared_expert_intermediate_size", "num_experts_per_tok"))
    assert (m.shared_experts, m.top_k, m.bias, m.shared_expert_gate) == (4, 4, ("qkv",), True)
    assert read(tmp_path, {**cfg, "qkv_bias": False}).bias == ()


def test_chatglm_norm_and_linear_biases_follow_its_config():
    """ChatGLMConfig (THUDM/chatglm3-6b's configuration_chatglm.py): rmsnorm (default true) picks
    RMSNorm over LayerNorm, add_bias_linear puts a bias on every linear."""
    from simcluster.hf_import import fields_from_config

    cfg = {"model_type": "chatglm", "num_layers": 28, "hidden_size": 4096, "num_attention_heads": 32,
           "ffn_hidden_size": 13696, "padded_vocab_size": 65024, "add_qkv_bias": True}  # fmt: skip
    assert (fields_from_config(cfg)["norm"], fields_from_config(cfg)["bias"]) == ("rmsnorm", ("qkv",))
    both = fields_from_config({**cfg, "rmsnorm": False, "add_bias_linear": True})
    assert (both["norm"], both["bias"]) == ("layernorm", ("qkv", "attn_out", "mlp"))


def test_opt_350m_embedding_projection_is_refused(tmp_path):
    """facebook/opt-350m: word_embed_proj_dim 512 under hidden_size 1024, so OPTDecoder adds
    project_in and project_out; the others (word_embed_proj_dim = hidden_size) read as before."""
    cfg = {"model_type": "opt", "hidden_size": 1024, "word_embed_proj_dim": 512, "ffn_dim": 4096,
           "num_hidden_layers": 24, "num_attention_heads": 16, "vocab_size": 50272,
           "max_position_embeddings": 2048}  # fmt: skip
    with pytest.raises(UserError) as err:
        read(tmp_path, cfg)
    assert "word_embed_proj_dim 512" in str(err.value)
    assert read(tmp_path, {**cfg, "word_embed_proj_dim": 1024}).max_positions == 2050


def test_deepseek_configs_take_their_classes_defaults(tmp_path):
    """DeepseekV3Config: q_lora_rank 1536, kv_lora_rank 512, qk_nope/rope 128/64, v_head 128, one
    shared expert, 3 leading dense layers, 8 experts a token; DeepseekV2Config: the same MLA
    dimensions and 2 shared experts. A file leaving them out is the same model."""
    v3 = published("deepseek-v3")
    keys = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
            "n_shared_experts", "first_k_dense_replace", "num_experts_per_tok")  # fmt: skip
    assert read(tmp_path, without(v3, *keys)).params_total() == from_hf_config(FIXTURES / "deepseek-v3.json").params_total()
    v2 = published("deepseek-v2")
    assert read(tmp_path, without(v2, *keys[:6])).params_total() == from_hf_config(FIXTURES / "deepseek-v2.json").params_total()


def test_qwen_window_layers_and_head_dim_defaults(tmp_path):
    """Qwen2Config and Qwen3Config: with use_sliding_window the layers from max_window_layers
    (default 28) on are local, which simcluster cannot place below the layer count; Qwen3Config's
    head_dim is 128 whatever hidden / heads is (Qwen3-4B: 2560 / 32)."""
    cfg = published("qwen3-8b")
    with pytest.raises(UserError, match="max_window_layers 28"):
        read(tmp_path, {**without(cfg, "max_window_layers"), "use_sliding_window": True, "sliding_window": 4096})
    small = {**without(cfg, "head_dim"), "hidden_size": 2560, "num_hidden_layers": 36}
    assert read(tmp_path, small).d_head == 128


def test_opt_enable_bias_and_chatglm_kv_channels():
    """OPTConfig.enable_bias (default true) is every linear's bias; ChatGLM's attention heads
    are kv_channels wide (its SelfAttention's hidden_size_per_attention_head)."""
    from simcluster.hf_import import fields_from_config

    opt = {"model_type": "opt", "hidden_size": 768, "ffn_dim": 3072, "num_hidden_layers": 12,
           "num_attention_heads": 12, "vocab_size": 50272, "max_position_embeddings": 2048}  # fmt: skip
    assert fields_from_config(opt)["bias"] == ("qkv", "attn_out", "mlp")
    assert fields_from_config({**opt, "enable_bias": False})["bias"] == ()
    glm = {"model_type": "chatglm", "num_layers": 40, "hidden_size": 4096, "num_attention_heads": 32,
           "kv_channels": 160, "ffn_hidden_size": 13696, "padded_vocab_size": 151552}  # fmt: skip
    assert fields_from_config(glm)["head_dim"] == 160


def test_gemma_head_dim_defaults_to_256(tmp_path):
    """GemmaConfig: head_dim 256, not hidden / heads (google/gemma-7b: 3072 / 16 = 192)."""
    cfg = {"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
           "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 256000}  # fmt: skip
    m = read(tmp_path, cfg)
    assert m.d_head == 256 and m.tied_embeddings
    # Gemma report (arXiv 2403.08295) Table 2, 7B: 7,751,248,896 non-embedding parameters (its
    # embedding count, 786,825,216, is of 256,128 rows; the config's vocab is 256,000)
    assert m.params_total() - m.vocab * m.hidden == 7_751_248_896
