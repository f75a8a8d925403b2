"""FSDP2's gradient sync deferred to the last microbatch (``zero3.gradient_sync``) and its
parameters kept gathered from a backward into the next forward (``zero3.reshard_after_backward``).

Source: PyTorch ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``
``FSDPParamGroup.post_backward`` (read at commit 002a76f): every post-backward first runs
``accumulate_unsharded_grad_if_needed`` (``_fsdp_param.py``: fp32 accumulator += bf16
gradient); without ``reduce_grads`` it reshards only if ``reshard_after_backward``, casts the
first gradient into the accumulator (``to_accumulated_grad_if_needed``) and returns before
``foreach_reduce``; ``unshard`` of a group still unsharded all-gathers nothing.
"""

from __future__ import annotations

import pytest
from engine_helpers import gpt_model, run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.memory import stage_params, static_memory
from simcluster.parallelism.wgrad import accumulation_bytes
from simcluster.scenario import scenario_from_dict

LAYERS, DP, M = 4, 4, 3


def _scenario(m: int = M, **zero3: object) -> dict:
    return {
        "name": "fsdp2-deferred",
        "model": gpt_model(LAYERS, 2048, 32000),
        "cluster": {"hardware": "dgx-h100", "gpus": DP, "network": "ideal"},
        "parallel": {"zero": 3},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": m * DP, "precision": "bf16"},
        "zero3": {"buffers": "copies", **zero3},
    }


def _count(data: dict, name: str) -> int:
    ev = run(data).events
    return int(((ev["rank"] == 0) & (ev["name"] == name)).sum())


def test_only_the_last_microbatch_reduce_scatters():
    every = _count(_scenario(), "zero3_grad_reduce_scatter")
    last = _count(_scenario(gradient_sync="last_microbatch"), "zero3_grad_reduce_scatter")
    assert every == M * last > 0
    # FSDP2's copy into the reduce-scatter buffer goes with it
    assert _count(_scenario(gradient_sync="last_microbatch"), "fsdp2_copy_in") == last


def test_kept_gathers_spare_every_forward_but_the_first():
    every = _count(_scenario(), "zero3_param_all_gather")
    kept = _count(_scenario(reshard_after_backward=False), "zero3_param_all_gather")
    # a forward gathers every unit once: one microbatch kept for its backward gathers that many
    per_forward = _count(_scenario(m=1, reshard_after_forward=False), "zero3_param_all_gather")
    assert per_forward > 0
    # keeping the backward's gathers removes the forwards' of microbatches 1..m-1
    assert kept == every - (M - 1) * per_forward
    # FSDP2 copies a gather out once, not at each use
    assert _count(_scenario(reshard_after_backward=False), "fsdp2_copy_out") == kept
    # with reshard_after_forward false too, each unit is gathered once per step
    once = _count(_scenario(reshard_after_backward=False, reshard_after_forward=False), "zero3_param_all_gather")
    assert once == per_forward


def _static(data: dict) -> tuple[float, float, float, float]:
    ctx = build_context(scenario_from_dict(data))
    params = stage_params(ctx.model, ctx.layout, ctx.chunks[0])
    return (*static_memory(ctx.model, ctx.layout, ctx.scenario.training, params), params.total)


@pytest.mark.parametrize("fp32_reduce, width", [(True, 4.0), (False, 2.0)])
def test_the_unsharded_accumulators_live_all_step(fp32_reduce, width):
    """One accumulator per local parameter in the reduce dtype (MixedPrecisionPolicy
    reduce_dtype: fp32, or the bf16 parameters' own, when autograd accumulates .grad)."""
    base = _scenario()
    base["training"]["fp32_grad_accum"] = fp32_reduce
    deferred = {**base, "zero3": {**base["zero3"], "gradient_sync": "last_microbatch"}}
    p0, g0, o0, n = _static(base)
    p1, g1, o1, _ = _static(deferred)
    assert (p1, o1) == (p0, o0)
    assert g1 - g0 == pytest.approx(width * n)


def test_kept_gathers_hold_every_16bit_parameter():
    p0, g0, _, n = _static(_scenario())
    p1, g1, _, _ = _static(_scenario(reshard_after_backward=False))
    assert p1 - p0 == pytest.approx(2.0 * n)  # bf16 gathered copy of every local parameter
    assert g1 == g0


@pytest.mark.parametrize("fp32_reduce, per_param", [(True, (6.0 + 2 * 10.0) / 3), (False, 2 * 6.0 / 3)])
def test_accumulation_is_one_cast_and_m_minus_one_adds(fp32_reduce, per_param):
    data = _scenario(gradient_sync="last_microbatch")
    data["training"]["fp32_grad_accum"] = fp32_reduce
    ctx = build_context(scenario_from_dict(data))
    assert accumulation_bytes(ctx.scenario.training, ctx.layout) == pytest.approx(per_param)
    # reduce-scattered every microbatch, FSDP2 accumulates only its sharded gradient
    plain = build_context(scenario_from_dict(_scenario()))
    assert accumulation_bytes(plain.scenario.training, plain.layout) == 0.0


def test_one_microbatch_defers_nothing():
    one = _scenario(m=1, gradient_sync="last_microbatch")
    ctx = build_context(scenario_from_dict(one))
    assert accumulation_bytes(ctx.scenario.training, ctx.layout) == 0.0
    assert _static(one)[:3] == _static(_scenario(m=1))[:3]


@pytest.mark.parametrize("buffers", ["flat", "views"])
@pytest.mark.parametrize("setting, value", [("gradient_sync", "last_microbatch"), ("reshard_after_backward", False)])
def test_other_zero3_engines_refuse_fsdp2s_methods(buffers, setting, value):
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(_scenario(buffers=buffers, **{setting: value})))
    assert err.value.field == f"zero3.{setting}"


def test_the_last_copy_in_reads_the_fp32_accumulator():
    """``foreach_reduce`` (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py) copies each
    parameter's gradient into the reduce-scatter buffer in the reduce dtype; after deferred
    sync that gradient is ``unsharded_accumulated_grad`` (fp32, _fsdp_param.py), so the copy-in
    reads 4 B and writes 4 B a parameter where a bf16 ``.grad`` is read at 2 B: 8 / 6 of the time."""
    from simcluster.engine.plan import kernel_model
    from simcluster.engine.simulate import _fsdp2_copies

    every = build_context(scenario_from_dict(_scenario()))
    deferred = build_context(scenario_from_dict(_scenario(gradient_sync="last_microbatch")))
    km = kernel_model(every)
    params = 1e9
    per_microbatch = _fsdp2_copies(every, km)[1](params)
    last = _fsdp2_copies(deferred, km)[1](params)
    assert last == pytest.approx(km.memory(params * 8.0)) and per_microbatch == pytest.approx(km.memory(params * 6.0))
