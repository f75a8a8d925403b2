"""V-Auto: the best V schedule within an activation-memory limit (Qi et al., "Pipeline
Parallelism with Controllable Memory", NeurIPS'24, arXiv 2405.15362, §3 and Appendix A; the
search of sail-sg's ``megatron/core/pipeline_parallel/zerobubble/scheduler/v_auto_schedule.py``,
``schedule(p, m, cost, max_mem)``, whose steps the functions here follow).

The paper's framework: a schedule is a *building block* (one microbatch's passes on every stage)
repeated every 6 slots, then squeezed and reordered; the block's lifespan on a stage bounds the
stage's peak activation memory. V-Min, V-Half and ZB-V are three blocks; the fork's search tries
every V-shape block with uniform offsets (:mod:`v_auto_block`: 60 stage-0 blocks, steps k0 >= k1
for F and B between stages, k0 on the first n0 stages) and for each one:

1. repeats it for max(m, 2p) microbatches and skips it if its peak is above 2p (1F1B's) or, with
   that many microbatches, above the limit;
2. squeezes it (:func:`v_auto_squeeze.squeeze`) and rewrites the warm-up
   (:func:`v_auto_phases.reorder_warmup`), skipping it if that raised the peak;
3. with m < 2p drops the surplus microbatches (with m <= p and room for 2m, first moves the
   early weight passes to the end, :func:`v_auto_phases.release_weights`), squeezes and skips it
   above the limit;
4. rewrites the cool-down, fills idle slots greedily without raising the peak, runs the weight
   passes in backward order, and keeps it if it is valid and not above its first peak.

Among the kept schedules the one whose longest stage (first F to last weight pass) is shortest
when replayed with the op times wins, the first found on a tie: the op times of the cost-aware
plan (:class:`OpCosts`: each pass's median over the stages, the stage-to-stage transfer), unit
times without them. The search stops raising k0's stage count n0 at a block above the limit.

The limit is ``parallel.activation_limit``: a fraction of 1F1B's activation memory (p
microbatches of a whole stage), turned into the fork's ``max_mem`` in chunk activations as
floor(limit x 2p): V-Min's blocks need about 1/3, V-Half's 1/2, ZB-V's 1. The fork's runtime
does not call this search (it plans V-Half and V-Min from ``zbv_greedy.py`` and ZB-V from
``zbv.py``): it is the paper's tool for its memory/bubble trade-off, run here as a schedule.
Its ``keep_stable_phase`` variant is off in ``schedule()`` and not implemented.
"""

from __future__ import annotations

import functools
import math

from simcluster.errors import UserError
from simcluster.progress import inner_progress
from simcluster.schedules.base import OpCosts, PipeOp, ScheduleSpec, VShapeSchedule
from simcluster.schedules.registry import register
from simcluster.schedules.v_auto_block import (
    IDLE,
    STEPS,
    Block,
    Grid,
    first_stage_blocks,
    peak,
    repeat,
    stage_blocks,
)
from simcluster.schedules.v_auto_phases import release_weights, reorder_cooldown, reorder_warmup
from simcluster.schedules.v_auto_squeeze import (
    Infeasible,
    drop_surplus,
    fill_idle_slots,
    is_valid,
    relabel_weights,
    squeeze,
    upstream,
)

FIELD_LIMIT = "parallel.activation_limit"
Frozen = tuple[str, ...]  # a stage's row of passes, hashable


def limit_units(limit: float, p: int) -> int:
    """The fork's ``max_mem``: ``limit`` x 1F1B's 2p chunk activations, rounded down."""
    return int(limit * 2 * p + 1e-9)


def schedule_block(p: int, m: int, block: Block, limit: int) -> tuple[Grid | None, int]:
    """One block through repeating, squeezing and reordering (``schedule_by_building_block``):
    the schedule (None if the block gives none within ``limit``) and the peak it was judged by."""
    planned = max(m, 2 * p)  # the fork plans at least 2p microbatches, then drops the surplus
    grid = repeat(block, planned)
    first = peak(grid)
    if (m == planned and first > limit) or first > 2 * p:
        return None, first
    try:
        grid = reorder_warmup(squeeze(grid, planned), planned)
        reordered = peak(grid)
        if reordered > first:
            return None, first
        if m < planned:
            grid = drop_surplus(grid, m)
            if m <= p and 2 * m <= limit:
                grid = release_weights(grid, min(2 * p, reordered))
            grid = squeeze(grid, m)
            first = peak(grid)
            if first > limit:
                return None, first
        grid = reorder_cooldown(grid, m)
        fill_idle_slots(grid)
        relabel_weights(grid, m)
    except Infeasible:
        return None, first
    final = peak(grid)
    if final > first:
        return None, first
    return (grid if is_valid(grid, m) else None), final


@functools.lru_cache(maxsize=16)
def candidates(p: int, m: int, limit: int) -> tuple[tuple[Frozen, ...], ...]:
    """Every schedule the search keeps, in its order (identical schedules once: the first
    found wins a tie, so repeats never change the choice)."""
    kept: dict[tuple[Frozen, ...], None] = {}
    done: dict[Block, tuple[Grid | None, int]] = {}  # k0 = k1 repeats a block for every n0
    firsts = first_stage_blocks()
    steps = [(k0, k1) for i0, k0 in enumerate(STEPS) for k1 in STEPS[: i0 + 1]]
    # tens of seconds at pp 8-16 near 1F1B's limit: `run` shows it on stderr as the simulation
    with inner_progress("planning v-auto", len(firsts) * len(steps), unit="block offsets") as advance:
        for first in firsts:
            for k0, k1 in steps:
                for n0 in range(1, p):
                    block = stage_blocks(first, k0, k1, n0, p)
                    if block is None:
                        continue
                    if block not in done:
                        done[block] = schedule_block(p, m, block, min(2 * p, limit))
                    grid, used = done[block]
                    if used > 2 * p or used > limit:
                        break  # a larger n0 only lengthens the lifespans
                    if grid is not None:
                        kept.setdefault(tuple(tuple(row) for row in grid), None)
                advance()
    return tuple(kept)


def span(grid: tuple[Frozen, ...], costs: OpCosts) -> float:
    """The longest stage, first F to last weight pass, replaying the order with ``costs``'
    pass times and transfers (``evaluate_schedule``: a pass starts when its stage is free and
    its input has arrived)."""
    p = len(grid)
    time = {"F": costs.f, "f": costs.f, "B": costs.b, "b": costs.b, "W": costs.w, "w": costs.w}
    end: dict[tuple[int, str, int], float] = {}
    free = [0.0] * p
    seen: list[dict[str, int]] = [{} for _ in grid]
    for j in range(len(grid[0])):
        for s in range(p):  # an input is always in an earlier slot
            kind = grid[s][j]
            if kind == IDLE:
                continue
            mb = seen[s].get(kind, 0)
            seen[s][kind] = mb + 1
            start = free[s]
            dep = upstream(p, s, kind)
            if dep is not None:
                start = max(start, end[(dep[0], dep[1], mb)] + costs.comm)
            free[s] = end[(s, kind, mb)] = start + time[kind]
    return max(free[s] - (end[(s, "F", 0)] - costs.f) for s in range(p))


_OPS = {"F": ("F", 0), "f": ("F", 1), "B": ("B", 1), "b": ("B", 0), "W": ("W", 1), "w": ("W", 0)}


def v_auto_orders(p: int, m: int, limit: int, costs: OpCosts, written: float | None = None) -> list[list[PipeOp]]:
    """The shortest schedule the search keeps within ``limit`` chunk activations per stage
    (``written``: the fraction of 1F1B's the scenario gave, which an error quotes)."""
    best: tuple[float, tuple[Frozen, ...]] | None = None
    for grid in candidates(p, m, limit):
        length = span(grid, costs)
        if best is None or length < best[0]:
            best = (length, grid)
    if best is None:
        raise UserError(FIELD_LIMIT, _no_fit(p, m, limit, written))
    orders = []
    for row in best[1]:
        seen: dict[str, int] = {}
        ops = []
        for kind in row:
            if kind != IDLE:
                ops.append(PipeOp(_OPS[kind][0], seen.get(kind, 0), _OPS[kind][1]))  # type: ignore[arg-type]
                seen[kind] = seen.get(kind, 0) + 1
        orders.append(ops)
    return orders


def _no_fit(p: int, m: int, limit: int, written: float | None = None) -> str:
    """Why no V schedule fits, with the smallest limit that does (rounded up to 3 decimals, so
    that it converts back to at least that many chunk activations); the limit as written
    when it was rounded down to whole chunk activations (0.3 at pp 2 is 1 of 4, 0.25)."""
    need = next((units for units in range(limit + 1, 2 * p + 1) if candidates(p, m, units)), None)
    if need is None:
        return f"no V schedule of the paper's blocks fits at pp={p} with {m} microbatches; use schedule zbv"
    share = math.ceil(need / (2 * p) * 1000) / 1000
    units = f"{limit} chunk activations per stage at pp={p}"
    if written is not None and abs(written - limit / (2 * p)) > 1e-9:
        units = f"{written:g} x 2pp rounded down to {units}, {limit / (2 * p):.3g}"
    shown = limit / (2 * p) if written is None else written
    return f"no V schedule fits {shown:.3g} of 1F1B's activations ({units}); raise it to at least {share:g}"


@register
class VAuto(VShapeSchedule):
    """V-Auto: the shortest V schedule within parallel.activation_limit of 1F1B's activations."""

    name = "v-auto"
    splits_backward = True
    cost_aware = True

    def validate(self, spec: ScheduleSpec) -> None:
        super().validate(spec)
        if spec.p < 2:
            raise UserError(
                "parallel.pp",
                "schedule 'v-auto' searches the offsets between stages; it needs pp >= 2",
            )
        if spec.activation_limit is None:
            raise UserError(
                FIELD_LIMIT,
                "schedule 'v-auto' needs a limit: a fraction of 1F1B's activation memory, e.g. 0.5 "
                "(at large pp V-Min's blocks need about 1/3, V-Half's 1/2, ZB-V's 1)",
            )

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        limit = limit_units(spec.activation_limit or 1.0, spec.p)
        return v_auto_orders(spec.p, spec.m, limit, spec.costs or OpCosts(), spec.activation_limit)
