"""Which layers each pipeline stage holds: chunks (virtual stages) with their layer ranges."""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.schedules import Schedule, ScheduleSpec
from simcluster.schedules.partition import layers_per_stage


@dataclass(frozen=True)
class Chunk:
    """A contiguous run of layers held by one stage (one virtual pipeline stage)."""

    virtual_stage: int
    first_layer: int
    layers: int
    embedding: bool  # holds the token embedding (first virtual stage)
    head: bool  # holds the final norm + LM head + loss (last virtual stage)

    @property
    def layer_indices(self) -> range:
        return range(self.first_layer, self.first_layer + self.layers)


def stage_chunks(
    model: ModelSpec, layout: Layout, schedule: Schedule, spec: ScheduleSpec, explicit: list[int] | None = None
) -> list[list[Chunk]]:
    """Per pipeline stage, the chunks it holds (local chunk order), from the schedule's mapping."""
    total = schedule.virtual_stages(spec)
    counts = layers_per_stage(model.layers, 1, total, explicit)
    starts = [sum(counts[:i]) for i in range(total)]
    out = []
    for stage in range(spec.p):
        chunks = []
        for c in range(schedule.chunks(spec)):
            mb = _microbatch_served(schedule, spec, c)
            vs = schedule.virtual_stage(spec, stage, c, mb)
            chunks.append(Chunk(vs, starts[vs], counts[vs], embedding=vs == 0, head=vs == total - 1))
        out.append(chunks)
    return out


def _microbatch_served(schedule: Schedule, spec: ScheduleSpec, chunk: int) -> int:
    serves = getattr(schedule, "chunk_serves", None)
    if serves is None:
        return 0
    return next(mb for mb in range(spec.m) if serves(spec, chunk, mb))
