"""The cost-aware ZB-V order (Qi et al. ICLR'24 Sec 6; the sail-sg runtime's V-schedule
heuristic, ``v_schedule.py``), planned with :class:`OpCosts` like ZB-1p/ZB-2p.

Two chunks per stage in a V (chunk 0 at model position s, chunk 1 at 2p-1-s). Memory is
counted in chunk forwards (F adds 1, B frees ``1 - w_memory``, W the rest) under a limit of 2p,
1F1B's peak. The heuristic, as the runtime describes it:

1. warm-up: chunk-0 forwards down the stages, then each stage, from the last up, adds chunk-0
   forwards (with every stage above it, to keep the chain) while they fit before its first
   chunk-1 input can arrive; the stages then even out their forward counts;
2. 2m rounds, each one backward then one forward per stage: a stage runs the backward of the
   chunk whose input has arrived (the loss chunk first), and the forward of the chunk whose
   input is there; before either, pending W fill the wait when they fit, and one more W is
   run when idling would make this stage's bubble the largest (``fill_b`` / ``fill_f`` choose
   whether chunk-0 backwards and forwards also do this);
3. the remaining W drain. Stage bubbles found in one pass are "approved" for the next, which
   may trade them between stages; the best of the passes and of the four fill choices is kept.

Where the heuristic cannot place an op (a variant that runs out of memory or inputs), that
variant is dropped; if all are, the unit-time greedy order of :mod:`zbv` is used.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from simcluster.schedules.base import OpCosts, PipeOp

_EPS = 1e-9
_Kind = Literal["F", "B", "W"]  # the passes the heuristic places (never a fused BW)
_PASSES = 20  # bubble-approval passes; each must lower the largest bubble to continue
# op slots per stage: (kind, lane); lane 0 is the first of the kind's two chunks to run on the
# way through the V: forwards run chunk 0 then chunk 1, backwards chunk 1 then chunk 0
F0, F1, B0, B1 = ("F", 0), ("F", 1), ("B", 0), ("B", 1)


class _Stuck(Exception):
    """The heuristic cannot place an op: an input is missing or memory is full."""


@dataclass
class _Stage:
    count: dict[tuple[str, int], int] = field(default_factory=lambda: {F0: 0, F1: 0, B0: 0, B1: 0})
    free_at: float = 0.0
    mem: float = 0.0
    idle: float = 0.0
    pending_w: deque[tuple[int, int]] = field(default_factory=deque)  # (lane, microbatch)
    ops: list[tuple[_Kind, int, int]] = field(default_factory=list)  # (kind, microbatch, chunk)


class _VGreedy:
    """One pass of the V heuristic for fixed fill choices and approved bubbles."""

    def __init__(self, p: int, m: int, costs: OpCosts, approved: list[float] | None) -> None:
        self.p, self.m, self.c = p, m, costs
        self.cap = 2.0 * p
        self.cost = {"F": costs.f, "B": costs.b, "W": costs.w}
        # sail-sg's V heuristic plans with a fixed per-layer estimate (zb_schedules.py:
        # f_mem_approx, w_mem_approx), not the measured allocations; without it the model's own
        # share, in which B frees memory as in the estimate
        w_memory = costs.w_memory_estimate if costs.w_memory_estimate is not None else min(costs.w_memory, 1.0)
        self.delta = {"F": 1.0, "B": -(1.0 - w_memory), "W": -w_memory}
        self.stages = [_Stage() for _ in range(p)]
        self.end: dict[tuple[str, int, int, int], float] = {}  # (kind, lane, stage, mb) -> end
        self.worst_idle = 0.0  # stage bubbles only grow: the largest so far
        self.approved = approved or [0.0] * p
        self.max_approved = max(self.approved) if approved else -1.0

    # --- dependencies -------------------------------------------------------------------
    def upstream(self, kind: str, lane: int, j: int, mb: int) -> tuple[str, int, int, int] | None:
        """The op on a neighbour stage that feeds this one (None: fed on the same stage)."""
        if lane == 1 and j < self.p - 1:
            return (kind, 1, j + 1, mb)
        if lane == 0 and j > 0:
            return (kind, 0, j - 1, mb)
        return None

    def arrival(self, kind: str, lane: int, j: int) -> float | None:
        """When the next (kind, lane) op's input reaches stage j; None if not yet scheduled."""
        dep = self.upstream(kind, lane, j, self.stages[j].count[(kind, lane)])
        if dep is None:
            return None
        end = self.end.get(dep)
        return None if end is None else end + self.c.comm

    def scheduled(self, key: tuple[str, int, int, int]) -> bool:
        return key in self.end

    # --- placing ops --------------------------------------------------------------------
    def put(self, kind: _Kind, lane: int, j: int) -> None:
        st = self.stages[j]
        if st.mem + self.delta[kind] > self.cap + _EPS:
            raise _Stuck
        if kind == "W":
            lane, mb = st.pending_w.popleft()
        else:
            mb = st.count[(kind, lane)]
            if mb >= self.m:
                raise _Stuck
        start = self._start(kind, lane, j, mb)
        if st.count[F0] > 0:
            st.idle += start - st.free_at
            self.worst_idle = max(self.worst_idle, st.idle)
        st.free_at = start + self.cost[kind]
        st.mem += self.delta[kind]
        if kind == "W":
            st.ops.append(("W", mb, 1 - lane))
            return
        self.end[(kind, lane, j, mb)] = st.free_at
        st.count[(kind, lane)] += 1
        # forwards run chunk 0 then 1; backwards run chunk 1 (the loss side) first
        st.ops.append((kind, mb, lane if kind == "F" else 1 - lane))
        if kind == "B":
            st.pending_w.append((lane, mb))

    def _start(self, kind: _Kind, lane: int, j: int, mb: int) -> float:
        """When op (kind, lane, mb) can start on stage j: once the stage is free and, but for a
        W, its input from the neighbour stage has arrived (:class:`_Stuck` if not yet placed)."""
        start = self.stages[j].free_at
        if kind != "W":
            dep = self.upstream(kind, lane, j, mb)
            if dep is not None:
                if dep not in self.end:
                    raise _Stuck
                start = max(start, self.end[dep] + self.c.comm)
        return start

    def largest_idle(self, j: int) -> float:
        return max(self.worst_idle, self.max_approved - self.approved[j])

    def fill_wait(self, j: int, arrive: float | None, extra: bool) -> None:
        """Pending W while the next op's input is on its way; one more when the wait would
        make this stage's bubble the largest and ``extra`` allows it."""
        st = self.stages[j]
        if arrive is None:
            return
        while st.pending_w and arrive >= st.free_at + self.c.w - _EPS:
            self.put("W", 0, j)
        if st.pending_w and arrive - st.free_at > self.largest_idle(j) - st.idle and extra:
            self.put("W", 0, j)

    # --- phases -------------------------------------------------------------------------
    def warm_up(self) -> None:
        """Chunk 0's forwards down the pipeline, chunk 1's back up with as many more chunk-0
        forwards before each as memory and its input's arrival allow, then forwards on
        alternate lanes until each stage has run at least its upstream's."""
        p, m = self.p, self.m
        for j in range(p):
            self.put("F", 0, j)
        for i in range(p - 1, -1, -1):
            if i < p - 1:
                self._forwards_before_turn(i)
            self.put("F", 1, i)
        lane = 0
        for i in range(1, p):
            prev, cur = self.stages[i - 1].count, self.stages[i].count
            while cur[F0] + cur[F1] < prev[F0] + prev[F1] or cur[F1] <= prev[F1] < m:
                placed = False
                for j in range(p - 1, i - 1, -1):
                    if self.stages[j].count[("F", lane)] < m:
                        self.put("F", lane, j)
                        placed = True
                if not placed and self.stages[i].count[F1] >= m:
                    break
                lane = 1 - lane

    def _forwards_before_turn(self, i: int) -> None:
        """Rounds of chunk-0 forwards on stages 0..i while stage i has the memory for them and
        finishes before stage i+1's first chunk-1 output arrives."""
        due = self.end[("F", 1, i + 1, 0)] + self.c.comm
        st = self.stages[i]
        while (
            st.mem + 2 + 2 * i <= self.cap + _EPS
            and st.free_at + self.c.f <= due + _EPS
            and st.count[F0] < self.m - i
        ):
            for j in range(i + 1):
                self.put("F", 0, j)

    def backward_lane(self, i: int) -> int:
        cnt = self.stages[i].count
        if cnt[B1] >= cnt[B0]:
            return 0
        if i == self.p - 1:
            return 1
        ready = self.scheduled(("B", 1, i + 1, cnt[B1]))
        return 1 if ready or cnt[B0] >= self.m else 0

    def forward_lane(self, i: int) -> int | None:
        cnt = self.stages[i].count
        if cnt[F1] >= cnt[F0]:
            return 0
        if i == self.p - 1 or self.scheduled(("F", 1, i + 1, cnt[F1])):
            return 1
        if cnt[F0] < self.m and (i == 0 or self.scheduled(("F", 0, i - 1, cnt[F0]))):
            return 0
        return None

    def run(self, fill_f: bool, fill_b: bool) -> list[list[tuple[_Kind, int, int]]]:
        """Warm up, then alternate a round of backwards and one of forwards until every pass
        is placed; the weight passes left drain at the end. Raises _Stuck if none fits."""
        self.warm_up()
        for _ in range(2 * self.m):
            self._backwards(fill_b)
            self._forwards(fill_f)
        for i in range(self.p):
            while self.stages[i].pending_w:
                self.put("W", 0, i)
        for st in self.stages:
            if st.count != {F0: self.m, F1: self.m, B0: self.m, B1: self.m}:
                raise _Stuck
        return [s.ops for s in self.stages]

    def _backwards(self, fill_b: bool) -> None:
        """One backward per stage that has one due: lane 1's up the stages first, then lane 0's."""
        lanes = [(i, self.backward_lane(i)) for i in range(self.p)]
        order = [x for x in reversed(lanes) if x[1] == 1] + [x for x in lanes if x[1] == 0]
        for i, lane in order:
            if self.stages[i].count[("B", lane)] >= self.m:
                continue
            self.fill_wait(i, self.arrival("B", lane, i), lane == 1 or fill_b)
            self.put("B", lane, i)

    def _forwards(self, fill_f: bool) -> None:
        """One forward per stage that may run one, weight passes first where its stash is full."""
        for i in range(self.p):
            if self.stages[i].count[F1] >= self.m:
                continue
            f_lane = self.forward_lane(i)
            if f_lane is None:
                continue
            st = self.stages[i]
            while st.mem + 1.0 > self.cap + _EPS:
                if not st.pending_w:
                    raise _Stuck
                self.put("W", 0, i)
            self.fill_wait(i, self.arrival("F", f_lane, i), fill_f)
            self.put("F", f_lane, i)

    def bubble(self) -> float:
        return self.worst_idle


def v_orders(p: int, m: int, costs: OpCosts) -> list[list[PipeOp]] | None:
    """The smallest-bubble V order the heuristic finds, or None when no variant completes."""
    best: tuple[float, list[list[tuple[_Kind, int, int]]]] | None = None
    for fill_b, fill_f in itertools.product((True, False), repeat=2):
        approved: list[float] | None = None
        for _ in range(_PASSES):
            g = _VGreedy(p, m, costs, approved)
            try:
                ops = g.run(fill_f, fill_b)
            except _Stuck:
                break
            bubble = g.bubble()
            if best is None or bubble < best[0] - _EPS:
                best = (bubble, ops)
            if approved is not None and bubble >= max(approved) - _EPS:
                break
            approved = [s.idle for s in g.stages]
    if best is None:
        return None
    return [[PipeOp(kind, mb, chunk) for kind, mb, chunk in stage] for stage in best[1]]
