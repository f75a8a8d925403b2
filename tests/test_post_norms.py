"""A norm on each block's output before the residual add (``model.post_norms``): Gemma 2 and 3
(transformers' Gemma2DecoderLayer and Gemma3DecoderLayer: ``post_attention_layernorm`` on the
attention output, ``post_feedforward_layernorm`` on the MLP output, beside the pre-block
``input_layernorm`` and ``pre_feedforward_layernorm``)."""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.flops import token_flops
from simcluster.memory import layer_activation_bytes
from simcluster.model import build_model
from simcluster.scenario import scenario_from_dict

# a Gemma-style layer: RMSNorm, gated MLP, rotary, no biases or dropout
SHAPE = {"name": "m", "layers": 4, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 32000, "norm": "rmsnorm",
         "mlp": "swiglu", "position": "rope", "max_positions": 0, "bias": False, "dropout": False}  # fmt: skip
SEQ = 4096


def _ctx(post: bool):
    sc = make_scenario(model={**SHAPE, "post_norms": post}, training={"seq_len": SEQ, "micro_batch": 1, "global_batch": 8})
    return build_context(scenario_from_dict(sc))


def test_two_more_norms_a_layer_and_no_flops():
    with_, without = build_model({**SHAPE, "post_norms": True}), build_model(SHAPE)
    # two RMSNorm weight vectors of h per layer (Gemma 2 report Table 2 counts them: test_hf_families)
    assert with_.params_total() - without.params_total() == 4 * 2 * 2048
    assert token_flops(with_, SEQ) == token_flops(without, SEQ)


def test_the_norms_inputs_are_kept_for_the_backward():
    # each output norm keeps its input, the block's output: one 16-bit s x h tensor per block
    with_, without = _ctx(True), _ctx(False)
    added = layer_activation_bytes(with_.model, with_.layout, with_.scenario.training, 0) - layer_activation_bytes(
        without.model, without.layout, without.scenario.training, 0
    )
    assert added == 2 * 2 * SEQ * 2048


def test_a_layer_with_output_norms_takes_longer():
    slow = run(make_scenario(model={**SHAPE, "post_norms": True})).summary["step_time_s"]
    fast = run(make_scenario(model=SHAPE)).summary["step_time_s"]
    assert slow > fast


def test_a_parallel_block_refuses_them():
    with pytest.raises(UserError) as err:
        build_model({**SHAPE, "post_norms": True, "parallel_block": True})
    assert err.value.field == "model.post_norms"
