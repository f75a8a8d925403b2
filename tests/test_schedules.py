"""Pipeline schedules: validity on a grid and the published bubble / memory numbers.

Bubble is measured as in the Zero Bubble paper's schedulers (per stage, idle time between its
first and last op; the largest over stages), with fixed op times and no communication.
"""

import pytest

from simcluster.errors import UserError
from simcluster.schedules import SCHEDULES, ScheduleSpec, get_schedule
from simcluster.schedules.check import (
    bubble_fraction,
    bubble_time,
    check_order,
    check_timeline,
    peak_inflight,
    replay,
)
from tests.schedule_helpers import run


def grid():
    for name, sched in sorted(SCHEDULES.items()):
        for p in (1, 2, 3, 4, 6, 8):
            for m in (1, 2, 3, 4, 5, 8, 12, 16, 17):
                for v in (1, 2, 3):
                    spec = ScheduleSpec(p, m, v)
                    try:
                        sched.validate(spec)
                    except UserError:
                        continue
                    yield name, p, m, v


@pytest.mark.parametrize(("name", "p", "m", "v"), list(grid()))
def test_every_schedule_is_valid_and_deadlock_free(name, p, m, v):
    run(name, p, m, v, t_f=1.0, t_b=1.3, t_w=0.7, t_comm=0.1)


def test_all_names_registered():
    assert sorted(SCHEDULES) == sorted(
        [
            "afab", "1f1b", "interleaved", "interleaved-zb", "looped-bfs", "zb-h1", "zb-h1-ds", "zb-h1-ds-exact", "zb-h2", "zb-1p", "zb-2p", "zb-auto",
            "zbv", "zbv-fixed", "v-half", "v-min", "v-auto", "dualpipe", "dualpipev",
        ]
    )  # fmt: skip


@pytest.mark.parametrize("name", ["1f1b", "afab"])
@pytest.mark.parametrize(("p", "m"), [(4, 8), (8, 32), (6, 5)])
def test_1f1b_afab_bubble_fraction(name, p, m):
    # Narayanan et al. SC'21 eq. 1: bubble = (p-1)/(m+p-1) of the step (balanced stages).
    _, tl = run(name, p, m, t_f=1.0, t_b=2.0, t_w=0.0)
    assert bubble_fraction(tl) == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize("name", ["interleaved", "looped-bfs"])
@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (4, 16, 4), (8, 16, 2)])
def test_interleaved_bubble_fraction(name, p, m, v):
    # Narayanan et al. SC'21 §2.2.2: interleaving divides the bubble by v; Lamy-Poirier
    # (arXiv 2211.05953) §3: the breadth-first loop has the same bubble when m >= p.
    _, tl = run(name, p, m, v, t_f=1.0, t_b=2.0, t_w=0.0)
    assert bubble_fraction(tl) == pytest.approx((p - 1) / (v * m + p - 1))


def test_looped_bfs_runs_pytorchs_order_and_keeps_every_microbatch():
    """torch.distributed.pipelining ScheduleLoopedBFS: each local stage's forwards over all
    microbatches in turn, then the backwards stage by stage in reverse, microbatches reversed;
    so like GPipe it holds all m microbatches of all v chunks at the turn."""
    p, m, v = 4, 6, 2
    ops, _ = run("looped-bfs", p, m, v)
    expected = [f"F{mb}.{c}" for c in range(v) for mb in range(m)]
    expected += [f"BW{mb}.{c}" for c in reversed(range(v)) for mb in reversed(range(m))]
    assert all([str(op) for op in stage] == expected for stage in ops)
    assert peak_inflight(ops) == [m * v] * p
    sched, spec = get_schedule("looped-bfs"), ScheduleSpec(p, m, v)
    assert [sched.virtual_stage(spec, 1, c, 0) for c in range(v)] == [1, 1 + p]  # looped placement


@pytest.mark.parametrize(("f", "b", "w"), [(1.0, 1.0, 1.0), (1.0, 1.2, 0.8)])
def test_zb_h1_bubble(f, b, w):
    # Qi et al. ICLR'24 §2.1: ZB-H1 bubble (p-1)(T_F + T_B - T_W), i.e. 1F1B's (p-1)(F+B+W)
    # scaled by (F+B-W)/(F+B+W); DeepSeek-V3 Table 2 writes it (p-1)(F+B_full-2W).
    p, m = 4, 12
    _, tl = run("zb-h1", p, m, t_f=f, t_b=b, t_w=w)
    _, base = run("1f1b", p, m, t_f=f, t_b=b, t_w=w)
    assert bubble_time(base) == pytest.approx((p - 1) * (f + b + w))
    assert bubble_time(tl) == pytest.approx((p - 1) * (f + b - w))


@pytest.mark.parametrize("name", ["zb-h2", "zbv"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 13), (8, 16)])
def test_zero_bubble_schedules(name, p, m):
    # Qi et al. ICLR'24 §2.2 and §6: ZB-H2 and ZB-V have no bubble when T_F=T_B=T_W, m >= 2p.
    _, tl = run(name, p, m)
    assert bubble_time(tl) == pytest.approx(0.0)


@pytest.mark.parametrize(("p", "m"), [(4, 8), (8, 16), (8, 24), (12, 28)])
def test_dualpipe_bubble(p, m):
    # DeepSeek-V3 report Table 2: (p/2-1)(F&B + B - 3W), B there is the full backward (b+w);
    # exact with F = B = W and a non-overlapped F&B pair (F&B = F + B + W).
    _, tl = run("dualpipe", p, m, t_f=1.0, t_b=1.0, t_w=1.0, t_fb=3.0)
    assert bubble_time(tl) == pytest.approx((p / 2 - 1) * (3.0 + 2.0 - 3.0))


@pytest.mark.parametrize(("f", "b", "w", "fb"), [(1, 1, 1, 2), (1, 1.5, 1, 3), (1, 1, 0.5, 2)])
def test_dualpipe_bubble_bounded_by_table2(f, b, w, fb):
    # With other times the Table 2 expression is an upper bound of the replayed bubble.
    p = 8
    _, tl = run("dualpipe", p, 2 * p + 4, t_f=f, t_b=b, t_w=w, t_fb=fb)
    assert 0 < bubble_time(tl) <= (p / 2 - 1) * (fb + (b + w) - 3 * w) + 1e-9


def test_dualpipev_is_dualpipe_folded():
    # DualPipeV on p ranks runs DualPipe's order for 2p half-size stages: same bubble count.
    _, tl = run("dualpipev", 4, 16)
    assert bubble_time(tl) == pytest.approx((8 / 2 - 1) * (3 + 2 - 3))


def test_activation_peaks():
    p, m = 4, 12
    # 1F1B: p microbatches on stage 0 (Narayanan et al. SC'21); GPipe keeps all m.
    assert peak_inflight(run("1f1b", p, m)[0])[0] == p
    assert peak_inflight(run("afab", p, m)[0]) == [m] * p
    # Qi et al. ICLR'24 Table: ZB-H1 keeps 1F1B's p, ZB-H2 2p-1.
    assert max(peak_inflight(run("zb-h1", p, m)[0])) == p
    assert peak_inflight(run("zb-h2", p, m)[0])[0] == 2 * p - 1
    # DeepSeek-V3 Table 2: DualPipe p+1 (its chunks are full stages).
    assert max(peak_inflight(run("dualpipe", p, m)[0])) == p + 1


def test_dualpipe_marks_overlapped_pairs():
    ops, _ = run("dualpipe", 4, 8)
    pairs = [(a, b) for s in ops for a, b in zip(s, s[1:], strict=False) if b.overlap]
    assert pairs and all(a.kind == "F" and b.kind == "BW" for a, b in pairs)


def test_dualpipe_directions():
    sched, spec = get_schedule("dualpipe"), ScheduleSpec(4, 8)
    assert sched.virtual_stage(spec, 0, 0, 0) == 0  # first half enters at stage 0
    assert sched.virtual_stage(spec, 3, 1, 7) == 0  # second half enters at stage p-1
    assert sched.virtual_stages(spec) == 4


@pytest.mark.parametrize(
    ("name", "p", "m", "v", "field"),
    [
        ("dualpipe", 3, 12, 1, "parallel.pp"),
        ("dualpipe", 4, 6, 1, "training.global_batch"),
        ("dualpipe", 4, 9, 1, "training.global_batch"),
        ("dualpipev", 4, 7, 1, "training.global_batch"),
        ("interleaved", 4, 2, 2, "training.global_batch"),
        ("interleaved", 4, 6, 2, "training.global_batch"),
        ("interleaved", 4, 8, 1, "parallel.vpp"),
        ("1f1b", 4, 8, 2, "parallel.vpp"),
    ],
)
def test_bad_specs(name, p, m, v, field):
    with pytest.raises(UserError) as err:
        get_schedule(name).build(ScheduleSpec(p, m, v))
    assert err.value.field == field and "\n" not in str(err.value)


def test_dualpipes_odd_microbatch_count_is_named_per_data_parallel_rank():
    # DualPipe feeds half the microbatches from each end of the pipeline (DeepSeek-V3
    # technical report, Sec 3.2.1), so their count must be even; it is a count per
    # data-parallel rank, which a bare "got 13; use an even number" beside a global batch of
    # 26 did not say
    with pytest.raises(UserError, match=r"each data-parallel rank .* got 9 \(global_batch / \(micro_batch x dp\)\)"):
        get_schedule("dualpipe").build(ScheduleSpec(4, 9))


def test_unknown_schedule_suggests():
    with pytest.raises(UserError, match="did you mean '1f1b'"):
        get_schedule("1f1f")


def test_spec_rejects_non_positive():
    with pytest.raises(UserError, match="positive"):
        ScheduleSpec(0, 4)


@pytest.mark.parametrize(("p", "m", "v", "g"), [(4, 8, 2, 4), (4, 8, 2, 8), (4, 12, 3, 6), (4, 10, 2, 6), (2, 9, 2, 3)])
def test_interleaved_microbatch_groups_are_valid(p, m, v, g):
    """Megatron-Core's microbatch_group_size_per_vp_stage (Llama 3's N contiguous
    microbatches): warm-up (p - rank - 1) * 2 + (v - 1) * g on each rank, any g in [p, m]
    with a last partial group of at least p; the order stays deadlock-free."""
    sched = get_schedule("interleaved")
    spec = ScheduleSpec(p, m, v, group=g)
    sched.validate(spec)
    ops = sched.build(spec)
    check_order(sched, spec, ops)
    check_timeline(sched, spec, replay(sched, spec, ops, t_f=1.0, t_b=2.0, t_w=0.0, t_comm=0.1))
    for rank, stage_ops in enumerate(ops):
        first_backward = next(i for i, op in enumerate(stage_ops) if op.kind != "F")
        warmup = min((p - rank - 1) * 2 + (v - 1) * g, m * v)
        assert first_backward == (warmup + 1 if warmup < m * v else warmup)  # steady state: F, then BW


def test_default_group_is_pp_and_a_larger_one_holds_more_in_flight():
    sched = get_schedule("interleaved")
    default = sched.build(ScheduleSpec(4, 16, 2))
    assert default == sched.build(ScheduleSpec(4, 16, 2, group=4))
    wide = sched.build(ScheduleSpec(4, 16, 2, group=8))
    assert peak_inflight(wide)[0] > peak_inflight(default)[0]


@pytest.mark.parametrize(("m", "g"), [(8, 2), (8, 9), (10, 8)])
def test_bad_microbatch_group(m, g):
    with pytest.raises(UserError):
        get_schedule("interleaved").validate(ScheduleSpec(4, m, 2, group=g))


@pytest.mark.parametrize(("p", "m", "group"), [(4, 6, 6), (4, 9, 5), (4, 10, 5), (3, 7, 4), (8, 12, 12)])
def test_interleaved_refusal_names_the_group_megatron_runs_it_in(p, m, group):
    """Megatron-Core relaxed m % pp == 0 (megatron/core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_with_interleaving: microbatch_group_size_per_vp_stage in
    [PP, M], and M % group either 0 or at least PP). The refusal under the default group of pp
    names that way out too, the smallest group that runs m, and that group does run."""
    sched = get_schedule("interleaved")
    with pytest.raises(UserError) as err:
        sched.validate(ScheduleSpec(p, m, 2))
    assert err.value.field == "training.global_batch"
    assert f"divisible by pp={p}" in str(err.value) and f"use a multiple of {p}" in str(err.value)
    assert f"set parallel.microbatch_group: {group} " in str(err.value)
    spec = ScheduleSpec(p, m, 2, group=group)
    check_order(sched, spec, sched.build(spec))
    for smaller in range(p, group):  # the smallest: every group below it is refused
        with pytest.raises(UserError):
            sched.validate(ScheduleSpec(p, m, 2, group=smaller))


def test_interleaved_with_one_chunk_names_the_fix():
    with pytest.raises(UserError, match="set parallel.vpp to 2 or more, or use schedule '1f1b'"):
        get_schedule("interleaved").validate(ScheduleSpec(4, 8, 1))


@pytest.mark.parametrize(("p", "m", "v"), [(4, 3, 2), (4, 1, 3), (8, 5, 2), (3, 2, 3)])
def test_pytorch_interleaving_runs_fewer_microbatches_than_stages(p, m, v):
    """torch.distributed.pipelining ScheduleInterleaved1F1B relaxes m % pp == 0 into
    max(1, m // pp) rounds of m / rounds (its docstring: "pp_group_size = 4, n_microbatches
    = 3 ... num_rounds = 1"); a rank warms up with (v - 1) * (m / rounds) + 2 * (p - 1 - rank)
    forwards, capped at m * v (_get_warmup_ops). Megatron-Core refuses m < pp."""
    sched = get_schedule("interleaved")
    with pytest.raises(UserError, match="needs at least"):
        sched.validate(ScheduleSpec(p, m, v))
    spec = ScheduleSpec(p, m, v, rounds=True)
    ops = sched.build(spec)
    check_order(sched, spec, ops)
    check_timeline(sched, spec, replay(sched, spec, ops, t_f=1.0, t_b=2.0, t_w=0.0, t_comm=0.1))
    for rank, stage_ops in enumerate(ops):
        warmup = min((v - 1) * m + 2 * (p - 1 - rank), m * v)
        first_backward = next(i for i, op in enumerate(stage_ops) if op.kind != "F")
        assert first_backward == (warmup + 1 if warmup < m * v else warmup)


def test_frameworks_on_pytorch_schedules_take_its_rule_on_microbatches():
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict
    from tests.conftest import make_scenario

    def ctx(framework, global_batch):
        # torchtitan's DDP runs alone, and it ties no embeddings under a pipeline
        fsdp2 = {"zero": 3} if framework == "torchtitan" else {}
        raw = make_scenario(framework=framework, parallel={"pp": 4, "vpp": 2, **fsdp2}, model={"tied_embeddings": False},
                            training={"global_batch": global_batch, "micro_batch": 1})  # fmt: skip
        return build_context(scenario_from_dict(raw))

    # 8 GPUs, pp 4: dp 2, so a global batch of 6 is 3 microbatches, one round of 3
    assert ctx("torchtitan", 6).spec.m == 3 and ctx("pytorch-ddp", 6).spec.rounds
    with pytest.raises(UserError, match="needs at least 4 microbatches"):
        ctx("megatron-core", 6)
    # 9 microbatches are 2 rounds in PyTorch, which refuses them; the refusal says PyTorch's rule
    with pytest.raises(UserError, match="ScheduleInterleaved1F1B.*use 8 or 10 microbatches"):
        ctx("torchtitan", 18)


def test_virtual_stages_without_a_schedule_mean_interleaved_1f1b():
    # a table's "VP 5" (NeMo's performance summaries) names no schedule: Megatron runs its
    # interleaved 1F1B whenever virtual stages are set; a named schedule is kept
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict
    from tests.conftest import make_scenario

    def schedule(**parallel):
        raw = make_scenario(parallel={"tp": 1, "pp": 2, **parallel}, training={"global_batch": 8})
        return scenario_from_dict(raw).parallel.schedule

    assert schedule(vpp=2) == "interleaved"
    assert schedule() == "1f1b"
    assert schedule(vpp=2, schedule="looped-bfs") == "looped-bfs"
    named = make_scenario(parallel={"pp": 2, "vpp": 2, "schedule": "1f1b"}, training={"global_batch": 8})
    with pytest.raises(UserError, match="vpp=2 needs a schedule that loops over chunks: 'interleaved', 'interleaved-zb', 'looped-bfs'"):
        build_context(scenario_from_dict(named))
    # a V schedule's two chunks are fixed: the error says so instead of naming the loop schedules only
    v_shape = make_scenario(parallel={"pp": 2, "vpp": 2, "schedule": "zbv"}, training={"global_batch": 8})
    with pytest.raises(UserError, match="schedule 'zbv' always runs 2 chunks per stage"):
        build_context(scenario_from_dict(v_shape))


def test_layers_per_virtual_stage_sets_vpp_as_megatron_does():
    # Narayanan et al. 2021's Table 1 states layers per virtual stage (run_table_1.sh passes
    # --num-layers-per-virtual-pipeline-stage); Megatron's arguments.py makes
    # vpp = (num_layers // pp) // num_layers_per_virtual_pipeline_stage
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict
    from tests.conftest import make_scenario

    def ctx(**parallel):
        raw = make_scenario(model="gpt3-175b", cluster={"hardware": "dgx-a100", "gpus": 96},
                            parallel={"tp": 8, "pp": 12, **parallel}, training={"global_batch": 96})  # fmt: skip
        return build_context(scenario_from_dict(raw))

    par = ctx(vpp_layers_per_stage=2).scenario.parallel  # 96 layers / 12 stages = 8, in chunks of 2
    assert (par.vpp, par.schedule) == (4, "interleaved")
    assert ctx(vpp_layers_per_stage=None).scenario.parallel.vpp == 1  # a table's empty cell
    assert ctx(num_layers_per_virtual_pipeline_stage=8).scenario.parallel.vpp == 1
    with pytest.raises(UserError, match="give one of them"):
        ctx(vpp_layers_per_stage=2, vpp=2)


def test_layers_per_virtual_stage_counts_the_accounted_embedding_and_loss():
    # Megatron's validate_args adds one layer for each of --account-for-embedding/loss-in-
    # pipeline-split before deriving vpp: Llama 3.1 405B's 126 layers + 2 = 128 over pp 16 is 8
    # a rank, one a virtual stage: vpp 8, the first virtual stage only the embedding and the last
    # only the loss (get_num_layers_to_build builds 0 there), not (126 // 16) // 1 = 7
    from simcluster.context import _with_virtual_stages
    from simcluster.model import build_model
    from simcluster.scenario import scenario_from_dict
    from tests.conftest import make_scenario

    raw = make_scenario(model="llama3.1-405b", cluster={"gpus": 128}, parallel={"tp": 8, "pp": 16,
                        "layers_per_virtual_stage": 1, "embedding_in_split": True, "loss_in_split": True})  # fmt: skip
    scenario = scenario_from_dict(raw)
    par = _with_virtual_stages(scenario, build_model(scenario.model)).parallel
    assert (par.vpp, par.schedule) == (8, "interleaved")
    assert par.layers_per_stage == [0] + [1] * 126 + [0]


@pytest.mark.parametrize(
    ("parallel", "framework", "needle"),
    [
        ({"layers_per_stage": [5, 3]}, "megatron-core", "parallel.layers_per_stage lists the split"),
        ({}, "megatron-lm-2021", "which framework megatron-lm-2021 does not have"),  # its validate_args has no such flag
        ({"schedule": "zbv"}, None, "places its stages in a V"),
    ],
)
def test_an_accounted_split_is_refused_where_megatrons_split_does_not_run(parallel, framework, needle):
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict
    from tests.conftest import make_scenario

    raw = make_scenario(cluster={"gpus": 2}, parallel={"pp": 2, "embedding_in_split": True, "loss_in_split": True, **parallel})
    if framework:
        raw["framework"] = framework
    with pytest.raises(UserError, match=needle) as err:
        build_context(scenario_from_dict(raw))
    assert err.value.field == "parallel.embedding_in_split"
