"""Interleaved 1F1B (Narayanan et al. SC'21; Megatron-LM virtual pipeline parallelism).

Each stage holds v chunks; chunk c of stage s is model position ``c * p + s``. The order
mirrors Megatron-core ``forward_backward_pipelining_with_interleaving`` with the default
``microbatch_group_size_per_vp_stage = p``: microbatches go through the chunks in groups of p,
warm-up is ``(p - rank - 1) * 2 + (v - 1) * p`` virtual microbatches (all of them when that
reaches m * v), then one F and one BW alternate, then the backward drain.
"""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.schedules.base import (
    FIELD_MICROBATCHES,
    FIELD_VPP,
    LoopedSchedule,
    PipeOp,
    ScheduleSpec,
    require_m_at_least,
)
from simcluster.schedules.registry import register


def schedule_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) of each virtual microbatch index, forward order."""
    table: list[tuple[int, int]] = []
    for first in range(0, m, group):
        last = min(first + group, m)
        for chunk in range(v):
            table += [(mb, chunk) for mb in range(first, last)]
    return table


@register
class Interleaved1F1B(LoopedSchedule):
    """Megatron interleaved 1F1B with v chunks per stage; bubble (p-1)/(v*m + p-1)."""

    name = "interleaved"

    def validate(self, spec: ScheduleSpec) -> None:
        if spec.v < 2:
            raise UserError(
                FIELD_VPP,
                "schedule 'interleaved' needs vpp >= 2 chunks per stage; set parallel.vpp",
            )
        # Megatron-core: group size (default p) must lie in [p, m], and m % group must be 0
        # (a partial last group smaller than p raises RuntimeError there).
        require_m_at_least(spec, self.name, spec.p, "Megatron interleaving needs m >= pp")
        if spec.m % spec.p != 0:
            raise UserError(
                FIELD_MICROBATCHES,
                f"schedule 'interleaved' needs microbatches divisible by pp={spec.p} "
                f"(as Megatron-LM), got {spec.m}; use a multiple of {spec.p}",
            )

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        p, m, v = spec.p, spec.m, spec.v
        table = schedule_table(m, v, p)
        total = m * v

        def fwd(k: int) -> PipeOp:
            mb, chunk = table[k]
            return PipeOp("F", mb, chunk)

        def bwd(k: int) -> PipeOp:
            mb, chunk = table[k]
            return PipeOp("BW", mb, v - 1 - chunk)

        out = []
        for stage in range(p):
            warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
            ops = [fwd(k) for k in range(warmup)]
            for k in range(total - warmup):
                ops += [fwd(warmup + k), bwd(k)]
            ops += [bwd(k) for k in range(total - warmup, total)]
            out.append(ops)
        return out
