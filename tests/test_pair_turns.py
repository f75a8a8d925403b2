"""The two ops of an F&B pair take the compute stream in turns, in the order the framework
issues to it, not whichever is ready first.

Reference: Megatron-LM ``megatron/core/models/common/model_chunk_schedule_plan.py``,
``schedule_layer_1f1b``: per layer pair the compute stream gets the backward's attention (of the
layer before), the forward's attention, the backward's MLP, the forward's MLP, and each
expert-parallel all-to-all goes to the communication stream where the turn changes hands.
DeepSeek-V3 report Fig. 4 arranges DualPipe's pairs the same way.
"""

from __future__ import annotations

import copy

import simpy
from conftest import make_scenario

from simcluster.engine import simulate
from simcluster.engine.pair_stream import Lane, PairStream
from simcluster.scenario import scenario_from_dict

MOE = {
    "name": "small-moe", "layers": 4, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn": 5632,
    "vocab": 1024, "experts": 8, "top_k": 2, "expert_ffn": 5632, "position": "rope",
}  # fmt: skip


def _runs(events, lo: float, hi: float) -> list[tuple[int, str, int]]:
    """The compute stream between ``lo`` and ``hi`` as runs of one microbatch's kernels:
    (microbatch, first kernel, its layer) per run."""
    ev = events[(events["stream"] == "compute") & (events["kind"].isin(["forward", "backward"]))]
    ev = ev[(ev["start_s"] >= lo) & (ev["end_s"] <= hi)].sort_values("start_s")
    runs: list[tuple[int, str, int]] = []
    for mb, name, layer in zip(ev["microbatch"], ev["name"], ev["layer"], strict=True):
        if not runs or runs[-1][0] != mb:
            runs.append((int(mb), str(name), int(layer)))
    return runs


def test_pair_alternates_attention_and_mlp_parts_as_megatron_issues_them():
    sc = scenario_from_dict(make_scenario(
        model=MOE, cluster={"hardware": "dgx-h100", "gpus": 16},
        parallel={"tp": 1, "pp": 1, "ep": 8},
        training={"seq_len": 4096, "micro_batch": 1, "global_batch": 64, "fused_cross_entropy": True},
        overlap={"ep_comm": True},
    ))  # fmt: skip
    ev = simulate(sc).events
    ev = ev[ev["rank"] == 0]
    # the first pair: MB1's forward with MB0's backward (Megatron's combined 1F1B, one stage)
    mb0_b = ev[(ev["microbatch"] == 0) & (ev["kind"] == "backward")]
    mb1_f = ev[(ev["microbatch"] == 1) & (ev["kind"] == "forward")]
    lo = min(mb0_b["start_s"].min(), mb1_f["start_s"].min())
    hi = max(mb0_b["end_s"].max(), mb1_f["end_s"].max())
    runs = _runs(ev, lo, hi)
    # B: head and layer 3's router recompute, up to its combine's backward all-to-all
    expected = [(0, "lm_head", -1), (1, "embedding", -1)]
    for f_layer in range(4):
        b_layer = 3 - f_layer
        expected += [(0, "experts", b_layer), (1, "experts", f_layer)]  # B's MLP, then F's
        if f_layer < 3:
            # B's router (with the permute's gradient) and attention, then F's combine tail and
            # attention
            expected += [(0, "router", b_layer), (1, "unpermute", f_layer)]
    assert runs[: len(expected)] == expected
    # every all-to-all of one op runs under the other's compute: none of MB1's dispatches is
    # exposed on its own stream while MB0's backward still has kernels to run
    dispatch = ev[(ev["name"] == "ep_dispatch") & (ev["microbatch"] == 1)]
    busy = ev[(ev["stream"] == "compute") & (ev["microbatch"] == 0) & (ev["kind"] == "backward")]
    for start, end in zip(dispatch["start_s"], dispatch["end_s"], strict=True):
        under = busy[(busy["start_s"] < end) & (busy["end_s"] > start)]
        assert len(under) > 0


def test_faster_nvlink_never_slows_a_dualpipev_step():
    """tools/metamorphic.py seed 919, draw 36: with the ready-first rule NVLink x1.5 made this
    DualPipeV step 0.4-0.8% longer (a faster TP collective let the other op's block in first).
    In a fixed order the step is a max-plus function of the durations: shorter never slower.
    (The draw named Megatron-Core, which runs no DualPipeV: its distributed optimizer and bucket
    passes are spelled out here.)"""
    base = {
        "name": "m919", "model": "qwen2.5-7b", "dp": {"nan_check": True, "prescale": True},
        "cluster": {"hardware": "dgx-h100", "gpus": 64},
        "parallel": {"tp": 4, "cp": 4, "pp": 4, "zero": 1, "schedule": "dualpipev", "sequence_parallel": False},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 32, "recompute": "selective"},
    }  # fmt: skip
    faster = copy.deepcopy(base)
    faster["cluster"]["profile"] = {"node": {"nvlink_GBps": 675.0}}  # DGX H100: 450 GB/s x1.5
    t0 = simulate(scenario_from_dict(base)).summary["step_time_s"]
    t1 = simulate(scenario_from_dict(faster)).summary["step_time_s"]
    assert t1 < t0


def _use(env: simpy.Environment, lane: Lane, seconds: float, log: list[str], tag: str):
    req = yield from lane.acquire()
    with req:
        log.append(f"{tag}@{env.now:g}")
        yield env.timeout(seconds)


def test_turns_pass_only_at_hand_over_and_the_rest_goes_to_the_op_still_running():
    env = simpy.Environment()
    stream = PairStream.open(env)
    b, f = Lane(stream, "B"), Lane(stream, "F")
    log: list[str] = []

    def forward():
        # ready at once, but the backward has the first turn
        yield from _use(env, f, 1.0, log, "F1")
        f.hand_over()
        yield from _use(env, f, 1.0, log, "F2")
        f.finish()

    def backward():
        yield env.timeout(0.5)  # e.g. waiting for a kernel's input: the turn stays its own
        yield from _use(env, b, 2.0, log, "B1")
        b.hand_over()
        yield from _use(env, b, 1.0, log, "B2")
        b.hand_over()
        yield from _use(env, b, 1.0, log, "B3")  # back to it when the forward finishes
        b.finish()

    env.process(forward())
    env.process(backward())
    env.run()
    assert log == ["B1@0.5", "F1@2.5", "B2@3.5", "F2@4.5", "B3@5.5"]


def test_turn_passes_before_the_expert_tp_collective_next_to_an_all_to_all():
    """Megatron's combine node runs the expert-TP reduce-scatter and then the all-to-all on the
    communication stream (its dispatch node the all-to-all, then the all-gather): the turn
    passes before the first of them. A TP collective alone does not pass it."""
    from simcluster.engine.worker import _turn_points
    from simcluster.parallelism.segments import Comm, Compute, Work

    def compute(name):
        return Compute.of(name, Work.of(gemm=1e-3), 0)

    combine = [compute("experts"), Comm("etp_rs", "etp", "reduce_scatter", 1.0), Comm("ep_combine", "ep", "all_to_all", 1.0),
               compute("unpermute")]  # fmt: skip
    dispatch = [compute("router"), Comm("ep_dispatch", "ep", "all_to_all", 1.0), Comm("etp_ag", "etp", "all_gather", 1.0),
                compute("experts")]  # fmt: skip
    tp_only = [compute("attn_out"), Comm("tp_ar", "tp", "all_reduce", 1.0), compute("mlp")]
    assert _turn_points(combine) == {1}
    assert _turn_points(dispatch) == {1}
    assert _turn_points(tp_only) == set()
    assert _turn_points(dispatch + combine) == {1, 5}


def test_a_run_of_blocking_collectives_is_enqueued_together():
    """The host enqueues the expert-TP reduce-scatter and the all-to-all after it back to back
    (only the GPU streams wait), so they take their places in the issue order together; an
    overlapped collective is enqueued alone."""
    from simcluster.engine.worker import _enqueued_with
    from simcluster.parallelism.segments import Comm, Compute, Work

    segs = [Compute.of("experts", Work.of(gemm=1e-3), 0), Comm("etp_rs", "etp", "reduce_scatter", 1.0),
            Comm("ep_combine", "ep", "all_to_all", 1.0), Compute.of("unpermute", Work.of(memory=1e-4), 0),
            Comm("tp_ag", "tp", "all_gather", 1.0, overlap=True), Comm("tp_rs", "tp", "reduce_scatter", 1.0)]  # fmt: skip
    assert list(_enqueued_with(segs, 1)) == [1, 2]
    assert list(_enqueued_with(segs, 4)) == [4]
    assert list(_enqueued_with(segs, 5)) == [5]
