"""Clearing the gradient buffer at a step's start (``dp.zero_grad_buffer``).

Megatron's ``train_step`` calls ``zero_grad_buffer()`` on every model chunk before the
forward-backward pass (Megatron-Core ``_ParamAndGradBuffer.reset``: ``grad_data.zero_()``; the
2021 local DDP's ``MemoryBuffer.zero``), nanotron's ``FP32GradientAccumulator.zero_grad`` clears
``_contiguous_fp32_grad_buffer`` and DeepSpeed's ``BF16_Optimizer.clear_hp_grads`` its fp32 flat
gradients: one write of every local gradient element, which the first microbatch then
accumulates into. PyTorch's ``zero_grad(set_to_none=True)`` frees the gradients instead.
"""

from __future__ import annotations

import pytest
from engine_helpers import gpt_model, run

from simcluster.context import build_context
from simcluster.engine.plan import kernel_model
from simcluster.frameworks import apply_framework
from simcluster.scenario import scenario_from_dict


def _scenario(pp: int = 1, zero: int = 0, fp32: bool = True, **dp: bool) -> dict:
    return {
        "name": "zero-grad",
        "model": gpt_model(4, 2048, 32000),
        "cluster": {
            "hardware": "dgx-h100",
            "gpus": 2 * pp,
            # no NCCL SM sharing and no slowest-GPU factor: the clear lasts exactly its bytes; a
            # host that issues instantly (the first forward's issue would hide under the clear)
            "profile": {"efficiency": {"collective_sms": 0, "host_op_us": 0.0}, "gpu": {"speed_spread": 0.0}},
        },
        "parallel": {"pp": pp, "zero": zero},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "precision": "bf16",
                     "fp32_grad_accum": fp32},
        "dp": dp,
    }


def _clears(res):
    ev = res.events
    return ev[ev["name"] == "zero_grad_buffer"].sort_values(["rank", "start_s"])


def _seconds(data: dict, nbytes: float) -> float:
    return kernel_model(build_context(scenario_from_dict(data))).memory(nbytes)


def test_no_clear_unless_asked():
    assert _clears(run(_scenario())).empty


@pytest.mark.parametrize("fp32, per_param", [(True, 4.0), (False, 2.0)])
def test_the_clear_writes_every_local_gradient_once_before_the_first_forward(fp32, per_param):
    data = _scenario(fp32=fp32, zero_grad_buffer=True)
    res = run(data)
    clears = _clears(res)
    ctx = build_context(scenario_from_dict(data))
    params = ctx.model.params_total()  # dp only: every rank holds the whole model's gradients
    assert len(clears) == 1
    ev = clears.iloc[0]
    assert ev["start_s"] == 0.0 and ev["kind"] == "optimizer"
    # fp32 main gradients: 4 B an element; bf16 ones (grad_reduce_in_bf16): 2 B
    assert ev["end_s"] - ev["start_s"] == pytest.approx(_seconds(data, params * per_param))
    ev_all = res.events
    first_forward = ev_all[(ev_all["rank"] == ev["rank"]) & (ev_all["kind"] == "forward")]["start_s"].min()
    assert first_forward >= ev["end_s"] - 1e-12


def test_the_step_grows_by_the_clear_on_a_single_stage():
    base = run(_scenario())
    data = _scenario(zero_grad_buffer=True)
    res = run(data)
    clear = _clears(res).iloc[0]
    grown = res.summary["step_time_s"] - base.summary["step_time_s"]
    assert grown == pytest.approx(clear["end_s"] - clear["start_s"], rel=1e-9)


def test_a_later_stage_clears_while_it_waits_for_its_first_activation():
    """Every stage clears its own buffer at the start; on stage 1 that is hidden behind the
    wait for stage 0's first forward, so the step grows by stage 0's clear only."""
    base = run(_scenario(pp=2))
    res = run(_scenario(pp=2, zero_grad_buffer=True))
    clears = _clears(res)
    assert sorted(clears["stage"]) == [0, 1]
    first_clear = clears[clears["stage"] == 0].iloc[0]
    grown = res.summary["step_time_s"] - base.summary["step_time_s"]
    assert grown == pytest.approx(first_clear["end_s"] - first_clear["start_s"], rel=1e-6)


def test_post_validated_period_counts_the_clear_not_the_wait_after_it():
    """With the optimizer's post-validation the step is the longest single-GPU period (Zero
    Bubble's "largest execution time of all stages"). A later stage's clear, run at the start,
    is followed by the wait for its first activation; in steady state it runs right before
    that activation, so its period grows by the clear's length, not by the pipeline's fill
    (under ZB-1p a later stage's period is the longest, so a fill counted there shows)."""
    def piped(**dp: bool) -> dict:
        data = _scenario(pp=4, **dp)
        data["cluster"]["gpus"] = 4
        data["parallel"]["schedule"] = "zb-1p"
        data["training"].update(global_batch=8, optimizer_post_validation=True)
        return data

    base = run(piped())
    res = run(piped(zero_grad_buffer=True))
    longest = _clears(res).assign(d=lambda c: c["end_s"] - c["start_s"])["d"].max()
    grown = res.summary["step_time_s"] - base.summary["step_time_s"]
    assert 0.0 < grown <= longest * (1 + 1e-6)


def test_sharded_gradients_have_no_whole_buffer_to_clear():
    assert _clears(run(_scenario(zero=3, zero_grad_buffer=True))).empty


def test_frameworks_clear_their_buffers():
    plain = {k: v for k, v in _scenario().items() if k != "dp"}
    for name in ("megatron-core", "megatron-lm-2021", "nanotron"):
        assert apply_framework({**plain, "framework": name})["dp"]["zero_grad_buffer"] is True, name
    nanotron_zero0 = {**plain, "parallel": {"zero": 0}, "framework": "nanotron"}
    assert apply_framework(nanotron_zero0)["dp"]["zero_grad_buffer"] is True
    # DeepSpeed: the BF16_Optimizer's fp32 buffer is cleared, fp16 ZeRO frees its .grad
    assert apply_framework({**plain, "framework": "deepspeed"})["dp"]["zero_grad_buffer"] is True
    fp16 = {**plain, "training": {**plain["training"], "precision": "fp16"}, "framework": "deepspeed"}
    assert apply_framework(fp16)["dp"]["zero_grad_buffer"] is False
    assert "zero_grad_buffer" not in apply_framework({**plain, "framework": "torchtitan"}).get("dp", {})
