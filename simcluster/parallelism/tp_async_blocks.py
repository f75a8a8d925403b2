"""Dense blocks with nanotron's async TP linears (``overlap.tp_async``): each block's column
and row linears split into the own token shard's GEMM and the rest, in the order
``parallelism/tp_async.py`` gives them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcluster.parallelism import context, tp_async
from simcluster.parallelism.builder_base import BuilderBase
from simcluster.parallelism.elementwise import Traffic
from simcluster.parallelism.linears import Gemm
from simcluster.parallelism.segments import Compute, Segment, Work


class AsyncTpBlocks(BuilderBase):
    """Mixin of :class:`~simcluster.parallelism.layer.LayerBuilder`: nanotron's async TP blocks."""

    if TYPE_CHECKING:

        def attention_gemms(self) -> list[Gemm]: ...

        def mlp_gemms(self, width: float) -> list[Gemm]: ...

        def core_times(self, phase: str, index: int = 0) -> context.CoreTimes: ...

        def _core_recompute(self, index: int) -> tuple[Segment, ...]: ...

        def _attention_input_recompute(self, gemms: list[Gemm], index: int) -> list[Segment]: ...

        def _mlp_recompute(self, index: int, forward_work: Work) -> list[Segment]: ...

    def _async_attention(self, index: int, phase: str) -> list[Segment]:
        """The attention block with nanotron's async TP linears: the QKV projection is the
        column linear, the output projection the row linear."""
        if phase == "W":
            return []
        ops, gemms = self.ops, self.attention_gemms()
        backward = phase == "B"
        core = context.cp_attention(self.shapes, self.core_times(phase, index), backward, index)
        redo: list[Segment] = []
        if backward:
            if "core_attn" in self.scenario.training.recomputed:
                core = [*self._core_recompute(index), *core]
            redo = self._attention_input_recompute(gemms, index)
        # the rotary and Q/K/V copies run between the QKV projection and the core
        row_extra = ops.attention_output() + ops.residual()
        return self._async_block("attn", index, phase, gemms, ops.attention_inputs(index), row_extra, core, redo)

    def _async_mlp(self, index: int, phase: str) -> list[Segment]:
        """The dense MLP with nanotron's async TP linears: gate/up is the column linear, down
        the row linear."""
        if phase == "W":
            return []
        m, ops = self.shapes.model, self.ops
        gemms = self.mlp_gemms(m.ffn)
        act = ops.activation(m.ffn / self.shapes.layout.tp)
        middle: list[Segment] = [Compute.of("mlp_act", self._elementwise(act, phase), index)]
        redo: list[Segment] = []
        if phase == "B":
            forward = Work()
            if "mlp" in self.scenario.training.recomputed:
                forward = self._gemms(gemms, "F") + self._elementwise(ops.mlp_norm() + act + ops.residual(), "F")
            redo = self._mlp_recompute(index, forward)
        return self._async_block("mlp", index, phase, gemms, None, ops.residual(), middle, redo)

    def _async_block(
        self,
        block: str,
        index: int,
        phase: str,
        gemms: list[Gemm],
        column_extra: Traffic | None,
        row_extra: Traffic,
        middle: list[Segment],
        redo: list[Segment],
    ) -> list[Segment]:
        """One block as ``parallelism/tp_async.py`` orders it: ``gemms`` are the column linears
        then the row linear; ``column_extra`` runs beside the column GEMMs (after them forward,
        before them backward), ``row_extra`` beside the row GEMM; the weight gradients run
        inside the backward, so W has nothing left."""
        ops = self.ops
        norm = ops.mlp_norm() if block == "mlp" else ops.norm()
        column, row = gemms[:-1], gemms[-1:]
        local, rest = tp_async.row_pieces(self.shapes.layout.tp)
        size = self.shapes.tp_collective_bytes
        beside = self._elementwise(column_extra, phase) if column_extra is not None else Work()
        if phase == "F":
            return tp_async.forward(block, index, size, tp_async.ForwardParts(
                norm=self._elementwise(norm, "F"),
                column_local=self._gemm_pieces(column, "F", local),
                column_rest=self._gemm_pieces(column, "F", rest) + beside,
                middle=tuple(middle),
                row=self._gemms(row, "F") + self._elementwise(row_extra, "F"),
            ))  # fmt: skip
        return tp_async.backward(block, index, size, tp_async.BackwardParts(
            redo=tuple(redo),
            row_local=self._gemm_pieces(row, "B", local),
            row_rest=self._gemm_pieces(row, "B", rest) + self._elementwise(row_extra, "B"),
            row_wgrad=self._gemms(row, "W"),
            middle=tuple(middle),
            column=self._gemms(column, "B") + beside,
            column_wgrad=self._gemms(column, "W"),
            norm=self._elementwise(norm, "B"),
        ), regather=not self.shapes.layout.sp_keeps_gather)  # fmt: skip
