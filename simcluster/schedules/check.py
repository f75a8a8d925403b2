"""Validity checks and a tiny list-scheduler for pipeline schedules.

``replay`` is not the engine: it executes an order with fixed op times and no resource
sharing, to check that the order is deadlock-free and to measure the textbook bubble.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from simcluster.schedules.base import PipeOp, Schedule, ScheduleSpec, Upstream, upstream

Timeline = list[list[tuple[PipeOp, float, float]]]


@dataclass(frozen=True)
class OpTimes:
    """Duration of each op kind (seconds); a fused BW takes B + W, an F&B pair ``fb``."""

    f: float = 1.0
    b: float = 1.0
    w: float = 1.0
    fb: float | None = None  # overlapped F&B pair; None: F + the backward, not overlapped

    def of(self, op: PipeOp) -> float:
        return {"F": self.f, "B": self.b, "W": self.w, "BW": self.b + self.w}[op.kind]


def check_order(schedule: Schedule, spec: ScheduleSpec, ops: list[list[PipeOp]]) -> None:
    """Raise ValueError unless each stage's order is complete and F before B before W.

    Every (microbatch, chunk) served by a stage has exactly one F and either one BW or one B
    followed later by one W; nothing else appears.
    """
    if len(ops) != spec.p:
        raise ValueError(f"{schedule.name}: {len(ops)} stage lists for p={spec.p}")
    chunks = schedule.chunks(spec)
    serves = getattr(schedule, "chunk_serves", lambda _s, _c, _m: True)
    for stage, stage_ops in enumerate(ops):
        expected = {(mb, c) for mb in range(spec.m) for c in range(chunks) if serves(spec, c, mb)}
        seen: dict[tuple[int, int], str] = {}
        for op in stage_ops:
            key = (op.microbatch, op.chunk)
            if key not in expected:
                raise ValueError(f"{schedule.name}: stage {stage} runs unexpected {op}")
            done = seen.get(key, "")
            allowed = {"": "F", "F": "B|BW", "FB": "W"}.get(done, "")
            if op.kind not in allowed.split("|"):
                raise ValueError(
                    f"{schedule.name}: stage {stage} runs {op} after '{done}' (needs F, B, W order)"
                )
            seen[key] = done + op.kind
        for key in sorted(expected):
            if seen.get(key) != "FBW":
                raise ValueError(
                    f"{schedule.name}: stage {stage} microbatch {key[0]} chunk {key[1]} "
                    f"has '{seen.get(key, '')}', needs F then B and W (or BW)"
                )


def replay(
    schedule: Schedule,
    spec: ScheduleSpec,
    ops: list[list[PipeOp]],
    t_f: float = 1.0,
    t_b: float = 1.0,
    t_w: float = 1.0,
    t_comm: float = 0.0,
    t_fb: float | None = None,
) -> Timeline:
    """Run each stage's order as early as dependencies allow; per stage (op, start, end).

    Cross-stage dependencies (from ``virtual_stage``) add ``t_comm``. An op flagged
    ``overlap`` starts together with the op before it and the pair lasts ``t_fb`` (default:
    the two durations summed). Raises ValueError naming the stuck ops on deadlock.
    """
    run = _Replay(ops, OpTimes(t_f, t_b, t_w, t_fb), t_comm, deps=[
        [upstream(schedule, spec, s, op) for op in stage_ops] for s, stage_ops in enumerate(ops)
    ])  # fmt: skip
    remaining = sum(len(x) for x in ops)
    while remaining:
        ran = sum(run.advance(stage) for stage in range(spec.p))
        if not ran:
            stuck = [
                f"stage {s}: {ops[s][run.head[s]]}" for s in range(spec.p) if run.head[s] < len(ops[s])
            ]
            raise ValueError(f"{schedule.name}: deadlock at " + "; ".join(stuck))
        remaining -= ran
    return run.out


@dataclass
class _Replay:
    """:func:`replay`'s state: per stage the next op, when the stage is free and what ran; the
    end of every (stage, phase, microbatch, chunk) done."""

    ops: list[list[PipeOp]]
    times: OpTimes
    t_comm: float
    deps: list[list[Upstream | None]]  # each op's input (schedules.base.upstream)
    done: dict[tuple[int, str, int, int], float] = field(default_factory=dict)
    head: list[int] = field(init=False)
    free: list[float] = field(init=False)
    out: Timeline = field(init=False)

    def __post_init__(self) -> None:
        self.head = [0] * len(self.ops)
        self.free = [0.0] * len(self.ops)
        self.out = [[] for _ in self.ops]

    def advance(self, stage: int) -> int:
        """Run ``stage``'s ops in order while their inputs are there; how many ran."""
        ran = 0
        while self.head[stage] < len(self.ops[stage]) and (step := self._place(stage)):
            self.head[stage] += step
            ran += step
        return ran

    def _ready_at(self, stage: int, i: int) -> float | None:
        dep = self.deps[stage][i]
        if dep is None:
            return self.free[stage]
        end = self.done.get(dep)
        if end is None:
            return None
        return max(self.free[stage], end + (self.t_comm if dep[0] != stage else 0.0))

    def _finish(self, stage: int, op: PipeOp, start: float, end: float) -> None:
        self.out[stage].append((op, start, end))
        phase = "F" if op.kind == "F" else ("B" if op.kind in ("B", "BW") else "W")
        self.done[(stage, phase, op.microbatch, op.chunk)] = end
        self.free[stage] = end

    def _place(self, stage: int) -> int:
        """Run the op at ``stage``'s head (with its F&B partner) if its inputs are there;
        how many ops ran (0: not ready)."""
        stage_ops, i = self.ops[stage], self.head[stage]
        start = self._ready_at(stage, i)
        if start is None:
            return 0
        if not (i + 1 < len(stage_ops) and stage_ops[i + 1].overlap):
            self._finish(stage, stage_ops[i], start, start + self.times.of(stage_ops[i]))
            return 1
        second = self._ready_at(stage, i + 1)
        if second is None:
            return 0
        start = max(start, second)
        a, b = stage_ops[i], stage_ops[i + 1]
        times = self.times
        length = times.fb if times.fb is not None else times.of(a) + times.of(b)
        self._finish(stage, a, start, start + length)
        self._finish(stage, b, start, start + length)
        return 2


def check_timeline(schedule: Schedule, spec: ScheduleSpec, timeline: Timeline) -> None:
    """Raise ValueError if a dependency starts early or two ops overlap on one stage.

    The two ops of an overlapped F&B pair (the second flagged ``overlap``) may share their
    interval, whichever of them starts first.
    """
    end_of: dict[tuple[int, str, int, int], float] = {}
    for stage, rows in enumerate(timeline):
        for op, _start, end in rows:
            phase = "F" if op.kind == "F" else ("B" if op.kind in ("B", "BW") else "W")
            end_of[(stage, phase, op.microbatch, op.chunk)] = end
    partner = _pair_partners(schedule.build(spec))
    eps = 1e-9
    for stage, rows in enumerate(timeline):
        # the two latest ends so far: the latest that is not this op's pair partner bounds it
        top: list[tuple[float, PipeOp | None]] = [(float("-inf"), None)] * 2
        for op, start, end in rows:
            mate = partner[stage].get(op)
            prev_end = top[1][0] if top[0][1] is not None and top[0][1] == mate else top[0][0]
            if start < prev_end - eps:
                raise ValueError(f"{schedule.name}: stage {stage} {op} overlaps the previous op")
            top = sorted([*top, (end, op)], key=lambda t: t[0], reverse=True)[:2]
            dep = upstream(schedule, spec, stage, op)
            if dep is not None and start < end_of[dep] - eps:
                raise ValueError(f"{schedule.name}: stage {stage} {op} starts before {dep} ends")


def _pair_partners(ops: list[list[PipeOp]]) -> list[dict[PipeOp, PipeOp]]:
    """Per stage, each op of an F&B pair mapped to the other."""
    out: list[dict[PipeOp, PipeOp]] = []
    for stage_ops in ops:
        mates: dict[PipeOp, PipeOp] = {}
        for first, second in zip(stage_ops, stage_ops[1:], strict=False):
            if second.overlap:
                mates[first], mates[second] = second, first
        out.append(mates)
    return out


def peak_inflight(ops: list[list[PipeOp]]) -> list[int]:
    """Per stage, max count of (microbatch, chunk) whose F ran and whose W (or BW) has not.

    The activation stash in chunk-microbatch units: multiply by a chunk's activation bytes.
    """
    peaks = []
    for stage_ops in ops:
        live = peak = 0
        for op in stage_ops:
            live += {"F": 1, "W": -1, "BW": -1}.get(op.kind, 0)
            peak = max(peak, live)
        peaks.append(peak)
    return peaks


def busy_time(rows: list[tuple[PipeOp, float, float]]) -> float:
    """Total time the stage computes (union of its op intervals)."""
    total, cur_start, cur_end = 0.0, None, None
    for _op, start, end in sorted(rows, key=lambda r: (r[1], r[2])):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start  # type: ignore[operator]
    return total


def bubble_time(timeline: Timeline) -> float:
    """Largest per-stage idle time between the stage's first and last op.

    Definition of the Zero Bubble paper (its schedulers measure each stage from its first F
    to its last W): 1F1B gives (p-1)(F+B+W) on stage 0.
    """
    return max(_span(rows) - busy_time(rows) for rows in timeline if rows)


def span(timeline: Timeline) -> float:
    """Longest per-stage time from first op start to last op end."""
    return max(_span(rows) for rows in timeline if rows)


def _span(rows: list[tuple[PipeOp, float, float]]) -> float:
    return max(r[2] for r in rows) - min(r[1] for r in rows)


def bubble_fraction(timeline: Timeline) -> float:
    """Bubble time over the longest stage span."""
    return bubble_time(timeline) / span(timeline)


def op_counts(ops: list[list[PipeOp]]) -> list[Counter[str]]:
    """Per stage, how many ops of each kind (for quick sanity checks)."""
    return [Counter(op.kind for op in stage_ops) for stage_ops in ops]
