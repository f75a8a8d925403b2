"""Pipeline sends overlap the next op only with virtual stages, as Megatron runs them.

Megatron-LM megatron/training/arguments.py ``validate_args``: without virtual pipeline stages,
``virtual_pipeline_model_parallel_size = None`` and ``overlap_p2p_comm = False`` ("non-interleaved
schedule does not support overlapping p2p communication"); the 1F1B schedule
(``forward_backward_pipelining_without_interleaving``) waits on each ``send_forward_recv_backward``.
"""

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario


def _pp_comm(**sections) -> bool:
    return build_context(scenario_from_dict(make_scenario(**sections))).scenario.overlap.pp_comm


@pytest.mark.parametrize("framework", [None, "megatron-core", "nemo", "megatron-bridge"])
def test_a_megatron_1f1b_blocks_on_its_sends_and_the_interleaved_schedule_overlaps_them(framework):
    extra = {"framework": framework} if framework else {}
    assert _pp_comm(parallel={"pp": 2}, **extra) is False
    # 8 layers on pp 2 at vpp 2: two layers a chunk, Megatron's interleaved schedule
    interleaved = {"pp": 4, "vpp": 2, "schedule": "interleaved"}
    assert _pp_comm(parallel=interleaved, cluster={"hardware": "dgx-h100", "gpus": 8}, **extra) is True


def test_a_written_true_is_the_generic_pipelines_and_refused_for_megatron():
    assert _pp_comm(parallel={"pp": 2}, overlap={"pp_comm": True}) is True
    with pytest.raises(UserError) as err:
        _pp_comm(parallel={"pp": 2}, overlap={"pp_comm": True}, framework="megatron-core")
    assert err.value.field == "overlap.pp_comm" and "interleaved" in str(err.value)


def test_the_default_1f1b_step_is_the_blocking_one():
    """The default simulates what overlap.pp_comm: false writes out, and a step that differs
    from the overlapped one (the sends are on the step's path)."""

    def step(**overlap) -> float:
        sc = make_scenario(parallel={"pp": 2}, training={"seq_len": 2048, "micro_batch": 1, "global_batch": 16},
                           overlap=overlap)  # fmt: skip
        return simulate(scenario_from_dict(sc)).summary["step_time_s"]

    default = step()
    assert default == step(pp_comm=False)
    assert default != step(pp_comm=True)


# PyTorch's torch/distributed/pipelining/schedules.py, Schedule1F1B._step_microbatches (torch
# 2.13): warm-up sends are waited on after the next forward ("Clear previous chunk's forward
# sends"), the last warm-up forward's send is fused with the first backward's receive
# (fwd_send_bwd_recv) and each steady-state send with the next op's receive, all waited on
# before the op; the cool-down keeps one backward send in flight and the last is waited on
# before perform_reduce_grad.
TORCH_1F1B = ("pytorch-ddp", "torchtitan", "automodel")


@pytest.mark.parametrize("framework", TORCH_1F1B)
def test_torch_1f1b_does_not_overlap_its_sends_and_refuses_a_written_true(framework):
    # torchtitan's DDP runs alone, and it ties no embeddings under a pipeline
    piped = {"pp": 2, "zero": 3} if framework == "torchtitan" else {"pp": 2}
    untied = {"tied_embeddings": False}
    assert _pp_comm(parallel=piped, framework=framework, model=untied) is False
    with pytest.raises(UserError) as err:
        _pp_comm(parallel=piped, overlap={"pp_comm": True}, framework=framework, model=untied)
    assert err.value.field == "overlap.pp_comm" and "Schedule1F1B" in str(err.value)
    assert _pp_comm(parallel={**piped, "schedule": "afab"}, framework=framework, model=untied) is True


def test_torch_1f1b_waits_on_a_send_where_the_stage_turns():
    """Stage 0 of 4 with 8 microbatches, in Schedule1F1B's order (4 warm-up forwards, then B/F
    turns, then the cool-down's backwards): which sends are waited on before the next op."""
    from simcluster.pipeline_p2p_overlap import send_blocks
    from simcluster.schedules import PipeOp

    kinds = "FFFF" + "BF" * 4 + "BBB"
    ops = [PipeOp(k, 0) for k in kinds]
    blocks = [send_blocks(op, ops[i + 1] if i + 1 < len(ops) else None) for i, op in enumerate(ops)]
    # warm-up F0..F2 in flight, F3 fused with B0's receive; every turn waits; the cool-down's
    # first three backwards (the last steady one included) in flight, the last one waited on
    assert blocks == [False, False, False, True] + [True] * 8 + [False, False, True]


def test_torch_1f1b_waits_at_the_turns_and_its_warm_up_sends_stay_off_the_critical_path(monkeypatch):
    """One stage a node (sends over InfiniBand): waiting where the stage turns costs time over
    keeping every send in flight until the next op has computed; waiting on every send as
    Megatron does costs nothing more here, since the warm-up's and cool-down's sends run while
    the stage computes ops whose inputs are already there."""
    from simcluster.engine import worker

    sc = make_scenario(framework="pytorch-ddp", cluster={"hardware": "dgx-a100", "gpus": 32},
                       parallel={"tp": 8, "pp": 4},
                       model={"layers": 16, "hidden": 4096, "heads": 32, "ffn": 16384},
                       training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8})  # fmt: skip

    def step() -> float:
        return simulate(scenario_from_dict(sc)).summary["step_time_s"]

    turns = step()
    monkeypatch.setattr(worker, "waits_at_turns", lambda scenario: False)
    every = step()
    monkeypatch.setattr(worker, "waits_at_turns", lambda scenario: True)
    monkeypatch.setattr(worker, "send_blocks", lambda op, following: False)
    in_flight = step()
    assert in_flight < turns
    assert every == pytest.approx(turns, rel=1e-3)
