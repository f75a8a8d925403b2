"""Parameter counts against published totals and the GPT parameter formula."""

import json

import pytest

from simcluster.model import build_model, from_hf_config, load_preset


def test_gpt_layer_formula():
    # Ultra-Scale Playbook: a GPT layer has 12h^2 + 13h parameters;
    # the model E(V+P) + L(12E^2 + 13E) + 2E with learned positions and tied embeddings.
    h, L, V, P = 1024, 8, 1000, 2048
    m = build_model(
        dict(
            layers=L,
            hidden=h,
            heads=16,
            ffn=4 * h,
            vocab=V,
            mlp="gelu",
            norm="layernorm",
            bias=True,
            position="learned",
            max_positions=P,
            tied_embeddings=True,
        )
    )
    assert m.layer_params(0) == 12 * h * h + 13 * h
    assert m.params_total() == h * (V + P) + L * (12 * h * h + 13 * h) + 2 * h


@pytest.mark.parametrize(
    "preset, total_b, active_b",
    [
        ("llama3-8b", 8.03, 8.03),  # Meta: 8.03B
        ("llama3-70b", 70.6, 70.6),  # Meta: 70.6B
        ("mixtral-8x7b", 46.7, 12.9),  # Mistral: 46.7B total, 12.9B active
        ("gpt3-175b", 174.6, 174.6),  # Brown et al. 2020: 175B (174.6B by the formula)
        ("deepseek-v3", 671.0, 37.0),  # DeepSeek-V3 report: 671B total, 37B active
    ],
)
def test_published_parameter_counts(preset, total_b, active_b):
    m = load_preset(preset)
    assert m.params_total() / 1e9 == pytest.approx(total_b, rel=0.005)
    assert m.params_active() / 1e9 == pytest.approx(active_b, rel=0.02)


def test_llama_405b_count():
    # Llama 3 paper: 405B (405.85B by the config's shapes)
    assert load_preset("llama3.1-405b").params_total() / 1e9 == pytest.approx(405.0, rel=0.005)


def test_hf_config_mixtral(tmp_path):
    cfg = {
        "model_type": "mixtral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = from_hf_config(path)
    assert m.experts == 8 and m.top_k == 2 and m.expert_ffn == 14336
    assert m.params_total() == load_preset("mixtral-8x7b").params_total()


def test_hf_config_deepseek_v3(tmp_path):
    cfg = {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "vocab_size": 129280,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "hidden_act": "silu",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert from_hf_config(path).params_total() == load_preset("deepseek-v3").params_total()


def test_hf_config_qwen3_moe(tmp_path):
    # Qwen3-30B-A3B config.json: 30.5B total, 3.3B active (Qwen3 model card)
    cfg = {
        "model_type": "qwen3_moe",
        "num_hidden_layers": 48,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "vocab_size": 151936,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = from_hf_config(path)
    assert m.params_total() / 1e9 == pytest.approx(30.5, rel=0.01)
    assert m.params_active() / 1e9 == pytest.approx(3.3, rel=0.03)


def test_scenario_gemm_shapes_under_tp():
    """calibrate --scenario times exactly these: Llama-3-70B, tp 8, s=8192 tokens per microbatch."""
    from simcluster.gemm_shapes import gemm_shapes

    shapes = set(gemm_shapes("llama3-70b-64xh100"))
    # QKV forward: tokens x hidden -> (64 + 2*8) heads * 128 / tp = 1280 columns
    assert (8192, 1280, 8192) in shapes
    # SwiGLU up+gate: 2 * 28672 / 8 = 7168 columns; vocab-parallel LM head 128256 / 8 = 16032
    assert (8192, 7168, 8192) in shapes and (8192, 16032, 8192) in shapes
    # weight gradients contract over the tokens: (in, out, tokens)
    assert (8192, 1280, 8192) in shapes and (1024, 8192, 8192) in shapes
