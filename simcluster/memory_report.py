"""Peak memory per stage from the schedule's op order (no timing needed).

Activations are stashed at F and released at W (or at the fused BW), so a stage's activation
peak depends only on its op order: this is where schedules differ (1F1B keeps p microbatches on
stage 0, AFAB keeps m, ZB-H2 up to 2p-1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from simcluster.context import Context
from simcluster.memory import StageMemory, chunk_activation_bytes, stage_memory


def activation_walk(
    ops: Sequence[Any], chunk_bytes: Sequence[float]
) -> tuple[float, dict[int, int]]:
    """Peak stashed bytes over an op order, and the in-flight microbatches per chunk at that peak."""
    live = 0.0
    peak = 0.0
    count = [0] * len(chunk_bytes)
    at_peak = {i: 0 for i in range(len(chunk_bytes))}
    for op in ops:
        if op.kind == "F":
            live += chunk_bytes[op.chunk]
            count[op.chunk] += 1
            if live > peak:
                peak = live
                at_peak = dict(enumerate(count))
        elif op.kind in ("W", "BW"):
            live -= chunk_bytes[op.chunk]
            count[op.chunk] -= 1
    return peak, at_peak


def memory_by_stage(ctx: Context) -> list[StageMemory]:
    """Memory of each stage's GPU at its activation peak, from the schedule order."""
    lay = ctx.layout
    orders = ctx.schedule.build(ctx.spec)
    out = []
    for stage, chunks in enumerate(ctx.chunks):
        cb = [chunk_activation_bytes(ctx.model, lay, ctx.scenario.training, ch) for ch in chunks]
        _, inflight = activation_walk(orders[stage], cb)
        out.append(stage_memory(ctx.model, lay, ctx.scenario.training, stage, chunks, inflight))
    return out


def memory_summary(ctx: Context) -> dict[str, Any]:
    """The ``simcluster memory --json`` document (bytes per GPU, most loaded GPU first)."""
    stages = memory_by_stage(ctx)
    worst = max(stages, key=lambda m: m.total_bytes)
    cap = ctx.capacity_bytes
    return {
        "scenario": ctx.scenario.name,
        "layout": ctx.layout.describe(),
        "hardware": ctx.profile.name,
        "params_total": ctx.model.params_total(),
        "params_active": ctx.model.params_active(),
        "params_per_gpu": worst.params_per_gpu,
        "params_bytes": worst.params_bytes,
        "grads_bytes": worst.grads_bytes,
        "optimizer_bytes": worst.optimizer_bytes,
        "activations_bytes": worst.activations_bytes,
        "other_bytes": worst.other_bytes,
        "total_bytes": worst.total_bytes,
        "capacity_bytes": cap,
        "fits": worst.total_bytes <= cap,
        "worst_stage": worst.stage,
        "per_stage": [m.to_dict() for m in stages],
    }
