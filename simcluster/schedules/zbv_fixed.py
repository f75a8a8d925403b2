"""ZB-V in its fixed order (torch.distributed.pipelining ``ScheduleZBVZeroBubble``, torchtitan's
"ZBVZeroBubble"; Qi et al., ICLR'24 §6, the handcrafted V for F = B = W).

Two chunks per stage in a V (chunk 0 is model position s, chunk 1 is 2p - 1 - s, so stage 0
holds both ends). As PyTorch lists stage s's actions: 2(p - s) - 1 forwards of chunk 0; s pairs
of (chunk 1, chunk 0) forwards; p - s times a chunk-1 forward, its B and its W; then, until
every microbatch is through, chunk 0's F, B, W and chunk 1's F, B, W in turn; the cool-down
runs s pairs of B (chunk 0, chunk 1), p - s chunk-0 B each with a deferred chunk-0 W, and the
W left over, chunk 1's first. Built for at least 2p - 1 microbatches, with the ones past m
dropped (PyTorch's own fill). Unlike ``zbv`` (sail-sg's heuristic, planned with the op
times), the order does not look at costs: it has no bubble only when F, B and W take alike.
"""

from __future__ import annotations

from collections import defaultdict

from simcluster.schedules.base import PipeOp, ScheduleSpec, VShapeSchedule
from simcluster.schedules.registry import register


@register
class ZeroBubbleVFixed(VShapeSchedule):
    """PyTorch's fixed ZB-V order: V-shaped chunks, W right after B but in the cool-down."""

    name = "zbv-fixed"
    splits_backward = True

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        return [_stage(spec.p, spec.m, s) for s in range(spec.p)]


def _stage(p: int, m: int, s: int) -> list[PipeOp]:
    """Stage ``s``'s actions as PyTorch lists them (the module docstring's phases)."""
    acts = _Actions()
    n = max(2 * p - 1, m)
    for _ in range(2 * (p - s) - 1):  # warm-up
        acts.f(0)
    for _ in range(s):
        acts.f(1)
        acts.f(0)
    for _ in range(p - s):
        acts.f(1)
        acts.b_then_w(1)
    while acts.count["F", 1] < acts.count["F", 0] or acts.count["F", 0] < n:  # steady
        if acts.count["F", 0] < n:
            acts.f(0)
        acts.b_then_w(0)
        acts.f(1)
        acts.b_then_w(1)
    _cooldown(acts, p, s)
    return [op for op in acts.ops if op.microbatch < m]


class _Actions:
    """A stage's action list, with how many of each (kind, chunk) it holds."""

    def __init__(self) -> None:
        self.count: dict[tuple[str, int], int] = defaultdict(int)
        self.ops: list[PipeOp] = []

    def run(self, kind: str, chunk: int, mb: int | None = None) -> None:
        """``kind`` of ``chunk`` for ``mb``, by default the next of its kind."""
        if mb is None:
            mb = self.count[kind, chunk]
            self.count[kind, chunk] = mb + 1
        self.ops.append(PipeOp(kind, mb, chunk))  # type: ignore[arg-type]

    def f(self, chunk: int) -> None:
        self.run("F", chunk)

    def b_then_w(self, chunk: int) -> None:
        # W of the microbatch whose B just ran (PyTorch indexes both by the B counter)
        self.run("B", chunk)
        self.run("W", chunk, self.count["B", chunk] - 1)


def _cooldown(acts: _Actions, p: int, s: int) -> None:
    """s pairs of B (chunk 0, chunk 1), p - s chunk-0 B each with a deferred chunk-0 W, then
    the W left over, chunk 1's first."""
    done_w = {0: acts.count["B", 0], 1: acts.count["B", 1]}
    for _ in range(s):
        acts.run("B", 0)
        acts.run("B", 1)
    for _ in range(p - s):
        acts.run("B", 0)
        acts.run("W", 0, done_w[0])
        done_w[0] += 1
    for chunk in (1, 0):
        while done_w[chunk] < acts.count["B", chunk]:
            acts.run("W", chunk, done_w[chunk])
            done_w[chunk] += 1
