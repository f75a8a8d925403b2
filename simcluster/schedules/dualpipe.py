"""DualPipe (DeepSeek-V3 technical report §3.2.1; deepseek-ai/DualPipe ``DualPipe``).

Two copies of the model run in opposite directions: the model is cut into p pieces, stage s
holds piece s for direction 0 (chunk 0) and piece p-1-s for direction 1 (chunk 1). The first
m/2 microbatches enter at stage 0 and flow down, the last m/2 enter at stage p-1 and flow up.
Bubble (p/2-1)(F&B + B - 3W) with B a full backward; activations p+1 (DeepSeek-V3 Table 2).
"""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.schedules.base import (
    FIELD_MICROBATCHES,
    FIELD_PP,
    BaseSchedule,
    PipeOp,
    ScheduleSpec,
    require_m_at_least,
)
from simcluster.schedules.dual_order import dual_order
from simcluster.schedules.registry import register


@register
class DualPipe(BaseSchedule):
    """Bidirectional DualPipe; needs even p, even m and m >= 2p (as ``DualPipe.step``)."""

    name = "dualpipe"
    splits_backward = True

    def chunks(self, spec: ScheduleSpec) -> int:
        return 2

    def virtual_stages(self, spec: ScheduleSpec) -> int:
        return spec.p

    def direction(self, spec: ScheduleSpec, microbatch: int) -> int:
        """0 for microbatches entering at stage 0, 1 for those entering at stage p-1: the first
        and second half of each flush's microbatches (numbered on from one pipeline flush to the
        next, ``Context.stage_orders``)."""
        return 0 if microbatch % spec.m < spec.m // 2 else 1

    def chunk_serves(self, spec: ScheduleSpec, chunk: int, microbatch: int) -> bool:
        return chunk == self.direction(spec, microbatch)

    def virtual_stage(self, spec: ScheduleSpec, stage: int, chunk: int, microbatch: int) -> int:
        if self.direction(spec, microbatch) == 0:
            return stage
        return spec.p - 1 - stage

    def validate(self, spec: ScheduleSpec) -> None:
        if spec.v not in (1, 2):
            raise UserError("parallel.vpp", "dualpipe always uses 2 chunks per stage; drop vpp")
        if spec.p % 2 != 0 or spec.p < 2:
            raise UserError(
                FIELD_PP,
                f"dualpipe needs an even number of stages, got pp={spec.p}; use an even pp",
            )
        if spec.m % 2 != 0:
            raise UserError(
                FIELD_MICROBATCHES,
                # the count is per data-parallel rank: "got 13; use an even number" beside a
                # global batch of 26 named neither the count nor what to change
                f"dualpipe splits the microbatches of each data-parallel rank in two halves, got "
                f"{spec.m} (global_batch / (micro_batch x dp)); change the batch for an even count",
            )
        require_m_at_least(spec, self.name, 2 * spec.p, "DualPipe needs m >= 2*pp")

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        p, half = spec.p, spec.m // 2
        out = []
        for rank in range(p):
            second_half = 1 if rank >= p // 2 else 0

            def where(phase: int, index: int, second_half: int = second_half) -> tuple[int, int]:
                # DualPipe: phase 0 is the forward direction on the first half of the ranks,
                # the reverse direction on the second half.
                direction = phase ^ second_half
                return direction * half + index, direction

            turning = rank in (p // 2 - 1, p // 2)
            r = min(rank, p - 1 - rank)
            out.append(dual_order(p // 2, r, half, turning, where))
        return out
