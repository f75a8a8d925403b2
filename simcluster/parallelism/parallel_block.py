"""The parallel attention + MLP block, y = x + Attn(LN1(x)) + MLP(LN2(x)), under tensor
parallelism (``model.parallel_block``; ``parallel.parallel_block_comm`` picks the code).

Both branches read the layer input, so one set of TP collectives can serve them; whether it
does depends on the implementation:

- ``separate``: each branch keeps its own, exactly as the sequential block's. NeMo's Falcon
  layer (``FalconTransformerLayer``, a subclass of Megatron-Core's ``TransformerLayer``) runs
  the stock ``SelfAttention`` and ``MLP`` modules, whose row-parallel linears each all-reduce
  (or reduce-scatter) their output, and only then adds the two; Megatron-Core itself has no
  parallel block (``transformer_layer.py``: norm, attention, bias-dropout-add, norm, MLP,
  bias-dropout-add). Built by the sequential path (``layer.py``), with the pre-MLP norm left
  out when one norm feeds both branches.
- ``gpt-neox``: EleutherAI/gpt-neox ``megatron/model/transformer.py`` with ``gpt_j_residual``
  builds both row-parallel linears with ``parallel_output=True`` (no reduce), adds the two
  partial outputs and all-reduces the sum once (``reduce_from_model_parallel_region``): one
  forward all-reduce per layer. Its backward is the identity there, and each branch's
  column-parallel linear (``copy_to_model_parallel_region`` on its input) all-reduces its own
  input gradient: two backward all-reduces, as the sequential block has. Tensor parallelism
  only, no sequence parallelism in that path. The attention's output bias is added on its own
  (``bias_dropout_fn(..., residual=None)``), a pass the sequential block fuses into its
  residual add (``Elementwise.branch_bias_add``).
- ``fused``: one set around the whole block, as the shared input allows (PaLM, Chowdhery et
  al. 2022 Sec. 2: the parallel formulation lets the attention's and the MLP's input matmuls
  fuse; MegaScale, Jiang et al. NSDI'24 Sec. 3.1, trains its 175B model with that block; how
  MegaScale's code places the collectives was not read here). Forward: all-gather the shared norm
  output, both branches, reduce-scatter the summed outputs (or one all-reduce without sequence
  parallelism). Backward: all-gather the output gradient, both branches' input gradients,
  added (the gathered norm output feeds two linears, so autograd sums their gradients, now
  the whole sequence wide), one reduce-scatter (one all-reduce without sequence parallelism),
  and one re-gather of the input for both weight gradients.

Not modelled: userbuffers overlaps (``overlap.tp_comm``) keep each GEMM's own slicing inside
the fused block, where only the first GEMM has a gather beside it and the last a scatter.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from simcluster.parallelism import tensor
from simcluster.parallelism.builder_base import BuilderBase
from simcluster.parallelism.segments import Compute, Segment, Work

if TYPE_CHECKING:
    from simcluster.userbuffers import BlockOverlaps


class ParallelBlocks(BuilderBase):
    """Mixin of :class:`~simcluster.parallelism.layer.LayerBuilder`: a parallel block inside one
    set of TP collectives (``gpt-neox`` forward, ``fused``)."""

    if TYPE_CHECKING:

        @property
        def tp_async(self) -> bool: ...

        @property
        def fuses_wgrad(self) -> bool: ...

        def _attention_body(self, index: int, phase: str) -> list[Segment]: ...

        def _mlp_body(self, index: int, phase: str) -> list[Segment]: ...

        def _attention_segments(self, index: int, phase: str) -> list[Segment]: ...

        def _mlp_segments(self, index: int, phase: str) -> list[Segment]: ...

        def _block_ub(self, block: str) -> BlockOverlaps | None: ...

        def _rs_reduce(self, block: str, phase: str) -> Work | None: ...

        def _op_recompute(self, index: int) -> Compute: ...

    @property
    def merged_block(self) -> bool:
        """Whether each layer's TP collectives serve both branches at once (a parallel block,
        tp > 1, ``gpt-neox`` or ``fused``); ``separate`` runs the sequential path."""
        m, lay = self.shapes.model, self.shapes.layout
        return m.parallel_block and lay.tp > 1 and lay.parallel_block_comm != "separate" and not self.tp_async

    def _parallel_block(self, index: int, phase: str) -> list[Segment]:
        """Layer ``index`` in ``phase`` (F, B, W or BW) as one parallel block."""
        if phase == "W":
            return self._attention_segments(index, "W") + self._mlp_segments(index, "W")
        if phase == "BW" and not self.fuses_wgrad:
            return self._parallel_block(index, "B") + self._parallel_block(index, "W")
        segments = self._block_segments(index, phase)
        if phase != "F" and self.scenario.training.recompute == "op":
            segments = [self._op_recompute(index), *segments]
        return segments

    def _block_segments(self, index: int, phase: str) -> list[Segment]:
        comm = self.shapes.layout.parallel_block_comm
        ub = self._block_ub("attn")
        neox = comm == "gpt-neox"
        if phase == "F":
            attention = self._attention_body(index, "F")
            if neox:
                attention = _add_to(attention, self._elementwise(self.ops.branch_bias_add(), "F"), last=True)
            body = attention + self._mlp_body(index, "F")
            return tensor.wrap_block(self.shapes, "block", body, ub, index, rs_reduce=self._rs_reduce("attn", "F"))
        if neox:
            # each column-parallel linear all-reduces its own input gradient, as in the
            # sequential block (B, or BW with the weight gradients under it); the attention's
            # backward starts with its bias add's
            attention = self._attention_segments(index, phase)
            attention = _add_to(attention, self._elementwise(self.ops.branch_bias_add(), "B"), last=False)
            return self._mlp_segments(index, phase) + attention
        body = self._with_gradient_sum(self._mlp_body(index, "B") + self._attention_body(index, "B"))
        if phase == "BW":
            wgrad = self._attention_segments(index, "W") + self._mlp_segments(index, "W")
            return tensor.wrap_block(self.shapes, "block", body, ub, index, backward=True, wgrad=wgrad)
        return tensor.wrap_block(self.shapes, "block", body, ub, index, backward=True)

    def _with_gradient_sum(self, body: list[Segment]) -> list[Segment]:
        """``body`` with the sum of the branches' input gradients added to its last compute
        (the QKV input gradient, which the sum follows before the reduce-scatter). The model's
        residual terms count the gradient sums on the token shard; a fused block's one of them
        is the whole sequence wide (``Elementwise.branch_gradient_sum``: the difference). The
        traffic is the sum's own bytes, one pass, so it is costed as a forward pass would be."""
        return _add_to(body, self._elementwise(self.ops.branch_gradient_sum(), "F"), last=True)


def _add_to(segments: list[Segment], extra: Work, last: bool) -> list[Segment]:
    """``segments`` with ``extra`` added to their last (or first) compute."""
    if not extra.total:
        return segments
    computes = [i for i, s in enumerate(segments) if isinstance(s, Compute)]
    at = computes[-1] if last else computes[0]
    seg = segments[at]
    assert isinstance(seg, Compute)
    work = seg.work + extra
    out = list(segments)
    out[at] = replace(seg, work=work, seconds=work.total)
    return out
