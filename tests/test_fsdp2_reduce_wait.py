"""PyTorch FSDP2 keeps one gradient reduce-scatter in flight.

Reference: pytorch/pytorch ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``
(torch 2.5 to 2.11): ``post_backward`` makes the current stream ``wait_event`` on the previous
group's ``reduce_scatter_state.event`` before calling ``foreach_reduce``, whose copy-in of the
gradients into the reduce-scatter buffer runs on the current stream (PR 129721; before it, on the
reduce-scatter stream behind the previous reduce-scatter, which the current stream then waited
for). ``FSDPState._root_post_backward_final_callback`` ends every backward with the current stream
waiting for the last reduce-scatter and each group's post-reduce event.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import run

MICROBATCHES = 2  # per replica


def _scenario(**dp: object) -> dict:
    """Llama 3.2 1B under torchtitan's FSDP2 on two nodes with 10 Gb/s NICs: each layer's
    reduce-scatter outlasts the next layer's backward."""
    return {
        "name": "fsdp2-wait",
        "model": "llama3.2-1b",
        "framework": "torchtitan",
        "cluster": {"hardware": "dgx-h100", "gpus": 16, "nic_gbps": 10.0},
        "parallel": {"zero": 3},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 16 * MICROBATCHES},
        "dp": dict(dp),
    }


def _events(**dp: object):
    ev = run(_scenario(**dp)).events
    return ev[ev["rank"] == 0]


def test_fsdp2_waits_for_the_previous_reduce_scatter_by_default():
    assert build_context(scenario_from_dict(_scenario())).scenario.fsdp2
    waits = _events()
    scatters = waits[waits["name"] == "zero3_grad_reduce_scatter"].sort_values("start_s")
    copies = waits[waits["name"] == "fsdp2_copy_in"].sort_values("start_s")
    assert len(copies) == len(scatters) > 2
    assert (copies["stream"] == "compute").all()
    # each copy-in (the next reduce-scatter's) starts after the reduce-scatter issued before it
    for (_, prev), (_, copy) in zip(scatters.iloc[:-1].iterrows(), copies.iloc[1:].iterrows(), strict=True):
        assert copy["start_s"] >= prev["end_s"] - 1e-12
    # the next microbatch's forward starts after the previous backward's last reduce-scatter
    forwards = waits[(waits["stream"] == "compute") & (waits["kind"] == "forward")]
    second = forwards[forwards["microbatch"] == 1]["start_s"].min()
    first_backward = scatters[scatters["start_s"] < second]
    assert second >= first_backward["end_s"].max() - 1e-12


def test_without_the_wait_the_backward_runs_on_under_the_reduce_scatters():
    """dp.wait_reduction false (FSDP1-like): the copy-cast runs on the reduce-scatter stream
    and the backward's compute never waits for a reduce-scatter, so the step is shorter on this
    slow network (the next forward still waits for its parameter gathers, queued behind)."""
    free = run(_scenario(wait_reduction=False))
    waiting = run(_scenario())
    ev = free.events[free.events["rank"] == 0]
    assert (ev["name"] == "fsdp2_copy_in").sum() == 0
    scatters = ev[ev["name"] == "zero3_grad_reduce_scatter"].sort_values("start_s")
    backward = ev[(ev["stream"] == "compute") & (ev["kind"] == "backward") & (ev["microbatch"] == 0)]
    # backward kernels run while the first reduce-scatters are still in flight
    assert (backward["start_s"] > scatters["end_s"].iloc[0] - 1e-12).any()
    assert backward["end_s"].max() < scatters[scatters["start_s"] < backward["end_s"].max()]["end_s"].max()
    assert free.summary["step_time_s"] < waiting.summary["step_time_s"]
    assert waiting.summary["step_time_s"] == pytest.approx(run(_scenario(wait_reduction=True)).summary["step_time_s"])
