"""ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24, Figure 3 top).

Same warm-up and peak activation memory as 1F1B (p microbatches); stage s delays its weight
gradients by s backward passes so W fills the 1F1B drain bubble. Bubble ~ (p-1)(F+B-W).
"""

from __future__ import annotations

from simcluster.schedules.base import BaseSchedule, PipeOp, ScheduleSpec
from simcluster.schedules.registry import register
from simcluster.schedules.zb_handcrafted import zb_stage_order


@register
class ZeroBubbleH1(BaseSchedule):
    """Handcrafted ZB-H1: F count before the first B is p - s; W lags B by s."""

    name = "zb-h1"
    splits_backward = True

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        return [zb_stage_order(spec.m, spec.p - s, s) for s in range(spec.p)]
