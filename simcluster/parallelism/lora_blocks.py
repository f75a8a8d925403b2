"""The LoRA adapters' work beside a frozen block's linears (``lora:``, simcluster/lora.py).

Each adapter runs at the activation precision (NeMo's ``ParallelLinearAdapter`` is a pair of
Megatron linears outside TransformerEngine's FP8 autocast) on the tokens its base linear sees:
forward, the dropout on its input (a mask and a masked copy, when ``lora.dropout`` > 0), x A,
then (x A) B scaled by alpha / r and added to the base output; backward, the input gradients
through B and A (the scale's and the dropout's passes, and the add into the base linear's input
gradient); W, the weight gradients of A and B, the only ones a LoRA layer takes. Under
TransformerEngine's op fuser (``lora.op_fuser``) the scale and both adds run inside the GEMMs.
"""

from __future__ import annotations

from simcluster.lora import (
    BLOCK_TARGETS,
    ROW_PARALLEL,
    adapter_gemms,
    adapter_pairs,
    adapter_widths,
    dropout_mask_bytes,
)
from simcluster.parallelism.builder_base import BuilderBase
from simcluster.parallelism.linears import Gemm
from simcluster.parallelism.segments import Comm, Compute, Segment, Work
from simcluster.userbuffers import disabled, switches_act, tp_overlaps_run

#: HBM bytes per element of each adapter pass (16-bit tensors; the dropout's mask as
#: :func:`~simcluster.lora.dropout_mask_bytes`). Forward: dropout reads x and writes the copy and
#: the mask (2 + 2 + mask); over the output, the scale (read, write) and the add into the base
#: output (two reads, a write).
DROPOUT_FWD_BYTES = 4.0
OUTPUT_FWD_BYTES = 4.0 + 6.0
#: Backward: the scale's gradient over the output (read, write); over the input, the dropout's
#: gradient (gradient and mask read, one write) and its add into the base input gradient.
OUTPUT_BWD_BYTES = 4.0
DROPOUT_BWD_BYTES = 4.0
INPUT_ADD_BYTES = 6.0
#: Under TransformerEngine's op fuser (``lora.op_fuser``): forward, the B GEMM scales by its alpha
#: and accumulates into the base output (``ForwardLinearScaleAdd``: beta 1, so it reads that
#: output once more, where its own write was already the GEMM's); backward, the scale is the B
#: input-gradient GEMM's alpha (``BackwardLinearScale``: no pass) and the adapter's input
#: gradient is the base input-gradient GEMM's C (``BackwardLinearAdd``: one more read)
OUTPUT_FWD_FUSED_BYTES = 2.0
OUTPUT_BWD_FUSED_BYTES = 0.0
INPUT_ADD_FUSED_BYTES = 2.0


class LoraBlocks(BuilderBase):
    """A dense block's adapters: their GEMMs and passes per phase."""

    def _adapter_gemms(self, targets: tuple[str, ...]) -> list[Gemm]:
        lora, m, tp = self.shapes.layout.lora, self.shapes.model, self.shapes.layout.tp
        if lora is None:
            return []
        return [g for pair in adapter_pairs(m, lora, targets, tp) for g in pair]

    def adapter_work(self, targets: tuple[str, ...], phase: str) -> Work:
        """The adapters beside the linears ``targets`` in phase F or B: their GEMMs at the
        activation precision and their memory-bound passes (none without LoRA)."""
        lora = self.shapes.layout.lora
        gemms = self._adapter_gemms(targets)
        if lora is None or not gemms:
            return Work()
        k, n = adapter_widths(self.shapes.model, lora, targets, self.shapes.layout.tp)
        mask = dropout_mask_bytes(lora)
        fused = lora.op_fuser
        if phase == "F":
            out = OUTPUT_FWD_FUSED_BYTES if fused else OUTPUT_FWD_BYTES
            per_token = n * out + (k * (DROPOUT_FWD_BYTES + mask) if mask else 0.0)
        else:
            out, add = (OUTPUT_BWD_FUSED_BYTES, INPUT_ADD_FUSED_BYTES) if fused else (OUTPUT_BWD_BYTES, INPUT_ADD_BYTES)
            per_token = n * out + k * (add + (DROPOUT_BWD_BYTES + mask if mask else 0.0))
        passes = Work.of(memory=self.km.memory(self.shapes.tokens * per_token))
        return self._gemms(gemms, phase, self.km.act_dtype) + passes

    def adapter_wgrad(self, block: str, index: int) -> list[Segment]:
        """A LoRA block's W: the weight gradients of its adapters' A and B (none where the
        block has no adapter: its base weights are frozen)."""
        gemms = self._adapter_gemms(BLOCK_TARGETS[block])
        if not gemms:
            return []
        return [Compute.of(f"{block}_lora_wgrad", self._gemms(gemms, "W", self.km.act_dtype), index)]

    def _gathers_input(self, target: str) -> bool:
        """Whether the adapter beside the column-parallel ``target`` gathers its sequence shard
        itself (forward an all-gather, backward its input gradient's reduce-scatter): NeMo asks
        TransformerEngine for the gathered norm output (``return_layernorm_output_gathered``)
        only where the linear's forward gather is no userbuffers overlap, and otherwise its
        ``ParallelLinearAdapter`` gathers the shard it is given (NeMo's adapter mixins; PR
        #9072 "disable overlap for qkv", Megatron-Core ``tp_comm_overlap_disable_qkv``). ASSUMED
        alike beside fc1 with ``tp_comm_overlap_disable_fc1`` (NeMo 1.x's MLP mixin asked for the
        gathered output only without any TP overlap; no shipped case has an fc1 adapter at tp > 1)."""
        overlap = self.scenario.overlap
        if not (tp_overlaps_run(overlap, self.shapes.layout)[0] and switches_act(overlap)):
            return False
        return not disabled(overlap, target)

    def adapter_comms(self, target: str, phase: str, layer: int) -> list[Segment]:
        """The tensor-parallel collectives of ``target``'s adapter in phase F or B, in the order
        they run (simcluster/lora.py: NeMo's ``ParallelLinearAdapter``); none at tp 1 or
        without an adapter there. Blocking, on the compute stream's path, as the adapter's
        Megatron linears issue them."""
        lay = self.shapes.layout
        lora = lay.lora
        if lora is None or lay.tp == 1 or target not in lora.targets:
            return []
        elt, tokens, sp = self.shapes.elt, self.shapes.tokens, lay.sequence_parallel
        narrow = tokens * lora.rank * elt  # an r-wide tensor of every token
        wide = self.shapes.tp_collective_bytes  # a hidden-wide one (s x h)
        name = f"lora_{target}"

        def comm(op: str, nbytes: float, suffix: str) -> Comm:
            return Comm(f"{name}_{suffix}", "tp", op, nbytes, False, layer)

        if target not in ROW_PARALLEL:
            own = [comm("all_gather" if phase == "F" else "reduce_scatter", wide, "input")] if self._gathers_input(target) else []
            if phase == "F":
                return [*own, comm("all_gather", narrow, "ag")]
            out: list[Segment] = [comm("all_reduce", narrow, "ar"), *own]
            k = adapter_gemms(self.shapes.model, lora, target, lay.tp)[0].k
            # without sequence parallelism A's input gradient is all-reduced on its own
            return out if sp else [*out, comm("all_reduce", tokens * k * elt, "ar_input")]
        if sp and lora.a2a:
            swap = comm("all_to_all", wide / lay.tp, "a2a")
            return [comm("all_reduce", narrow, "ar"), swap] if phase == "F" else [swap, comm("all_reduce", narrow, "ar")]
        if phase == "F":
            return [comm("all_reduce", narrow, "ar"), comm("all_gather", wide, "ag")]
        # backward: the sequence shard's gradient gathered whole (the forward's cut), then
        # B's input gradient all-reduced; without sequence parallelism only the latter
        gather = [comm("all_gather", wide, "ag")] if sp else []
        return [*gather, comm("all_reduce", narrow, "ar")]
