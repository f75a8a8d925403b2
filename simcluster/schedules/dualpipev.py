"""DualPipeV (deepseek-ai/DualPipe ``DualPipeV``; the "cut-in-half" DualPipe).

The model is cut into 2p pieces laid out as a V: stage s holds piece s (chunk 0) and piece
2p-1-s (chunk 1), so every microbatch goes down the pipeline and back up, and the loss is on
stage 0. It runs DualPipe's eight-step order with p ranks in one "half".
"""

from __future__ import annotations

from simcluster.schedules.base import PipeOp, ScheduleSpec, VShapeSchedule, require_m_at_least
from simcluster.schedules.dual_order import dual_order
from simcluster.schedules.registry import register


@register
class DualPipeV(VShapeSchedule):
    """V-shaped DualPipe; needs m >= 2p (as ``DualPipeV.step``)."""

    name = "dualpipev"
    splits_backward = True

    def validate(self, spec: ScheduleSpec) -> None:
        super().validate(spec)
        require_m_at_least(spec, self.name, 2 * spec.p, "DualPipeV needs m >= 2*pp")

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)

        def where(phase: int, index: int) -> tuple[int, int]:
            return index, phase

        return [
            dual_order(spec.p, rank, spec.m, rank == spec.p - 1, where) for rank in range(spec.p)
        ]
