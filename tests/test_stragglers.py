"""Known stragglers (simulation.stragglers): a slow GPU, degraded NICs.

The checks are the arithmetic of a synchronous step: a rank whose kernels take f times as long
spends exactly f times its compute, a data-parallel step without overlap waits for it, a
1F1B pipeline runs at its slowest stage's pace, and a ring across a link at half its capacity
moves its bytes at half the rate (nccl-tests: a ring's bus bandwidth is its slowest link's).
"""

from __future__ import annotations

import pytest
from conftest import make_scenario

from simcluster import simulate
from simcluster.errors import UserError
from simcluster.hardware import load_profile
from simcluster.network import collective_time
from simcluster.scenario import scenario_from_dict
from simcluster.stragglers import degrade_nics
from simcluster.topology import build_cluster

NO_OVERLAP = {"dp_grad_reduce": False, "param_gather": False}
# identical GPUs, and a host that issues instantly: this small model's kernels are shorter than
# their issue from Python (parallelism/host.py), and a host-bound step would not scale with a
# slow GPU's kernels
IDENTICAL_GPUS = {
    "hardware": "dgx-h100", "gpus": 8, "speed_spread": 0.0, "profile": {"efficiency": {"host_op_us": 0.0}},
}  # fmt: skip


def _run(stragglers=None, **sections):
    raw = make_scenario(**sections)
    raw["simulation"] = {"all_ranks": True, "stragglers": stragglers or []}
    return simulate(scenario_from_dict(raw))


def _compute_seconds(result, rank: int) -> float:
    ev = result.events
    mine = ev[(ev["rank"] == rank) & (ev["stream"] == "compute")]
    return float((mine["end_s"] - mine["start_s"]).sum())


def test_slow_gpu_spends_f_times_its_compute_and_the_dp_step_waits_for_it():
    """dp 8, no overlap: compute, then the gradient reduction every rank enters only once the
    straggler has, then the optimizer; so the step grows by (f - 1) x the straggler's compute."""
    sections = dict(cluster=IDENTICAL_GPUS, parallel={"zero": 1}, overlap=NO_OVERLAP)
    base = _run(**sections)
    slow = _run([{"gpu": 5, "compute": 1.5}], **sections)
    c5 = _compute_seconds(base, 5)
    assert _compute_seconds(slow, 5) == pytest.approx(1.5 * c5, rel=1e-9)
    assert _compute_seconds(slow, 0) == pytest.approx(_compute_seconds(base, 0), rel=1e-9)
    step, step0 = slow.summary["step_time_s"], base.summary["step_time_s"]
    assert step == pytest.approx(step0 + 0.5 * c5, rel=1e-6)
    assert slow.summary["stragglers"] == {"compute": {"5": 1.5}, "nic": {}}
    assert slow.summary["all_ranks"] and "straggler x1.5" in slow.rank_labels[5]


def test_a_slow_stage_sets_the_pace_of_a_1f1b_pipeline():
    """1F1B with one stage f times slower: the step holds that stage's m microbatches at f times
    their time, plus at most one forward and backward of each other stage (fill and drain)."""
    sections = dict(
        cluster={**IDENTICAL_GPUS, "gpus": 4, "network": "ideal"},
        parallel={"pp": 4},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 16},
    )
    base = _run(**sections)
    slow = _run([{"gpu": 2, "compute": 2.0}], **sections)
    m = base.summary["microbatches"]
    ev = base.events
    passes = ev[ev["kind"].isin(["forward", "backward"])]
    per_stage = {r: float((g["end_s"] - g["start_s"]).sum()) for r, g in passes.groupby("rank")}
    slow_stage = 2.0 * per_stage[2]  # m microbatches of F + B on the slow stage
    others = sum(per_stage[r] / m for r in (0, 1, 3))  # one F + B of every other stage
    step = slow.summary["step_time_s"]
    assert slow_stage < step <= slow_stage + others + 0.01 * slow_stage
    assert step > 1.5 * base.summary["step_time_s"]


def test_ring_through_a_half_speed_nic_takes_twice_as_long():
    """An all-reduce between one GPU on each of two nodes is a ring over their NICs; with one
    node's NICs at half capacity its bandwidth term doubles (latency aside)."""
    profile = load_profile("dgx-h100")
    healthy = build_cluster(profile, 16)
    degraded = build_cluster(profile, 16)
    degrade_nics(degraded, {1: 0.5})
    size = 4 * 2**30
    t0 = collective_time("all_reduce", size, healthy, [0, 8])
    t1 = collective_time("all_reduce", size, degraded, [0, 8])
    assert t1 / t0 == pytest.approx(2.0, rel=0.01)
    # a node that is not on the path changes nothing
    degrade_nics(healthy, {})
    assert collective_time("all_reduce", size, healthy, [0, 8]) == t0


def test_degraded_nics_slow_a_cross_node_step_and_nothing_inside_a_node():
    sections = dict(
        cluster={**IDENTICAL_GPUS, "gpus": 16}, parallel={"tp": 8, "zero": 1}, overlap=NO_OVERLAP
    )
    base = _run(**sections)
    slow = _run([{"node": 1, "nic": 0.25}], **sections)
    assert slow.summary["exposed_comm_s"]["dp"] > 2 * base.summary["exposed_comm_s"]["dp"]
    assert slow.summary["exposed_comm_s"]["tp"] == pytest.approx(base.summary["exposed_comm_s"]["tp"])


def test_stragglers_imply_every_rank_and_are_deterministic():
    raw = make_scenario(cluster=IDENTICAL_GPUS)
    raw["simulation"] = {"stragglers": [{"gpu": 1, "compute": 1.1}]}
    a = simulate(scenario_from_dict(raw))
    b = simulate(scenario_from_dict(raw))
    assert a.summary["all_ranks"]
    assert a.summary["step_time_s"] == b.summary["step_time_s"]


@pytest.mark.parametrize(
    ("item", "field", "words"),
    [
        ({"compute": 1.2}, "simulation.stragglers.0", "exactly one of gpu"),
        ({"gpu": 1, "node": 0}, "simulation.stragglers.0", "exactly one of gpu"),
        ({"gpu": 8}, "simulation.stragglers.0.gpu", "outside the job (0..7)"),
        ({"gpu": 1, "nic": 0.5}, "simulation.stragglers.0.nic", "applies to a node"),
        ({"node": 0, "compute": 2.0}, "simulation.stragglers.0.compute", "applies to a GPU"),
        ({"node": 0, "nic": 0.5}, "simulation.stragglers.0.node", "single-node job"),
    ],
)
def test_bad_stragglers_name_the_field(item, field, words):
    raw = make_scenario()
    raw["simulation"] = {"stragglers": [item]}
    with pytest.raises(UserError) as err:
        simulate(scenario_from_dict(raw))
    assert err.value.field == field and words in err.value.message


def test_node_outside_the_cluster_and_duplicates_are_refused():
    raw = make_scenario(cluster={"hardware": "dgx-h100", "gpus": 16}, parallel={"tp": 8})
    raw["simulation"] = {"stragglers": [{"node": 2, "nic": 0.5}]}
    with pytest.raises(UserError, match="outside the cluster"):
        simulate(scenario_from_dict(raw))
    raw["simulation"] = {"stragglers": [{"gpu": 3}, {"gpu": 3, "compute": 2}]}
    with pytest.raises(UserError, match="listed twice"):
        simulate(scenario_from_dict(raw))


@pytest.mark.parametrize(
    "argv",
    [["memory", "llama3-8b-8xh100", "--set", "simulation.stragglers=[{gpu: 99, compute: 2}]"],
     ["compare", "llama3-8b-8xh100", "llama3-8b-8xh100@simulation.stragglers=[{gpu: 99, compute: 2}]"]],
)  # fmt: skip
def test_a_straggler_outside_the_job_is_refused_by_every_command(cli, argv):
    """memory printed 'fits' for a straggler on GPU 99 of an 8-GPU job, and compare found it
    only once the scenarios before it were simulated: the check runs with the layout's."""
    from tests.test_scenario_errors import assert_one_line_error

    assert_one_line_error(cli(*argv), "simulation.stragglers.0.gpu", "GPU 99 is outside the job (0..7)")


def test_schema_bounds(cli):
    result = cli("run", "llama3-8b-8xh100", "--set", "simulation.stragglers=[{gpu: 1, compute: 0}]")
    assert result.code == 2 and "simulation.stragglers.0.compute" in result.err
    result = cli("run", "llama3-8b-8xh100", "--set", "simulation.stragglers=[{gpu: 1, speed: 2}]")
    assert result.code == 2 and "unknown key" in result.err and "Traceback" not in result.err


def test_run_table_names_the_stragglers(cli):
    result = cli(
        "run",
        "llama3-8b-8xh100",
        "--set",
        "training.global_batch=8",
        "--set",
        "simulation.stragglers=[{gpu: 3, compute: 1.25}]",
    )
    assert result.code == 0, result.err
    assert "stragglers" in result.out and "GPU 3 kernels x1.25" in result.out


PAIRED = [
    # DualPipe with TP and sequence parallelism (once refused: a slow GPU made the two ops'
    # collectives reach a TP group's ranks in different orders, and they deadlocked)
    ({
        "model": {"preset": "gpt3-13b", "layers": 8},
        "cluster": {"hardware": "dgx-a100", "gpus": 16},
        "parallel": {"tp": 4, "pp": 2, "schedule": "dualpipe", "sequence_parallel": True},
        "training": {"seq_len": 1024, "global_batch": 16},
    }, 1),
    # Megatron-Core's EP overlap with expert TP: a run of two blocking collectives (expert-TP
    # reduce-scatter, then the all-to-all) where the turn passes (the layout the search found,
    # then without sequence parallelism, which Megatron-Core refuses beside EP and TP, and without
    # its expert biases, which Megatron-Core splits over expert TP only at etp 1)
    ({
        "model": {"preset": "gpt-oss-20b", "bias": False}, "framework": "megatron-core",
        "cluster": {"hardware": "dgx-h100", "gpus": 32},
        "parallel": {"tp": 4, "pp": 1, "zero": 2, "sequence_parallel": True, "ep": 4},
        "training": {"seq_len": 2048, "micro_batch": 2, "global_batch": 64, "optimizer_offload": True},
        "overlap": {"ep_comm": True},
    }, 28),
]  # fmt: skip


@pytest.mark.parametrize("data, slow_gpu", PAIRED, ids=["dualpipe-tp4-sp", "ep-overlap-etp4"])
def test_stragglers_with_paired_forward_backward_ops_keep_every_rank_in_issue_order(data, slow_gpu):
    """F&B pairs (DualPipe, overlap.ep_comm) with a slow GPU: each rank issues its collectives
    in its program order (the pair's turns, a run of blocking collectives enqueued together,
    every stream served in issue order: ``Comms.ticket``), so the ranks of a group meet in the
    same collective and the slow GPU only lengthens the step. These layouts deadlocked before
    (found by a random-layout search)."""
    data = {"name": "paired", **data}
    healthy = simulate(scenario_from_dict({**data, "simulation": {"all_ranks": True}}))
    slow = {**data, "simulation": {"stragglers": [{"gpu": slow_gpu, "compute": 2.0}]}}
    first = simulate(scenario_from_dict(slow))
    assert first.summary["step_time_s"] > healthy.summary["step_time_s"]
    again = simulate(scenario_from_dict(slow))
    assert again.summary["step_time_s"] == first.summary["step_time_s"]  # deterministic


def test_a_slow_gpu_under_zero3_keeps_every_ranks_gathers_and_reductions_in_order():
    """ZeRO-3's parameter gathers and gradient reduce-scatters share the data-parallel stream;
    with a slower GPU one rank reached the stream with them in another order than its peers
    and the ranks deadlocked (this layout, found by a random-layout search). They are now
    issued in program order on every rank, and the step waits for the slow GPU. The layout was
    found with FSDP2's copies under framework deepspeed, a pair now refused (DeepSpeed's ZeRO-3
    runs its own coordinator, zero3_coordinator.check); it runs DeepSpeed's coordinator here,
    whose gathers and bucketed reduce-scatters share the same stream."""
    data = {
        "model": {"preset": "deepseek-v3", "layers": 4},
        "cluster": {"hardware": "dgx-h200", "gpus": 8},
        "parallel": {"tp": 4, "zero": 3},
        "training": {"seq_len": 2048, "global_batch": 2, "precision": "fp16"},
        "zero3": {"prefetch": False},
        "framework": "deepspeed",
    }
    healthy = simulate(scenario_from_dict({**data, "simulation": {"all_ranks": True}}))
    slow = simulate(
        scenario_from_dict({**data, "simulation": {"stragglers": [{"gpu": 7, "compute": 1.2}]}})
    )
    assert healthy.summary["step_time_s"] < slow.summary["step_time_s"]


def test_a_slow_gpu_cannot_reorder_a_ranks_data_parallel_collectives():
    """Collectives of one group are matched in the order each rank issues them, as NCCL does.
    Under ZeRO-3 with experts and the reductions left to the step's end (megatron-lm-2021's
    local DDP), the experts' bucket reduce-scatters followed the layers' queued reduce-scatters
    on the slow rank only: the fast ranks' went ahead of them, and the ranks waited for each
    other for ever (the step came out as 0 s, a ZeroDivisionError). In program order, the slow
    GPU's step is longer than without it, as it must be."""
    doc = make_scenario(
        framework="megatron-lm-2021",
        model={"layers": 4, "hidden": 1024, "heads": 8, "vocab": 32000, "experts": 4, "top_k": 2,
               "expert_ffn": 1024},
        cluster={"hardware": "dgx-h100", "gpus": 8},
        parallel={"tp": 1, "pp": 1, "zero": 3, "ep": 2, "schedule": "zb-auto"},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 32, "precision": "bf16"},
    )  # fmt: skip
    even = simulate(scenario_from_dict(doc)).summary["step_time_s"]
    doc["simulation"] = {"stragglers": [{"gpu": 7, "compute": 1.3}]}
    slow = simulate(scenario_from_dict(doc)).summary["step_time_s"]
    assert slow > even > 0
