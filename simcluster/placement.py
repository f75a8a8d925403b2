"""Which layers each pipeline stage holds: chunks (virtual stages) with their layer ranges."""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.layout import Layout
from simcluster.model import ModelSpec
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


def virtual_stages_of(schedule: str, p: int, v: int) -> tuple[int, list[list[int]]]:
    """(V, per stage the virtual stages it holds, in local chunk order)."""
    if schedule == "interleaved":
        return p * v, [[c * p + s for c in range(v)] for s in range(p)]
    if schedule in ("zbv", "dualpipev"):
        return 2 * p, [[s, 2 * p - 1 - s] for s in range(p)]
    if schedule == "dualpipe":
        # two copies of the model run in opposite directions: stage s holds s and p-1-s
        return p, [[s, p - 1 - s] for s in range(p)]
    return p, [[s] for s in range(p)]


def stage_chunks(
    model: ModelSpec, layout: Layout, explicit: list[int] | None = None
) -> list[list[Chunk]]:
    """Per pipeline stage, the chunks it holds (local chunk order)."""
    total, held = virtual_stages_of(layout.schedule, layout.pp, layout.vpp)
    counts = layers_per_stage(model.layers, 1, total, explicit)
    starts = [sum(counts[:i]) for i in range(total)]
    return [
        [
            Chunk(
                virtual_stage=vs,
                first_layer=starts[vs],
                layers=counts[vs],
                embedding=vs == 0,
                head=vs == total - 1,
            )
            for vs in stages
        ]
        for stages in held
    ]
