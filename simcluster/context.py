"""Resolve a validated scenario into the objects every command needs."""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.errors import UserError
from simcluster.hardware import HardwareProfile, load_profile
from simcluster.layout import Layout, build_layout
from simcluster.model import ModelSpec, build_model
from simcluster.placement import Chunk, stage_chunks
from simcluster.scenario import Scenario, TrainingSection
from simcluster.schedules import Schedule, ScheduleSpec, get_schedule


@dataclass(frozen=True)
class Context:
    """Model, layout, hardware and stage placement of one scenario."""

    scenario: Scenario
    model: ModelSpec
    layout: Layout
    profile: HardwareProfile
    chunks: list[list[Chunk]]
    schedule: Schedule
    spec: ScheduleSpec

    @property
    def capacity_bytes(self) -> float:
        return self.profile.memory_bytes


def build_context(scenario: Scenario, hardware: str | None = None) -> Context:
    """Resolve model, hardware profile (``hardware`` overrides cluster.hardware) and layout."""
    model = build_model(scenario.model.model_dump(exclude_none=True))
    profile = load_profile(
        hardware or scenario.cluster.hardware,
        scenario.cluster.overrides(),
        field="--hardware" if hardware else "cluster.hardware",
        patch=scenario.cluster.profile,
    )
    gpn = scenario.cluster.gpus_per_node or profile.node.gpus_per_node
    if (
        scenario.cluster.gpus_per_node
        and scenario.cluster.gpus_per_node > profile.node.gpus_per_node
    ):
        raise UserError(
            "cluster.gpus_per_node",
            f"{gpn} exceeds the {profile.node.gpus_per_node} GPUs per node of '{profile.name}'",
        )
    profile.attention_curves(scenario.training.attention_kernel)  # an unknown kernel fails here
    _check_recompute(scenario.training, model)
    schedule = get_schedule(scenario.parallel.schedule)
    layout = build_layout(scenario, model, gpn)
    spec = ScheduleSpec(p=layout.pp, m=layout.microbatches, v=layout.vpp)
    schedule.validate(spec)
    chunks = stage_chunks(model, layout, schedule, spec, scenario.parallel.layers_per_stage)
    return Context(
        scenario=scenario, model=model, layout=layout, profile=profile, chunks=chunks, schedule=schedule, spec=spec
    )


def _check_recompute(training: TrainingSection, model: ModelSpec) -> None:
    """Recomputation settings that only make sense together."""
    if training.recompute_modules and training.recompute != "selective":
        raise UserError(
            "training.recompute_modules",
            f"lists what selective recomputation reruns; set training.recompute: selective "
            f"(it is '{training.recompute}') or drop the list",
        )
    if "mla_up_proj" in training.recomputed and model.mla is None:
        raise UserError(
            "training.recompute_modules", "mla_up_proj needs an MLA model (model.mla); drop it"
        )
    if training.recompute_num_layers is not None and training.recompute != "full":
        raise UserError(
            "training.recompute_num_layers",
            f"counts the layers full recomputation reruns; set training.recompute: full "
            f"(it is '{training.recompute}') or drop it",
        )
