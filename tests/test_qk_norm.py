"""Query/key normalisation (``model.qk_norm``: Qwen3, Gemma 3, OLMo 2, Apertus; Megatron's
--qk-layernorm): an RMSNorm over Q and one over K before the rotary embedding."""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.hf_import import fields_from_config
from simcluster.memory import layer_activation_bytes
from simcluster.parallelism.elementwise import STYLES, Elementwise
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario
from tests.test_elementwise import LLAMA

Q, KV = 1024, 256  # LLAMA: 16 heads and 4 KV heads of 64


def _ctx(qk_norm: bool, **scenario):
    return build_context(scenario_from_dict(make_scenario(model={**LLAMA, "qk_norm": qk_norm}, **scenario)))


def _inputs(qk_norm: bool, eager: bool = False) -> float:
    ctx = _ctx(qk_norm)
    return Elementwise(ctx.model, ctx.layout, 2.0, STYLES["eager" if eager else "fused"]).attention_inputs().bytes_per_token


def test_a_fused_norm_reads_and_writes_q_and_k_once():
    # bf16: 2 + 2 bytes per element of Q (1024) and K (256); V is not normalised
    assert _inputs(True) - _inputs(False) == 4 * (Q + KV)


def test_an_eager_norm_moves_the_reference_rmsnorms_36_bytes():
    # Qwen3RMSNorm / Olmo2RMSNorm are the Llama reference norm: x.float() 2+4, pow 4+4, mean 4,
    # x*rsqrt 4+4, type_as 4+2, *weight 2+2 bytes per element
    assert _inputs(True, eager=True) - _inputs(False, eager=True) == 36 * (Q + KV)


def test_the_norms_inputs_are_kept_for_the_backward():
    # one more bf16 copy of Q and K per token (the pre-norm values the norm's backward reads)
    seq = 2048
    with_norm = _ctx(True, training={"seq_len": seq, "micro_batch": 1, "global_batch": 8})
    without = _ctx(False, training={"seq_len": seq, "micro_batch": 1, "global_batch": 8})
    added = layer_activation_bytes(with_norm.model, with_norm.layout, with_norm.scenario.training, 0) - (
        layer_activation_bytes(without.model, without.layout, without.scenario.training, 0)
    )
    assert added == 2 * seq * (Q + KV)


def test_the_norm_weights_are_per_head():
    # q_norm and k_norm weights of head_dim each (transformers Qwen3Attention)
    assert _ctx(True).model.attention_params() - _ctx(False).model.attention_params() == 2 * 64


def test_a_layer_with_the_norms_takes_longer():
    slow = simulate(_ctx(True)).summary["step_time_s"]
    fast = simulate(_ctx(False)).summary["step_time_s"]
    assert slow > fast


@pytest.mark.parametrize(
    ("model_type", "expect"),
    # Qwen3Attention's and Gemma3Attention's q_norm/k_norm are RMSNorm(head_dim); Olmo2Attention's
    # RMSNorm(heads * head_dim) over the whole projection; Llama's and Mistral's none
    [("qwen3", "shared"), ("qwen3_moe", "shared"), ("olmo2", "whole"), ("gemma3_text", "shared"),
     ("llama", "none"), ("mistral", "none")],
)  # fmt: skip
def test_hf_configs_say_which_models_normalise_q_and_k(model_type, expect):
    cfg = {"model_type": model_type, "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "intermediate_size": 512, "vocab_size": 1000, "hidden_act": "silu"}  # fmt: skip
    assert fields_from_config(cfg).get("qk_norm", "none") == expect


def test_the_qwen3_presets_normalise_q_and_k():
    for preset in ("qwen3-30b-a3b", "qwen3-235b-a22b"):
        sc = make_scenario(model={"preset": preset}, parallel={"ep": 8})
        assert build_context(scenario_from_dict(sc)).model.qk_norm == "shared", preset


def test_latent_attention_refuses_the_flag(cli, tmp_path):
    import yaml

    sc = make_scenario(model={"preset": "deepseek-v3", "qk_norm": True, "layers": 4, "dense_layers": 1}, parallel={"ep": 8})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    res = cli("run", str(path))
    assert res.code == 2 and "model.qk_norm" in res.err and len(res.err.strip().splitlines()) == 1


def test_an_apertus_config_reads_as_the_preset():
    # swiss-ai/Apertus-8B-2509 config.json: model_type apertus, hidden_act xielu (a two-matrix
    # MLP), QK-norm in its modelling code; the same shape as the apertus-8b preset
    from simcluster.model import load_preset

    cfg = {"model_type": "apertus", "hidden_act": "xielu", "num_hidden_layers": 32, "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 21504,
           "vocab_size": 131072, "tie_word_embeddings": False}  # fmt: skip
    fields = fields_from_config(cfg)
    assert (fields["mlp"], fields["qk_norm"], fields["tied_embeddings"]) == ("gelu", "shared", False)
    assert load_preset("apertus-8b").params_total() == pytest.approx(8.05e9, rel=1e-3)
