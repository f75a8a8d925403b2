"""Which layers each pipeline stage holds: chunks (virtual stages) with their layer ranges."""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.schedules import Schedule, ScheduleSpec
from simcluster.schedules.partition import cost_balanced, layers_per_stage

HEAD_LAYER = -2  # the layer index a unit of work uses for the LM head and loss
EMBEDDING_LAYER = -1  # the layer index a unit of work uses for the embedding


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

    def unit_layers(self) -> list[list[int]]:
        """Each unit's layer indices in forward order, as the engine's plan groups them
        (engine/plan.py ``_units``, FSDP1's root units aside): one layer a unit, the embedding
        with the first layer and the LM head with the last; one unit of the two alone on a
        stage without layers."""
        layers = list(self.layer_indices)
        if not layers:
            return [[u for present, u in ((self.embedding, EMBEDDING_LAYER), (self.head, HEAD_LAYER)) if present]]
        units = [[x] for x in layers]
        if self.embedding:
            units[0].insert(0, EMBEDDING_LAYER)
        if self.head:
            units[-1].append(HEAD_LAYER)
        return units


def stage_chunks(
    model: ModelSpec,
    layout: Layout,
    schedule: Schedule,
    spec: ScheduleSpec,
    explicit: list[int] | None = None,
    partition: str = "megatron",
) -> list[list[Chunk]]:
    """Per pipeline stage, the chunks it holds (local chunk order), from the schedule's mapping.
    ``partition`` picks the split when ``explicit`` is not given (``parallel.partition``)."""
    total = schedule.virtual_stages(spec)
    if explicit is None and partition == "nanotron" and total > 1:
        explicit = cost_balanced(model.layers, total, *nanotron_costs(model))
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


def nanotron_costs(model: ModelSpec) -> tuple[int, int]:
    """(decoder layer, LM head) costs of nanotron's ``get_block_compute_costs`` for Llama:
    4 * heads * d_head * h (Q, K, V and output counted as four h x h matrices, whatever the
    kv heads) + 3 * d_ff * h (gated MLP; 2 for a two-matrix one), and vocab * h."""
    mlp_matrices = 3 if model.mlp == "swiglu" else 2
    ffn = model.expert_ffn * model.top_k if model.is_moe else model.ffn
    layer = 4 * model.heads * model.d_head * model.hidden + mlp_matrices * ffn * model.hidden
    return int(layer), int(model.vocab * model.hidden)
