"""Zero Bubble's automatic schedules ZB-1p / ZB-2p and the optimizer's post-validation.

References: Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24: Sec 3.1 (the heuristic, a
limit of p or 2p microbatches' activations), Sec 2 (ZB-H1's bubble (p-1)(F+B-W), a third of
1F1B's at F = B = W, and ZB-H2's (p-1)(F+B-2W), none: the automatic schedules must do at least
as well), Sec 4 (post-validation: without the all-reduce before the optimizer step,
steps repeat at the longest stage's span, "the largest execution time of all stages").
"""

import pytest

from simcluster.context import build_context
from simcluster.memory_report import activation_walk, memory_by_stage
from simcluster.scenario import scenario_from_dict
from simcluster.schedules import OpCosts, ScheduleSpec, get_schedule
from simcluster.schedules.check import bubble_fraction, bubble_time, check_order, replay, span
from tests.engine_helpers import pipeline_scenario, run

COSTS = [(1.0, 1.0, 1.0, 0.0), (1.0, 1.2, 0.8, 0.05), (1.0, 1.5, 0.6, 0.1), (1.0, 1.1, 1.3, 0.02)]
SHAPES = [(4, 8), (4, 24), (8, 24), (8, 64), (16, 48)]


def _replay(name, p, m, costs):
    sched = get_schedule(name)
    spec = ScheduleSpec(p, m, 1, costs)
    ops = sched.build(spec)
    check_order(sched, spec, ops)
    return ops, replay(sched, spec, ops, costs.f, costs.b, costs.w, costs.comm)


@pytest.mark.parametrize(("p", "m"), SHAPES)
def test_unit_costs_match_the_handcrafted_bubbles(p, m):
    unit = OpCosts()
    # Sec 2: ZB-H1's bubble (p-1)(F+B-W) = p-1 at unit times; ZB-H2 none
    assert bubble_time(_replay("zb-1p", p, m, unit)[1]) == pytest.approx(p - 1)
    assert bubble_time(_replay("zb-2p", p, m, unit)[1]) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(("p", "m"), SHAPES)
@pytest.mark.parametrize("times", COSTS)
def test_cost_aware_orders_are_no_worse_than_handcrafted(p, m, times):
    costs = OpCosts(*times)
    for auto, hand in (("zb-1p", "zb-h1"), ("zb-2p", "zb-h2")):
        tl_auto = _replay(auto, p, m, costs)[1]
        tl_hand = _replay(hand, p, m, costs)[1]
        assert span(tl_auto) <= span(tl_hand) + 1e-9


def test_zb_2p_bubble_under_one_percent_with_enough_microbatches():
    # the paper's Table 5: ZB-2p's bubble rate stays under 1% once m >= 3p
    _, tl = _replay("zb-2p", 8, 64, OpCosts(1.0, 1.2, 0.8, 0.05))
    assert bubble_fraction(tl) < 0.01


@pytest.mark.parametrize(("name", "limit"), [("zb-1p", 1), ("zb-2p", 2)])
@pytest.mark.parametrize("w_memory", [0.1, 0.5, 0.9])
def test_activation_limit_is_kept(name, limit, w_memory):
    p, m = 6, 30
    costs = OpCosts(1.0, 1.3, 0.7, 0.05, w_memory)
    ops, _ = _replay(name, p, m, costs)
    # one microbatch's F stash is one unit; W frees w_memory of it, B the rest
    peaks = [activation_walk(stage, [1.0], [w_memory]) for stage in ops]
    assert max(peaks) <= limit * p + 1e-9
    assert max(peaks) > (limit - 1) * p  # it does use the room it is given


def test_memory_command_follows_the_simulated_order():
    data = pipeline_scenario(4, 12, "zb-2p", training={"fused_cross_entropy": True})
    res = run(data)
    ctx = build_context(scenario_from_dict(data))
    for mem in memory_by_stage(ctx):
        sim = res.memory[res.memory["stage"] == mem.stage]["activations"].max()
        assert mem.activations_bytes == pytest.approx(sim, rel=1e-6)


def _stage_spans(res):
    ev = res.events
    out = []
    for _, rows in ev.groupby("rank"):
        pipe = rows[rows["kind"].isin(["forward", "backward_input", "backward_weight", "backward"])]
        out.append(rows["end_s"].max() - pipe["start_s"].min())
    return out


@pytest.mark.parametrize("schedule", ["zb-2p", "zb-h2", "1f1b"])
def test_post_validation_step_is_the_longest_stage_span(schedule):
    sync = run(pipeline_scenario(4, 16, schedule))
    post = run(pipeline_scenario(4, 16, schedule, training={"optimizer_post_validation": True}))
    assert post.summary["optimizer_post_validation"] is True
    assert post.summary["step_time_s"] == pytest.approx(max(_stage_spans(post)), rel=1e-12)
    # the same work in the same order: only the step boundary differs
    assert sync.summary["step_time_s"] == pytest.approx(post.events["end_s"].max(), rel=1e-12)
    assert post.summary["step_time_s"] <= sync.summary["step_time_s"]


def test_post_validation_removes_the_pipeline_fill_of_a_parallelogram():
    """ZB-2p at balanced F, B, W runs each stage without idling (a parallelogram): with
    post-validation a step lasts one stage's work, without it the (p-1) forwards of the fill
    are added."""
    p, m = 4, 16
    post = run(pipeline_scenario(p, m, "zb-2p", training={"optimizer_post_validation": True}))
    sync = run(pipeline_scenario(p, m, "zb-2p"))
    per = post.summary["compute_per_microbatch_s"]
    work = m * (per["forward"] + per["backward_input"] + per["backward_weight"])
    ev = post.events
    optimizer = (ev[ev["kind"] == "optimizer"]["end_s"] - ev[ev["kind"] == "optimizer"]["start_s"]).max()
    assert post.summary["step_time_s"] < sync.summary["step_time_s"]
    assert post.summary["bubble_fraction"] < 0.01
    # one stage's passes and its optimizer step, with under 1% idle (the end stages' embedding
    # and head make the stages slightly unequal)
    assert post.summary["step_time_s"] == pytest.approx(work + optimizer, rel=0.01)


def test_timelines_mark_no_step_end_under_post_validation():
    from simcluster.output.gantt import describe_step
    from simcluster.output.writer import _step_time

    summary = {"layout": "pp4", "step_time_s": 2.0, "optimizer_post_validation": True}
    # the events cover one whole step, longer than the steady-state period: no boundary to draw
    assert _step_time(summary) is None
    assert "steady state" in describe_step(summary)
    assert _step_time(dict(summary, optimizer_post_validation=False)) == 2.0


# --- ZB-V planned with op times (sail-sg's V-schedule heuristic, zbv_auto.py) ---------------


def _v(p, m, costs):
    sched = get_schedule("zbv")
    spec = ScheduleSpec(p, m, 1, costs)
    ops = sched.build(spec)
    check_order(sched, spec, ops)
    return ops, replay(sched, spec, ops, costs.f, costs.b, costs.w, costs.comm)


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 24), (8, 16), (8, 64)])
def test_zbv_has_no_bubble_at_unit_times(p, m):
    # Qi et al. Sec 6: with F = B = W and m >= 2p the V schedule has no bubble
    assert bubble_time(_v(p, m, OpCosts())[1]) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("w_memory", [0.3, 0.5, 0.7])
def test_zbv_keeps_1f1b_memory(w_memory):
    p, m = 6, 30
    ops, _ = _v(p, m, OpCosts(1.0, 1.3, 0.7, 0.05, w_memory))
    # two half-size chunks: 2p chunk stashes = 1F1B's p full-stage microbatches
    assert max(activation_walk(stage, [1.0, 1.0], [w_memory] * 2) for stage in ops) <= 2 * p + 1e-9


def test_zbv_planned_with_op_times_beats_the_unit_order():
    """When B is much longer than W, the unit-time order idles where the cost-aware one fills
    the wait with W (8 stages, 64 microbatches: 16% bubble against 4%)."""
    from simcluster.schedules.zbv import unit_greedy_orders

    sched, costs = get_schedule("zbv"), OpCosts(1.0, 1.5, 0.6, 0.1)
    spec = ScheduleSpec(8, 64, 1, costs)
    unit = replay(sched, spec, unit_greedy_orders(8, 64), costs.f, costs.b, costs.w, costs.comm)
    check_order(sched, spec, unit_greedy_orders(8, 64))
    planned = _v(8, 64, costs)[1]
    assert bubble_fraction(planned) < 0.05 < 0.15 < bubble_fraction(unit)


# --- ZB-auto: sail-sg's adaptive memory limit (85% of the GPU) ------------------------------


def test_zb_auto_fills_85_percent_of_the_gpu_at_most():
    """The limit leaves parameters, gradients, optimizer state and the loss transient in place
    and lets activations fill the rest of 85% of the GPU (sail-sg's default percentile)."""
    from simcluster.engine import simulate
    from simcluster.scenario import load_scenario

    peaks = {}
    # 16 microbatches, twice ZB-2p's 2p = 8 in flight, reach the peaks of the scenario's 64
    # (47.3, 68.3 and 67.1 GiB against a limit of 67.7) at a quarter of the simulation
    for name in ("zb-1p", "zb-2p", "zb-auto"):
        res = simulate(load_scenario("llama3-70b-64xh100", [("parallel.schedule", name), ("training.global_batch", 32)]))
        peaks[name] = res.summary["peak_memory_bytes"]["max"]
        capacity = res.summary["capacity_bytes"]
    assert peaks["zb-1p"] < peaks["zb-auto"] <= 0.85 * capacity * 1.001 < peaks["zb-2p"]


def test_zb_auto_limits_from_the_room_given():
    sched, p, m = get_schedule("zb-auto"), 4, 24
    costs = OpCosts(1.0, 1.2, 0.8, 0.05, 0.5)
    # no room known (no plan): ZB-2p's 2p; little room: never below 1F1B's p - j on stage j
    assert sched.caps(ScheduleSpec(p, m, 1, costs)) == [8.0] * 4
    tight = OpCosts(1.0, 1.2, 0.8, 0.05, 0.5, (1.0, 2.0, 30.0, 0.5))
    assert sched.caps(ScheduleSpec(p, m, 1, tight)) == [4.0, 3.0, 30.0, 1.0]
    for q, n in [(2, 4), (4, 8), (6, 24), (8, 16), (8, 64)]:
        none = OpCosts(1.0, 1.5, 0.6, 0.1, 0.3, (0.0,) * q)  # no room anywhere: 1F1B's counts
        spec = ScheduleSpec(q, n, 1, none)
        ops = sched.build(spec)
        check_order(sched, spec, ops)
        peaks = [activation_walk(stage, [1.0], [0.3]) for stage in ops]
        assert all(peak <= q - j + 1e-9 for j, peak in enumerate(peaks))
    roomy = OpCosts(1.0, 1.2, 0.8, 0.05, 0.5, (50.0,) * 4)
    ops = sched.build(ScheduleSpec(p, m, 1, roomy))
    check_order(sched, ScheduleSpec(p, m, 1, roomy), ops)
    tl = replay(sched, ScheduleSpec(p, m, 1, roomy), ops, 1.0, 1.2, 0.8, 0.05)
    assert span(tl) <= span(_replay("zb-2p", p, m, costs)[1]) + 1e-9


def test_planned_costs_are_the_plans_medians_and_room():
    """schedule_costs: each pass's upper median over the stages' chunks (the runtime's
    sorted(...)[n // 2]), W's share from the memory model, and activation_room's arithmetic:
    room x one microbatch's stash + static memory = 85% of the GPU."""
    from simcluster.engine.plan import (
        ADAPTIVE_MEMORY_SHARE,
        build_plans,
        kernel_model,
        pipeline_p2p_seconds,
        schedule_costs,
    )
    from simcluster.memory import stage_params, static_memory, wgrad_retained_fraction
    from simcluster.topology import build_cluster

    data = pipeline_scenario(4, 8, "zb-auto", layers=10)
    data["cluster"]["network"] = "simulated"
    ctx = build_context(scenario_from_dict(data))
    cluster = build_cluster(ctx.profile, ctx.scenario.cluster.gpus, ctx.layout.gpus_per_node)
    p2p = pipeline_p2p_seconds(ctx, cluster)
    assert p2p > 0
    plans = build_plans(ctx, kernel_model(ctx), p2p)
    costs = schedule_costs(ctx, [pl.chunks for pl in plans], p2p, [sum(pl.static_bytes.values()) for pl in plans])
    f_times = sorted(pl.chunks[0].seconds("F") for pl in plans)
    assert costs.f == f_times[len(f_times) // 2]
    assert costs.comm == p2p
    assert costs.w_memory == wgrad_retained_fraction(ctx.model, ctx.layout, ctx.scenario.training)
    for stage, room in enumerate(costs.memory_limit):
        params = stage_params(ctx.model, ctx.layout, ctx.chunks[stage])
        fixed = sum(static_memory(ctx.model, ctx.layout, ctx.scenario.training, params))
        fixed += plans[stage].chunks[0].loss_transient_bytes
        fixed += ctx.scenario.training.memory_overhead_gib * 2**30
        unit = plans[stage].chunks[0].activation_bytes
        assert room * unit + fixed == pytest.approx(ADAPTIVE_MEMORY_SHARE * ctx.capacity_bytes)


# --- full recomputation: B adds memory (sail-sg's measured b_mem > 0) -----------------------


def test_backward_that_adds_memory_runs_pending_w_first():
    """With w_memory above 1 a B grows the stash by w - 1 units; as in sail-sg's
    ``manual_order`` pending W run before it until it fits, the first microbatch's B excepted
    (placed unchecked there), so a stage's peak stays within its limit plus that one B."""
    p, m, w = 4, 16, 3.0
    room = (14.0, 13.0, 12.0, 11.0)
    costs = OpCosts(1.0, 1.3, 0.7, 0.05, w, room)
    sched = get_schedule("zb-auto")
    spec = ScheduleSpec(p, m, 1, costs)
    ops = sched.build(spec)
    check_order(sched, spec, ops)
    for j, stage in enumerate(ops):
        assert activation_walk(stage, [1.0], [w]) <= room[j] + (w - 1.0) + 1e-9
        after_first_b = stage[[op.kind for op in stage].index("B") + 1 :]
        live = sum(1.0 for op in stage if op.kind == "F") - sum(1.0 for op in after_first_b if op.kind == "F")
        live += w - 1.0  # the first B
        for op in after_first_b:
            live += {"F": 1.0, "B": w - 1.0, "W": -w}[op.kind]
            assert live <= room[j] + 1e-9


def test_zb_1p_cannot_hold_what_full_recomputation_keeps():
    """ZB-1p's limit is 1F1B's p microbatches of F stash; when B keeps more than a stash until
    W, no order fits (sail-sg raises "Cannot fit memory") and the error says why."""
    from simcluster.errors import UserError

    with pytest.raises(UserError) as err:
        get_schedule("zb-1p").build(ScheduleSpec(4, 16, 1, OpCosts(1.0, 1.3, 0.7, 0.05, 3.0)))
    line = err.value.one_line()
    assert "parallel.schedule" in line and "full recomputation" in line


def test_full_recomputation_plans_with_each_stages_kept_bytes():
    """Under full recomputation the planner's W share is, per stage, the bytes B keeps for the
    weight gradients over F's stash of layer inputs (above 1: the linear layers' inputs
    outweigh a layer's input), and zb-auto's steady state stays under 85% of the GPU."""
    from simcluster.engine.plan import build_plans, kernel_model, schedule_costs
    from simcluster.errors import UserError

    data = pipeline_scenario(4, 16, "zb-auto", training={"recompute": "full"})
    ctx = build_context(scenario_from_dict(data))
    plans = build_plans(ctx, kernel_model(ctx))
    costs = schedule_costs(ctx, [pl.chunks for pl in plans], 0.0, [sum(pl.static_bytes.values()) for pl in plans])
    kept = [pl.chunks[0].wgrad_bytes / pl.chunks[0].activation_bytes for pl in plans]
    assert costs.stage_w_memory == tuple(kept)
    assert min(kept[:-1]) > 1.0
    res = run(data)
    unit = plans[0].chunks[0].activation_bytes
    slack = (max(kept) - 1.0) * unit  # the first B, placed unchecked
    assert res.summary["peak_memory_bytes"]["max"] <= 0.85 * res.summary["capacity_bytes"] + slack
    with pytest.raises(UserError):
        run(pipeline_scenario(4, 16, "zb-1p", training={"recompute": "full"}))


def test_zbv_plans_with_sail_sgs_fixed_memory_estimate():
    """sail-sg's V heuristic is given f_mem = 34h + 5as and w_mem = -32h per layer
    (zb_schedules.py f_mem_approx / w_mem_approx), not measured allocations: W frees
    32h / (34h + 5as) of a microbatch's stash in its plan, recomputation or not."""
    from simcluster.engine.plan import build_plans, kernel_model, schedule_costs
    from simcluster.schedules.zbv_auto import _VGreedy

    for recompute in ("none", "full"):
        data = pipeline_scenario(4, 16, "zbv", training={"recompute": recompute})
        ctx = build_context(scenario_from_dict(data))
        plans = build_plans(ctx, kernel_model(ctx))
        costs = schedule_costs(ctx, [pl.chunks for pl in plans], 0.0, [sum(pl.static_bytes.values()) for pl in plans])
        h, a, s = 4096, 32, 1024
        assert costs.w_memory_estimate == pytest.approx(32 * h / (34 * h + 5 * a * s))
        g = _VGreedy(4, 16, costs, None)
        assert g.delta["W"] == -costs.w_memory_estimate
        assert g.delta["B"] == pytest.approx(-(1 - costs.w_memory_estimate))
