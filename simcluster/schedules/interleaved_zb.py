"""Interleaved zero bubble (torch.distributed.pipelining ``ScheduleInterleavedZeroBubble``,
torchtitan's "InterleavedZeroBubble"): interleaved 1F1B with the backward split into B and W
and each stage's weight gradients deferred to fill the drain, Qi et al.'s ZB-H1 idea (ICLR'24)
on looped chunks.

Chunk c of stage s is model position ``c * p + s`` (interleaving's placement). As PyTorch
builds it: the microbatches go round in ``rounds = max(1, m // p)`` rounds of ``g = m / rounds``
(m must divide into them); walking the stage's v·m forward steps, step k runs chunk
``(k // g) mod v`` on that chunk's next microbatch. Stage s warms up with
``(v - 1)·g + (p - 1 - s)`` forwards (one fewer per hop than interleaved 1F1B's two), then
alternates one forward and one input-gradient backward B, the backward walking the chunks in
reverse in runs of g; after its first s backwards every B is followed by the oldest pending W,
and the W left over run at the end. With one chunk it is exactly ZB-H1.
"""

from __future__ import annotations

from collections import defaultdict

from simcluster.schedules.base import (
    LoopedSchedule,
    PipeOp,
    ScheduleSpec,
    pytorch_rounds,
    require_whole_rounds,
)
from simcluster.schedules.registry import register


@register
class InterleavedZeroBubble(LoopedSchedule):
    """Interleaved 1F1B with B/W split and W deferred by the stage index (PyTorch's ZB1P)."""

    name = "interleaved-zb"
    splits_backward = True

    def validate(self, spec: ScheduleSpec) -> None:
        require_whole_rounds(spec, self.name, "ScheduleInterleavedZeroBubble")

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        return [self._stage(spec, stage) for stage in range(spec.p)]

    def _stage(self, spec: ScheduleSpec, stage: int) -> list[PipeOp]:
        p, m, v = spec.p, spec.m, spec.v
        _, group = pytorch_rounds(spec)
        total = v * m
        warmup = min((v - 1) * group + (p - 1 - stage), total)

        def forward_chunk(step: int) -> int:
            return (step // group) % v

        def backward_chunk(step: int) -> int:
            return v - 1 - ((step - warmup) // group) % v

        counters: dict[tuple[str, int], int] = defaultdict(int)

        def op(kind: str, chunk: int) -> PipeOp:
            mb = counters[kind, chunk]
            counters[kind, chunk] = mb + 1
            return PipeOp(kind, mb, chunk)  # type: ignore[arg-type]

        ops = [op("F", forward_chunk(k)) for k in range(warmup)]
        pending: list[int] = []  # chunks of the backwards whose W has not run, oldest first
        for k in range(warmup, total + warmup):
            if k < total:
                ops.append(op("F", forward_chunk(k)))
            chunk = backward_chunk(k)
            ops.append(op("B", chunk))
            pending.append(chunk)
            if k - warmup >= stage:
                ops.append(op("W", pending.pop(0)))
        ops += [op("W", chunk) for chunk in pending]
        return ops
