"""All-forward-all-backward (GPipe, Huang et al. 2019): every F, then every backward."""

from __future__ import annotations

from simcluster.schedules.base import BaseSchedule, PipeOp, ScheduleSpec
from simcluster.schedules.registry import register


@register
class AllForwardAllBackward(BaseSchedule):
    """GPipe: peak activation stash is all m microbatches on every stage."""

    name = "afab"
    holds_every_microbatch = True
    splits_backward = False

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        stage_ops = [PipeOp("F", mb) for mb in range(spec.m)]
        # Backward in microbatch order, as torch.distributed.pipelining ScheduleGPipe does.
        stage_ops += [PipeOp("BW", mb) for mb in range(spec.m)]
        return [list(stage_ops) for _ in range(spec.p)]
