"""The shipped presets added from published configs reproduce the published parameter counts.

Each preset's ``source:`` names the config.json or paper table its shape came from; the totals
below are the published counts (checkpoint element counts where the checkpoint is public), and
the preset's layer structure must land within 2% of them. Where a part of the model cannot be
expressed in :class:`ModelSpec` its size is given, and the count must match exactly once it is
added back.
"""

from dataclasses import replace

import pytest
import yaml

from simcluster.model import _presets_dir, load_preset, preset_names

# preset -> (published total, published active or None for dense, where the numbers come from)
PUBLISHED = {
    # element counts of the Hugging Face checkpoints (meta-llama/Llama-2-*-hf): 6.74B / 13.0B / 69.0B
    "llama2-7b": (6_738_415_616, None, "meta-llama/Llama-2-7b-hf checkpoint: 6,738,415,616"),
    "llama2-13b": (13_015_864_320, None, "meta-llama/Llama-2-13b-hf checkpoint: 13,015,864,320"),
    "llama2-70b": (68_976_648_192, None, "meta-llama/Llama-2-70b-hf checkpoint: 68,976,648,192"),
    "mistral-7b": (7_241_732_096, None, "mistralai/Mistral-7B-v0.1 checkpoint: 7,241,732,096 (7.24B)"),
    # Mistral AI's announcement of Mixtral 8x22B: 141B total, 39B active (140.6B / 39.2B exactly)
    "mixtral-8x22b": (141e9, 39e9, "Mistral AI, Mixtral 8x22B announcement: 141B total, 39B active"),
    # Qwen2.5 model cards (Qwen/Qwen2.5-7B, Qwen/Qwen2.5-72B): 7.61B and 72.7B
    "qwen2.5-7b": (7.61e9, None, "Qwen/Qwen2.5-7B model card: 7.61B (checkpoint 7,615,616,512)"),
    "qwen2.5-72b": (72.7e9, None, "Qwen/Qwen2.5-72B model card: 72.7B"),
    # Qwen3 model cards (Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B): 30.5B total / 3.3B activated,
    # 235B / 22B (the per-head q/k RMSNorm weights, 2 x 128 per layer, are below the rounding)
    "qwen3-30b-a3b": (30.5e9, 3.3e9, "Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    "qwen3-235b-a22b": (235e9, 22e9, "Qwen/Qwen3-235B-A22B model card: 235B total, 22B activated"),
    # the Apertus models as swiss-ai names them (Hernandez-Cano et al. 2025, "Apertus", released
    # at 8B and 70B): the launch scripts' shapes give 8.05B and 70.6B
    "apertus-8b": (8e9, None, "swiss-ai/Apertus-8B-2509: 8B"),
    "apertus-70b": (70e9, None, "swiss-ai/Apertus-70B-2509: 70B"),
    # Brown et al. 2020, Table 2.1 (n_params column)
    "gpt3-13b": (13.0e9, None, "Brown et al. 2020, Table 2.1: GPT-3 13B, 13.0B"),
    # bigscience/bloom model card
    "bloom-176b": (176_247_271_424, None, "bigscience/bloom model card: 176,247,271,424"),
    # Zhang et al. 2022 (OPT), Table 1 / abstract
    "opt-175b": (175e9, None, "Zhang et al. 2022, Table 1: OPT-175B, 175B"),
    # Smith et al. 2022 (title and abstract)
    "mt-nlg-530b": (530e9, None, "Smith et al. 2022: Megatron-Turing NLG 530B, 530B"),
    # model cards: meta-llama/Llama-3.2-1B and -3B (1.23B, 3.21B), Qwen/Qwen3-8B, -14B, -32B
    # (8.2B, 14.8B, 32.8B), mistralai/Mistral-Nemo-Base-2407 (12.2B in its checkpoint), allenai/OLMo-2-1124-7B and
    # -13B (7B, 13B), mosaicml/mpt-7b and mpt-30b (6.7B, 30B)
    "llama3.2-1b": (1.23e9, None, "meta-llama/Llama-3.2-1B model card: 1.23B"),
    "llama3.2-3b": (3.21e9, None, "meta-llama/Llama-3.2-3B model card: 3.21B"),
    "qwen3-8b": (8.2e9, None, "Qwen/Qwen3-8B model card: 8.2B"),
    "qwen3-14b": (14.8e9, None, "Qwen/Qwen3-14B model card: 14.8B"),
    "qwen3-32b": (32.8e9, None, "Qwen/Qwen3-32B model card: 32.8B"),
    "mistral-nemo-12b": (12.2e9, None, "mistralai/Mistral-Nemo-Base-2407 checkpoint: 12.2B (12B by name)"),
    "olmo2-7b": (7.3e9, None, "allenai/OLMo-2-1124-7B: 7B (7.30B by its config)"),
    "olmo2-13b": (13.7e9, None, "allenai/OLMo-2-1124-13B: 13B (13.7B by its config)"),
    "mpt-7b": (6.7e9, None, "mosaicml/mpt-7b model card: 6.7B"),
    "mpt-30b": (30e9, None, "mosaicml/mpt-30b model card: 30B"),
    # Brown et al. 2020, Table 2.1 (n_params column)
    "gpt3-1.3b": (1.3e9, None, "Brown et al. 2020, Table 2.1: GPT-3 XL, 1.3B"),
    "gpt3-2.7b": (2.7e9, None, "Brown et al. 2020, Table 2.1: GPT-3 2.7B"),
    "gpt3-6.7b": (6.7e9, None, "Brown et al. 2020, Table 2.1: GPT-3 6.7B"),
    # NeMo's GPT-3 5B and 20B by name (NeMo-Framework-Launcher conf/training/gpt3/5b.yaml, 20b.yaml;
    # the NeMo performance summaries' GPT3-5B / GPT3-20B rows): 5.05B and 20.3B as shaped
    "gpt3-5b": (5.0e9, None, "NeMo-Framework-Launcher gpt3/5b.yaml: GPT-3 5B"),
    "gpt3-20b": (20.0e9, None, "NeMo-Framework-Launcher gpt3/20b.yaml: GPT-3 20B"),
    # Gemma 3 technical report, Table 1 (the language model: embedding + non-embedding)
    "gemma3-12b": (11.771e9, None, "Gemma 3 report Table 1: 1,012M + 10,759M"),
    "gemma3-27b": (27.016e9, None, "Gemma 3 report Table 1: 1,416M + 25,600M"),
    # deepseek-ai/DeepSeek-V2-Lite model card: 15.7B total, 2.4B activated; the activated count
    # leaves out the input embedding (102,400 x 2,048, a lookup), as DeepSeek-V3's 37B does
    "deepseek-v2-lite": (15.7e9, 2.4e9 + 102_400 * 2048, "DeepSeek-V2-Lite model card: 15.7B total, 2.4B activated"),
    # Black et al. 2022 (GPT-NeoX-20B), Sec. 2: 20,554,567,680 parameters
    "gpt-neox-20b": (20_554_567_680, None, "Black et al. 2022: GPT-NeoX-20B, 20,554,567,680"),
    # LLaMA v1: Touvron et al. 2023, Table 2 (6.7B, 13.0B, 32.5B, 65.2B), to the parameter as the
    # converted Hugging Face checkpoints count them: 7B as KerasNLP's llama_7b_en preset and
    # meta-llama/Llama-2-7b-hf (the same shape), 13B / 30B / 65B as juncongmoo/pyllama's
    # docs/quant/README.md prints the converted LLaMAForCausalLM modules
    "llama-7b": (6_738_415_616, None, "Touvron et al. 2023, Table 2: 6.7B; checkpoint 6,738,415,616"),
    "llama-13b": (13_015_864_320, None, "Touvron et al. 2023, Table 2: 13.0B; checkpoint 13,015,864,320"),
    "llama-33b": (32_528_943_616, None, "Touvron et al. 2023, Table 2: 32.5B; checkpoint 32,528,943,616"),
    "llama-65b": (65_285_660_672, None, "Touvron et al. 2023, Table 2: 65.2B; checkpoint 65,285,660,672"),
    # Falcon: the checkpoints' safetensors totals (tiiuae/falcon-40b 41.8B, tiiuae/falcon-180B),
    # which hold the lm_head that FalconForCausalLM ties to the word embeddings a second time:
    # the presets, tied as the importer reads the configs, are one vocab x hidden matrix short
    # (test_falcon_checkpoints_store_the_tied_head_twice); 40B and 180B by name
    # Falcon-7B: 7B by name; FalconForCausalLM's modules count 6,921,720,704 (tests/test_hf_defaults.py)
    "falcon-7b": (7e9, None, "Almazrouei et al. 2023: Falcon-7B, 7B"),
    "falcon-40b": (41_835_970_560, None, "tiiuae/falcon-40b checkpoint: 41,835,970,560 (41.8B)"),
    "falcon-180b": (179_522_565_120, None, "tiiuae/falcon-180B checkpoint: 179,522,565,120"),
    # Databricks' DBRX announcement and databricks/dbrx-base model card: 132B total, 36B active
    "dbrx": (132e9, 36e9, "Databricks, Introducing DBRX / dbrx-base model card: 132B total, 36B active"),
}


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_published_parameter_count_within_2_percent(preset):
    total, active, _source = PUBLISHED[preset]
    model = load_preset(preset)
    assert model.params_total() == pytest.approx(total, rel=0.02)
    assert model.params_active() == pytest.approx(active if active else total, rel=0.02)


def test_exact_checkpoint_counts_with_the_parts_not_modelled():
    """Where the checkpoint count is published to the parameter, the layer structure reproduces
    it exactly; the only differences are parts ModelSpec cannot express."""
    exact = {"llama2-7b", "llama2-13b", "llama2-70b", "mistral-7b"}
    exact |= {"llama-7b", "llama-13b", "llama-33b", "llama-65b"}
    for preset in exact:
        assert load_preset(preset).params_total() == PUBLISHED[preset][0]
    # Qwen2.5-7B: bias on the Q/K/V projections only (qkv_bias): 28 layers x (3584 + 2 x 4 x 128)
    assert load_preset("qwen2.5-7b").params_total() == 7_615_616_512
    # BLOOM: with BloomModel's word_embeddings_layernorm after the word embedding (weight and
    # bias, model.embedding_norm)
    bloom = load_preset("bloom-176b")
    assert bloom.embedding_norm and bloom.params_total() == PUBLISHED["bloom-176b"][0]
    # its model card: 3,596,615,680 embedding parameters (the word embeddings, tied with the
    # output head), beside which the first stage holds that LayerNorm
    assert bloom.embedding_params() == 3_596_615_680 + 2 * 14336


def test_falcon_checkpoints_store_the_tied_head_twice():
    """FalconForCausalLM ties lm_head to transformer.word_embeddings (vllm-project/vllm#3590,
    huggingface/transformers#35715), but the safetensors files keep an lm_head.weight beside
    the embedding; the checkpoints' totals are the tied model plus that copy."""
    for preset in ("falcon-40b", "falcon-180b"):
        m = load_preset(preset)
        assert m.tied_embeddings
        assert m.params_total() + m.vocab * m.hidden == PUBLISHED[preset][0]


# the architecture fields of tiiuae/falcon-40b's config.json (model_type falcon, as
# tests/test_hf_configs.py holds it) and of tiiuae/falcon-180B's (the same keys; 80 layers,
# hidden 14848, 232 heads)
FALCON_40B = {
    "alibi": False, "bias": False, "hidden_size": 8192, "model_type": "falcon", "multi_query": True,
    "new_decoder_architecture": True, "num_attention_heads": 128, "num_hidden_layers": 60, "num_kv_heads": 8,
    "parallel_attn": True, "vocab_size": 65024,
}  # fmt: skip
FALCON_180B = {**FALCON_40B, "hidden_size": 14848, "num_attention_heads": 232, "num_hidden_layers": 80}


@pytest.mark.parametrize("preset, config", [("falcon-40b", FALCON_40B), ("falcon-180b", FALCON_180B)])
def test_falcon_presets_are_what_their_configs_import_as(preset, config):
    """The shipped Falcon presets and simcluster/hf_import.py read the same model out of the
    config.json: GeLU MLP of 4h, LayerNorm, 8 KV heads, no biases, tied embeddings, the parallel
    block with two norms."""
    from simcluster.model import from_hf_config

    imported = from_hf_config(f"tiiuae/{preset}/config.json", parsed=config)
    assert replace(imported, name=preset) == load_preset(preset)


def test_falcon_7b_preset_is_its_config_multi_query_with_one_norm():
    """tiiuae/falcon-7b's config.json (tests/fixtures/hf): the original decoder layer, one
    LayerNorm feeding both branches and a single K/V head, 6,921,720,704 parameters."""
    import json
    from pathlib import Path

    from simcluster.model import from_hf_config

    config = json.loads((Path(__file__).parent / "fixtures" / "hf" / "falcon-7b.json").read_text())
    preset = load_preset("falcon-7b")
    assert replace(from_hf_config("tiiuae/falcon-7b/config.json", parsed=config), name="falcon-7b") == preset
    assert (preset.kv_heads, preset.parallel_norms, preset.params_total()) == (1, 1, 6_921_720_704)


def test_llama_v1_is_llama_2s_shape_before_grouped_query_attention():
    """LLaMA v1's SwiGLU width is Meta's FeedForward rule: 2/3 of 4 x dim, rounded up to a
    multiple of 256; Llama 2 7B and 13B kept the 7B's and 13B's shapes."""
    for preset in ("llama-7b", "llama-13b", "llama-33b", "llama-65b"):
        m = load_preset(preset)
        assert m.ffn == 256 * -(-int(8 * m.hidden / 3) // 256)
        assert (m.kv_heads, m.vocab, m.tied_embeddings, m.norm) == (m.heads, 32000, False, "rmsnorm")
    assert load_preset("llama-7b") == replace(load_preset("llama2-7b"), name="llama-7b")
    assert load_preset("llama-13b") == replace(load_preset("llama2-13b"), name="llama-13b")


def test_dbrx_is_fine_grained_and_unbiased():
    m = load_preset("dbrx")
    assert (m.experts, m.top_k, m.expert_ffn, m.kv_heads, m.d_head) == (16, 4, 10752, 8, 128)
    assert (m.norm, m.norm_bias, m.bias, m.tied_embeddings) == ("layernorm", False, (), False)
    assert m.moe_layers == m.layers == 40


def test_mixtral_8x22b_active_is_two_of_eight_experts():
    m = load_preset("mixtral-8x22b")
    assert (m.experts, m.top_k, m.expert_ffn) == (8, 2, 16384)
    assert m.params_total() / 1e9 == pytest.approx(140.6, abs=0.05)
    assert m.params_active() / 1e9 == pytest.approx(39.2, abs=0.05)


def test_architecture_traits():
    l70 = load_preset("llama2-70b")
    assert (l70.kv_heads, l70.ffn, l70.vocab, l70.tied_embeddings) == (8, 28672, 32000, False)
    assert load_preset("llama2-7b").kv_heads == 32  # multi-head attention below 70B
    for name in ("qwen2.5-7b", "qwen2.5-72b"):
        q = load_preset(name)
        assert (q.vocab, q.tied_embeddings, q.bias) == (152064, False, ("qkv",))
    gpt = load_preset("gpt3-13b")
    # Table 2.1: d_model 5140 but 40 heads x 128 = 5120
    assert (gpt.hidden, gpt.d_head, gpt.heads * gpt.d_head, gpt.ffn) == (5140, 128, 5120, 4 * 5140)
    assert gpt.tied_embeddings and gpt.position == "learned" and gpt.bias
    bloom = load_preset("bloom-176b")
    assert (bloom.position, bloom.max_positions, bloom.tied_embeddings) == ("alibi", 0, True)
    opt = load_preset("opt-175b")
    assert (opt.max_positions, opt.vocab, opt.tied_embeddings) == (2050, 50272, True)
    mt = load_preset("mt-nlg-530b")
    assert (mt.layers, mt.hidden, mt.heads) == (105, 20480, 128)


def test_every_added_preset_is_listed_and_names_its_source():
    names = preset_names()
    for preset in PUBLISHED:
        assert preset in names
        data = yaml.safe_load((_presets_dir() / f"{preset}.yaml").read_text())
        assert data.get("source"), preset


def test_grok1_total_is_the_announced_314b():
    """xAI's Grok-1 release: "314B parameter Mixture-of-Experts model with 25% of the weights
    active on a given token". The total within 2%; "25%" is a rounded share (the two of eight
    experts plus attention and embeddings come to about 27% here), so the active count is only
    checked to lie between a quarter and 30% of the total."""
    model = load_preset("grok-1")
    assert model.params_total() == pytest.approx(314e9, rel=0.02)
    assert 0.25 < model.params_active() / model.params_total() < 0.30


def test_grok1_ties_its_output_head_to_the_embedding():
    # xai-org/grok-1 model.py: the LanguageModel's logits are InOutEmbed.decode, the final
    # hidden state times the same embedding matrix transposed; one vocab x hidden matrix
    model = load_preset("grok-1")
    assert model.tied_embeddings
    assert model.params_total() == pytest.approx(315.7e9, rel=1e-3)


def test_kimi_k2_is_deepseek_v3s_architecture_at_its_published_size():
    # moonshotai/Kimi-K2-Base model card: 1T total, 32B activated, rounded to the trillion and
    # the billion (so 3% here); 384 experts against DeepSeek-V3's 256, 64 heads against 128
    m = load_preset("kimi-k2")
    assert m.params_total() == pytest.approx(1e12, rel=0.03)
    assert m.params_active() == pytest.approx(32e9, rel=0.03)
    v3 = load_preset("deepseek-v3")
    assert (m.experts, m.heads, m.dense_layers, m.mla) == (384, 64, 1, v3.mla)


@pytest.mark.parametrize(
    "written, preset",
    [
        # Hugging Face repository ids, with the organisation and Meta's prefix or a checkpoint suffix
        ("meta-llama/Meta-Llama-3-8B", "llama3-8b"),
        ("meta-llama/Llama-2-7b-hf", "llama2-7b"),
        ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
        ("deepseek-ai/DeepSeek-V3-Base", "deepseek-v3"),
        ("meta-llama/Llama-4-Scout-17B-16E", "llama4-scout"),
        # NVIDIA's performance tables: Nemotron-15B, LLAMA4-Maverick-LLM; sizes after a name
        ("Nemotron-340B", "nemotron4-340b"),
        ("LLAMA4-Maverick-LLM", "llama4-maverick"),
        ("Grok-1 314B", "grok-1"),
        ("DeepSeek V3 671B", "deepseek-v3"),
        ("Qwen3 MoE 30B", "qwen3-30b-a3b"),
        # the models' own names: GPT-3 Table 2.1 ("GPT-3 175B or 'GPT-3'", "GPT-3 XL" = 1.3B),
        # the bigscience/bloom repository (the 176B), Smith et al. 2022's "Megatron-Turing NLG 530B"
        ("GPT-3", "gpt3-175b"),
        ("GPT-3 XL", "gpt3-1.3b"),
        ("bigscience/bloom", "bloom-176b"),
        ("MT-NLG", "mt-nlg-530b"),
        ("Megatron-Turing NLG 530B", "mt-nlg-530b"),
        # tuned checkpoints keep the base model's shapes
        ("meta-llama/Llama-2-7b-chat-hf", "llama2-7b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3-8b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        # LLaMA v1 as the paper and the huggyllama conversions name it, Falcon, DBRX
        ("huggyllama/llama-65b", "llama-65b"),
        ("LLaMA-33B", "llama-33b"),
        ("huggyllama/llama-30b", "llama-33b"),
        ("tiiuae/falcon-7b", "falcon-7b"),
        ("tiiuae/falcon-40b", "falcon-40b"),
        ("tiiuae/falcon-180B", "falcon-180b"),
        ("Falcon 40B", "falcon-40b"),
        ("databricks/dbrx-base", "dbrx"),
        ("databricks/dbrx-instruct", "dbrx"),
    ],
)
def test_a_model_named_as_a_repository_or_a_table_names_it_finds_the_preset(written, preset):
    from simcluster.model import resolve_preset_name

    assert resolve_preset_name(written) == preset


def test_a_size_that_is_not_shipped_is_not_read_as_another_size():
    from simcluster.model import resolve_preset_name

    # Llama 2 comes in 7B, 13B and 70B; "Llama 3 13B" must stay unknown, not become some Llama 3
    assert resolve_preset_name("Llama 3 13B") == "Llama 3 13B"


@pytest.mark.parametrize("written", ["GPT-3 1B", "MT-NLG 100B", "BLOOM 3B", "BLOOM-560M"])
def test_a_family_name_with_another_size_is_not_read_as_the_shipped_size(written):
    from simcluster.model import resolve_preset_name

    # "GPT-3" alone is the 175B, but GPT-3 1B is none of the paper's sizes
    assert resolve_preset_name(written) == written


def test_a_model_named_but_not_shipped_is_refused_on_its_name():
    from simcluster.errors import UserError
    from simcluster.model import build_model

    with pytest.raises(UserError) as err:
        build_model({"name": "PaLM 540B"})
    assert str(err.value).startswith("model.name: 'PaLM 540B' is not a shipped preset")
    assert "hf_config" in str(err.value) and "mt-nlg-530b" in str(err.value)
    # a model given by its shape with one field left out is still told which field
    with pytest.raises(UserError, match="model.vocab: missing"):
        build_model({"name": "gpt-22B", "layers": 48, "hidden": 6144, "heads": 64})


def test_deepseek_v2_lite_is_nvidias_megatron_example_at_the_cards_depth():
    """NVIDIA/Megatron-LM examples/deepseek2_lite/train_deepseek2_lite_h100_fp8.sh shapes the
    model from flags (16 layers by default); at the model card's 27 layers, with the tokenizer's
    102,400 entries, it is the preset to the parameter."""
    from pathlib import Path

    from simcluster.context import build_context
    from simcluster.importers import ImportOptions, import_config
    from simcluster.scenario import scenario_from_dict

    script = Path(__file__).parent / "fixtures" / "launch" / "megatron" / "train_deepseek2_lite_h100_fp8.sh"
    options = ImportOptions(cluster="dgx-h100", nodes=1, variables={"NUM_LAYERS": "27"})
    imported = import_config("megatron", script, options)
    imported.scenario["model"]["vocab"] = 102_400
    model = build_context(scenario_from_dict(imported.scenario)).model
    preset = load_preset("deepseek-v2-lite")
    assert model.params_total() == preset.params_total() == 15_706_484_224
    assert model.params_active() == preset.params_active()
