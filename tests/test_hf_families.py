"""The model families users bring as a Hugging Face config.json (tests/fixtures/hf/: each file
holds the architecture fields of the published config.json named in its row, other keys left
out), read by simcluster/hf_import.py and checked against the parameter counts their authors
publish. Where a published count includes a part simcluster does not model (listed in
hf_import's docstring) the row names it and its exact size; tests/test_hf_shapes.py counts the
families whose parts differ from layer to layer (biases, norms) module by module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simcluster.errors import UserError
from simcluster.model import ModelSpec, build_model, from_hf_config, load_preset

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def fixture(name: str) -> ModelSpec:
    return from_hf_config(FIXTURES / f"{name}.json")


def fixture_without_softcaps(tmp_path: Path, name: str) -> ModelSpec:
    cfg = json.loads((FIXTURES / f"{name}.json").read_text())
    cfg.update(attn_logit_softcapping=None, final_logit_softcapping=None)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return from_hf_config(path)


def non_embedding(m: ModelSpec) -> int:
    """Total less the embedding and (untied) output head, as Qwen's model cards count it."""
    return m.params_total() - m.vocab * m.hidden * (1 if m.tied_embeddings else 2)


# fixture -> ((total, rel), (active, rel) or None). A rounded published figure is compared at
# the half-unit of its last digit; a wider tolerance says why in its row's comment.
PUBLISHED = {
    # OpenAI, gpt-oss-120b and gpt-oss-20b model card: 116.83B / 20.91B total (active per
    # token: test_gpt_oss_active_parameters_leave_the_embedding_lookup_out)
    "gpt-oss-120b": ((116.83e9, 5e-5), None),
    "gpt-oss-20b": ((20.91e9, 2.4e-4), None),
    # DeepSeek-V2 paper (arXiv 2405.04434) abstract: 236B total, 21B activated; DeepSeek-V2-Lite
    # model card: 15.7B total
    "deepseek-v2": ((236e9, 0.0022), (21e9, 0.024)),
    "deepseek-v2-lite": ((15.7e9, 0.0032), None),
    # Meta's model cards: Scout 109B total / 17B active, Maverick 400B / 17B; the totals
    # include the vision encoder, which a text model leaves out (Scout's language model 107.8B)
    "llama4-scout": ((109e9, 0.02), (17e9, 0.029)),
    "llama4-maverick": ((400e9, 0.02), (17e9, 0.029)),
    # Mistral AI's Mixtral 8x22B announcement: 141B total, 39B active
    "mixtral-8x22b-instruct": ((141e9, 0.0035), (39e9, 0.0128)),
    # Qwen model cards: Qwen3-8B 8.2B; Qwen3-30B-A3B 30.5B total, 3.3B activated (3.35B
    # counted: at the rounding edge); Qwen1.5-MoE-A2.7B 14.3B total, 2.7B activated
    "qwen3-8b": ((8.2e9, 0.0061), None),
    "qwen3-30b-a3b": ((30.5e9, 0.0016), (3.3e9, 0.017)),
    "qwen1.5-moe-a2.7b": ((14.3e9, 0.0035), (2.7e9, 0.0185)),
    # Gemma 3 technical report, Table 1: 27B = 1,416M embedding + 25,600M non-embedding (the
    # 417M vision encoder apart)
    "gemma-3-27b": ((27.016e9, 0.001), None),
    # OLMoE paper (arXiv 2409.02060) abstract: OLMoE-1B-7B, 7B total (6.9B in its Table 1) and
    # 1B active (1.3B in Table 1)
    "olmoe-1b-7b": ((6.9e9, 0.0072), (1.3e9, 0.038)),
    # MosaicML's MPT-7B model card: 6.7B (6.65B counted: the card rounds up)
    "mpt-7b": ((6.7e9, 0.008), None),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_parameter_counts(name):
    (total, total_rel), active = PUBLISHED[name]
    m = fixture(name)
    assert m.params_total() == pytest.approx(total, rel=total_rel)
    if active is not None:
        assert m.params_active() == pytest.approx(active[0], rel=active[1])


# fixture -> (the published exact count, the part of it simcluster does not model)
EXACT = {
    # microsoft/Phi-3-mini-4k-instruct safetensors metadata: 3,821,079,552
    "phi-3-mini-4k": (3_821_079_552, 0),
    # mistralai/Mistral-7B-v0.1 checkpoint: 7,241,732,096 (tests/test_presets.py)
    "mistral-7b-v0.1": (7_241_732_096, 0),
    # meta-llama/Meta-Llama-3-8B safetensors metadata: 8,030,261,248
    "llama-3-8b": (8_030_261_248, 0),
    # Black et al. 2022 (GPT-NeoX-20B): 20,554,567,680; rotary_pct 0.25 moves no weights
    "gpt-neox-20b": (20_554_567_680, 0),
    # Qwen/Qwen2.5-7B safetensors metadata: 7,615,616,512, the Q/K/V biases (qkv_bias: 28
    # layers x (3584 + 2 x 4 x 128)) included
    "qwen2.5-7b": (7_615_616_512, 0),
    # allenai/OLMo-2-1124-7B safetensors metadata: 7,298,617,344; Olmo2Attention's q_norm and
    # k_norm span the whole projection (model.qk_norm: whole, 2 x 4096 weights a layer)
    "olmo-2-7b": (7_298_617_344, 0),
    # allenai/OLMoE-1B-7B-0924 safetensors metadata: 6,919,161,856 (OlmoeAttention's q_norm of
    # hidden_size and k_norm of kv_heads x head_dim: model.qk_norm whole)
    "olmoe-1b-7b": (6_919_161_856, 0),
    # Qwen/Qwen1.5-MoE-A2.7B safetensors metadata: 14,315,784,192, with Qwen2MoeSparseMoeBlock's
    # shared_expert_gate (one 2048-wide row a layer, model.shared_expert_gate)
    "qwen1.5-moe-a2.7b": (14_315_784_192, 0),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_parameter_counts(name):
    published, not_modelled = EXACT[name]
    assert fixture(name).params_total() == published - not_modelled


@pytest.mark.parametrize(("name", "active"), [("gpt-oss-120b", 5.13e9), ("gpt-oss-20b", 3.61e9)])
def test_gpt_oss_active_parameters_leave_the_embedding_lookup_out(name, active):
    """gpt-oss model card: 5.13B / 3.61B active per token, the embedding (a lookup, no
    multiply) not counted; four of the experts, attention, the unembedding and norms are."""
    m = fixture(name)
    assert m.params_active() - m.vocab * m.hidden == pytest.approx(active, rel=0.002)


def test_deepseek_v3_main_model_is_671b_with_37b_active():
    """DeepSeek-V3 technical report (arXiv 2412.19437) Sec. 1: 671B total, 37B activated per
    token, the MTP module (num_nextn_predict_layers 1, Sec. 2.2) apart."""
    m = fixture("deepseek-v3")
    assert (m.dense_layers, m.shared_experts, m.mtp_layers, m.mla is not None) == (3, 1, 1, True)
    assert m.params_total() - m.mtp_params() == pytest.approx(671e9, rel=0.001)
    assert m.params_active() - m.mtp_params(active=True) == pytest.approx(37e9, rel=0.02)
    assert m.params_total() == load_preset("deepseek-v3").params_total()


def test_deepseek_v2_lite_activates_2_4b_without_the_embedding():
    """DeepSeek-V2-Lite model card: 2.4B activated (2.45B counted without the embedding lookup,
    the nearest reading: 2.66B with it); its q_lora_rank null (queries not compressed), 2 shared
    and 6 of 64 routed experts, the first layer dense."""
    m = fixture("deepseek-v2-lite")
    assert m.mla is not None and m.mla.q_lora_rank == 0
    assert (m.dense_layers, m.shared_experts, m.top_k, m.experts) == (1, 2, 6, 64)
    assert m.params_active() - m.vocab * m.hidden == pytest.approx(2.4e9, rel=0.022)


@pytest.mark.parametrize(
    ("name", "non_embedding_b"),
    # Qwen3 model cards, "Number of Parameters (Non-Embedding)": 6.95B and 29.9B
    [("qwen3-8b", 6.95e9), ("qwen3-30b-a3b", 29.9e9)],
)
def test_qwen3_non_embedding_counts_and_qk_norm(name, non_embedding_b):
    m = fixture(name)
    assert m.qk_norm and not m.sliding_window
    assert non_embedding(m) == pytest.approx(non_embedding_b, rel=0.001)


def test_qwen1_5_moe_shared_expert_is_four_expert_widths():
    """Qwen2MoeSparseMoeBlock: one shared expert of 5632 = 4 x moe_intermediate_size 1408."""
    m = fixture("qwen1.5-moe-a2.7b")
    assert (m.experts, m.top_k, m.shared_experts, m.expert_ffn) == (60, 4, 4, 1408)
    assert not m.sliding_window  # use_sliding_window false


@pytest.mark.parametrize("name", ["gemma-2-27b", "gemma-2-9b"])
def test_gemma2_soft_capping_is_refused_by_field(name):
    with pytest.raises(UserError) as err:
        fixture(name)
    assert err.value.field == "model.hf_config"
    assert "attn_logit_softcapping 50.0" in str(err.value) and "null" in str(err.value)


@pytest.mark.parametrize(
    ("name", "non_embedding_published", "total_published"),
    # Gemma 2 report (arXiv 2408.00118) Table 2, non-embedding parameters: 27B 26,047,480,320;
    # 9B 8,324,201,984 (Gemma2DecoderLayer's four norms a layer, model.post_norms); the
    # google/gemma-2-27b and gemma-2-9b safetensors metadata: 27,227,128,320 and 9,241,705,984
    # (the embedding of the config's 256,000 rows, the paper's table counts 256,128)
    [("gemma-2-27b", 26_047_480_320, 27_227_128_320), ("gemma-2-9b", 8_324_201_984, 9_241_705_984)],
)
def test_gemma2_without_soft_caps_counts_the_papers_parameters(
    tmp_path, name, non_embedding_published, total_published
):
    m = fixture_without_softcaps(tmp_path, name)
    assert (m.sliding_window, m.global_every, m.tied_embeddings, m.mlp) == (4096, 2, True, "swiglu")
    assert m.post_norms and not m.has_qk_norm
    assert m.params_total() - m.vocab * m.hidden == non_embedding_published
    assert m.params_total() == total_published


def test_llama4_chunked_attention_on_three_layers_in_four():
    """Llama4TextConfig: attention_chunk_size 8192 on the rotary layers; no_rope_layers empty
    -> one NoPE (global) layer every no_rope_layer_interval = 4."""
    for name in ("llama4-scout", "llama4-maverick"):
        m = fixture(name)
        assert (m.attention_chunk, m.global_every, m.sliding_window) == (8192, 4, 0)
        assert [i for i in range(8) if m.attention_span(i, 16384) == 16384] == [3, 7]
        preset = load_preset(name)
        assert (preset.attention_chunk, preset.global_every) == (8192, 4)
        assert m.params_total() == pytest.approx(preset.params_total(), rel=1e-6)


def test_llama4_layer_types_and_no_rope_layers_give_the_same_pattern(tmp_path):
    text = json.loads((FIXTURES / "llama4-scout.json").read_text())["text_config"]
    for extra in (
        {"layer_types": (["chunked_attention"] * 3 + ["full_attention"]) * 12},
        {"no_rope_layers": [1, 1, 1, 0] * 12},
    ):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**text, **extra}))
        m = from_hf_config(path)
        assert (m.attention_chunk, m.global_every) == (8192, 4)


def test_gpt_oss_alternates_a_128_token_window_with_global_layers():
    m = fixture("gpt-oss-120b")
    assert (m.sliding_window, m.global_every, m.bias, m.top_k) == (128, 2, ("qkv", "attn_out", "mlp"), 4)
    assert m.params_total() == load_preset("gpt-oss-120b").params_total()


def test_gpt_oss_router_has_its_bias():
    """transformers' GptOssTopKRouter: weight (experts x h) and bias (experts), per layer."""
    m = fixture("gpt-oss-20b")
    without = build_model({**{k: v for k, v in m.to_dict().items() if k != "mla"}, "bias": False})
    linear_biases = m.layers * (m.heads * m.d_head + 2 * m.kv_heads * m.d_head + m.hidden)  # attention
    linear_biases += m.layers * m.experts * (2 * m.expert_ffn + m.hidden)  # experts' gate_up and down
    assert m.params_total() - without.params_total() == linear_biases + m.layers * m.experts


@pytest.mark.parametrize(
    ("change", "named"),
    [({"model_type": "phimoe"}, "model_type 'phimoe'"), ({"attn_logit_softcapping": 30.0}, "attn_logit_softcapping")],
)
def test_the_cli_refuses_in_one_line(cli, tmp_path, change, named):
    from conftest import make_scenario
    from test_scenario_errors import assert_one_line_error, write

    cfg = {**json.loads((FIXTURES / "llama-3-8b.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    data = make_scenario()
    data["model"] = {"hf_config": str(path)}
    assert_one_line_error(cli("memory", write(tmp_path, data)), "model.hf_config", named)


def test_phi3_mini_4k_window_on_every_layer():
    """Phi-3-mini-4k-instruct config.json: sliding_window 2047, which Phi3Attention passes to
    its kernel on every layer."""
    m = fixture("phi-3-mini-4k")
    assert (m.sliding_window, m.global_every, m.mlp, m.tied_embeddings) == (2047, 0, "swiglu", False)


def test_mistral_7b_window_is_the_presets():
    """Mistral 7B (Jiang et al. 2023, Sec. 2): a 4,096-token window on every layer."""
    m, preset = fixture("mistral-7b-v0.1"), load_preset("mistral-7b")
    assert (m.sliding_window, m.global_every) == (preset.sliding_window, preset.global_every) == (4096, 0)
    assert m.params_total() == preset.params_total()


def test_mpt_reads_its_own_key_names():
    """MPT's config.json: d_model, n_heads, n_layers, expansion_ratio, no_bias, ALiBi."""
    m = fixture("mpt-7b")
    assert (m.layers, m.hidden, m.heads, m.ffn, m.bias, m.position) == (32, 4096, 32, 16384, (), "alibi")


def test_mixtral_8x22b_preset_has_the_v3_tokenizers_vocabulary():
    """mistralai/Mixtral-8x22B(-Instruct)-v0.1 config.json: vocab_size 32768 (tokenizer v3)."""
    assert load_preset("mixtral-8x22b").params_total() == fixture("mixtral-8x22b-instruct").params_total()
    assert load_preset("mixtral-8x22b").vocab == 32768


@pytest.mark.parametrize(
    ("name", "change", "named"),
    [
        # Qwen2Config: with use_sliding_window the layers from max_window_layers on are local
        ("qwen2.5-7b", {"use_sliding_window": True, "max_window_layers": 14}, "max_window_layers"),
        # DeepseekV3DecoderLayer: MoE when layer_idx % moe_layer_freq == 0
        ("deepseek-v3", {"moe_layer_freq": 2}, "moe_layer_freq"),
        ("qwen1.5-moe-a2.7b", {"shared_expert_intermediate_size": 5000}, "shared_expert_intermediate_size"),
    ],
)
def test_what_cannot_be_expressed_is_refused_by_field(tmp_path, name, change, named):
    cfg = {**json.loads((FIXTURES / f"{name}.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(UserError) as err:
        from_hf_config(path)
    assert err.value.field == "model.hf_config" and named in str(err.value)


def test_qwen_window_on_every_layer_or_none():
    """max_window_layers 0: every layer local; max_window_layers >= layers: none."""
    cfg = json.loads((FIXTURES / "qwen2.5-7b.json").read_text())
    from simcluster.hf_import import fields_from_config

    assert fields_from_config({**cfg, "use_sliding_window": True, "max_window_layers": 0})["sliding_window"] == 131072
    assert "sliding_window" not in fields_from_config({**cfg, "use_sliding_window": True, "max_window_layers": 28})


def test_a_scenario_names_the_fixture_as_its_model():
    sc = build_model({"hf_config": str(FIXTURES / "qwen3-8b.json")})
    assert sc.layers == 36 and sc.kv_heads == 8


@pytest.mark.parametrize(("preset", "non_embedding"), [("gemma3-12b", 10_759e6), ("gemma3-27b", 25_600e6)])
def test_gemma3_presets_are_the_reports_language_models(preset, non_embedding):
    """Gemma 3 technical report, Table 1, non-embedding parameters (rounded to the million)."""
    m = load_preset(preset)
    assert (m.post_norms, m.qk_norm, m.sliding_window, m.global_every) == (True, "shared", 1024, 6)
    assert m.params_total() - m.vocab * m.hidden == pytest.approx(non_embedding, abs=0.5e6)
    if preset == "gemma3-27b":
        assert m.params_total() == fixture("gemma-3-27b").params_total()


def test_qwen2_bias_is_on_the_qkv_projections_only():
    """Qwen2Attention: q_proj, k_proj, v_proj with bias=True, o_proj and the MLP without."""
    m = fixture("qwen2.5-7b")
    assert m.bias == ("qkv",)
    fields = {k: v for k, v in m.to_dict().items() if k != "mla"}
    without = build_model({**fields, "bias": False})
    assert m.params_total() - without.params_total() == 28 * (3584 + 2 * 4 * 128)
    # the older spelling: qkv_bias false takes the Q/K/V biases off, true puts them back
    assert build_model({**fields, "qkv_bias": False}).params_total() == without.params_total()
    assert build_model({**fields, "bias": False, "qkv_bias": True}).params_total() == m.params_total()
    assert fixture("qwen3-8b").bias == ()  # Qwen3Attention: attention_bias, false
    with pytest.raises(UserError) as err:
        build_model({**fields, "bias": True, "qkv_bias": True})
    assert err.value.field == "model.qkv_bias"


def test_llama_style_attention_and_mlp_bias():
    """LlamaConfig: attention_bias (q, k, v, o_proj) and mlp_bias (gate, up, down)."""
    from simcluster.hf_import import fields_from_config

    cfg = json.loads((FIXTURES / "llama-3-8b.json").read_text())
    assert fields_from_config({**cfg, "attention_bias": True})["bias"] == ("qkv", "attn_out")
    assert fields_from_config({**cfg, "mlp_bias": True})["bias"] == ("mlp",)
    both = fields_from_config({**cfg, "attention_bias": True, "mlp_bias": True})
    assert both["bias"] == ("qkv", "attn_out", "mlp")
    # LlamaAttention's o_proj carries attention_bias too: h a layer beyond the Q/K/V biases
    m, plain = build_model({"hf_config": str(FIXTURES / "llama-3-8b.json"), "bias": ["qkv", "attn_out"]}), fixture("llama-3-8b")
    assert m.params_total() - plain.params_total() == 32 * ((32 + 2 * 8) * 128 + 4096)


def test_chatglm_groups_count_only_with_multi_query_attention():
    """THUDM/chatglm3-6b's own modelling code: multi_query_group_num KV groups when
    multi_query_attention, every head its own otherwise; add_qkv_bias on the QKV projection."""
    from simcluster.hf_import import fields_from_config

    cfg = {"model_type": "chatglm", "num_layers": 28, "hidden_size": 4096, "num_attention_heads": 32,
           "multi_query_attention": True, "multi_query_group_num": 2, "ffn_hidden_size": 13696,
           "padded_vocab_size": 65024, "add_qkv_bias": True, "add_bias_linear": False}  # fmt: skip
    assert fields_from_config(cfg)["kv_heads"] == 2 and fields_from_config(cfg)["bias"] == ("qkv",)
    assert "kv_heads" not in fields_from_config({**cfg, "multi_query_attention": False})
