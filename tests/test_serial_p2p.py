"""``overlap.pp_p2p: serial``: DeepSpeed's pipeline engine, one blocking send or receive at a time.

DeepSpeed's TrainSchedule (deepspeed/runtime/pipe/schedule.py) runs a middle stage's steady state
as [RecvActivation, SendGrad, ForwardPass] then [SendActivation, RecvGrad, BackwardPass], each
instruction a blocking NCCL send or recv (pipe/p2p.py), and an NCCL send moves its data only
while the receiver is in the matching recv. So a middle stage spends four transfer times T per
microbatch in p2p, where Megatron's batched send_forward_recv_backward / send_backward_recv_forward
spend two: the steady-state period is longer by exactly 2T.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.engine.plan import build_cluster, pipeline_p2p_seconds
from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict


def _scenario(global_batch: int, p2p: str, network: str = "simulated", **parallel):
    return scenario_from_dict({
        "model": {"name": "t", "layers": 8, "hidden": 4096, "heads": 32, "ffn": 16384, "vocab": 1024,
                  "mlp": "gelu"},
        # one GPU per node: every stage boundary crosses the network, so T is well above noise
        "cluster": {"hardware": "dgx-a100", "gpus": 4, "gpus_per_node": 1, "network": network},
        "parallel": {"tp": 1, "pp": 4, **parallel},
        "overlap": {"pp_comm": False, "pp_p2p": p2p, "dp_grad_reduce": False},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": global_batch, "precision": "bf16",
                     "recompute": "none"},
    })  # fmt: skip


def _period(p2p: str) -> float:
    """Seconds per extra microbatch in the steady state (two runs, 16 microbatches apart)."""
    short, long = (simulate(_scenario(m, p2p)).summary["step_time_s"] for m in (16, 32))
    return (long - short) / 16


def test_serial_p2p_costs_a_middle_stage_two_more_transfers_per_microbatch():
    ctx = build_context(_scenario(16, "serial"))
    transfer = pipeline_p2p_seconds(ctx, build_cluster(ctx.profile, 4, 1))
    assert transfer > 1e-3  # 4096 x 4096 bf16 = 33.5 MB over one 200 Gb/s NIC
    assert _period("serial") - _period("batched") == pytest.approx(2 * transfer, rel=1e-6)


def test_with_free_transfers_the_order_alone_costs_nothing():
    # the same 1F1B order, so with zero-time transfers the rendezvous never waits longer than
    # the data dependencies already do
    batched, serial = (
        simulate(_scenario(16, p2p, network="ideal")).summary["step_time_s"] for p2p in ("batched", "serial")
    )
    assert serial == batched


def test_deepspeed_framework_selects_serial_p2p():
    sc = scenario_from_dict({
        "framework": "deepspeed",
        "model": {"preset": "llama3-8b"},
        "cluster": {"gpus": 16},
        "parallel": {"tp": 2, "pp": 2},
        "training": {"seq_len": 4096, "global_batch": 32},
    })  # fmt: skip
    assert sc.overlap.pp_p2p == "serial" and sc.overlap.pp_comm is False


@pytest.mark.parametrize(
    ("override", "needle"),
    [({"schedule": "interleaved", "vpp": 2}, "1f1b, afab, zb-h1-ds, zb-h1-ds-exact only"), ({}, "pp_comm: false")],
)
def test_serial_p2p_outside_deepspeeds_engine_is_a_one_line_error(override, needle):
    sc = _scenario(16, "serial", **override)
    if not override:
        sc = sc.model_copy(update={"overlap": sc.overlap.model_copy(update={"pp_comm": True})})
    with pytest.raises(UserError) as err:
        build_context(sc)
    assert err.value.field == "overlap.pp_p2p"
    assert needle in str(err.value)


def test_a_schedule_the_serial_engine_does_not_run_is_refused_by_the_framework():
    """nanotron's engines are OneForwardOneBackward and AllForwardAllBackward
    (parallel/pipeline_parallel/engine.py): a ZB-H1 under it is refused by the framework's
    schedules, naming the framework that runs it, before the serial p2p is looked at."""
    sc = scenario_from_dict({
        "framework": "nanotron",
        "model": {"preset": "llama3-8b"},
        "cluster": {"gpus": 16},
        "parallel": {"tp": 2, "pp": 2, "schedule": "zb-h1"},
        "training": {"seq_len": 4096, "global_batch": 32},
    })  # fmt: skip
    with pytest.raises(UserError) as err:
        build_context(sc)
    assert err.value.field == "parallel.schedule"
    assert "framework nanotron does not run schedule 'zb-h1' (its pipelines run 1f1b, afab)" in str(err.value)
    assert "framework zero-bubble" in str(err.value)


# nanotron's AllForwardAllBackwardPipelineEngine (parallel/pipeline_parallel/engine.py): after
# each forward it executes the queued activation send, after each backward the gradient send,
# each a blocking isend + wait (p2p.py), and a forward's input is received (blocking) inside
# the model's first PipelineBlock: one thing at a time on a stage.


def test_afab_with_free_transfers_serial_costs_nothing():
    batched, serial = (
        simulate(_scenario(8, p2p, network="ideal", schedule="afab")).summary["step_time_s"]
        for p2p in ("batched", "serial")
    )
    assert serial == batched


def test_afab_serial_stage_does_one_thing_at_a_time():
    serial = simulate(_scenario(8, "serial", schedule="afab"))
    batched = simulate(_scenario(8, "batched", schedule="afab"))
    assert serial.summary["step_time_s"] > batched.summary["step_time_s"]
    events = serial.events
    middle = events[events["rank"] == sorted(events["rank"].unique())[1]]
    pipe = middle[middle["kind"].isin(["forward", "backward", "send", "recv"])]
    spans = sorted(zip(pipe["start_s"], pipe["end_s"], strict=True))
    for (_, end), (start, _) in zip(spans[:-1], spans[1:], strict=True):
        assert start >= end - 1e-12  # no send, receive or compute overlaps another
