"""V-Half and V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS'24,
arXiv 2405.15362; sail-sg's ``--zero-bubble-v-schedule-mem-setup half|min``, built by the fork's
``megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py``, whose steps these
functions follow one for one: ``stable_pattern_v_half``/``_v_min``, ``put_w``,
``mem_of_stage``, ``reorder`` (twice) and the unit-time ``eager_execution_time``).

V-shaped like ZB-V (stage s holds model chunk s and chunk 2p-1-s), but built from a *building
block*: one microbatch's four passes F (chunk 0), f (chunk 1), B (backward of chunk 1, the
loss side) and b (backward of chunk 0) at fixed time slots on every stage, repeated every six
slots. The block's lifespan sets the activation memory: about 1/2 (V-Half) or 1/3 (V-Min) of
1F1B's. The repeated blocks are then "squeezed" (the warm-up and the cool-down move ops to the
earliest free slot their inputs allow, never above the block's peak memory), and the weight
passes W fill the free slots after their backward (first in one pool, then per chunk).

The order is independent of the op times (the fork's runtime plans it with F = B = W = 1000
and a communication cost of 1 whatever it profiled): the blocks fix it in unit slots, so
unequal passes open bubbles the slots did not plan (V-Min most: 4 stages, 64 microbatches,
F:B:W = 60:77:56 gives 18% idle against 3% at equal times; V-Half 2%). Memory is counted
in slots as the paper does (F and f stash one unit, B and b free nothing, W frees one). The
result keeps (p+2)//2 (V-Half) and (p+4)//3 (V-Min) microbatches' activations against 1F1B's p,
the counts of the authors' summary table (tests/test_v_controllable.py).
"""

from __future__ import annotations

from collections.abc import Callable

from simcluster.schedules.base import OpKind, PipeOp, ScheduleSpec, VShapeSchedule
from simcluster.schedules.registry import register

Slots = list[list[int]]  # per pass type, the slot of each microbatch (in microbatch order)
F0, F1, B1, B0 = range(4)  # forward chunk 0, forward chunk 1, backward chunk 1, backward chunk 0
PERIOD = 6  # slots between consecutive microbatches in the repeated block
_STASH = (1, 1, 0, 0, -1, -1)  # memory units per pass type (W lists come after the four)
# the pipeline op each pass type is: (kind, chunk)
_OPS: dict[int, tuple[OpKind, int]] = {
    F0: ("F", 0), F1: ("F", 1), B1: ("B", 1), B0: ("B", 0), 4: ("W", 1), 5: ("W", 0)
}


def v_min_block(p: int) -> list[list[int]]:
    """Per stage, the slots of F, f, B, b of one microbatch (V-Min: about 1/3 of 1F1B)."""
    gap = 2 if p % 3 == 0 else 0
    return [[i, 2 * p - i - 1, 2 * p + gap + i, 4 * p + gap - i - 1] for i in range(p)]


def v_half_block(p: int) -> list[list[int]]:
    """Per stage, the slots of F, f, B, b of one microbatch (V-Half: about 1/2 of 1F1B)."""
    gap = 3 if p % 2 == 0 else 0
    return [[2 * i, 3 * p - i - 2, 3 * p + gap + 2 * i - 1, 6 * p + gap - i - 2] for i in range(p)]


def with_weight_passes(stage: Slots, split: bool) -> Slots:
    """The four pass lists plus W: each backward leaves a W to run in the next free slot (one
    pool, or one per chunk with ``split``, chunk-1 first); leftovers run after the last op."""
    base = [list(x) for x in stage[:4]]
    at = {slot: t for t, lst in enumerate(base) for slot in lst}
    pools: list[list[int]] = [[], []] if split else [[]]
    pending = [0, 0]
    last = max(x[-1] for x in base)
    for slot in range(last + 1):
        t = at.get(slot)
        if t is not None:
            if t in (B1, B0):
                pending[t - B1 if split else 0] += 1
            continue
        for w in range(len(pools)):
            if pending[w]:
                pools[w].append(slot)
                pending[w] -= 1
                break
    slot = last
    for w in range(len(pools)):
        for _ in range(pending[w]):
            slot += 1
            pools[w].append(slot)
    return base + pools


def peak_memory(stage: Slots) -> int:
    """Largest stash over the slots (without W lists, a pending W runs in every idle slot)."""
    has_w = len(stage) > 4
    at = {slot: t for t, lst in enumerate(stage) for slot in lst}
    cur = peak = pending = 0
    for slot in range(max(at) + 1):
        t = at.get(slot)
        if t is not None:
            cur += _STASH[t]
            pending += t in (B1, B0)
        elif not has_w and pending:
            cur -= 1
            pending -= 1
        peak = max(peak, cur)
    return peak


def _inputs(p: int, s: int, t: int, mb: int) -> list[tuple[int, int, int]]:
    """(stage, type, microbatch) of the passes op (s, t, mb) waits for: its input from the
    neighbour stage, the pass before it on the same stage, and its own previous microbatch."""
    keys = []
    if t in (F0, B1) and s > 0:
        keys.append((s - 1, t, mb))
    if t in (F1, B0) and s + 1 < p:
        keys.append((s + 1, t, mb))
    if 0 < t < 4:
        keys.append((s, t - 1, mb))
    if mb > 0:
        keys.append((s, t, mb - 1))
    return keys


def _upstream(stages: list[Slots], s: int, t: int, mb: int) -> int:
    """The latest slot among the op's inputs (-1 if none)."""
    dep = max((stages[a][b][c] for a, b, c in _inputs(len(stages), s, t, mb)), default=-1)
    if t == 4:  # the pooled W list: the mb-th backward of either chunk
        dep = max(dep, sorted(stages[s][B1] + stages[s][B0])[mb])
    return dep


def _global_order(stages: list[Slots]) -> list[tuple[int, int, int, int]]:
    """Every op as (slot, stage, type, microbatch) in slot order (ties: stage, then type)."""
    ops = [(slot, s, t, mb) for s, st in enumerate(stages) for t, lst in enumerate(st) for mb, slot in enumerate(lst)]
    return sorted(ops)


def _compact(stages: list[Slots]) -> list[Slots]:
    """Run every op as early as its inputs and its stage allow, one slot each (the slots'
    order kept): the slot each op then starts in."""
    p = len(stages)
    end: dict[tuple[int, int, int], int] = {}
    free = [0] * p
    for _, s, t, mb in _global_order(stages):
        start = max(free[s], max((end[k] for k in _inputs(p, s, t, mb)), default=0))
        end[(s, t, mb)] = start + 1
        free[s] = start + 1
    return [[[end[(s, t, mb)] - 1 for mb in range(len(lst))] for t, lst in enumerate(st)] for s, st in enumerate(stages)]


class _Stash:
    """One stage's stash over the slots, for ``squeeze``'s memory check of a move.

    Moving an op from ``slot`` to an earlier free slot ``early`` only changes the stash in
    ``[early, slot)``. Before ``early`` nothing moved; from ``slot`` on the stash is never
    higher than before: with W lists the ops' units are the same, and without them (a pending
    W runs in each idle slot, a queue served by idle slots) the move turns ``slot`` idle and
    brings a backward no later, so at least as many W have run by then (the departures of a
    queue, min over u of arrivals by u plus idle slots after u, only grow). The stage was
    within the budget before the move, so checking ``[early, slot)`` is checking the stage,
    in time independent of m; the states before each slot are kept up to date lazily.
    """

    def __init__(self, stage: Slots, size: int):
        self.has_w = len(stage) > 4
        self.at = [-1] * size
        for t, lst in enumerate(stage):
            for slot in lst:
                self.at[slot] = t
        self.cur = [0] * (size + 1)  # stash and pending W before each slot
        self.pending = [0] * (size + 1)
        self.valid = 0  # cur and pending are right up to and including this index

    def _step(self, cur: int, pending: int, t: int) -> tuple[int, int]:
        if t >= 0:
            return cur + _STASH[t], pending + (t in (B1, B0))
        if not self.has_w and pending:
            return cur - 1, pending - 1
        return cur, pending

    def _before(self, slot: int) -> tuple[int, int]:
        cur, pending = self.cur[self.valid], self.pending[self.valid]
        for k in range(self.valid, slot):
            cur, pending = self._step(cur, pending, self.at[k])
            self.cur[k + 1], self.pending[k + 1] = cur, pending
        self.valid = max(self.valid, slot)
        return self.cur[slot], self.pending[slot]

    def fits(self, t: int, slot: int, early: int, budget: int) -> bool:
        """Whether the op of type t at ``slot`` can run at the free ``early`` instead."""
        cur, pending = self._before(early)
        for k in range(early, slot):
            cur, pending = self._step(cur, pending, t if k == early else self.at[k])
            if cur > budget:
                return False
        return True

    def move(self, t: int, slot: int, early: int) -> None:
        self.at[slot], self.at[early] = -1, t
        self.valid = min(self.valid, early)


def squeeze(stages: list[Slots], with_w: bool) -> list[Slots]:
    """Move warm-up (``with_w`` only) and cool-down ops to the earliest free slot after their
    inputs that keeps the stage within the block's peak memory; the steady state stays put."""
    stages = [[list(x) for x in (with_weight_passes(st, split=False) if with_w else st)] for st in stages]
    budget = max(peak_memory(st) for st in stages)
    m = len(stages[0][F0])
    size = max(x[-1] for st in stages for x in st) + 1
    taken = [[False] * size for _ in stages]
    stash = [_Stash(st, size) for st in stages]
    phase = 0  # 0 warm-up, 1 steady (from stage 0's first b), 2 cool-down (after the last F)
    for slot, s, t, mb in _global_order(stages):
        if phase == 0 and t == B0 and s == 0:
            phase = 1
        if phase == 1:
            if t == F0 and mb == m - 1:
                phase = 2
            taken[s][slot] = True
            continue
        if phase == 0 and not with_w:
            taken[s][slot] = True
            continue
        for early in range(_upstream(stages, s, t, mb) + 1, slot):
            if not taken[s][early] and stash[s].fits(t, slot, early, budget):
                stages[s][t][mb] = early
                stash[s].move(t, slot, early)
                break
        taken[s][stages[s][t][mb]] = True
    if not with_w:
        stages = [with_weight_passes(st, split=False) for st in stages]
    return _compact(stages)


def block_orders(p: int, m: int, block: Callable[[int], list[list[int]]]) -> list[list[PipeOp]]:
    """The building block repeated for m microbatches, squeezed with and then without the W
    passes, W placed per chunk; per stage, the ops in slot order."""
    stages = [[list(range(x, x + PERIOD * m, PERIOD)) for x in offsets] for offsets in block(p)]
    stages = [st[:4] for st in squeeze(stages, with_w=True)]
    stages = [st[:4] for st in squeeze(stages, with_w=False)]
    orders = []
    for st in stages:
        slotted = with_weight_passes(st, split=True)
        ops = sorted((slot, t, mb) for t, lst in enumerate(slotted) for mb, slot in enumerate(lst))
        orders.append([PipeOp(_OPS[t][0], mb, _OPS[t][1]) for _, t, mb in ops])
    return orders


class _BlockSchedule(VShapeSchedule):
    splits_backward = True
    block: Callable[[int], list[list[int]]]

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        return block_orders(spec.p, spec.m, type(self).block)


@register
class VHalf(_BlockSchedule):
    """V-Half: a V schedule in about half of 1F1B's activation memory."""

    name = "v-half"
    block = staticmethod(v_half_block)


@register
class VMin(_BlockSchedule):
    """V-Min: a V schedule in about a third of 1F1B's activation memory."""

    name = "v-min"
    block = staticmethod(v_min_block)
