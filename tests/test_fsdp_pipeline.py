"""FSDP (ZeRO-3) under a pipeline, and FSDP's ``reshard_after_forward``.

torchtitan composes FSDP2 with pipeline parallelism (its 3D/4D runs: FSDP + TP + PP on 512
H100s, ``docs/performance.md`` Tables 5 and 6). Its ``apply_fsdp`` keeps each block's gathered
parameters after the forward when PP is on (``reshard_after_forward = not pp_enabled``: "do not
reshard after forward to avoid per-microbatch all-gathers"), and torch.distributed.pipelining's
``PipelineStage.backward_maybe_with_nosync`` turns gradient sync and resharding off for every
backward but the last, after which it runs FSDP's post-backward for the whole stage. So per step
each of a stage's layers is gathered once and reduce-scattered once, after the stage's last
backward, and FSDP2 adds each microbatch's gradient into an unsharded fp32 accumulator
(``accumulate_unsharded_grad_if_needed``). DeepSpeed and Megatron pipelines refuse ZeRO-2/3.
"""

from __future__ import annotations

import pytest
from engine_helpers import gpt_model, run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.memory import stage_params, static_memory
from simcluster.parallelism.wgrad import ACCUM_FP32_INPLACE, accumulation_bytes
from simcluster.scenario import scenario_from_dict

LAYERS = 4


def _scenario(pp: int = 2, dp: int = 2, m: int = 4, **zero3: object) -> dict:
    return {
        "name": "fsdp-pp",
        "model": gpt_model(LAYERS, 2048, 32000),
        "cluster": {"hardware": "dgx-h100", "gpus": pp * dp, "network": "ideal"},
        "parallel": {"pp": pp, "zero": 3},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": m * dp, "precision": "bf16"},
        "zero3": {"buffers": "copies", **zero3},
    }


def _comm(res, name: str, rank: int):
    ev = res.events
    return ev[(ev["rank"] == rank) & (ev["name"] == name)].sort_values("start_s")


def test_zero2_with_a_pipeline_is_refused_and_names_zero3():
    data = _scenario()
    data["parallel"]["zero"] = 2
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == "parallel.zero"
    assert "zero=3" in str(err.value)


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-core", "nanotron"])
def test_frameworks_without_fsdp_pipelines_refuse_zero3_under_a_pipeline(framework):
    data = {**_scenario(), "framework": framework}
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == "parallel.zero"
    assert "torchtitan" in str(err.value)
    assert build_context(scenario_from_dict({**_scenario(), "framework": "torchtitan"})).layout.zero3_pipelined


def test_under_a_pipeline_each_layer_is_gathered_and_reduced_once_per_step():
    data = _scenario(m=4)
    res = run(data)
    layout = build_context(scenario_from_dict(data)).layout
    for stage, stage_layers in ((0, 2), (1, 2)):  # 4 layers on 2 stages; edge units merge in
        rank = layout.rank(tp=0, cp=0, dp=0, pp=stage)
        gathers = _comm(res, "zero3_param_all_gather", rank)
        reduces = _comm(res, "zero3_grad_reduce_scatter", rank)
        assert len(gathers) == stage_layers  # not 4 microbatches x (forward + backward)
        assert len(reduces) == stage_layers
        assert set(gathers["microbatch"]) == {0}  # during the first microbatch's forward
        ev = res.events
        backward = ev[(ev["rank"] == rank) & (ev["stream"] == "compute") & (ev["kind"] == "backward")]
        # gradient sync waits for the stage's last backward to finish
        assert reduces["start_s"].min() >= backward["end_s"].max() - 1e-12


def test_reduce_scatter_carries_each_stage_fp32_gradients():
    data = _scenario()
    res = run(data)
    ctx = build_context(scenario_from_dict(data))
    for stage, chunks in enumerate(ctx.chunks):
        rank = ctx.layout.rank(tp=0, cp=0, dp=0, pp=stage)
        reduces = _comm(res, "zero3_grad_reduce_scatter", rank)
        params = stage_params(ctx.model, ctx.layout, chunks).total
        assert reduces["bytes"].sum() == pytest.approx(params * 4.0)  # fp32 reduce dtype


def test_without_a_pipeline_keeping_the_gather_for_backward_halves_the_gathers():
    base = _scenario(pp=1, dp=2, m=2)
    kept = _scenario(pp=1, dp=2, m=2, reshard_after_forward=False)
    n_base = len(_comm(run(base), "zero3_param_all_gather", 0))
    res = run(kept)
    gathers = _comm(res, "zero3_param_all_gather", 0)
    units = LAYERS  # embedding and head ride with the first and last layer
    assert len(gathers) == 2 * units  # one per layer per microbatch, in the forward
    assert n_base > len(gathers)  # the default re-gathers (all but the last layer) for backward
    copies = _comm(res, "fsdp2_copy_out", 0)
    assert len(copies) == len(gathers)  # copied out once per gather, not once per use
    # the reductions stay per microbatch without a pipeline
    assert len(_comm(res, "zero3_grad_reduce_scatter", 0)) == 2 * units


def test_pipelined_memory_holds_parameters_and_fp32_gradients_unsharded():
    data = _scenario(dp=4)
    ctx = build_context(scenario_from_dict(data))
    assert ctx.layout.zero3_pipelined and ctx.layout.zero3_keep_for_backward
    params = stage_params(ctx.model, ctx.layout, ctx.chunks[0])
    p_b, g_b, o_b = static_memory(ctx.model, ctx.layout, ctx.scenario.training, params)
    n = ctx.layout.zero_group
    assert n == 4
    assert p_b == pytest.approx(params.total * 2.0)  # bf16, gathered for the step
    assert g_b == pytest.approx(params.total * 4.0)  # the fp32 unsharded accumulator
    assert o_b == pytest.approx(params.total * (4.0 + 8.0) / n)  # master + Adam moments, sharded


def test_fsdp2_accumulates_in_fp32_only_under_a_pipeline():
    piped = build_context(scenario_from_dict(_scenario()))
    flat = build_context(scenario_from_dict(_scenario(pp=1, dp=4)))
    # FSDP2's post_backward without gradient sync: the first microbatch casts its bf16
    # gradient into the fp32 accumulator (2 + 4 B), the other m - 1 add into it in place
    # (2 + 4 + 4 B, ACCUM_FP32_INPLACE); m = 4: (6 + 3 x 10) / 4 = 9 B per microbatch
    m = piped.layout.microbatches
    assert m == 4
    assert accumulation_bytes(piped.scenario.training, piped.layout) == pytest.approx((6.0 + (m - 1) * ACCUM_FP32_INPLACE) / m)
    assert accumulation_bytes(flat.scenario.training, flat.layout) == 0.0


def test_reshard_after_forward_defaults_follow_torchtitan():
    assert build_context(scenario_from_dict(_scenario())).layout.zero3_keep_for_backward
    assert not build_context(scenario_from_dict(_scenario(pp=1, dp=4))).layout.zero3_keep_for_backward
    forced = build_context(scenario_from_dict(_scenario(reshard_after_forward=True)))
    assert not forced.layout.zero3_keep_for_backward
