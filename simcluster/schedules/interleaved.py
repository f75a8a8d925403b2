"""Interleaved 1F1B (Narayanan et al. SC'21; Megatron-LM virtual pipeline parallelism).

Each stage holds v chunks; chunk c of stage s is model position ``c * p + s``. The order
mirrors Megatron-core ``forward_backward_pipelining_with_interleaving``: microbatches go
through the chunks in groups of ``g = microbatch_group_size_per_vp_stage`` (``parallel.
microbatch_group``, default p; Llama 3's "N contiguous micro-batches"), warm-up is
``(p - rank - 1) * 2 + (v - 1) * g`` virtual microbatches (all of them when that reaches
m * v), then one F and one BW alternate, then the backward drain. A larger g holds more
microbatches in flight (memory) for about the same bubble. Megatron-Core takes g in [p, m]
with m a whole number of groups or a last group of at least p. torch.distributed.pipelining's
``ScheduleInterleaved1F1B`` runs the same order with g = m / max(1, m // p) (its rounds), any
m a multiple of the rounds, fewer than p included: ``ScheduleSpec.rounds``, set for the
frameworks on PyTorch's schedules (``frameworks.PYTORCH_PIPELINING``). With m < p the
bubble exceeds (p-1)/(v*m + p-1): a chunk's first backward waits for the last stage.
"""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.schedules.base import (
    FIELD_MICROBATCHES,
    FIELD_VPP,
    LoopedSchedule,
    PipeOp,
    ScheduleSpec,
    pytorch_rounds,
    require_m_at_least,
    require_whole_rounds,
)
from simcluster.schedules.registry import register

FIELD_GROUP = "parallel.microbatch_group"


def schedule_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) of each virtual microbatch index, forward order."""
    table: list[tuple[int, int]] = []
    for first in range(0, m, group):
        last = min(first + group, m)
        for chunk in range(v):
            table += [(mb, chunk) for mb in range(first, last)]
    return table


def pytorch_group(spec: ScheduleSpec) -> int:
    """Microbatches per round of torch.distributed.pipelining's interleaved 1F1B."""
    return pytorch_rounds(spec)[1]


def smallest_group(p: int, m: int) -> int:
    """The smallest microbatch group Megatron-Core runs m >= p microbatches in: within [p, m],
    with m a whole number of groups or a last group of at least p (m itself always is)."""
    return next(g for g in range(p, m + 1) if m % g == 0 or m % g >= p)


@register
class Interleaved1F1B(LoopedSchedule):
    """Megatron interleaved 1F1B with v chunks per stage; bubble (p-1)/(v*m + p-1)."""

    name = "interleaved"

    def validate(self, spec: ScheduleSpec) -> None:
        if spec.v < 2:
            raise UserError(
                FIELD_VPP,
                "schedule 'interleaved' needs vpp >= 2 chunks per stage; set parallel.vpp to 2 "
                "or more, or use schedule '1f1b' for one chunk per stage",
            )
        if spec.rounds and spec.group in (0, pytorch_group(spec)):
            # torch.distributed.pipelining ScheduleInterleaved1F1B: "relaxing the requirement
            # of num_microbatch % pp_size == 0", any m a multiple of its rounds (m < p included)
            require_whole_rounds(spec, self.name, "ScheduleInterleaved1F1B")
            return
        # Megatron-core: the group (default p) lies in [p, m] (its first stage's receive buffer
        # holds group - p + 1 tensors), and a partial last group smaller than p raises there.
        require_m_at_least(spec, self.name, spec.p, "Megatron interleaving needs m >= pp")
        group = spec.group or spec.p
        if not spec.p <= group <= spec.m:
            raise UserError(
                FIELD_GROUP,
                f"must lie between pp={spec.p} and the {spec.m} microbatches per step, got {group}",
            )
        if 0 < spec.m % group < spec.p:
            rule = (
                f"in whole groups of {group} (parallel.microbatch_group) or a last group of at least pp"
                if group != spec.p
                else f"divisible by pp={spec.p} in Megatron-LM's default groups of pp"
            )
            # Megatron-Core relaxed m % pp == 0 into this rule on the group; name the group that
            # runs these m microbatches, the smallest (the fewest in flight)
            raise UserError(
                FIELD_MICROBATCHES,
                f"schedule 'interleaved' needs microbatches {rule}, got {spec.m}; "
                f"use a multiple of {group}, or set {FIELD_GROUP}: {smallest_group(spec.p, spec.m)} "
                "(Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage)",
            )

    def build(self, spec: ScheduleSpec) -> list[list[PipeOp]]:
        self.validate(spec)
        p, m, v = spec.p, spec.m, spec.v
        group = spec.group or (pytorch_group(spec) if spec.rounds else p)
        table = schedule_table(m, v, group)
        total = m * v

        def fwd(k: int) -> PipeOp:
            mb, chunk = table[k]
            return PipeOp("F", mb, chunk)

        def bwd(k: int) -> PipeOp:
            mb, chunk = table[k]
            return PipeOp("BW", mb, v - 1 - chunk)

        out = []
        for stage in range(p):
            warmup = min((p - stage - 1) * 2 + (v - 1) * group, total)
            ops = [fwd(k) for k in range(warmup)]
            for k in range(total - warmup):
                ops += [fwd(warmup + k), bwd(k)]
            ops += [bwd(k) for k in range(total - warmup, total)]
            out.append(ops)
        return out
