"""FP8 parameters (``training.fp8_param_gather``).

Megatron-Core's ``fp8_param_gather`` keeps TransformerEngine modules' weights as FP8 tensors
and its distributed optimizer all-gathers those (Megatron-Core ``DistributedOptimizer``: the
parameter buffer holds the FP8 data); NeMo's ``bf16_with_fp8_mixed`` and Megatron-Bridge's
``bf16_with_fp8_current_scaling_mixed`` / ``bf16_with_mxfp8_mixed`` set it. The embedding, the
LM head and the norms stay 16-bit. An FP8 element is 1 byte on the wire under every recipe (the scales are not gathered).
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.parallelism.data import FP8_PARAM_BYTES, gather_bytes
from simcluster.scenario import scenario_from_dict


def _fp8(zero: int, **training) -> dict:
    return make_scenario(
        cluster={"hardware": "dgx-h100", "gpus": 8},
        parallel={"tp": 1, "pp": 1, "zero": zero},
        training={"precision": "fp8", "global_batch": 8, **training},
        overlap={"param_gather": True, "dp_grad_reduce": True},
    )


def _gathers(data: dict, name: str):
    ev = run(data).events
    return ev[ev["name"] == name]


def test_wire_bytes_per_fp8_parameter():
    sc = scenario_from_dict(_fp8(1, fp8_param_gather=True))
    assert gather_bytes(sc, 1010.0, 1000.0) == pytest.approx(1000 * 1.0 + 10 * 2.0)
    # the scales never travel, block scales included: Megatron-Core's parameter buffer holds the
    # raw FP8 data, and TransformerEngine's cast_master_weights_to_fp8 gives every rank the full
    # scales from an all-reduced amax (_cast_master_weights_to_fp8_blockwise_scaling: Step 2)
    assert FP8_PARAM_BYTES == {"delayed": 1.0, "current": 1.0, "block": 1.0}
    plain = scenario_from_dict(_fp8(1))
    assert gather_bytes(plain, 1010.0, 1000.0) == pytest.approx(1010 * 2.0)


@pytest.mark.parametrize("zero,name", [(1, "param_all_gather"), (3, "zero3_param_all_gather")])
def test_layer_weights_are_gathered_in_fp8_the_embedding_and_head_in_16_bits(zero, name):
    plain = _gathers(_fp8(zero), name)
    fp8 = _gathers(_fp8(zero, fp8_param_gather=True), name)
    assert len(plain) == len(fp8)
    ctx = build_context(scenario_from_dict(_fp8(zero)))
    m = ctx.model
    layer_bytes = m.layers * m.layer_params(0)  # per GPU: dp shards nothing of the gathered output
    other = m.embedding_params() + m.head_params()
    per_step = 1 if zero == 1 else None
    if per_step:  # ZeRO-1: one gather of every parameter per step
        assert plain["bytes"].sum() == pytest.approx(2 * (layer_bytes + other), rel=1e-6)
        assert fp8["bytes"].sum() == pytest.approx(layer_bytes + 2 * other, rel=1e-6)
    else:  # ZeRO-3: the same ratio gather by gather
        ratio = fp8.groupby("layer")["bytes"].sum() / plain.groupby("layer")["bytes"].sum()
        assert ratio.loc[3] == pytest.approx(0.5)  # a middle layer: all FP8
        # the first forward unit gathers the 16-bit embedding with layer 0's FP8 weights
        emb, first = m.embedding_params(), m.layer_params(0)
        assert ratio.loc[-1] == pytest.approx((2 * emb + first) / (2 * emb + 2 * first))


def test_fp8_parameters_need_fp8_training():
    data = make_scenario(training={"fp8_param_gather": True})
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == "training.fp8_param_gather"


def test_mxfp8_parameters_are_gathered_in_16_bits_blockwise_hopper_ones_in_fp8():
    """MXFP8 parameters cannot be mapped into Megatron-Core's flat parameter buffer, so its
    distributed optimizer all-gathers the 16-bit copy aliased on the gradient buffer and each
    rank quantises again (reuse_grad_buf_for_mxfp8_param_ag; Megatron-LM pull request 4987:
    "the all-gather ships bf16"); Hopper's 1 x 128 blockwise ones are gathered as FP8."""
    def blackwell(**training):
        data = _fp8(1, fp8_recipe="block", **training)
        data["cluster"]["hardware"] = "dgx-b200"
        return data

    plain = _gathers(blackwell(), "param_all_gather")
    mx = _gathers(blackwell(fp8_param_gather=True), "param_all_gather")
    assert mx["bytes"].sum() == pytest.approx(plain["bytes"].sum(), rel=1e-12)
    hopper = _gathers(_fp8(1, fp8_recipe="block", fp8_param_gather=True), "param_all_gather")
    hopper_plain = _gathers(_fp8(1, fp8_recipe="block"), "param_all_gather")
    assert hopper["bytes"].sum() < 0.6 * hopper_plain["bytes"].sum()
