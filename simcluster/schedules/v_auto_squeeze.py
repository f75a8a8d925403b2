"""Order-keeping steps of the adaptive V scheduler (sail-sg's ``v_auto_schedule.py``: the
"squeezing" of Qi et al., "Pipeline Parallelism with Controllable Memory", §2, and the checks
around it): moving every pass to its earliest slot, dropping the surplus microbatches, the
greedy filling of idle slots that never raises a stage's peak memory, and the weight passes'
relabelling in backward order.

The microbatch of a pass is its rank among the same pass on its stage. Where the fork stops on
an assertion (a pass before the one it waits for), :class:`Infeasible` is raised and the search
skips that building block.
"""

from __future__ import annotations

from simcluster.schedules.v_auto_block import IDLE, PASSES, Grid, peak


class Infeasible(Exception):
    """This building block gives no valid schedule."""


def upstream(p: int, s: int, kind: str) -> tuple[int, str] | None:
    """The stage and pass (same microbatch) that ``kind`` on stage s waits for besides the
    passes before it on its own stage: F and B come from the stage before, f and b from the
    stage after; at the V's turns (stage p-1's f and b, stage 0's B) and for W and w the wait
    is on the stage itself, kept by its order."""
    if kind in "FB" and s > 0:
        return s - 1, kind
    if kind in "fb" and s + 1 < p:
        return s + 1, kind
    return None


_LOCAL = {"f": "F", "B": "f", "b": "B", "W": "B", "w": "b"}  # the pass each waits for on a turn
_DOWN, _UP = frozenset("FBW"), frozenset("fbw")  # passes visited down, then up, the stages
_STASH = {"F": 1, "f": 1, "W": -1, "w": -1, "B": 0, "b": 0, IDLE: 0}  # chunk activations


def _upstreams(p: int) -> list[dict[str, tuple[int, str] | None]]:
    """:func:`upstream` of every stage and pass."""
    return [{kind: upstream(p, s, kind) for kind in PASSES} for s in range(p)]


def _slots(p: int) -> list[dict[str, list[int]]]:
    """Per stage and pass, the slot of each microbatch placed so far."""
    return [{kind: [] for kind in PASSES} for _ in range(p)]


def squeeze(grid: Grid, m: int) -> Grid:
    """Each pass at its earliest slot, the stages' orders kept (``squeeze_without_change_order``:
    slots are visited in order, F, B and W down the stages before f, b and w up them)."""
    p = len(grid)
    width = max(len(row) for row in grid)
    visits: list[list[tuple[int, str]]] = [[] for _ in range(width)]
    for down, stages in ((True, range(p)), (False, range(p - 1, -1, -1))):
        for s in stages:
            for j, kind in enumerate(grid[s]):
                if kind in _DOWN if down else kind in _UP:
                    visits[j].append((s, kind))
    out = [[IDLE] * width for _ in grid]
    deps = _upstreams(p)
    slots = _slots(p)
    free = [0] * p
    for s, kind in (visit for column in visits for visit in column):
        mine = slots[s][kind]
        mb = len(mine)
        if mb >= m:
            raise Infeasible
        start = free[s]
        dep = deps[s][kind]
        if dep is not None:
            theirs = slots[dep[0]][dep[1]]
            if len(theirs) <= mb:
                raise Infeasible
            start = max(start, theirs[mb] + 1)
        out[s][start] = kind
        mine.append(start)
        free[s] = start + 1
    return [row[: max(free)] for row in out]


def drop_surplus(grid: Grid, m: int) -> Grid:
    """Keep each stage's first m of every pass (the fork plans at least 2p microbatches)."""
    out = []
    for row in grid:
        count = dict.fromkeys(PASSES, 0)
        new = []
        for kind in row:
            if kind != IDLE:
                count[kind] += 1
                if count[kind] > m:
                    kind = IDLE
            new.append(kind)
        out.append(new)
    return out


def fill_idle_slots(grid: Grid) -> None:
    """``reorder_greedily_without_increasing_peak_mem``: visiting the slots in order (stages
    in order within a slot), an idle slot takes the first later pass of some kind on its stage
    that may run there (its input done in an earlier slot) and, for F or f, whose stash does
    not lift the stage above the schedule's peak until its old slot. In place."""
    p, budget = len(grid), peak(grid)
    last = [_last_slots(row) for row in grid]
    deps = _upstreams(p)
    slots = _slots(p)
    mem = [0] * p
    for j in range(len(grid[0])):
        for s in range(p):
            row = grid[s]
            if row[j] == IDLE:
                k = _pulled(grid, s, j, last[s], budget - mem[s], slots, deps)
                if k is None:
                    continue
                row[j], row[k] = row[k], IDLE
            slots[s][row[j]].append(j)
            mem[s] += _STASH[row[j]]


def _last_slots(row: list[str]) -> dict[str, int]:
    """The last slot of each pass on a stage's row (-1 for a pass it does not run)."""
    at = dict.fromkeys(PASSES, -1)
    for j, kind in enumerate(row):
        at[kind] = j
    return at


def _pulled(
    grid: Grid, s: int, j: int, last: dict[str, int], headroom: int,
    slots: list[dict[str, list[int]]], deps: list[dict[str, tuple[int, str] | None]],
) -> int | None:  # fmt: skip
    """The later slot of stage ``s`` whose pass may move into idle slot ``j``: the first of its
    kind after j, its input done before j, and for F or f its stash within ``headroom`` (the
    schedule's peak less the stage's stash at j) until its old slot; None if no pass may."""
    row = grid[s]
    wanted = {kind for kind in PASSES if last[kind] > j}
    delta = rise = 0
    for k in range(j + 1, len(row)):
        if not wanted:
            return None
        kind = row[k]
        delta += _STASH[kind]
        rise_before, rise = rise, max(rise, delta)
        if kind not in wanted:
            continue
        wanted.discard(kind)
        if kind in "Ff" and rise_before >= headroom:
            continue  # its stash from slot j on would exceed the peak
        if _input_done(kind, len(slots[s][kind]), j, slots, deps[s][kind], s):
            return k
    return None


def _input_done(
    kind: str, mb: int, j: int, slots: list[dict[str, list[int]]], dep: tuple[int, str] | None, s: int
) -> bool:
    """Whether the input of stage ``s``'s next ``kind`` pass (its ``mb``-th) is done before slot
    ``j``: the other stage's pass it waits for, else the pass before it on its own stage
    (``_LOCAL``: f after F, B after f, ...); a first-stage F waits for nothing."""
    if dep is not None:
        theirs = slots[dep[0]][dep[1]]
        return len(theirs) > mb and theirs[mb] < j
    return kind == "F" or len(slots[s][_LOCAL[kind]]) > mb


def relabel_weights(grid: Grid, m: int) -> None:
    """Weight slots run the pending weight passes oldest backward first (``relabel_w``): each
    W or w slot becomes W after a B, w after a b, in the order the backwards ran. In place."""
    for row in grid:
        for kind in PASSES:
            if row.count(kind) != m:
                raise Infeasible
        queue: list[str] = []
        for j, kind in enumerate(row):
            if kind in "Bb":
                queue.append("W" if kind == "B" else "w")
            elif kind in "Ww":
                if not queue:
                    raise Infeasible
                row[j] = queue.pop(0)


def _slot_of(grid: Grid, m: int) -> dict[tuple[int, str, int], int] | None:
    """The slot of each (stage, pass, microbatch); None unless every pass is m times on every
    stage."""
    slot_of: dict[tuple[int, str, int], int] = {}
    for s, row in enumerate(grid):
        seen = dict.fromkeys(PASSES, 0)
        for j, kind in enumerate(row):
            if kind != IDLE:
                slot_of[(s, kind, seen[kind])] = j
                seen[kind] += 1
        if any(n != m for n in seen.values()):
            return None
    return slot_of


def is_valid(grid: Grid, m: int) -> bool:
    """Every pass m times per stage, each after its input (the other stage's or its own)."""
    p = len(grid)
    slot_of = _slot_of(grid, m)
    if slot_of is None:
        return False
    for s in range(p):
        for kind in PASSES:
            dep = upstream(p, s, kind)
            src = dep if dep is not None else ((s, _LOCAL[kind]) if kind != "F" else None)
            if src is None:
                continue
            for mb in range(m):
                if slot_of[(src[0], src[1], mb)] >= slot_of[(s, kind, mb)]:
                    return False
    return True
