"""Compute/communication interference (issue 8): NCCL collectives occupy SMs.

Sources: NCCL runs one CTA per channel and its CTAs never share an SM with compute kernels
(NVIDIA/nccl issue 689, maintainer); a DGX-A100 all-reduce uses 24 CTAs (NVIDIA/nccl issue
1225; nccl-tests issue 100 log: 24 ring channels); on H100 a GEMM next to a 24-CTA all-gather
drops from ~80% to ~47% MFU (NVIDIA developer forum thread 337991); overlapped compute slows
18.9% on average (Lee et al., arXiv 2507.03114). With c of the n SMs taken, compute runs at
(n - c) / n: a segment of s seconds fully covered by a collective takes s * n / (n - c).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import simpy

from simcluster.engine.interference import SmShare
from simcluster.engine.metrics import uncovered
from simcluster.errors import UserError
from simcluster.hardware import load_profile
from tests.engine_helpers import run

A100_SMS, NCCL_CTAS = 108, 24  # A100 whitepaper; NVIDIA/nccl issue 1225
RATE = (A100_SMS - NCCL_CTAS) / A100_SMS
INTERFERING = ("dp", "cp", "ep")  # edp is recorded as dp
KEY = ["rank", "kind", "name", "microbatch", "chunk", "layer"]


# --- the rate model on its own --------------------------------------------------------------
def _timeline(seconds: float, windows: list[tuple[float, float]]) -> float:
    """End time of ``seconds`` of compute started at 0 with collectives in flight on ``windows``."""
    env = simpy.Environment()
    share = SmShare(env, A100_SMS, NCCL_CTAS)
    end: list[float] = []

    def compute():
        yield from share.compute(0, seconds)
        end.append(env.now)

    def collective(start: float, stop: float):
        yield env.timeout(start)
        share.enter(0)
        yield env.timeout(stop - start)
        share.leave(0)

    env.process(compute())
    for w in windows:
        env.process(collective(*w))
    env.run()
    return end[0]


def test_fully_covered_segment_takes_seconds_times_sms_over_free_sms():
    # 10 s of GEMMs under one all-reduce lasting 20 s: 10 * 108 / 84
    assert _timeline(10.0, [(0.0, 20.0)]) == pytest.approx(10.0 * 108 / 84, rel=1e-12)


def test_partly_covered_segment_loses_the_stolen_share_of_the_overlap():
    # covered 2..5 s: 3 s at 84/108 speed -> the segment ends 3 * 24/108 s later
    assert _timeline(10.0, [(2.0, 5.0)]) == pytest.approx(10.0 + 3.0 * 24 / 108, rel=1e-12)


def test_overlapping_collectives_each_take_their_own_sms():
    # in flight 1..4 and 3..6: two kernels, each on 24 SMs of its own (an NCCL CTA fills an
    # SM's registers: 640 threads x 96 registers of 65,536), so 3..4 runs on 60 of 108
    lost = (2.0 * 24 + 1.0 * 48 + 2.0 * 24) / 108
    assert _timeline(10.0, [(1.0, 4.0), (3.0, 6.0)]) == pytest.approx(10.0 + lost, rel=1e-12)


def test_collectives_cannot_take_every_sm():
    # six 24-CTA collectives at once would want 144 of 108 SMs: compute keeps one SM
    end = _timeline(1.0, [(0.0, 1000.0)] * 6)
    assert end == pytest.approx(108.0, rel=1e-12)


def test_collective_starting_mid_segment_and_outlasting_it():
    # 4 s alone, then 6 s of work at 84/108 speed
    assert _timeline(10.0, [(4.0, 100.0)]) == pytest.approx(4.0 + 6.0 * 108 / 84, rel=1e-12)


# --- the profile field ----------------------------------------------------------------------
def test_shipped_profiles_take_24_sms_per_collective_with_a_source():
    for name in ("dgx-a100", "dgx-h100", "dgx-h200", "hgx-h800", "dgx-b200"):
        prof = load_profile(name)
        assert prof.efficiency.collective_sms == 24, name
        assert "efficiency.collective_sms" in prof.sources, name
    assert "ASSUMPTION" in load_profile("dgx-b200").sources["efficiency.collective_sms"]


@pytest.mark.parametrize("name", ["amd-mi300x", "amd-mi325x"])
def test_rccl_holds_56_cus_on_an_8_gpu_mi300_node(name):
    """RCCL's topology model for 8 fully connected MI300-series GPUs (rome_model_79) has 28
    rings, doubled to 56 channels of one 256-thread workgroup each; rocm-systems' rccl_common.h
    names the cap RCCL_MI3XX_MAX_SINGLE_NODE_CHANNELS = 56 (ROCm/rccl pull request 2073: "56 CUs
    for 8 ranks"). Overlapped compute keeps (304 - 56) / 304 of its speed."""
    prof = load_profile(name)
    assert prof.efficiency.collective_sms == 56
    assert "RCCL_MI3XX_MAX_SINGLE_NODE_CHANNELS" in prof.sources["efficiency.collective_sms"]
    assert (
        prof.gpu.sm_count - prof.efficiency.collective_sms
    ) / prof.gpu.sm_count == pytest.approx(0.8158, abs=1e-4)


@pytest.mark.parametrize(
    "patch", [{"efficiency": {"collective_sms": 108}}, {"efficiency": {"collective_sms": -1}}]
)
def test_bad_collective_sms_names_the_field(patch):
    with pytest.raises(UserError) as err:
        load_profile("dgx-a100", patch=patch)
    assert err.value.field == "cluster.profile.efficiency.collective_sms"


# --- the engine -----------------------------------------------------------------------------
def _dp_scenario(collective_sms: int, **parallel) -> dict:
    """A small GPT on two DGX-A100s, TP 2, two stages x DP 4 (ZeRO-3: one stage x DP 8),
    gradient reduction and parameter gathers overlapped."""
    pp = 1 if parallel.get("zero") == 3 else 2
    return {
        "name": "interference",
        "model": {
            "layers": 4,
            "hidden": 2048,
            "heads": 16,
            "ffn": 8192,
            "vocab": 1024,
            "mlp": "gelu",
            "norm": "layernorm",
        },
        "cluster": {
            "hardware": "dgx-a100",
            "gpus": 16,
            "gpus_per_node": 8,
            "network": "simulated",
            # every GPU equally fast (no slowest-GPU factor): the recorded step below predates it
            "profile": {
                "efficiency": {"collective_sms": collective_sms},
                "gpu": {"speed_spread": 0.0},
            },
        },
        "parallel": {"tp": 2, "pp": pp, "zero": 1, "schedule": "1f1b", **parallel},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 16, "precision": "bf16"},
        # the backward's TP all-reduce blocking (as before Megatron's async one): interference
        # here comes from the DP collectives alone, which the assertions below account. Pipeline
        # sends overlapped, written: a 1F1B without a framework blocks on them by default
        # (pipeline_p2p_overlap.py), and sends beside compute are part of what is checked here
        "overlap": {
            "dp_grad_reduce": True,
            "param_gather": True,
            "tp_grad_async": False,
            "pp_comm": True,
        },
    }


def _compute(events: pd.DataFrame) -> pd.DataFrame:
    return events[events["stream"] == "compute"].set_index(KEY).sort_index()


def _covered(events: pd.DataFrame, rank: int, start: float, end: float) -> float:
    comm = events[(events["rank"] == rank) & events["group"].isin(INTERFERING)]
    iv = comm[["start_s", "end_s"]].to_numpy()
    # covered = segment length minus the part no interfering collective is in flight over
    return (end - start) - uncovered(np.array([[start, end]]), iv)


def test_zero_collective_sms_is_the_model_without_interference():
    """collective_sms = 0: compute events last exactly their standalone seconds, and the step
    is the one recorded before interference existed (commit 0edb4fe: 0.026609 s), re-recorded
    when weight gradients started paying their fp32 main-gradient traffic (+1.19 ms) and when
    A100 attention moved to FlashAttention-2's sustained measured rate (+1.01 ms), and when the
    vocab-parallel loss's three small tp all-reduces were added (+0.07 ms), and when the
    optimizer step counted the 16-bit copy's read of the fp32 master (+0.03 ms: 34 -> 38 B per
    parameter of the stage's ZeRO shard), and when buckets became runs of whole tensors (+0.07
    ms: 25 MB of fp32 gradients split each 50M-parameter layer into smaller reduce-scatters),
    and when a bucket closing on a layer's MLP weights started before that layer's attention
    backward (-0.25 ms), and when an unfused add into the fp32 main gradient was charged its 10 B
    per parameter instead of 8 (+0.30 ms), and when collectives took NCCL's current protocol
    rates and latency terms (network/nccl_caps.py: -0.02 ms), and when the optimizer step's eager
    Python after the norm's sync was waited for (training.step_tail: +0.11 ms)."""
    res = run(_dp_scenario(0))
    assert res.summary["step_time_s"] == 0.029123302362199514
    ev = res.events
    assert res.events.equals(run(_dp_scenario(0)).events)  # deterministic
    slow = _compute(run(_dp_scenario(24)).events)
    assert len(slow) == len(_compute(ev))
    assert ev["end_s"].max() < slow["end_s"].max()


def test_every_compute_segment_is_retimed_by_its_covered_time():
    """Per compute event: uncovered time + covered time * 84/108 = its standalone seconds."""
    fast = _compute(run(_dp_scenario(0, zero=3)).events)
    slow_ev = run(_dp_scenario(24, zero=3)).events
    slow = _compute(slow_ev)
    assert list(fast.index) == list(slow.index)
    standalone = (fast["end_s"] - fast["start_s"]).to_numpy()
    covered_total = 0.0
    for (key, row), alone in zip(slow.iterrows(), standalone, strict=True):
        covered = _covered(slow_ev, key[0], row["start_s"], row["end_s"])
        covered_total += covered
        took = row["end_s"] - row["start_s"]
        assert (took - covered) + covered * RATE == pytest.approx(alone, rel=1e-9, abs=1e-15)
    assert covered_total > 0  # ZeRO-3 prefetch and reduce-scatters run under compute


def test_pipeline_p2p_and_tp_collectives_do_not_slow_compute():
    """No data parallelism, TP comm overlap on: TP collectives and pipeline sends run under
    compute (sequence parallel), yet the events are identical with 0 and 100 of 108 SMs per collective."""

    def scenario(sms: int) -> dict:
        data = _dp_scenario(sms)
        data["cluster"]["gpus"] = 4
        data["training"]["global_batch"] = 8
        data["overlap"]["tp_comm"] = True
        data["parallel"]["sequence_parallel"] = True  # TP overlap needs SP (Megatron)
        return data

    base, stolen = run(scenario(0)).events, run(scenario(100)).events
    for group in ("tp", "pp"):
        under = 0.0
        for _rank, rows in base.groupby("rank", sort=True):
            compute = rows[rows["stream"] == "compute"][["start_s", "end_s"]].to_numpy()
            comm = rows[(rows["group"] == group) & (rows["kind"] != "recv")]
            iv = comm[["start_s", "end_s"]].to_numpy()
            under += (iv[:, 1] - iv[:, 0]).sum() - uncovered(iv, compute)
        assert under > 0, group  # the comm really runs next to compute
    pd.testing.assert_frame_equal(base, stolen)


def test_dp_overlap_slows_the_step_and_exposed_comm_stays_consistent():
    """Overlapped gradient reduction now costs compute time. Per rank: the compute stream got
    longer by exactly the lost work (covered time x 24/108); exposed DP comm is the DP time the
    compute stream leaves uncovered; compute-busy + exposed comm fit in the step."""
    base, slow = run(_dp_scenario(0)), run(_dp_scenario(24))
    step = slow.summary["step_time_s"]
    assert step > base.summary["step_time_s"]
    ev, alone = slow.events, _compute(base.events)
    worst_dp = 0.0
    for rank, rows in ev.groupby("rank", sort=True):
        on = rows[rows["stream"] == "compute"]
        compute = on[["start_s", "end_s"]].to_numpy()
        lost = sum(_covered(ev, rank, s, e) for s, e in compute) * (1 - RATE)
        mine = alone.loc[rank]
        longer = (compute[:, 1] - compute[:, 0]).sum() - (mine["end_s"] - mine["start_s"]).sum()
        assert longer == pytest.approx(lost, rel=1e-9)
        assert lost > 0
        comm = rows[rows["group"] != ""]
        exposed = uncovered(comm[["start_s", "end_s"]].to_numpy(), compute)
        busy = (compute[:, 1] - compute[:, 0]).sum()  # the compute stream never overlaps itself
        assert busy + exposed <= step * (1 + 1e-12)
        dp = rows[rows["group"] == "dp"][["start_s", "end_s"]].to_numpy()
        worst_dp = max(worst_dp, uncovered(dp, compute))
    assert slow.summary["exposed_comm_s"]["dp"] == pytest.approx(worst_dp, rel=1e-12)


@pytest.mark.parametrize("parallel", [{"zero": 1}, {"zero": 3}])
def test_symmetry_matches_all_ranks_with_interference(parallel):
    data = _dp_scenario(24, **parallel)
    sym, every = run(data).summary, run(data, all_ranks=True).summary
    assert sym["step_time_s"] != run(_dp_scenario(0, **parallel)).summary["step_time_s"]
    assert every["step_time_s"] == pytest.approx(sym["step_time_s"], rel=1e-9)
    assert every["exposed_comm_s"] == pytest.approx(sym["exposed_comm_s"], rel=1e-9, abs=1e-12)


def test_collectives_in_flight_together_hold_the_sum_of_their_sms():
    """A userbuffers bulk overlap holds its own ``num_sm`` (NeMo's H100 preset: qkv_wgrad 24,
    fc1_wgrad 4 of 132 SMs); two in flight at once are two kernels, each on SMs of its own
    (NCCL's built for one CTA per SM: ``__launch_bounds__(NCCL_MAX_NTHREADS, 1)``,
    ``-maxrregcount=96``), so compute keeps 132 - 4 - 24 SMs while both run."""
    env = simpy.Environment()
    share = SmShare(env, 132, 0, userbuffer_sms=24)
    end: list[float] = []

    def compute():
        yield from share.compute(0, 10.0)
        end.append(env.now)

    def holder(sms: int, start: float, stop: float):
        yield env.timeout(start)
        share.enter(0, sms)
        yield env.timeout(stop - start)
        share.leave(0, sms)

    env.process(compute())
    env.process(holder(4, 0.0, 20.0))  # 4 SMs throughout
    env.process(holder(24, 2.0, 4.0))  # 24 SMs from 2 s to 4 s
    env.run()
    # 0-2 s and after 4 s at 128/132, 2-4 s at 104/132
    done = 2 * 128 / 132 + 2 * 104 / 132
    assert end[0] == pytest.approx(4.0 + (10.0 - done) * 132 / 128, rel=1e-12)
    assert share.held_by("tp", sms=24) == 24 and share.held_by("dp") == 0  # NCCL takes none here


def test_every_group_a_collective_can_run_on_has_a_stream_and_interferes_as_what_it_is_shown_as():
    """The engine's group tables are kept in three modules (comms, recorder, interference) and
    grow with each parallelism (hybrid sharding's dps/dpr/edps/edpr, hierarchical CP's cpa/cpr):
    a group missing from the recorder has no stream, and one missing from the interfering set
    would run its NCCL kernels without taking SMs from compute, unlike the group it is reported
    as (a hierarchical CP all-to-all is a cp collective, a replica all-reduce a dp one)."""
    from simcluster.engine.comms import GROUP_DIM, SHOWN_AS
    from simcluster.engine.interference import INTERFERING_GROUPS
    from simcluster.engine.recorder import STREAM_OF_GROUP

    assert set(GROUP_DIM) <= set(STREAM_OF_GROUP)
    for group in GROUP_DIM:
        shown = SHOWN_AS.get(group, group)
        if shown in ("dp", "cp", "ep"):
            assert group in INTERFERING_GROUPS, group
        # a stream of its own: ppg's all-gather runs in the pipeline receive's blocking call, the
        # FP8 amax all-reduce in a process group (and NCCL stream) apart from the gradients'
        assert STREAM_OF_GROUP[group] == STREAM_OF_GROUP[shown] or group in (
            "ppg",
            "amax",
            "amax_tp",
        ), group
