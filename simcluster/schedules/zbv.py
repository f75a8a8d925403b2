"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24 §6; sail-sg ``zbv.py``).

The model is cut into 2p chunks laid out as a V: stage s holds chunk s (chunk 0) and chunk
2p-1-s (chunk 1), so the loss is on stage 0. The order is cost-aware: sail-sg's V-schedule
heuristic planned with the op times (:mod:`zbv_auto`; unit times without them, as the runtime
plans before it has profiled). Should that heuristic not complete, a unit-time greedy list
schedule is used instead: at each tick a stage runs a ready F (deeper chunk first) if memory
allows, else a ready B (oldest microbatch first), else a pending W. Memory uses sail-sg's
accounting: F stashes 2 units, B and W each free 1, and a stage may hold 4p units (= 1F1B's
peak of p full stage activations). With F = B = W either has no bubble for m >= 2p.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from simcluster.schedules.base import OpCosts, PipeOp, ScheduleSpec, VShapeSchedule
from simcluster.schedules.registry import register
from simcluster.schedules.zbv_auto import v_orders


@dataclass
class _Stage:
    next_f: list[int] = field(default_factory=lambda: [0, 0])
    next_b: list[int] = field(default_factory=lambda: [0, 0])
    pending_w: deque[tuple[int, int]] = field(default_factory=deque)
    mem: int = 0
    ops: list[PipeOp] = field(default_factory=list)


@register
class ZeroBubbleV(VShapeSchedule):
    """ZB-V: V-shaped, cost-aware zero-bubble order within 1F1B's activation memory."""

    name = "zbv"
    splits_backward = True
    cost_aware = True

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        return v_orders(spec.p, spec.m, spec.costs or OpCosts()) or unit_greedy_orders(spec.p, spec.m)


def unit_greedy_orders(p: int, m: int) -> list[list[PipeOp]]:
    """The unit-time greedy V order (the module docstring's fallback)."""
    return _UnitGreedy(p, m).orders()


class _UnitGreedy:
    """The fallback's state: each stage's progress and the tick each (virtual stage,
    microbatch) F and B ends at."""

    def __init__(self, p: int, m: int) -> None:
        self.p, self.m = p, m
        self.cap, self.last = 4 * p, 2 * p - 1
        self.f_end: dict[tuple[int, int], int] = {}
        self.b_end: dict[tuple[int, int], int] = {}
        self.stages = [_Stage() for _ in range(p)]

    def vs(self, s: int, c: int) -> int:
        """Virtual stage of stage ``s``'s chunk ``c`` (the V: chunk 1 runs back up)."""
        return s if c == 0 else self.last - s

    def f_ready(self, s: int, c: int, t: int) -> bool:
        st = self.stages[s]
        mb, k = st.next_f[c], self.vs(s, c)
        if mb >= self.m or st.mem + 2 > self.cap:
            return False
        dep = 0 if k == 0 else self.f_end.get((k - 1, mb))
        return dep is not None and dep <= t

    def b_ready(self, s: int, c: int, t: int) -> bool:
        st = self.stages[s]
        mb, k = st.next_b[c], self.vs(s, c)
        if mb >= st.next_f[c]:
            return False
        dep = self.f_end.get((k, mb)) if k == self.last else self.b_end.get((k + 1, mb))
        return dep is not None and dep <= t

    def pick(self, s: int, t: int) -> PipeOp | None:
        """A ready F (deeper chunk first), else a ready B, else the oldest pending W."""
        st = self.stages[s]
        f_cands = [c for c in (1, 0) if self.f_ready(s, c, t)]
        if f_cands:
            c = min(f_cands, key=lambda c: (st.next_f[c], -c))
            return PipeOp("F", st.next_f[c], c)
        b_cands = [c for c in (1, 0) if self.b_ready(s, c, t)]
        if b_cands:
            c = min(b_cands, key=lambda c: (st.next_b[c], -c))
            return PipeOp("B", st.next_b[c], c)
        if st.pending_w:
            mb, c = st.pending_w[0]
            return PipeOp("W", mb, c)
        return None

    def apply(self, s: int, op: PipeOp, t: int) -> None:
        """Stage ``s`` runs ``op`` in tick ``t``: its memory (F stashes 2 units, B and W free
        1 each) and the end ticks its successors wait for."""
        st, k = self.stages[s], self.vs(s, op.chunk)
        if op.kind == "F":
            st.next_f[op.chunk] += 1
            st.mem += 2
            self.f_end[(k, op.microbatch)] = t + 1
        elif op.kind == "B":
            st.next_b[op.chunk] += 1
            st.mem -= 1
            st.pending_w.append((op.microbatch, op.chunk))
            self.b_end[(k, op.microbatch)] = t + 1
        else:
            st.pending_w.popleft()
            st.mem -= 1
        st.ops.append(op)

    def orders(self) -> list[list[PipeOp]]:
        """Every stage's op list, tick by tick until all 6pm ops ran."""
        t, remaining = 0, 6 * self.m * self.p
        while remaining:
            chosen = [(s, op) for s in range(self.p) if (op := self.pick(s, t)) is not None]
            if not chosen:
                raise AssertionError(f"zbv builder stalled at tick {t} (p={self.p}, m={self.m})")
            for s, op in chosen:  # all decisions of a tick use the state before it
                self.apply(s, op, t)
            remaining -= len(chosen)
            t += 1
        return [st.ops for st in self.stages]
