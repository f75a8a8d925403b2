"""The time and memory of the small parts ``model:`` names by set (the shapes themselves:
tests/test_hf_shapes.py): BLOOM's embedding LayerNorm (``embedding_norm``), Qwen2-MoE's
shared-expert gate (``shared_expert_gate``), a query/key norm without weights (Llama 4's
``qk_norm: weightless``), an LM head's bias and Cohere's LayerNorm without a bias."""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import compute_seconds, layer_builder

from simcluster.context import build_context
from simcluster.memory import embedding_activation_bytes
from simcluster.model import build_model
from simcluster.parallelism.zero3_coordinator import small_tensors
from simcluster.scenario import scenario_from_dict

SEQ, H = 2048, 1024
# a BLOOM-like layer: LayerNorm, GeLU MLP, ALiBi, biases, tied, no dropout
BLOOM = {"name": "b", "layers": 2, "hidden": H, "heads": 16, "ffn": 4 * H, "vocab": 32000, "norm": "layernorm",
         "mlp": "gelu", "position": "alibi", "bias": True, "dropout": False, "tied_embeddings": True}  # fmt: skip
MOE = {"name": "q", "layers": 2, "hidden": H, "heads": 16, "ffn": 2816, "vocab": 32000, "experts": 8, "top_k": 2,
       "expert_ffn": 704, "shared_experts": 4}  # fmt: skip


def _data(model: dict, **parallel: int) -> dict:
    return make_scenario(
        model=model,
        parallel={"tp": 1, "pp": 1, **parallel},
        training={"seq_len": SEQ, "micro_batch": 1, "global_batch": 8},
    )


def test_the_embedding_norm_is_a_norm_pass_each_way_and_keeps_its_input():
    """BloomModel applies word_embeddings_layernorm to the looked-up embeddings: one LayerNorm
    (a fused read and write of h per token forward, twice that backward, as every norm here),
    its 2h weights, and its input kept for the backward (16-bit, s x h)."""
    with_, without = layer_builder(_data({**BLOOM, "embedding_norm": True})), layer_builder(_data(BLOOM))
    km, elt = with_.km, with_.shapes.elt
    forward = compute_seconds(with_.embedding("F")) - compute_seconds(without.embedding("F"))
    assert forward == pytest.approx(km.memory(SEQ * 2 * elt * H))
    assert compute_seconds(with_.embedding("B")) == pytest.approx(km.memory(SEQ * 2 * 2 * elt * H))
    assert without.embedding("B") == [] and with_.embedding("W") == without.embedding("W")
    assert build_model({**BLOOM, "embedding_norm": True}).params_total() - build_model(BLOOM).params_total() == 2 * H
    ctx = build_context(scenario_from_dict(_data({**BLOOM, "embedding_norm": True})))
    assert embedding_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training) == 2 * SEQ * H


def test_the_shared_expert_gate_is_a_memory_bound_pass_and_one_row():
    """Qwen2MoeSparseMoeBlock: sigmoid(shared_expert_gate(x)) * shared_expert(x), the gate an
    nn.Linear(hidden, 1, bias=False): it reads the block's input and reads and writes the
    shared output (3 h-wide passes a token forward, twice backward), h weights a MoE layer."""
    gated, plain = layer_builder(_data({**MOE, "shared_expert_gate": True})), layer_builder(_data(MOE))
    km, elt = gated.km, gated.shapes.elt
    for phase, scale in (("F", 1), ("B", 2)):
        added = compute_seconds(gated.layer(0, phase)) - compute_seconds(plain.layer(0, phase))
        assert added == pytest.approx(km.memory(scale * 3 * SEQ * H * elt))
    assert build_model({**MOE, "shared_expert_gate": True}).params_total() - build_model(MOE).params_total() == 2 * H


def test_a_weightless_query_key_norm_costs_the_same_pass_without_weights():
    """Llama4TextL2Norm normalises Q and K like an RMSNorm without its weight: the same pass
    (and the same kept inputs), no parameters, no ZeRO-3 small tensors."""
    model = {"name": "l", "layers": 2, "hidden": H, "heads": 16, "kv_heads": 4, "ffn": 2816, "vocab": 32000,
             "norm": "rmsnorm", "mlp": "swiglu", "position": "rope", "bias": False}  # fmt: skip
    shared, weightless = layer_builder(_data({**model, "qk_norm": "shared"})), layer_builder(
        _data({**model, "qk_norm": "weightless"})
    )
    assert compute_seconds(shared.layer(0, "F")) == compute_seconds(weightless.layer(0, "F"))
    assert compute_seconds(shared.layer(0, "B")) == compute_seconds(weightless.layer(0, "B"))
    s, w = shared.shapes.model, weightless.shapes.model
    assert s.params_total() - w.params_total() == 2 * 2 * (H // 16)  # 2 layers x (q_norm + k_norm)
    ctx = build_context(scenario_from_dict(_data({**model, "qk_norm": "weightless"})))
    plain = build_context(scenario_from_dict(_data(model)))
    assert small_tensors(ctx.model, ctx.layout, 0) == small_tensors(plain.model, plain.layout, 0)


def test_lm_head_bias_and_an_unbiased_layernorm_in_the_small_tensors():
    """The LM head's bias is vocab-parallel (vocab / tp a rank) beside the final norm; Cohere's
    LayerNorm is a weight alone (one h tensor a norm, not two)."""
    ctx = build_context(scenario_from_dict(_data({**BLOOM, "bias": ["mlp", "lm_head"]}, tp=2)))
    assert small_tensors(ctx.model, ctx.layout, -2) == [H, H, 32000 / 2]
    cohere = build_context(scenario_from_dict(_data({**BLOOM, "bias": False, "norm_bias": False})))
    assert small_tensors(cohere.model, cohere.layout, -2) == [H]
    assert small_tensors(cohere.model, cohere.layout, 0) == [H, H]  # the attention's and the MLP's norms
