"""What the :class:`~simcluster.parallelism.layer.LayerBuilder` mixins share: the per-GPU
shapes, the kernel model and the scenario, and (for the type checker) the builder's costing of
GEMMs and memory-bound kernels that every mixin calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcluster.compute import KernelModel
from simcluster.parallelism.elementwise import Elementwise, Traffic
from simcluster.parallelism.linears import Gemm
from simcluster.parallelism.segments import Work
from simcluster.parallelism.shapes import Shapes
from simcluster.scenario import Scenario


class BuilderBase:
    """The state and costing helpers a layer-builder mixin relies on."""

    shapes: Shapes
    km: KernelModel
    scenario: Scenario

    @property
    def wgrads_inputs(self) -> bool:
        """Whether the base linears' quantised inputs are kept for weight gradients: not in a
        LoRA run, whose frozen linears quantise only the rowwise copy their forward GEMM reads
        (:meth:`KernelModel.quantise`, ``columnwise``)."""
        return self.shapes.layout.lora is None

    @property
    def wgrads_grads(self) -> bool:
        """Whether the base linears' quantised output gradients keep the columnwise copy a
        weight gradient reads: not for a LoRA run's frozen linears under TransformerEngine's op
        fuser, whose ``BasicLinear`` asks its grad-output quantizer for ``columnwise=
        weight_requires_grad``. TransformerEngine's ``Linear`` module cast both copies for a
        frozen weight too until TransformerEngine issue 1693 (April 2025), so the module path
        keeps them (the rows that run it predate the fix or do not say)."""
        lora = self.shapes.layout.lora
        return lora is None or not lora.op_fuser

    if TYPE_CHECKING:

        @property
        def ops(self) -> Elementwise: ...

        def _gemms(self, gemms: list[Gemm], phase: str, dtype: str | None = None, splits: int = 1) -> Work: ...

        def _gemm_pieces(
            self, gemms: list[Gemm], phase: str, pieces: tuple[float, ...], dtype: str | None = None
        ) -> Work: ...

        def _elementwise(self, traffic: Traffic, phase: str) -> Work: ...
