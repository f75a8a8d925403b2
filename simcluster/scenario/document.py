"""The whole scenario: its sections, the simulation options and known stragglers."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, PrivateAttr

from simcluster.rate_bounds import DEGRADED
from simcluster.scenario.base import SectionBase
from simcluster.scenario.data_parallel import DpSection, Zero3Section
from simcluster.scenario.lora import LoraSection
from simcluster.scenario.model_cluster import ClusterSection, ModelSection
from simcluster.scenario.moe import MoeSection
from simcluster.scenario.overlap import OverlapSection
from simcluster.scenario.parallel import ParallelSection
from simcluster.scenario.training import TrainingSection
from simcluster.userbuffers import async_tp


class Straggler(SectionBase):
    """One known-slow part of the cluster: a GPU whose kernels run slower, or a node whose
    NICs run below their rated bandwidth (``simulation.stragglers``)."""

    gpu: int | None = Field(default=None, ge=0, description="global rank of a slow GPU")
    compute: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description="with gpu: how many times longer its kernels take (1.25 = a GPU 20% slow)",
    )
    node: int | None = Field(default=None, ge=0, description="a node whose NICs are degraded")
    nic: Annotated[float, DEGRADED] = Field(
        default=1.0,
        gt=0,
        le=1,
        description="with node: the fraction of their bandwidth its NICs keep (0.5 = a 400G "
        "link trained down to 200G)",
    )


class SimulationSection(SectionBase):
    all_ranks: bool = Field(default=False, description="simulate every rank, not one per stage")
    stragglers: list[Straggler] = Field(
        default_factory=list,
        description="known-slow GPUs or degraded NICs; simulated with every rank (all_ranks)",
    )


class Scenario(SectionBase):
    """A validated scenario."""

    name: str = Field(
        default="scenario",
        description="the scenario's name, shown in the result tables and plot titles",
    )
    description: str = Field(
        default="",
        description="free text on what the scenario runs (simcluster list scenarios shows it)",
    )
    framework: str | None = Field(
        default=None,
        description=(
            "the training framework (simcluster list frameworks): fills the overlap, gradient "
            "reduction and kernel fields the scenario leaves unset with what that framework does"
        ),
    )
    framework_release: str | None = Field(
        default=None,
        description=(
            "the framework's release (also written after its name: framework: nemo 24.07); "
            "releases whose settings differed from today's run with those "
            "(simcluster/framework_releases.py: NeMo before 24.09 ran flash-attn 2)"
        ),
    )
    model: ModelSection
    cluster: ClusterSection
    parallel: ParallelSection = ParallelSection()
    training: TrainingSection
    overlap: OverlapSection = OverlapSection()
    zero3: Zero3Section = Zero3Section()
    dp: DpSection = DpSection()
    moe: MoeSection = MoeSection()
    lora: LoraSection = LoraSection()
    simulation: SimulationSection = SimulationSection()
    #: the dotted keys the scenario itself wrote (``section.key``, or a top-level key), before
    #: a framework preset filled its defaults, as ``scenario_from_dict`` records them; None for
    #: a scenario validated directly, where no preset has filled anything in
    _written: frozenset[str] | None = PrivateAttr(default=None)

    @property
    def written(self) -> frozenset[str]:
        """The keys the scenario wrote itself, in the schema's names (after aliases, misplaced
        keys, ``--set``, ``cluster.nodes`` read as ``cluster.gpus`` and the like; not a
        framework preset's): what ``inert.py`` may name as having no effect and what
        ``context`` asks whether a setting was given. A scenario validated directly
        (``Scenario.model_validate``: no preset applied) wrote the fields pydantic saw set."""
        if self._written is not None:
            return self._written
        keys: set[str] = set()
        for name in self.model_fields_set:
            value = getattr(self, name)
            if isinstance(value, BaseModel):
                keys.update(f"{name}.{key}" for key in value.model_fields_set)
            else:
                keys.add(name)
        return frozenset(keys)

    def as_written(self) -> dict[str, Any]:
        """The scenario's keys as it wrote them (validated values, no framework preset's
        defaults): the mapping to change a setting of and validate again, so that the preset
        fills in for the new layout what it does there (DeepSpeed's BF16_Optimizer cast at
        ZeRO-1, not carried into a ZeRO-2 layout; nanotron's ZeRO-0 DDP buckets, not into its
        ZeRO-1 path) as ``run`` of that layout would."""
        written = self.written
        out: dict[str, Any] = {}
        for name, value in self.model_dump(exclude_unset=True).items():
            if name in _SECTIONS and isinstance(value, dict):
                kept = {key: v for key, v in value.items() if f"{name}.{key}" in written}
                if kept or name in ("model", "cluster", "training"):
                    out[name] = kept
            elif name in written:
                out[name] = value
        return out

    def __eq__(self, other: object) -> bool:
        # the same scenario however it was written: which keys were spelled out (``written``)
        # names notes, it is not part of what runs
        if not isinstance(other, Scenario):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def with_written(self, keys: frozenset[str]) -> Scenario:
        """This scenario, recording ``keys`` as the ones its user wrote."""
        self._written = keys
        return self

    @property
    def fsdp2(self) -> bool:
        """ZeRO-3 as PyTorch FSDP2 runs it (``zero3.buffers: copies``): per-parameter copies of
        each gather, fp32 shards stepped in place."""
        return self.parallel.zero == 3 and self.zero3.buffers == "copies"

    @property
    def fsdp1(self) -> bool:
        """ZeRO-3 as PyTorch FSDP1 runs it (``zero3.buffers: flat``): a FlatParameter per
        wrapped unit, the root unit kept gathered from its forward to its backward."""
        return self.parallel.zero == 3 and self.zero3.buffers == "flat"

    @property
    def torch_fsdp(self) -> bool:
        """ZeRO-3 as PyTorch's FSDP (1 or 2) keeps its state: the parameters' own fp32 shard,
        stepped in place by the optimizer (no separate master or 16-bit copy), and fp32
        gradient shards whatever the reduce dtype."""
        return self.fsdp2 or self.fsdp1

    @property
    def sp_regather(self) -> bool:
        """``parallel.sp_regather`` resolved: PyTorch's async TP keeps the all-gathered input
        (its ``fused_all_gather_matmul`` returns the gathered A, which the backward's weight
        gradient reads), every other stack re-gathers unless its framework says otherwise."""
        if self.parallel.sp_regather is not None:
            return self.parallel.sp_regather
        return not (self.overlap.tp_comm and async_tp(self.overlap))

    @property
    def wait_reduction(self) -> bool:
        """``dp.wait_reduction`` resolved: one gradient reduction in flight (FSDP2's default)."""
        return self.fsdp2 if self.dp.wait_reduction is None else self.dp.wait_reduction

    @property
    def backward_sync(self) -> str:
        """``dp.backward_sync`` resolved: PyTorch FSDP's stream wait by default (FSDP2's root
        post-backward callback; FSDP1's ``_post_backward_final_callback``, where the compute
        stream waits for the post-backward and all-reduce streams), else none."""
        return self.dp.backward_sync or ("stream" if self.torch_fsdp else "none")


_SECTIONS: dict[str, type[BaseModel]] = {
    name: f.annotation  # type: ignore[misc]
    for name, f in Scenario.model_fields.items()
    if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
}
