"""V-Auto, the adaptive V scheduler of Qi et al., "Pipeline Parallelism with Controllable
Memory" (NeurIPS'24, arXiv 2405.15362): sail-sg's ``zerobubble/scheduler/v_auto_schedule.py``
searched for the shortest V schedule within an activation-memory limit.

Memory is counted as the paper and the fork count it, in chunk activations per stage (F and f
stash one, W and w free one); 1F1B's p microbatches of a stage are 2p. The authors' summary
table gives V-Min (p+4)//3 and V-Half (p+2)//2 microbatches (tests/test_v_controllable.py)."""

import pytest

from simcluster.errors import UserError
from simcluster.schedules import ScheduleSpec, get_schedule
from simcluster.schedules.check import bubble_time, replay, span
from simcluster.schedules.v_auto import candidates
from tests.engine_helpers import checked_unit_build, peak_chunk_stash, pipeline_scenario, run


def _build(p, m, units):
    """v-auto at a limit of ``units`` chunk activations, checked, with its unit-time replay."""
    return checked_unit_build("v-auto", ScheduleSpec(p, m, activation_limit=units / (2 * p)))


def _units(ops):
    """The largest stash over the stages in chunk activations."""
    return round(2 * peak_chunk_stash(ops))


def _expected_bubble(p, peak):
    """The fork's own prediction of the search's idle slots at unit times for a peak of ``peak``
    chunk activations (``schedule()`` in v_auto_schedule.py, its ``expected_bubble`` printed
    beside what it found): 3p - 1 - 3 peak + max(3p, p - 1 + 2 (1 + ceil(peak / 2))), none below
    zero (at 2p it reads -1: ZB-V's level has no bubble)."""
    return max(0, 3 * p - 1 - 3 * peak + max(3 * p, p - 1 + 2 * (1 + (peak + 1) // 2)))


@pytest.mark.parametrize(("p", "m"), [(3, 6), (4, 8), (4, 12), (5, 10), (6, 12)])
def test_bubble_is_the_forks_expected_at_every_reachable_limit(p, m):
    """With m >= 2p (no surplus microbatches dropped) and F = B = W = 1, every limit from the
    smallest that fits up to 2p gives a schedule whose peak is the limit and whose largest stage
    bubble is the fork's ``expected_bubble`` for it: three slots fewer per chunk activation
    until p - 1 + 2(1 + ceil(peak/2)) passes 3p."""
    fitted = []
    for units in range(1, 2 * p + 1):
        try:
            ops, timeline = _build(p, m, units)
        except UserError:
            assert not fitted  # once a limit fits, every larger one does
            continue
        fitted.append(units)
        assert _units(ops) == units
        assert bubble_time(timeline) == _expected_bubble(p, units)
    assert fitted[-1] == 2 * p and len(fitted) >= 3


def _named(name, p, m):
    sched, spec = get_schedule(name), ScheduleSpec(p, m)
    ops = sched.build(spec)
    return _units(ops), bubble_time(replay(sched, spec, ops, 1.0, 1.0, 1.0))


@pytest.mark.parametrize(("p", "m"), [(4, 8), (4, 16), (6, 24), (5, 7)])
@pytest.mark.parametrize("name", ["v-min", "v-half", "zbv"])
def test_at_a_named_schedules_memory_no_more_memory_and_no_more_bubble(p, m, name):
    """The paper's V-Min, V-Half and V-ZB are three of the search's blocks: at the limit each one
    holds (V-Min (p+4)//3 and V-Half (p+2)//2 microbatches, the summary table's; ZB-V p), v-auto
    keeps within it and idles no longer at equal op times."""
    units, bubble = _named(name, p, m)
    assert units == {"v-min": 2 * ((p + 4) // 3), "v-half": 2 * ((p + 2) // 2), "zbv": 2 * p}[name]
    ops, timeline = _build(p, m, units)
    assert _units(ops) <= units
    assert bubble_time(timeline) <= bubble + 1e-9


@pytest.mark.parametrize(("p", "m"), [(2, 1), (2, 5), (3, 4), (4, 3), (4, 5), (6, 5)])
def test_the_stash_never_exceeds_the_limit(p, m):
    """Every limit gives a valid order within it or a one-line error naming the field, also
    with fewer microbatches than 2p (the fork plans 2p and drops the surplus, and with m <= p
    moves early weight passes to the end while 2m chunk activations fit)."""
    for units in range(1, 2 * p + 1):
        try:
            ops, _ = _build(p, m, units)
        except UserError as err:
            assert err.field == "parallel.activation_limit" and "raise it to at least" in err.message
            continue
        assert _units(ops) <= units


@pytest.mark.parametrize(("p", "m"), [(4, 8), (5, 12)])
@pytest.mark.parametrize("times", [(1.0, 1.0, 1.0, 0.0), (6.85, 8.16, 7.68, 0.3)])
def test_more_memory_never_a_longer_step(p, m, times):
    """With m >= 2p the limit only decides which blocks the search keeps (a block's schedule
    does not depend on it), so a larger limit keeps a superset and the replayed step never
    grows: the paper's trade-off of memory for bubble, at equal op times and at the 9.6B
    model's modelled F, B, W (ms, A100, tests/test_v_controllable.py)."""
    from simcluster.schedules import OpCosts

    f, b, w, comm = times
    sched = get_schedule("v-auto")
    spans = []
    for units in range(2 * ((p + 4) // 3), 2 * p + 1):
        spec = ScheduleSpec(p, m, activation_limit=units / (2 * p), costs=OpCosts(f, b, w, comm))
        timeline = replay(sched, spec, sched.build(spec), f, b, w, comm)
        spans.append(span(timeline))  # the longest stage, what the search minimises
        assert set(candidates(p, m, units - 1)) <= set(candidates(p, m, units))
    assert spans == sorted(spans, reverse=True)
    assert spans[-1] < spans[0]


def test_planned_with_the_op_times_it_beats_v_min_at_v_mins_memory():
    """The search picks by the replayed step with the op times it is given (the fork's
    ``evaluate_schedule(s, f, b, w, c)``); V-Min's order is fixed in unit slots and loses
    time when F, B and W differ (the fork README: "V-Min (and only V-Min) suffers a
    performance degradation when F/B/W are not balanced"). At V-Min's memory v-auto is faster."""
    from simcluster.schedules import OpCosts

    p, m, times = 4, 32, (6.85, 8.16, 7.68, 0.0)
    v_min, spec = get_schedule("v-min"), ScheduleSpec(p, m)
    fixed = replay(v_min, spec, v_min.build(spec), *times)
    units = _units(v_min.build(spec))
    auto = get_schedule("v-auto")
    spec = ScheduleSpec(p, m, activation_limit=units / (2 * p), costs=OpCosts(*times))
    ops = auto.build(spec)
    assert _units(ops) <= units
    planned = replay(auto, spec, ops, *times)
    assert bubble_time(planned) < bubble_time(fixed)


def test_deterministic_and_independent_of_the_cache():
    sched, spec = get_schedule("v-auto"), ScheduleSpec(5, 10, activation_limit=0.7)
    first = sched.build(spec)
    candidates.cache_clear()
    assert sched.build(spec) == first


def test_refusals_name_the_field_and_the_fix():
    sched = get_schedule("v-auto")
    with pytest.raises(UserError, match="needs a limit") as err:
        sched.validate(ScheduleSpec(4, 8))
    assert err.value.field == "parallel.activation_limit"
    with pytest.raises(UserError, match="pp >= 2"):
        sched.validate(ScheduleSpec(1, 8, activation_limit=0.5))
    # V-Min's blocks at pp=6 need 3 microbatches of 6 (6 chunk activations of 12)
    with pytest.raises(UserError, match=r"raise it to at least 0\.5\b") as err:
        sched.build(ScheduleSpec(6, 12, activation_limit=0.4))
    # the limit as written, and what it became: floor(0.4 x 12) = 4 chunk activations, 1/3
    # (the fork's max_mem); it said 'fits 0.333 of 1F1B's' to a scenario that wrote 0.4
    assert "fits 0.4 of 1F1B's activations (0.4 x 2pp rounded down to 4 chunk activations" in err.value.message
    assert "pp=6, 0.333)" in err.value.message
    with pytest.raises(UserError, match="parallel.vpp"):
        sched.validate(ScheduleSpec(4, 8, v=3, activation_limit=0.5))


def test_the_engine_runs_it_within_its_limit():
    """The same model on 4 stages: 1F1B's first stage keeps 4 microbatches; v-auto at 0.5 and
    0.75 keeps 2 and 3 (V-Min's and V-Half's counts at p = 4) on the stages without a model end
    (the first stage also holds the LM head's inputs, tests/test_v_controllable.py)."""
    stash = {}
    for name, limit in (("1f1b", None), ("v-auto", 0.5), ("v-auto", 0.75)):
        parallel = {} if limit is None else {"activation_limit": limit}
        data = pipeline_scenario(4, 16, name, layers=16, training={"fused_cross_entropy": True}, parallel=parallel)
        memory = run(data).memory
        stash[(name, limit)] = [memory[memory["stage"] == s]["activations"].max() for s in range(4)]
    full = stash[("1f1b", None)][0]
    assert max(stash[("v-auto", 0.5)][1:]) == pytest.approx(0.5 * full, rel=1e-3)
    assert max(stash[("v-auto", 0.75)][1:]) == pytest.approx(0.75 * full, rel=1e-3)


def test_scenario_field_bounds():
    from simcluster.scenario import scenario_from_dict
    from tests.conftest import make_scenario

    for bad in (0, 1.5, -0.2):
        with pytest.raises(UserError, match="activation_limit"):
            scenario_from_dict(make_scenario(parallel={"pp": 2, "schedule": "v-auto", "activation_limit": bad}))
    # above 1 the error says why (1F1B's memory is the search's ceiling: the fork's schedule()
    # skips a block above 2p chunk activations) and what to write, not pydantic's bare bound
    with pytest.raises(UserError) as got:
        scenario_from_dict(make_scenario(parallel={"pp": 2, "schedule": "v-auto", "activation_limit": 5}))
    assert "fraction of 1F1B's activation memory, at most 1" in got.value.message and "e.g. 0.5" in got.value.message


def test_the_limit_is_a_sweep_axis():
    """``simcluster sweep --activation-limit 0.5,1``: one row per limit, each a valid layout."""
    from simcluster.sweep import candidates as sweep_rows
    from simcluster.sweep import check, parse_axis

    assert parse_axis("activation_limit", "0.5, 0.75,1", 8) == [0.5, 0.75, 1.0]
    with pytest.raises(UserError) as err:
        parse_axis("activation_limit", "1.5", 8)
    assert err.value.field == "--activation-limit"
    base = pipeline_scenario(4, 16, "v-auto", layers=16)
    rows = sweep_rows(base, {"schedule": ["v-auto", "v-half"], "activation_limit": [0.5, 1.0]})
    assert [(r.scenario["parallel"]["schedule"], r.scenario["parallel"].get("activation_limit")) for r in rows] == [
        ("v-auto", 0.5), ("v-auto", 1.0), ("v-half", None),
    ]  # fmt: skip
    assert all(check(row, None) is None for row in rows)


def test_a_schedule_without_the_limit_is_swept_once():
    """Only v-auto reads parallel.activation_limit (inert.py's rule for it): with both axes
    swept, another schedule is one row without the limit, not one identical simulation per
    limit labelled as if the limit applied (as 1F1B runs once beside a swept vpp)."""
    from simcluster.sweep import candidates as sweep_rows

    base = pipeline_scenario(4, 16, "v-auto", layers=16)
    base["parallel"]["activation_limit"] = 0.75
    rows = sweep_rows(base, {"schedule": ["1f1b", "V-Auto"], "activation_limit": [0.5, 1.0]})
    assert [r.label for r in rows] == [
        "schedule=1f1b activation_limit=-", "schedule=V-Auto activation_limit=0.5",
        "schedule=V-Auto activation_limit=1.0",
    ]  # fmt: skip
    assert "activation_limit" not in rows[0].scenario["parallel"]  # the base's 0.75 too
    assert [r.scenario["parallel"]["activation_limit"] for r in rows[1:]] == [0.5, 1.0]


@pytest.mark.parametrize("p", [3, 4, 5, 6, 8])
def test_v_min_and_v_half_blocks_are_in_the_searched_family(p):
    """The paper's uniform offsets (§3.1, the fork's ``available_offsets``): V-Min's building
    block steps F and B one slot per stage, V-Half's two, f and b one back; their stage-0
    blocks (the fork's zbv_greedy.py ones, tests/test_v_controllable.py) are among the 60
    the search starts from, so both blocks are searched (modulo the period of 6)."""
    from simcluster.schedules.v_auto_block import first_stage_blocks, stage_blocks
    from simcluster.schedules.v_controllable import v_half_block, v_min_block

    starts = {block[:4]: block for block in first_stage_blocks()}
    assert len(starts) == 60
    for block, step in ((v_min_block(p), 1), (v_half_block(p), 2)):
        slots = [tuple(x % 6 for x in stage) for stage in block]
        searched = stage_blocks(starts[slots[0]], step, step, p - 1, p)
        assert searched is not None and [s[:4] for s in searched] == slots
