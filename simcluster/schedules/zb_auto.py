"""ZB-1p, ZB-2p and ZB-auto: Zero Bubble's automatic, cost-aware schedules (Qi et al., "Zero
Bubble Pipeline Parallelism", ICLR'24, Sec. 3.1).

The handcrafted ZB-H1/ZB-H2 assume F = B = W. The paper's runs instead time F, B, W and the
stage-to-stage transfer in the first iterations and build the order with a greedy heuristic
under an activation-memory limit: p microbatches' worth of F activations for ZB-1p (1F1B's
peak), 2p for ZB-2p, and for ZB-auto (the runtime's default) what fits in 85% of the GPU. The
heuristic, as the paper and the sail-sg runtime describe it:

1. warm-up: each stage runs as many forwards as fit (memory, and the time until its first
   backward can arrive), earlier stages strictly more than later ones;
2. steady state: one F and one B per microbatch on every stage; a W is slotted in before an
   op whose input has not arrived yet, when it fits in the wait or when idling would make this
   stage's bubble the largest, and whenever memory needs one freed;
3. the remaining W drain at the end.

A few tie-breaking variants are tried and the order with the shortest stage span is kept
(sail-sg tries the same eight; it leaves its ILP refinement disabled). The sail-sg runtime
plans with uniform op times (the median over stages) and the activation memory each pass
allocated in its profiling iterations; :class:`OpCosts` carries both. Memory is counted in
units of one microbatch's F stash: F adds 1, B frees ``1 - w_memory``, W the rest. Under full
recomputation B adds memory (``w_memory`` above 1): as in sail-sg's ``manual_order``, pending W
then run before a B until it fits, and where none is pending the variant fails (the runtime
raises "Cannot fit memory"); the first microbatch's B is placed without the check, as there.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal

from simcluster.errors import UserError
from simcluster.schedules.base import FIELD_SCHEDULE, BaseSchedule, OpCosts, PipeOp, ScheduleSpec
from simcluster.schedules.registry import register

_EPS = 1e-9
_Kind = Literal["F", "B", "W"]  # the passes the heuristic places (never a fused BW)


@dataclass
class _Stage:
    done: dict[str, int] = field(default_factory=lambda: {"F": 0, "B": 0, "W": 0})
    free_at: float = 0.0
    mem: float = 0.0
    idle: float = 0.0  # waiting after the stage's first F (the stage's bubble)
    start: float | None = None
    ops: list[tuple[_Kind, int]] = field(default_factory=list)  # (kind, microbatch)

    def pending_w(self) -> int:
        return self.done["B"] - self.done["W"]


class _Greedy:
    """One run of the heuristic for fixed tie-breaking choices."""

    def __init__(self, p: int, m: int, costs: OpCosts, caps: list[float]) -> None:
        self.p, self.m, self.c, self.caps = p, m, costs, caps
        self.cost = {"F": costs.f, "B": costs.b, "W": costs.w}
        self.w_memory = list(costs.stage_w_memory or [costs.w_memory] * p)
        self.deltas = [{"F": 1.0, "B": w - 1.0, "W": -w} for w in self.w_memory]
        self.stages = [_Stage() for _ in range(p)]
        self.end: dict[tuple[str, int, int], float] = {}  # (kind, stage, microbatch) -> end
        self.worst_idle = 0.0  # stage bubbles only grow: the largest so far

    def arrival(self, kind: str, j: int, mb: int) -> float:
        """When the input of ``kind`` for ``mb`` reaches stage j (0 if it has no upstream)."""
        if kind == "F" and j > 0:
            dep = ("F", j - 1, mb)
        elif kind == "B" and j < self.p - 1:
            dep = ("B", j + 1, mb)
        else:
            return 0.0
        if dep not in self.end:  # this variant got ahead of its input: drop it
            raise _NoFit
        return self.end[dep] + self.c.comm

    def put(self, j: int, kind: _Kind, check: bool = True) -> None:
        st = self.stages[j]
        mb = st.done[kind]
        if check and st.mem + self.deltas[j][kind] > self.caps[j] + _EPS:
            raise _NoFit
        start = max(st.free_at, self.arrival(kind, j, mb))
        if st.done["F"] > 0:
            st.idle += start - st.free_at
            self.worst_idle = max(self.worst_idle, st.idle)
        if st.start is None:
            st.start = start
        st.free_at = start + self.cost[kind]
        self.end[(kind, j, mb)] = st.free_at
        st.mem += self.deltas[j][kind]
        st.done[kind] += 1
        st.ops.append((kind, mb))

    def max_idle(self) -> float:
        return self.worst_idle

    def free_memory_for(self, j: int, kind: _Kind) -> None:
        """Run pending W until ``kind`` fits (a B needs room only when it adds memory)."""
        st = self.stages[j]
        while st.mem + self.deltas[j][kind] > self.caps[j] + _EPS:
            if st.pending_w() == 0:
                raise _NoFit
            self.put(j, "W")

    def fill_wait(self, j: int, kind: str, greedy: bool) -> None:
        """Run pending W while the input of the next ``kind`` is still on its way."""
        st = self.stages[j]
        arrive = self.arrival(kind, j, st.done[kind])
        while st.pending_w() and st.free_at + self.c.w <= arrive + _EPS:
            self.put(j, "W")
        if st.pending_w() and st.free_at < arrive - _EPS:
            gap = arrive - st.free_at
            # a W longer than the wait delays the op; worth it when idling would make this
            # stage the one with the largest bubble, optional (``greedy``) otherwise
            if gap > self.max_idle() - st.idle or greedy:
                self.put(j, "W")

    def warm_up(self, allow_bubble: bool) -> None:
        p = self.p
        for j in range(p):
            self.put(j, "F")
        extra = self._extra_forwards(allow_bubble)
        for j in range(1, p):
            while 0 < extra[j] >= extra[j - 1] and self.stages[j].done["F"] + extra[j] < self.m:
                extra[j] -= 1
        for j in range(p):
            for _ in range(extra[j]):
                self.put(j, "F")
        for j in range(p - 1, -1, -1):
            self.put(j, "B", check=False)  # the first B is placed unchecked, as sail-sg's

    def _extra_forwards(self, allow_bubble: bool) -> list[int]:
        """The extra warm-up forwards each stage fits after its first F (memory, and the time
        until its first backward can arrive), stages visited last to first, the last stage none;
        before :meth:`warm_up` keeps earlier stages strictly ahead."""
        p, f, b, comm = self.p, self.c.f, self.c.b, self.c.comm
        extra = [0] * p
        b_end = self.end[("F", p - 1, 0)] + b  # first B on the last stage
        for j in range(p - 2, -1, -1):
            st = self.stages[j]
            t, mem = st.free_at, st.mem
            while st.done["F"] + extra[j] < self.m and mem + 1.0 <= self.caps[j] + _EPS:
                if (t + f > b_end + comm) if allow_bubble else (t >= b_end + comm):
                    break
                t, mem, extra[j] = t + f, mem + 1.0, extra[j] + 1
            b_end = max(t, b_end + comm) + b
        return extra

    def wants_f(self, j: int, prioritize_b: bool) -> bool:
        st = self.stages[j]
        if st.done["F"] >= self.m:
            return False
        if not (prioritize_b and j + 1 < self.p):
            return True
        nxt = self.stages[j + 1]
        if st.done["F"] < nxt.done["F"] + 2:
            return True
        # stage j is well ahead: run its F only if it does not delay the coming B
        b_due = nxt.free_at + self.c.f + self.c.b + self.c.comm
        if st.free_at >= b_due:
            return False
        w_time, mem, pending = 0.0, st.mem + 1.0, st.pending_w()
        while mem > self.caps[j] + _EPS and pending:
            w_time, mem, pending = w_time + self.c.w, mem - self.w_memory[j], pending - 1
        if st.free_at + self.c.f + w_time <= b_due + _EPS:
            return True
        return b_due - st.free_at > self.max_idle() - st.idle

    def run(self, allow_bubble: bool, prioritize_b: bool, greedy: bool) -> list[list[tuple[_Kind, int]]]:
        p = self.p
        self.warm_up(allow_bubble)
        for _ in range(1, self.m):
            self._forwards(prioritize_b, greedy)
            self._backwards(greedy)
        for j in range(p):
            while self.stages[j].pending_w():
                self.put(j, "W")
        return [s.ops for s in self.stages]

    def _forwards(self, prioritize_b: bool, greedy: bool) -> None:
        """One round's F on every stage that wants one (a stage only when every later one
        does), first to last."""
        p = self.p
        want = [self.wants_f(j, prioritize_b) for j in range(p)]
        for j in range(p - 2, -1, -1):
            want[j] = want[j] and want[j + 1]
        for j in range(p):
            if want[j]:
                self.free_memory_for(j, "F")
                if j > 0:
                    self.fill_wait(j, "F", greedy)
                self.put(j, "F")

    def _backwards(self, greedy: bool) -> None:
        """One round's B on every stage, last to first (stage 0 runs its pending W first once
        its forwards are all done)."""
        p = self.p
        for j in range(p - 1, -1, -1):
            self.free_memory_for(j, "B")
            if j + 1 < p:
                self.fill_wait(j, "B", greedy)
            if j == 0 and self.stages[0].done["F"] == self.m:
                while self.stages[0].pending_w():
                    self.put(0, "W")
            self.put(j, "B")

    def span(self) -> float:
        return max(s.free_at - (s.start or 0.0) for s in self.stages)


class _NoFit(Exception):
    """The memory limit leaves no room for the next op."""


def auto_orders(p: int, m: int, costs: OpCosts, caps: list[float]) -> list[list[PipeOp]]:
    """The shortest-span order the heuristic finds over its tie-breaking variants, stage j
    holding at most ``caps[j]`` microbatches' F stash."""
    best: tuple[float, list[list[tuple[_Kind, int]]]] | None = None
    for allow_bubble, prioritize_b, greedy in itertools.product((True, False), repeat=3):
        g = _Greedy(p, m, costs, caps)
        try:
            ops = g.run(allow_bubble, prioritize_b, greedy)
        except _NoFit:
            continue
        if best is None or g.span() < best[0] - _EPS:
            best = (g.span(), ops)
    if best is None:
        msg = f"no order fits a limit of {min(caps):g} microbatches' activations"
        kept = max(costs.stage_w_memory or [costs.w_memory])
        if kept > 1.0:
            msg += (
                f": under full recomputation a backward keeps {kept:.3g} microbatches' stash until its"
                " weight gradients; use zb-auto or zb-h1, or selective recomputation"
            )
        raise UserError(FIELD_SCHEDULE, msg)
    return [[PipeOp(kind, mb) for kind, mb in stage] for stage in best[1]]


class ZeroBubbleAuto(BaseSchedule):
    """Cost-aware zero-bubble order under a limit of ``memory_factor * p`` F activations."""

    splits_backward = True
    cost_aware = True
    memory_factor = 1

    def caps(self, spec: ScheduleSpec) -> list[float]:
        return [float(self.memory_factor * spec.p)] * spec.p

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        return auto_orders(spec.p, spec.m, spec.costs or OpCosts(), self.caps(spec))


@register
class ZeroBubble1p(ZeroBubbleAuto):
    """ZB-1p: Zero Bubble's automatic, cost-aware order in 1F1B's activation memory (p)."""

    name = "zb-1p"
    memory_factor = 1


@register
class ZeroBubble2p(ZeroBubbleAuto):
    """ZB-2p: Zero Bubble's automatic, cost-aware order in 2p microbatches' memory, ~no bubble."""

    name = "zb-2p"
    memory_factor = 2


@register
class ZeroBubbleAdaptive(ZeroBubbleAuto):
    """ZB-auto: Zero Bubble's adaptive limit, the activation room left in 85% of the GPU."""

    name = "zb-auto"

    def caps(self, spec: ScheduleSpec) -> list[float]:
        # sail-sg's default --zero-bubble-max-pending-backward auto: each stage may fill
        # --zero-bubble-adaptive-memory-limit-percentile (85) % of the GPU's memory with the
        # activations, after its parameters, gradients and optimizer state; never below what
        # 1F1B holds there (p - j microbatches on stage j), 2p when the room is unknown
        limit = spec.costs.memory_limit if spec.costs else None
        if limit is None or len(limit) != spec.p:
            return [2.0 * spec.p] * spec.p
        return [max(float(spec.p - j), room) for j, room in enumerate(limit)]
