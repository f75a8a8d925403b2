"""1F1B (PipeDream-flush, Narayanan et al. 2021; Megatron-LM non-interleaved schedule)."""

from __future__ import annotations

from simcluster.schedules.base import BaseSchedule, PipeOp, ScheduleSpec, require_m_at_least
from simcluster.schedules.registry import register


@register
class OneForwardOneBackward(BaseSchedule):
    """Stage s runs p-s-1 warm-up forwards, then alternates F and BW, then drains.

    Warm-up count as in Megatron-LM ``forward_backward_pipelining_without_interleaving``:
    ``min(p - rank - 1, m)``; at most p microbatches are stashed on stage 0.
    """

    name = "1f1b"
    splits_backward = False

    def validate(self, spec: ScheduleSpec) -> None:
        super().validate(spec)
        if spec.rounds:
            # torch.distributed.pipelining's Schedule1F1B (PyTorch 2.7 on, pytorch/pytorch#144702)
            # refuses fewer microbatches than stages; Megatron's runs them
            require_m_at_least(spec, self.name, spec.p, "PyTorch's Schedule1F1B refuses fewer than pp")

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        out = []
        for stage in range(spec.p):
            warmup = min(spec.p - stage - 1, spec.m)
            ops = [PipeOp("F", mb) for mb in range(warmup)]
            for i in range(spec.m - warmup):
                ops.append(PipeOp("F", warmup + i))
                ops.append(PipeOp("BW", i))
            ops += [PipeOp("BW", mb) for mb in range(spec.m - warmup, spec.m)]
            out.append(ops)
        return out
