"""ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24, Figure 3 bottom).

More warm-up forwards (2(p-s)-1 on stage s, so up to 2p-1 microbatches stashed) fill the
bubble before the first B, and W passes are pushed to the tail, turning the trapezoid into a
parallelogram: with F = B = W each stage runs without idle time between its first and last op.
"""

from __future__ import annotations

from simcluster.schedules.base import BaseSchedule, PipeOp, ScheduleSpec
from simcluster.schedules.registry import register
from simcluster.schedules.zb_handcrafted import zb_stage_order


@register
class ZeroBubbleH2(BaseSchedule):
    """Handcrafted ZB-H2: 2(p-s)-1 warm-up F on stage s; W lags B by 2s."""

    name = "zb-h2"
    splits_backward = True

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        return [zb_stage_order(spec.m, 2 * (spec.p - s) - 1, 2 * s) for s in range(spec.p)]
