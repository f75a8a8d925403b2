"""Looped breadth-first pipeline (Lamy-Poirier, arXiv 2211.05953; torch.distributed.pipelining
``ScheduleLoopedBFS``, torchtitan's "LoopedBFS").

Each stage holds v chunks placed as in interleaving (chunk c of stage s is model position
``c * p + s``). A stage runs every microbatch's forward through its first chunk, then through
its second, and so on; then the backward chunk by chunk in reverse, each over the
microbatches in reverse order, as PyTorch's schedule lists them. Activations of all m
microbatches of every chunk are held at the turn (GPipe's memory); with m >= p the bubble is
interleaving's, (p-1)/(v*m + p-1), and a chunk's gradients are complete long before the step
ends, which is what lets FSDP reduce them early (the paper's point).
"""

from __future__ import annotations

from simcluster.schedules.base import LoopedSchedule, PipeOp, ScheduleSpec
from simcluster.schedules.registry import register


@register
class LoopedBFS(LoopedSchedule):
    """Breadth-first over v looped chunks: all forwards chunk by chunk, then all backwards."""

    name = "looped-bfs"
    holds_every_microbatch = True

    def validate(self, spec: ScheduleSpec) -> None:
        return None  # any p, m and v: PyTorch's schedule has no divisibility rule

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        m, v = spec.m, spec.v
        forwards = [PipeOp("F", mb, chunk) for chunk in range(v) for mb in range(m)]
        backwards = [PipeOp("BW", mb, chunk) for chunk in reversed(range(v)) for mb in reversed(range(m))]
        return [forwards + backwards for _ in range(spec.p)]
