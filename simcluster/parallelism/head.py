"""The pipeline's edges: the token embedding, the final norm with the vocab-parallel LM head
and its cross-entropy (and the loss's TP reductions), and DeepSeek-V3's multi-token-prediction
modules after the head."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcluster.parallelism import logit_softcap, loss_kernels, tp_async, wgrad
from simcluster.parallelism.builder_base import BuilderBase
from simcluster.parallelism.linears import Gemm
from simcluster.parallelism.segments import Comm, Compute, Segment, Work


class HeadBuilder(BuilderBase):
    """Mixin of :class:`~simcluster.parallelism.layer.LayerBuilder`: embedding, LM head, loss, MTP."""

    if TYPE_CHECKING:

        @property
        def tp_async(self) -> bool: ...

        def layer(self, index: int, phase: str) -> list[Segment]: ...

    def embedding(self, phase: str) -> list[Segment]:
        """Token embedding lookup (vocab-parallel: an all-reduce over tp, or RS with SP), and
        BLOOM's norm of the looked-up embeddings after it (``model.embedding_norm``:
        BloomModel's word_embeddings_layernorm; Megatron-DeepSpeed's ``--embed-layernorm``
        applies it to the reduced embedding), a pre-block norm's passes."""
        norm = self._embedding_norm(phase)
        if phase == "B":
            return norm
        nbytes = self.shapes.tokens * self.shapes.model.hidden * self.shapes.elt
        if phase == "W" and self.shapes.layout.lora is not None:
            return []  # frozen
        if phase == "W":
            # gather the token gradients into a dense (vocab/tp x hidden) gradient (zero-filled
            # first), then add it into the main gradient: in place, no GEMM to fuse it into
            m = self.shapes.model
            table = m.vocab / self.shapes.layout.tp * m.hidden
            scatter = self.km.memory(2 * nbytes * 2 + table * self.shapes.elt)
            accumulate = wgrad.accumulation_seconds(
                self.km, self.scenario.training, self.shapes.layout, table, gemm=False
            )
            return [Compute.of("embedding_wgrad", Work.of(memory=scatter, grad_accum=accumulate), -1)]
        segs: list[Segment] = [Compute.of("embedding", Work.of(memory=self.km.memory(2 * nbytes)), -1)]
        lay = self.shapes.layout
        if lay.tp > 1:
            op = "reduce_scatter" if lay.sequence_parallel else "all_reduce"
            segs.append(Comm("embedding_tp", "tp", op, self.shapes.tp_collective_bytes, False, -1))
        return segs + norm

    def _embedding_norm(self, phase: str) -> list[Segment]:
        if not self.shapes.model.embedding_norm or phase == "W":
            return []
        return [Compute.of("embedding_norm", self._elementwise(self.ops.norm(), phase), -1)]

    def head(self, phase: str) -> list[Segment]:
        """Final norm + vocab-parallel LM head + cross-entropy.

        The LM head runs at the activation precision even in FP8 training: Megatron-Core's
        output layer is its own ColumnParallelLinear, outside TransformerEngine's FP8 modules.
        """
        m, lay = self.shapes.model, self.shapes.layout
        g = [Gemm(m.hidden, m.vocab / lay.tp)]
        dtype = self.km.act_dtype
        ce = Work.of(loss=self.km.memory(self._cross_entropy_bytes(phase))) + self._softcap(phase) if phase != "W" else Work()
        if self.tp_async:
            return self._async_head(g, ce, phase, dtype) + self._loss_reductions(phase)
        if phase == "W":
            frozen = self.shapes.layout.lora is not None
            return [] if frozen else [Compute.of("lm_head_wgrad", self._gemms(g, "W", dtype), -1)]
        body: list[Segment] = [Compute.of("lm_head", self._gemms(g, phase, dtype) + ce, -1)]
        if lay.tp > 1 and lay.sequence_parallel:
            op = "all_gather" if phase == "F" else "reduce_scatter"
            body.insert(0, Comm("lm_head_tp", "tp", op, self.shapes.tp_collective_bytes, False, -1))
        body += self._loss_reductions(phase)
        if phase == "F" and self.scenario.dp.nan_check:
            # Megatron's --check-for-nan-in-loss-and-grad also asserts each microbatch's loss
            # is not NaN on the host (loss_func): the host waits for the reduced loss
            body.append(Compute("loss_nan_check", 0.0, -1, sync=True))
        return body

    def _loss_reductions(self, phase: str) -> list[Segment]:
        """The vocab-parallel loss's collectives over tp, each blocking, as its kernel runs them
        (``loss_kernels.loss_collectives``: the unfused loss's three all-reduces, the fused
        ones' two, TransformerEngine's one all-gather). Small and latency-bound; forward only."""
        tp = self.shapes.layout.tp
        if phase != "F" or tp == 1:
            return []
        collectives = loss_kernels.loss_collectives(self.scenario.training.fused_cross_entropy, self.shapes.tokens, tp)
        return [Comm(name, "tp", op, size, False, -1) for name, op, size in collectives]

    def _async_head(self, g: list[Gemm], ce: Work, phase: str, dtype: str) -> list[Segment]:
        """nanotron's LM head is an async column linear too: forward, the input all-gather under
        the own shard's logits GEMM; backward (after the loss's), the input re-gather under the
        input-gradient GEMM and that gradient's reduce-scatter under the weight gradient."""
        if phase == "W":
            return []
        size = self.shapes.tp_collective_bytes
        if phase == "F":
            local, rest = tp_async.row_pieces(self.shapes.layout.tp)
            return [
                Comm("lm_head_tp", "tp", "all_gather", size, True, -1, holds_sms=True),
                Compute.of("lm_head_local", self._gemm_pieces(g, "F", local, dtype), -1),
                Compute.of("lm_head", self._gemm_pieces(g, "F", rest, dtype) + ce, -1),
            ]
        return [
            Compute.of("lm_head_loss", ce, -1),
            Comm("lm_head_tp_ag_input", "tp", "all_gather", size, True, -1, holds_sms=True),
            Compute.of("lm_head", self._gemms(g, "B", dtype), -1),
            Comm("lm_head_tp", "tp", "reduce_scatter", size, True, -1, holds_sms=True),
            Compute.of("lm_head_wgrad", self._gemms(g, "W", dtype), -1),
        ]

    def head_and_mtp(self, phase: str) -> list[Segment]:
        """The LM head and the MTP modules after it (DeepSeek-V3 Sec. 2.2), in the phase's
        order: forward head first, then each module; backward in reverse."""
        depths = range(self.shapes.model.mtp_layers)
        if phase == "F":
            return self.head("F") + [seg for d in depths for seg in self._mtp_module(d, "F")]
        # module k predicts from module k - 1's output: the deepest one's backward runs first
        return [seg for d in reversed(depths) for seg in self._mtp_module(d, phase)] + self.head(phase)

    def _mtp_module(self, depth: int, phase: str) -> list[Segment]:
        """One MTP module: embed the tokens one further ahead (the main model's embedding),
        normalise it and the previous depth's hidden state, project the 2h concatenation to h,
        run one transformer layer, and predict through the shared head and another loss."""
        m = self.shapes.model
        proj = [Gemm(2 * m.hidden, m.hidden / self.shapes.layout.tp)]
        index = m.mtp_layer_index(depth)
        if phase == "W":
            embed = self.embedding("W")
            proj_w = Compute.of("mtp_proj_wgrad", self._gemms(proj, "W"), index)
            return [*self.head("W"), *self.layer(index, "W"), proj_w, *embed]
        norms = self._elementwise(self.ops.norm() + self.ops.norm(), phase)
        tokens_bytes = self.shapes.tokens * m.hidden * self.shapes.elt
        lookup = Work.of(memory=self.km.memory(2 * tokens_bytes)) if phase == "F" else Work()
        entry = Compute.of("mtp_input", lookup + norms + self._gemms(proj, phase), index)
        if phase == "F":
            return [entry, *self.layer(index, "F"), *self.head("F")]
        return [*self.head(phase), *self.layer(index, phase), entry]

    def _softcap(self, phase: str) -> Work:
        """The output logits' tanh soft-capping (``model.logit_softcap``, logit_softcap.py): its
        memory-bound passes, one kernel each, or nothing inside a fused loss."""
        tr = self.scenario.training
        per_op = self.ops.style.kernel_per_op
        elements = self.shapes.tokens * self.shapes.model.vocab / self.shapes.layout.tp
        nbytes = logit_softcap.traffic_bytes(
            self.shapes.model.logit_softcap, loss_kernels.folds_softcap(tr.fused_cross_entropy), per_op, elements,
            self.shapes.elt, phase == "B",
        )
        kernels = 3 if per_op else 1
        return Work.of(memory=kernels * self.km.memory(nbytes / kernels)) if nbytes else Work()

    def _cross_entropy_bytes(self, phase: str) -> float:
        """HBM traffic of the vocab-parallel cross-entropy on this GPU's logits, as the loss
        kernel of ``training.fused_cross_entropy`` moves it (``loss_kernels``)."""
        elements = self.shapes.tokens * self.shapes.model.vocab / self.shapes.layout.tp
        return loss_kernels.cross_entropy_bytes(
            self.scenario.training.fused_cross_entropy, elements, self.shapes.elt, phase != "F"
        )
