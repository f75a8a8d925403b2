"""Mixtures of experts whose MoE layers alternate with dense ones (``model.moe_every``):
Llama 4 Maverick's interleave_moe_layer_step, Qwen2-MoE's decoder_sparse_step."""

import json

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.flops import convention_factor, layer_matmul_weights, token_flops
from simcluster.model import from_hf_config, load_preset
from simcluster.scenario import scenario_from_dict


def test_every_second_layer_is_moe_as_transformers_places_them():
    # transformers Llama4TextModel: moe_layers = range(step - 1, layers, step) -> 1, 3, 5, ...
    m = load_preset("llama4-maverick")
    assert [i for i in range(8) if m.is_moe_layer(i)] == [1, 3, 5, 7]
    assert m.moe_layers == 24 and m.first_moe_layer == 1


@pytest.mark.parametrize(
    ("preset", "total", "active"),
    # Meta's model cards: Scout 17B active / 109B total (its vision encoder included), Maverick
    # 17B active / 400B total
    [("llama4-scout", 109e9, 17e9), ("llama4-maverick", 400e9, 17e9)],
)
def test_llama4_parameter_counts(preset, total, active):
    m = load_preset(preset)
    assert m.params_total() == pytest.approx(total, rel=0.02)
    assert m.params_active() == pytest.approx(active, rel=0.02)


def test_a_dense_layer_between_moe_layers_multiplies_the_dense_mlp():
    m = load_preset("llama4-maverick")
    h = m.hidden
    attention = layer_matmul_weights(m, 0) - 3 * h * m.ffn
    # layer 0: attention + the 16384-wide dense MLP; layer 1: attention + one routed and one
    # shared 8192-wide expert + the router
    assert layer_matmul_weights(m, 1) == attention + 2 * 3 * h * m.expert_ffn + h * m.experts


def test_hf_config_llama4_reads_the_text_config(tmp_path):
    text = {
        "model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120,
        "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 8192, "intermediate_size_mlp": 16384, "vocab_size": 202048,
        "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
        "use_qk_norm": True, "hidden_act": "silu", "tie_word_embeddings": False,
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama4", "text_config": text, "vision_config": {}}))
    m = from_hf_config(path)
    assert (m.moe_every, m.ffn, m.expert_ffn, m.shared_experts) == (2, 16384, 8192, 1)
    assert m.params_total() == load_preset("llama4-maverick").params_total()


def test_moe_every_needs_a_dense_width_and_a_moe_model():
    base = {"cluster": {"gpus": 8}, "training": {"seq_len": 2048, "global_batch": 8}}
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict({**base, "model": {"preset": "llama3-8b", "moe_every": 2}}))
    assert err.value.field == "model.moe_every"
    sc = scenario_from_dict({**base, "model": {"preset": "qwen3-30b-a3b", "decoder_sparse_step": 2}})
    assert sc.model.moe_every == 2


@pytest.mark.parametrize(
    ("preset", "flops"),
    # Megatron-Bridge tests/unit_tests/training/utils/test_flop_utils.py: its
    # num_floating_point_operations for one 8,192-token sequence of each recipe (attention
    # counted with the causal half, as Bridge's formula does: flops: causal here)
    [("llama3-8b", 4.22e14), ("llama3-70b", 3.68e15), ("llama3.1-405b", 2.07e16),
     ("llama4-scout", 8.92e14), ("llama4-maverick", 8.92e14)],
)  # fmt: skip
def test_model_flops_match_megatron_bridges_formula(preset, flops):
    m = load_preset(preset)
    per_sequence = token_flops(m, 8192).total * 8192 * convention_factor(m, 8192, "causal")
    assert per_sequence == pytest.approx(flops, rel=0.005)
