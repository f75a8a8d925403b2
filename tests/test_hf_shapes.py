"""Exact parameter shapes of the families whose biases and norms differ from part to part
(``model.bias`` as a list, ``model.norm_bias``, ``model.qk_norm``'s kinds,
``model.embedding_norm``, ``model.shared_expert_gate``): each published config.json
(tests/fixtures/hf/) is counted module by module as its transformers modelling code builds it,
and simcluster's count must equal that sum; the model card's figure is cited beside it.

Provenance: the phi-2, codegen-350m-mono, command-r, command-r-plus and stablelm-2 fixtures hold
the shape fields of those published config.json files as transcribed without Hub access
(2026-11-30), trimmed to what the import reads; the module-by-module sums here agree with the
model cards' totals, which is the check that the transcription is right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simcluster.errors import UserError
from simcluster.model import ModelSpec, build_model, from_hf_config, load_preset

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def fixture(name: str) -> ModelSpec:
    return from_hf_config(FIXTURES / f"{name}.json")


def linear(n_in: int, n_out: int, bias: bool) -> int:
    """nn.Linear(n_in, n_out, bias)'s parameters."""
    return n_in * n_out + (n_out if bias else 0)


def test_phi_2_biases_every_linear_and_its_lm_head():
    """microsoft/phi-2 (modeling_phi.py): PhiAttention's q/k/v_proj and dense with bias=True,
    PhiMLP's fc1/fc2 (nn.Linear's default bias), one nn.LayerNorm a layer (PhiDecoderLayer's
    input_layernorm feeds attention and MLP), final_layernorm, and PhiForCausalLM's untied
    lm_head with bias=True. Model card: 2.7 billion parameters."""
    h, ffn, v, layers = 2560, 10240, 51200, 32
    per_layer = 2 * h + 4 * linear(h, h, True) + linear(h, ffn, True) + linear(ffn, h, True)
    modules = v * h + layers * per_layer + 2 * h + linear(h, v, True)
    assert modules == 2_779_683_840
    m = fixture("phi-2")
    assert m.bias == ("qkv", "attn_out", "mlp", "lm_head") and m.parallel_block
    assert m.params_total() == modules
    assert m.params_total() == pytest.approx(2.7e9, rel=0.03)


def test_codegen_350m_has_no_attention_biases_but_an_lm_head_bias():
    """Salesforce/codegen-350M-mono (modeling_codegen.py): CodeGenAttention's qkv_proj and
    out_proj with bias=False, CodeGenMLP's fc_in/fc_out and CodeGenForCausalLM's lm_head with
    nn.Linear's bias, ln_1 a layer (parallel block) and ln_f. Model card: 350M."""
    h, v, layers = 1024, 51200, 20
    per_layer = 2 * h + linear(h, 3 * h, False) + linear(h, h, False) + linear(h, 4 * h, True) + linear(4 * h, h, True)
    modules = v * h + layers * per_layer + 2 * h + linear(h, v, True)
    assert modules == 356_712_448
    m = fixture("codegen-350m-mono")
    assert m.bias == ("mlp", "lm_head")
    assert m.params_total() == modules
    assert m.params_total() == pytest.approx(350e6, rel=0.02)


def test_command_r_layernorm_has_no_bias():
    """CohereForAI/c4ai-command-r-v01 (modeling_cohere.py): CohereLayerNorm holds a weight and no
    bias (input_layernorm, one a layer in the parallel block, and the final norm); no linear
    biases (attention_bias false); lm_head tied (CohereConfig's default). Model card: 35B."""
    h, ffn, v, layers = 8192, 22528, 256000, 40
    per_layer = h + 4 * h * h + 3 * h * ffn
    modules = v * h + layers * per_layer + h
    m = fixture("command-r")
    assert (m.norm, m.norm_bias, m.bias, m.tied_embeddings, m.qk_norm) == ("layernorm", False, (), True, "none")
    assert m.params_total() == modules == 34_980_831_232
    assert m.params_total() == pytest.approx(35e9, rel=0.015)


def test_command_r_plus_normalises_each_head_with_its_own_weights():
    """CohereForAI/c4ai-command-r-plus: use_qk_norm true, so CohereAttention holds
    q_norm = CohereLayerNorm((heads, head_dim)) and k_norm = CohereLayerNorm((kv_heads, head_dim)):
    a weight per channel of Q and of K, no bias. Model card: 104B."""
    h, ffn, v, layers, heads, kv, d = 12288, 33792, 256000, 64, 96, 8, 128
    per_layer = h + 2 * h * heads * d + 2 * h * kv * d + (heads + kv) * d + 3 * h * ffn
    modules = v * h + layers * per_layer + h
    m = fixture("command-r-plus")
    assert m.qk_norm == "per_head"
    assert m.params_total() == modules == 103_810_674_688
    assert m.params_total() == pytest.approx(104e9, rel=0.005)


def test_stablelm_2_12b_per_head_layernorms_have_no_bias():
    """stabilityai/stablelm-2-12b (modeling_stablelm.py): qk_layernorm builds
    StableLmLayerNormPerHead(head_dim, heads) and (head_dim, kv_heads), one nn.LayerNorm(head_dim,
    bias=False) per head; the layer's own nn.LayerNorm (one, use_parallel_residual) has a bias;
    no linear biases (use_qkv_bias false), untied. Model card: 12.1B."""
    h, ffn, v, layers, heads, kv = 5120, 13824, 100352, 40, 32, 8
    d = h // heads
    per_layer = 2 * h + 2 * h * heads * d + 2 * h * kv * d + (heads + kv) * d + 3 * h * ffn
    modules = 2 * v * h + layers * per_layer + 2 * h
    m = fixture("stablelm-2-12b")
    assert (m.qk_norm, m.parallel_block, m.parallel_norms, m.bias) == ("per_head", True, 1, ())
    assert m.params_total() == modules == 12_143_185_920
    assert m.params_total() == pytest.approx(12.1e9, rel=0.005)


def test_stablelm_2_1_6b_biases_only_its_qkv_projections():
    """stabilityai/stablelm-2-1_6b: use_qkv_bias puts biases on StableLmAttention's q/k/v_proj
    (o_proj bias=False, StableLmMLP none); two biased LayerNorms a layer. Model card: 1.6B
    (1,644,515,328)."""
    h, ffn, v, layers = 2048, 5632, 100352, 24
    per_layer = 2 * 2 * h + 3 * linear(h, h, True) + linear(h, h, False) + 3 * h * ffn
    modules = 2 * v * h + layers * per_layer + 2 * h
    m = fixture("stablelm-2-1.6b")
    assert (m.bias, m.qk_norm) == (("qkv",), "none")
    assert m.params_total() == modules == 1_644_515_328


def test_gpt_neox_attention_bias_false_leaves_the_mlp_biases(tmp_path):
    """GPTNeoXAttention's query_key_value and dense take bias=config.attention_bias (default
    true); GPTNeoXMLP's dense_h_to_4h and dense_4h_to_h are always biased."""
    cfg = json.loads((FIXTURES / "gpt-neox-20b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "attention_bias": False}))
    m = from_hf_config(path)
    full = fixture("gpt-neox-20b")
    assert m.bias == ("mlp",) and full.bias == ("qkv", "attn_out", "mlp")
    assert full.params_total() - m.params_total() == 44 * (3 * 6144 + 6144)


def test_llama4_query_key_norm_has_no_weights():
    """Llama4TextAttention's qk_norm is Llama4TextL2Norm (x * rsqrt(mean(x^2) + eps), no
    weight): the preset's layers hold no query/key norm weights, yet the norm's pass is timed."""
    m = load_preset("llama4-scout")
    assert m.qk_norm == "weightless" and m.has_qk_norm and m.qk_norm_params() == 0
    shared = build_model({"preset": "llama4-scout", "qk_norm": "shared"})
    assert shared.params_total() - m.params_total() == 48 * 2 * 128


def test_qwen1_5_moe_shared_expert_gate_is_one_row_a_layer():
    """Qwen2MoeSparseMoeBlock.shared_expert_gate = nn.Linear(hidden, 1, bias=False) on each of
    Qwen1.5-MoE-A2.7B's 24 MoE layers, active for every token."""
    m = fixture("qwen1.5-moe-a2.7b")
    without = build_model({"hf_config": str(FIXTURES / "qwen1.5-moe-a2.7b.json"), "shared_expert_gate": False})
    assert m.params_total() - without.params_total() == 24 * 2048
    assert m.params_active() - without.params_active() == 24 * 2048


@pytest.mark.parametrize(
    ("model", "field", "named"),
    [
        ({"bias": ["qkv", "mlps"]}, "model.bias", "mlp"),
        ({"qk_norm": "per-head"}, "model.qk_norm", "per_head"),
        ({"shared_expert_gate": True}, "model.shared_expert_gate", "shared_experts"),
    ],
)
def test_bad_part_names_are_refused_by_field(model, field, named):
    with pytest.raises(UserError) as err:
        build_model({"preset": "llama3-8b", **model})
    assert err.value.field == field and named in str(err.value)


def test_the_cli_refuses_an_unknown_bias_part_in_one_line(cli, tmp_path):
    from conftest import make_scenario
    from test_scenario_errors import assert_one_line_error, write

    data = make_scenario()
    data["model"] = {"preset": "llama3-8b", "bias": ["qkv", "out"]}
    assert_one_line_error(cli("memory", write(tmp_path, data)), "model.bias", "attn_out")


def test_older_spellings_read_as_the_new_fields():
    """bias true = every linear of the layers; qk_norm true = shared; qkv_bias = bias [qkv]."""
    llama = load_preset("llama3-8b")
    assert build_model({"preset": "llama3-8b", "bias": True}).bias == ("qkv", "attn_out", "mlp")
    assert build_model({"preset": "llama3-8b", "qk_norm": True}).qk_norm == "shared"
    assert build_model({"preset": "qwen3-8b", "qk_norm": False}).qk_norm == "none"
    qkv = build_model({"preset": "llama3-8b", "qkv_bias": True})
    assert qkv.bias == ("qkv",) and qkv.params_total() - llama.params_total() == 32 * (32 + 2 * 8) * 128
