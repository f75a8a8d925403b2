"""Parameter counts against published totals and the GPT parameter formula."""

import json

import pytest

from simcluster.errors import UserError
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
        ("nemotron4-15b", 15.7, 15.7),  # Parmar et al. 2024: 3.2B embedding + 12.5B other
        ("nemotron4-340b", 341.0, 341.0),  # Nemotron-4 340B report: 9.4B + 331.6B
    ],
)
def test_published_parameter_counts(preset, total_b, active_b):
    m = load_preset(preset)
    # the published counts are of the main model (DeepSeek-V3's MTP module is counted apart)
    assert (m.params_total() - m.mtp_params()) / 1e9 == pytest.approx(total_b, rel=0.005)
    assert (m.params_active() - m.mtp_params(active=True)) / 1e9 == pytest.approx(active_b, rel=0.02)


@pytest.mark.parametrize("preset, total_b, active_b", [("gpt-oss-120b", 116.8, 5.1), ("gpt-oss-20b", 20.9, 3.6)])
def test_gpt_oss_parameter_counts(preset, total_b, active_b):
    # OpenAI's gpt-oss model card: 116.8B / 5.1B active and 20.9B / 3.6B active; its active
    # count leaves out the input embedding (201,088 x 2,880 = 0.58B), ours includes it
    m = load_preset(preset)
    assert m.params_total() / 1e9 == pytest.approx(total_b, rel=0.005)
    assert (m.params_active() - m.vocab * m.hidden) / 1e9 == pytest.approx(active_b, rel=0.02)
    assert (m.sliding_window, m.global_every) == (128, 2)


def test_deepseek_v3_mtp_module_count():
    """deepseek-ai/DeepSeek-V3 model card: 685B on Hugging Face = 671B of the main model + 14B of
    the MTP module, whose checkpoint stores its own copies of the embedding and output head
    (shared with the main model in training, so the simulator counts them once)."""
    m = load_preset("deepseek-v3")
    assert m.mtp_layers == 1
    stored = m.mtp_params() + 2 * m.vocab * m.hidden
    assert stored / 1e9 == pytest.approx(14.0, abs=0.55)  # "14B", rounded
    assert (m.params_total() + 2 * m.vocab * m.hidden) / 1e9 == pytest.approx(685.0, abs=0.55)


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
        "num_nextn_predict_layers": 1,
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
    assert (8192, 1280, 8192, "fwd") in shapes
    # SwiGLU up+gate: 2 * 28672 / 8 = 7168 columns; vocab-parallel LM head 128256 / 8 = 16032
    assert (8192, 7168, 8192, "fwd") in shapes and (8192, 16032, 8192, "fwd") in shapes
    # input gradients: (tokens, in, out); the attention projection's input is 64 * 128 / 8 = 1024 wide
    assert (8192, 8192, 1280, "dgrad") in shapes and (8192, 1024, 8192, "dgrad") in shapes
    # weight gradients contract over the tokens: (in, out, tokens), the QKV one the same
    # M x N x K as its forward but a GEMM of another layout (simcluster/gemm_roles.py)
    assert (8192, 1280, 8192, "wgrad") in shapes and (1024, 8192, 8192, "wgrad") in shapes


# --- Hugging Face configs of other families: published parameter counts ---------------------
# Each total is the model's published parameter count (its Hugging Face model card /
# safetensors metadata, or the paper), which the layer structure must reproduce exactly or
# within the parts listed as not modelled in simcluster/hf_import.py.
HF_FAMILIES = {
    # GPT-2 small: learned positions (1024), LayerNorm, biases, tied, n_inner null = 4h
    "gpt2": ({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": None,
              "vocab_size": 50257, "n_positions": 1024, "activation_function": "gelu_new",
              "resid_pdrop": 0.1}, 124_439_808, 0),
    # OPT-1.3B (Zhang et al. 2022): ReLU MLP, 2048 + 2 learned positions, tied
    "opt": ({"model_type": "opt", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 32,
             "ffn_dim": 8192, "vocab_size": 50272, "max_position_embeddings": 2048,
             "activation_function": "relu", "dropout": 0.1}, 1_315_758_080, 0),
    # GPT-NeoX-20B (Black et al. 2022): rotary, untied, biases (parallel residual: same count)
    "gpt_neox": ({"model_type": "gpt_neox", "num_hidden_layers": 44, "hidden_size": 6144,
                  "num_attention_heads": 64, "intermediate_size": 24576, "vocab_size": 50432,
                  "hidden_act": "gelu", "tie_word_embeddings": False}, 20_554_567_680, 0),
    # BLOOM-560m: ALiBi (no position weights), tied, BloomModel's word_embeddings_layernorm
    # (2h, model.embedding_norm)
    "bloom": ({"model_type": "bloom", "n_layer": 24, "hidden_size": 1024, "n_head": 16,
               "vocab_size": 250880}, 559_214_592, 0),
    # Falcon-7B: multi-query (one KV head), no biases, tied; one norm per layer in its parallel
    # block (FalconDecoderLayer's input_layernorm feeds attention and MLP)
    "falcon": ({"model_type": "falcon", "num_hidden_layers": 32, "hidden_size": 4544,
                "num_attention_heads": 71, "multi_query": True, "bias": False, "vocab_size": 65024,
                "parallel_attn": True}, 6_921_720_704, 0),
    # Gemma-7B: gated GeLU MLP (3 matrices although the activation is not SiLU), head_dim 256
    # (16 x 256 = 4096 != hidden 3072), tied by default
    "gemma": ({"model_type": "gemma", "num_hidden_layers": 28, "hidden_size": 3072, "num_attention_heads": 16,
               "num_key_value_heads": 16, "head_dim": 256, "intermediate_size": 24576, "vocab_size": 256000,
               "hidden_act": "gelu_pytorch_tanh"}, 8_537_680_896, 0),
    # Qwen2.5-7B: GQA 28/4, untied, a bias on the Q/K/V projections only (qkv_bias)
    "qwen2": ({"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
               "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
               "hidden_act": "silu", "tie_word_embeddings": False}, 7_615_616_512, 0),
}


@pytest.mark.parametrize("family", sorted(HF_FAMILIES))
def test_hf_config_families_reproduce_published_parameter_counts(tmp_path, family):
    cfg, published, not_modelled = HF_FAMILIES[family]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert from_hf_config(path).params_total() == published - not_modelled


def test_hf_config_family_traits(tmp_path):
    def load(cfg):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        return from_hf_config(path)

    gpt2 = load(HF_FAMILIES["gpt2"][0])
    assert (gpt2.mlp, gpt2.norm, gpt2.bias, gpt2.position, gpt2.max_positions) == (
        "gelu", "layernorm", ("qkv", "attn_out", "mlp"), "learned", 1024
    )
    assert gpt2.tied_embeddings and gpt2.dropout and gpt2.ffn == 4 * 768
    assert load(HF_FAMILIES["opt"][0]).max_positions == 2050  # OPT's two offset rows
    assert load(HF_FAMILIES["bloom"][0]).position == "alibi"
    assert load(HF_FAMILIES["falcon"][0]).kv_heads == 1
    gemma = load(HF_FAMILIES["gemma"][0])
    assert gemma.mlp == "swiglu" and gemma.d_head == 256 and gemma.tied_embeddings
    llama = load({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
                  "num_attention_heads": 4, "intermediate_size": 688, "vocab_size": 1000, "hidden_act": "silu"})
    assert (llama.mlp, llama.norm, llama.position, llama.tied_embeddings) == ("swiglu", "rmsnorm", "rope", False)


@pytest.mark.parametrize("model_type", ["somethingnew", "lama", None])
def test_hf_config_of_an_unknown_model_type_is_refused_with_the_list(tmp_path, model_type):
    """A model_type whose modelling code simcluster does not know (or none) is refused in one
    line naming the supported ones, not read as a Llama: its MLP, norms and biases are unknown."""
    cfg = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 688,
           "vocab_size": 1000, "hidden_act": "silu"}  # fmt: skip
    if model_type:
        cfg["model_type"] = model_type
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(UserError) as err:
        from_hf_config(path)
    message = str(err.value)
    assert err.value.field == "model.hf_config" and "\n" not in message
    assert "supported: " in message and "llama, " in message and "gpt_oss" in message
    if model_type == "lama":
        assert "did you mean 'llama'?" in message


def test_alibi_has_no_rotary_kernel():
    """ALiBi adds a bias inside the attention kernel: no position weights and no rotary pass
    over Q and K before it (Press et al. 2022)."""
    from conftest import make_scenario
    from engine_helpers import layer_builder

    def inputs(position):
        b = layer_builder(make_scenario(model={"name": "m", "layers": 2, "hidden": 1024, "heads": 16,
                                               "ffn": 4096, "vocab": 1000, "position": position}))
        return b.ops.attention_inputs().bytes_per_token, b.shapes.model.params_total()

    (alibi_bytes, alibi_params), (rope_bytes, rope_params) = inputs("alibi"), inputs("rope")
    assert alibi_bytes < rope_bytes
    assert alibi_params == rope_params


def test_nemotron4_15b_squared_relu_count():
    """Nemotron-4 15B (Parmar et al. 2024, arXiv 2402.16819: 32 layers, h 6144, 48 heads, 8 KV
    heads, squared-ReLU FFN 24576, vocab 256000, untied embeddings, no biases): 3.2B embedding
    parameters and 12.5B non-embedding ones (the paper's Table 1: 3.2B / 12.5B). relu2 is a
    two-matrix MLP like gelu."""
    shape = dict(name="nemotron4-15b", layers=32, hidden=6144, heads=48, kv_heads=8, ffn=24576,
                 vocab=256000, norm="layernorm", tied_embeddings=False)
    relu2 = build_model(dict(shape, mlp="relu2"))
    assert relu2.params_total() == build_model(dict(shape, mlp="gelu")).params_total()
    embedding = 2 * 256000 * 6144
    assert embedding / 1e9 == pytest.approx(3.15, abs=0.01)
    assert (relu2.params_total() - embedding) / 1e9 == pytest.approx(12.5, abs=0.1)


def test_hf_config_nemotron_is_a_two_matrix_squared_relu_model(tmp_path):
    """transformers' Nemotron (Nemotron-4 / Minitron): up and down projections with squared
    ReLU, LayerNorm, untied. The Nemotron-4 15B shape (Parmar et al. 2024, Table 1): 3.2B
    embedding and 12.5B non-embedding parameters."""
    cfg = {"model_type": "nemotron", "num_hidden_layers": 32, "hidden_size": 6144, "num_attention_heads": 48,
           "num_key_value_heads": 8, "intermediate_size": 24576, "vocab_size": 256000, "hidden_act": "relu2"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    model = from_hf_config(path)
    assert (model.mlp, model.norm, model.tied_embeddings) == ("relu2", "layernorm", False)
    assert (model.params_total() - 2 * 256000 * 6144) / 1e9 == pytest.approx(12.5, abs=0.1)


def test_ffn_defaults_to_megatrons_width():
    # Megatron-LM arguments.py, --ffn-hidden-size unset: 4h for a two-matrix MLP, and for SwiGLU
    # int((4h * 2/3) / 64) * 64 (h = 4096 -> 10880, h = 2048 -> 5440), the 4h MLP's parameters
    gelu = build_model({"layers": 2, "hidden": 4096, "heads": 32, "vocab": 51200, "mlp": "gelu"})
    assert gelu.ffn == 16384
    swiglu = build_model({"layers": 2, "hidden": 4096, "heads": 32, "vocab": 51200})
    assert (swiglu.mlp, swiglu.ffn) == ("swiglu", 10880)
    assert build_model({"layers": 2, "hidden": 2048, "heads": 16, "vocab": 51200}).ffn == 5440
    # a given width wins, and a missing required field still names itself
    assert build_model({"layers": 2, "hidden": 4096, "heads": 32, "vocab": 51200, "ffn": 11008}).ffn == 11008
    with pytest.raises(UserError, match="model.vocab"):
        build_model({"layers": 2, "hidden": 4096, "heads": 32})


@pytest.mark.parametrize(
    ("written", "preset"),
    [
        ("Llama-2-70B", "llama2-70b"),
        ("gpt-3-175b", "gpt3-175b"),
        ("Mixtral-8x7B", "mixtral-8x7b"),
        ("llama3.1-70b", "llama3-70b"),  # Llama 3.1 kept Llama 3's shapes
        ("Llama-3.1-8B", "llama3-8b"),
        ("llama3-405b", "llama3.1-405b"),
        ("qwen2.5-7b", "qwen2.5-7b"),
    ],
)
def test_preset_names_match_without_case_or_separators(written, preset):
    assert load_preset(written) == load_preset(preset)


def test_an_unknown_preset_still_suggests_one():
    with pytest.raises(UserError, match="did you mean 'llama2-70b'"):
        load_preset("llama2-700b")


def test_a_name_that_is_a_preset_without_shapes_means_the_preset():
    # `model: {name: llama3-8b}` has no shape to build from; the name can only mean the preset,
    # and fields beside it override it as they do beside `preset:`
    assert build_model({"name": "Llama-3-8B"}) == load_preset("llama3-8b")
    assert build_model({"name": "llama3-8b", "layers": 4}).layers == 4


def test_a_name_beside_full_shapes_stays_a_label():
    fields = {"name": "llama3-8b", "layers": 2, "hidden": 256, "heads": 4, "vocab": 1000}
    spec = build_model(fields)
    # Megatron-LM's default SwiGLU width int(8h/3/64)*64, not the preset's 14336
    assert (spec.layers, spec.hidden, spec.ffn) == (2, 256, 640)


def test_a_name_that_is_no_preset_still_asks_for_the_shapes():
    # given alone, the name is what is wrong (a preset name misspelt, or shapes left out): the
    # error is on model.name and asks for the shapes
    with pytest.raises(UserError, match=r"model.name: 'my-model' is not a shipped preset; give its shape \(layers"):
        build_model({"name": "my-model"})


def test_dense_layers_that_leave_no_moe_layer_are_refused_naming_the_value_and_the_fix():
    # DeepSeek-V3's preset has dense_layers 3 (config.json first_k_dense_replace); cut to one
    # layer with dense_layers 1 no MoE layer is left: the message once read "must be in 0..0"
    with pytest.raises(UserError, match=r"^model\.dense_layers: 1 must be in 0\.\.0, .*raise model\.layers$"):
        build_model({"preset": "deepseek-v3", "layers": 1, "dense_layers": 1})
