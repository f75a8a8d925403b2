"""The eight-step order shared by DualPipe and DualPipeV (deepseek-ai/DualPipe).

Both run two "phases" per rank; a phase is one of the rank's two chunks. Following
``DualPipe.step`` / ``DualPipeV.step`` with n half-pipeline ranks, the rank's position r in
its half, and M microbatches per phase:

1. 2(n-r-1) x F0            5. n-r-1 x (B1, F1&B0)
2. r+1 x (F0, F1)           6. r+1 x (B1, B0), second half of them split (zero bubble)
3. n-r-1 x (B1 W F1)        7. n-r-1 x (W, B0 split)
4. M-2n+r+1 x (F0&B1, F1&B0)  8. r+1 x W
"X&Y" is an overlapped forward/backward pair; the first pair of step 4 on the turning rank
(DualPipe middle ranks, DualPipeV last rank) is not overlapped. Split backwards push their W
into a FIFO that later W steps pop, exactly as ``WeightGradStore``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from simcluster.schedules.base import PipeOp

# (phase, index within that phase) -> (microbatch, chunk)
PhaseMap = Callable[[int, int], tuple[int, int]]


@dataclass
class _Emitter:
    where: PhaseMap
    ops: list[PipeOp] = field(default_factory=list)
    n_f: list[int] = field(default_factory=lambda: [0, 0])
    n_b: list[int] = field(default_factory=lambda: [0, 0])
    pending_w: deque[tuple[int, int]] = field(default_factory=deque)

    def f(self, phase: int) -> None:
        mb, chunk = self.where(phase, self.n_f[phase])
        self.n_f[phase] += 1
        self.ops.append(PipeOp("F", mb, chunk))

    def b(self, phase: int, split: bool = False, overlap: bool = False) -> None:
        mb, chunk = self.where(phase, self.n_b[phase])
        self.n_b[phase] += 1
        self.ops.append(PipeOp("B" if split else "BW", mb, chunk, overlap))
        if split:
            self.pending_w.append((mb, chunk))

    def w(self) -> None:
        mb, chunk = self.pending_w.popleft()
        self.ops.append(PipeOp("W", mb, chunk))

    def fb(self, f_phase: int, b_phase: int) -> None:
        self.f(f_phase)
        self.b(b_phase, overlap=True)


def dual_order(n: int, r: int, per_phase: int, turning: bool, where: PhaseMap) -> list[PipeOp]:
    """Ops of one rank; ``n`` ranks per half, ``r`` position, ``per_phase`` microbatches."""
    e = _Emitter(where)
    _warm_up(e, n, r)
    _steady(e, n, r, per_phase, turning)
    _cool_down(e, n, r)
    if e.pending_w or e.n_f != [per_phase, per_phase] or e.n_b != [per_phase, per_phase]:
        raise AssertionError(f"dual order incomplete: F{e.n_f} B{e.n_b} W left {len(e.pending_w)}")
    return e.ops


def _warm_up(e: _Emitter, n: int, r: int) -> None:
    """Steps 1-3: the first phase's forwards, both phases' in turn, then the first split
    backwards of phase 1 between its forwards."""
    for _ in range(2 * (n - r - 1)):
        e.f(0)
    for _ in range(r + 1):
        e.f(0)
        e.f(1)
    for _ in range(n - r - 1):
        e.b(1, split=True)
        e.w()
        e.f(1)


def _steady(e: _Emitter, n: int, r: int, per_phase: int, turning: bool) -> None:
    """Steps 4-5: overlapped forward/backward pairs of both phases."""
    for i in range(per_phase - 2 * n + r + 1):
        if i == 0 and turning:
            e.f(0)
            e.b(1)  # not overlapped, "to further reduce bubble size"
        else:
            e.fb(0, 1)
        e.fb(1, 0)
    for _ in range(n - r - 1):
        e.b(1)
        e.fb(1, 0)


def _cool_down(e: _Emitter, n: int, r: int) -> None:
    """Steps 6-8: the last backwards, the second half of step 6 split (zero bubble), and the
    weight gradients they left."""
    split = False
    steps = r + 1
    for i in range(steps):
        if i == steps // 2 and r % 2 == 1:
            split = True
        e.b(1, split=split)
        if i == steps // 2 and r % 2 == 0:
            split = True
        e.b(0, split=split)
    for _ in range(n - r - 1):
        e.w()
        e.b(0, split=True)
    for _ in range(r + 1):
        e.w()
