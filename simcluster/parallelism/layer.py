"""The work of one transformer layer for one microbatch on one GPU, per phase (F, B, W).

Compute times come from the kernel model (GEMM shapes under TP sharding, fused attention, the
memory-bound norms/activations/residuals); communication segments come from the parallelism
modules (TP, CP, EP). Phase B holds the input-gradient GEMMs and all backward communication;
phase W the weight-gradient GEMMs (zero-bubble schedules run it separately; BW fuses them).
The attention core's time is :class:`~simcluster.parallelism.attention_time.AttentionTimes`',
nanotron's async TP blocks :class:`~simcluster.parallelism.tp_async_blocks.AsyncTpBlocks`', a
parallel attention + MLP block inside one set of TP collectives
:class:`~simcluster.parallelism.parallel_block.ParallelBlocks`', and the embedding, LM head, loss and MTP modules
:class:`~simcluster.parallelism.head.HeadBuilder`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from simcluster.compute import QUANTISED, KernelModel
from simcluster.fp8_store import fp8_swiglu_store
from simcluster.frameworks import get_framework
from simcluster.lora import BLOCK_TARGETS
from simcluster.moe_kernels import DEFAULT_GROUPED, GROUPED_BY_FRAMEWORK
from simcluster.parallelism import (
    autocast_casts,
    context,
    expert,
    fp8_weights,
    host,
    tensor,
    torchao_float8,
    wgrad,
)
from simcluster.parallelism.attention_time import AttentionTimes
from simcluster.parallelism.elementwise import STYLES, Elementwise, Traffic
from simcluster.parallelism.head import HeadBuilder
from simcluster.parallelism.linears import Gemm
from simcluster.parallelism.lora_blocks import LoraBlocks
from simcluster.parallelism.parallel_block import ParallelBlocks
from simcluster.parallelism.segments import Compute, Segment, Work, as_recompute
from simcluster.parallelism.shapes import Shapes
from simcluster.parallelism.tp_async_blocks import AsyncTpBlocks
from simcluster.scenario import Scenario
from simcluster.userbuffers import (
    BlockOverlaps,
    UbOverlap,
    async_tp,
    block_overlaps,
    resolve,
    switches_act,
    tp_overlaps_run,
)
from simcluster.userbuffers_traffic import (
    gather_copy_bytes,
    ring_rs_reduce_bytes,
    scatters_fp8,
    writes_in_place,
)

__all__ = ["Gemm", "LayerBuilder"]


@dataclass
class LayerBuilder(AttentionTimes, AsyncTpBlocks, ParallelBlocks, HeadBuilder, LoraBlocks):
    """Builds phase segments for layers, the embedding and the LM head."""

    shapes: Shapes
    km: KernelModel
    scenario: Scenario

    # --- shapes -------------------------------------------------------------------------
    def attention_gemms(self) -> list[Gemm]:
        m, t = self.shapes.model, self.shapes.layout.tp
        h = m.hidden
        if m.mla is not None:
            a = m.mla
            qk = a.qk_nope_head_dim + a.qk_rope_head_dim
            q = [Gemm(h, a.q_lora_rank), Gemm(a.q_lora_rank, m.heads * qk / t)] if a.q_lora_rank else [Gemm(h, m.heads * qk / t)]
            return q + [
                Gemm(h, a.kv_lora_rank + a.qk_rope_head_dim),
                Gemm(a.kv_lora_rank, m.heads * (a.qk_nope_head_dim + a.v_head_dim) / t),
                Gemm(m.heads * a.v_head_dim / t, h),
            ]
        d = m.d_head
        return [Gemm(h, (m.heads + 2 * m.kv_heads) * d / t), Gemm(m.heads * d / t, h)]

    def mlp_gemms(self, width: float) -> list[Gemm]:
        m, t = self.shapes.model, self.shapes.layout.tp
        up = m.up_width(width)
        return [Gemm(m.hidden, up / t), Gemm(width / t, m.hidden)]

    # --- compute times --------------------------------------------------------------------
    def _gemms(self, gemms: list[Gemm], phase: str, dtype: str | None = None, splits: int = 1) -> Work:
        """GEMM time of ``gemms`` in one phase, with the FP8 quantisation of the operand each
        phase casts (the input forward, the output gradient backward; W reuses both) and, in
        W, the fp32 main-gradient accumulation. ``splits`` > 1 runs each forward or
        input-gradient GEMM as that many kernels over slices of the tokens (TP overlap)."""
        tokens, km = self.shapes.tokens, self.km
        rows = tokens / splits
        if phase == "W":
            params = sum(g.k * g.n for g in gemms)
            accumulate = wgrad.accumulation_seconds(
                km, self.scenario.training, self.shapes.layout, params
            )
            wgrad_t = sum(km.gemm(g.k, g.n, tokens, dtype, role="wgrad") for g in gemms)
            return Work.of(gemm=wgrad_t, grad_accum=accumulate)
        torchao = (dtype or km.gemm_dtype) == "fp8" and torchao_float8.applies(self.scenario.training)
        if phase == "B":
            mm = splits * sum(km.gemm(rows, g.k, g.n, dtype, role="dgrad") for g in gemms)
            casts = sum(km.quantise(tokens * g.n, dtype, gradient=True, columnwise=self.wgrads_grads) for g in gemms)
            casts += self._weight_transposes(gemms, dtype)
            if torchao:
                casts += torchao_float8.backward_seconds(km, tokens, [(g.k, g.n) for g in gemms])
                casts += torchao_float8.weight_cast_seconds(km, self.scenario.training, [g.k * g.n for g in gemms])
        else:
            mm = splits * sum(km.gemm(rows, g.n, g.k, dtype, role="fwd") for g in gemms)
            # torchao keeps the 16-bit input for the backward: its forward cast is rowwise only
            columnwise = self.wgrads_inputs and not torchao
            casts = sum(km.quantise(tokens * g.k, dtype, columnwise=columnwise) for g in gemms)
            casts += self._weight_casts(gemms, dtype, torchao)
        return Work.of(gemm=mm, memory=casts)

    def _weight_casts(self, gemms: list[Gemm], dtype: str | None = None, torchao: bool = False) -> float:
        """The forward's casts of these linears' weights: torch.autocast's of fp32 weights
        (``training.autocast``, parallelism/autocast_casts.py) and TransformerEngine's FP8 or
        NVFP4 quantisation (parallelism/fp8_weights.py), or ``torchao``'s uncached one
        (parallelism/torchao_float8.py)."""
        training, layout = self.scenario.training, self.shapes.layout
        weights = [g.k * g.n for g in gemms]
        if torchao:
            quantised = torchao_float8.weight_cast_seconds(self.km, training, weights)
        else:
            quantised = fp8_weights.forward_cast_seconds(self.km, training, layout, weights, dtype)
        return autocast_casts.forward_cast_seconds(self.km, training, layout, weights) + quantised

    def _weight_transposes(self, gemms: list[Gemm], dtype: str | None = None) -> float:
        """The backward's transposes of these linears' FP8 weights as Megatron FSDP gathers
        them (parallelism/fp8_weights.py)."""
        weights = [g.k * g.n for g in gemms]
        return fp8_weights.backward_transpose_seconds(
            self.km, self.scenario.training, self.shapes.layout, weights, dtype
        )

    def _gemm_pieces(
        self, gemms: list[Gemm], phase: str, pieces: tuple[float, ...], dtype: str | None = None
    ) -> Work:
        """Forward or input-gradient GEMMs run as one kernel per piece of the tokens (each a
        fraction of them), with the FP8 casts of the pieces' operands (``tp_async``)."""
        tokens, km = self.shapes.tokens, self.km
        share = sum(pieces)
        if phase == "B":
            mm = sum(km.gemm(tokens * p, g.k, g.n, dtype, role="dgrad") for p in pieces for g in gemms)
            casts = sum(
                km.quantise(tokens * share * g.n, dtype, gradient=True, columnwise=self.wgrads_grads) for g in gemms
            ) + self._weight_transposes(gemms, dtype)
        else:
            mm = sum(km.gemm(tokens * p, g.n, g.k, dtype, role="fwd") for p in pieces for g in gemms)
            casts = sum(km.quantise(tokens * share * g.k, dtype, columnwise=self.wgrads_inputs) for g in gemms)
            casts += self._weight_casts(gemms, dtype)
        return Work.of(gemm=mm, memory=casts)

    @property
    def tp_async(self) -> bool:
        """Whether the dense blocks run nanotron's async TP linears (``overlap.tp_async``)."""
        return tp_overlaps_run(self.scenario.overlap, self.shapes.layout)[1]

    @cached_property
    def ops(self) -> Elementwise:
        """The layer's memory-bound parts in the framework's style (``training.elementwise``)."""
        training = self.scenario.training
        style = STYLES[training.elementwise]
        return Elementwise(
            self.shapes.model, self.shapes.layout, self.shapes.elt, style, training.micro_batch,
            # the kernel in use, the profile's default included: TE on Ampere runs flash-attn 2
            self.km.profile.attention_kernel_in_use(training.attention_kernel)
            if training.flash_attention
            else None,
            fp8_attention=training.fp8_attention,
            fp8_swiglu_store=fp8_swiglu_store(self.shapes.model, training),
        )

    def _elementwise(self, traffic: Traffic, phase: str, backward_scale: int = 2) -> Work:
        """Memory-bound kernels: their bytes once forward, twice backward (``backward_scale``;
        a cast runs once each way). Fused, a group is one kernel; eager (and nanotron), each
        operation pays its own launch gap."""
        if phase == "W" or traffic.bytes_per_token <= 0:
            return Work()
        scale = backward_scale if phase == "B" else 1
        seconds = self.km.memory(self.shapes.tokens * traffic.bytes_per_token * scale)
        if self.ops.eager:
            seconds += (traffic.kernels * scale - 1) * self.km.launch_s
        return Work.of(memory=seconds)

    # --- layer segments ------------------------------------------------------------------
    def layer(self, index: int, phase: str) -> list[Segment]:
        """Segments of layer ``index`` for phase F, B, W or BW (B and W fused, as a schedule
        that does not split W off runs them)."""
        if self.merged_block:
            return self._parallel_block(index, phase)
        if phase == "BW":
            return self._fused_backward(index)
        segments = self._order(phase, self._attention(index, phase), self._mlp_segments(index, phase))
        if phase == "B" and self.scenario.training.recompute == "op":
            segments = [self._op_recompute(index), *segments]
        return segments

    def _fused_backward(self, index: int) -> list[Segment]:
        """BW: each block's weight gradients right after its input gradients, as autograd runs
        a layer whose W is not split off. The TP collective of a block's input gradient (the
        reduce-scatter with sequence parallelism, the all-reduce without) then runs under the
        block's weight-gradient GEMMs: Megatron's column-parallel linear backward
        (``LinearWithGradAccumulationAndAsyncCommunication``, before it
        ``ColumnParallelLinearWithAsyncAllreduce``) and TransformerEngine's linears launch it
        asynchronously before the wgrad GEMM (with userbuffers: the qkv_wgrad / fc1_wgrad bulk
        overlaps). The model runs the whole block's wgrad after its input gradient, where
        autograd runs the row-parallel one earlier, so the collective may hide under a little
        more GEMM than it does. Elsewhere (no TP, synchronous linears: ``overlap.tp_grad_async``
        false, nanotron's async linears) the layer's input gradients come first, then its
        weight gradients. A MoE block's, with or without TP, come right after the experts'
        input gradients, before the gradient goes back to the tokens' ranks
        (:meth:`_moe_backward`)."""
        moe = self.shapes.model.is_moe_layer(index)
        if not self.fuses_wgrad:
            if not moe:
                return self.layer(index, "B") + self.layer(index, "W")
            return self._moe_backward(self.layer(index, "B"), index) + self._attention(index, "W")
        if moe:
            mlp = self._moe_backward(self._mlp_segments(index, "B"), index)
        else:
            mlp = self._mlp_segments(index, "BW")
        segments = mlp + self._attention_segments(index, "BW")
        if self.scenario.training.recompute == "op":
            segments = [self._op_recompute(index), *segments]
        return segments

    def _attention(self, index: int, phase: str) -> list[Segment]:
        """The attention block in ``phase``, with asynchronous TP collectives where they run."""
        return self._async_attention(index, phase) if self.tp_async else self._attention_segments(index, phase)

    def _moe_backward(self, backward: list[Segment], index: int) -> list[Segment]:
        """A MoE block's ``backward`` (or its layer's) with the block's weight gradients right
        after the experts' input gradients: before the expert-TP reduce-scatter and the
        dispatch's gradient all-to-all, as autograd reaches them (each expert linear's wgrad
        beside its dgrad) and as Megatron-Core's combined 1F1B issues a layer pair
        (``TransformerLayerSchedulePlan.run``: ``b_layer.mlp.backward_dw()`` before
        ``b_layer.moe_dispatch.backward``; DeepSeek-V3 Fig. 4: MLP(B), MLP(W), then the
        forward's MLP). In an F&B pair they thus run in the MLP's turn, under the forward's
        dispatch, not after the backward's attention."""
        at = max(i for i, seg in enumerate(backward) if isinstance(seg, Compute) and seg.name == "experts") + 1
        return [*backward[:at], *self._mlp_segments(index, "W"), *backward[at:]]

    def _attention_segments(self, index: int, phase: str) -> list[Segment]:
        """The attention block: norm (sharded by SP), QKV, rotary, core, output projection,
        residual, inside its TP collectives (none in W)."""
        gemms = self.attention_gemms()
        if phase == "W" and self.shapes.layout.lora is not None:
            return self.adapter_wgrad("attn", index)
        if phase == "W":
            wgrad: list[Segment] = [Compute.of("attn_wgrad", self._linear(gemms, "W", "attn"), index)]
            return self._wgrad_host(wgrad, self._block_tensors("attn", len(gemms)))
        if phase == "BW":
            return self._with_wgrad(self._attention_body(index, "B"), "attn", index, self._attention_segments(index, "W"))
        return tensor.wrap_block(
            self.shapes, "attn", self._attention_body(index, phase), self._block_ub("attn"), index,
            backward=phase == "B", rs_reduce=self._rs_reduce("attn", phase),
        )  # fmt: skip

    def _attention_body(self, index: int, phase: str) -> list[Segment]:
        """The attention block's compute in ``phase`` (F or B), in execution order."""
        backward = phase != "F"
        ops = self.ops
        pre = self._elementwise(ops.norm() + ops.attention_inputs(index), phase)
        pre += self._elementwise(ops.fp8_attention_casts(self.shapes.attention_widths), phase, backward_scale=1)
        gemms = self.attention_gemms()
        qkv_t, out_t = self._linear(gemms[:-1], phase, "attn"), self._linear(gemms[-1:], phase, "attn", column=False)
        qkv_t += self.adapter_work(("qkv",), phase)
        out_t += self.adapter_work(("proj",), phase)
        out_t += self._elementwise(ops.attention_output() + ops.residual(), phase)
        core = context.cp_attention(self.shapes, self.core_times(phase, index), backward, index)
        redo = self.scenario.training.recomputed
        if phase == "B" and "core_attn" in redo:
            core = [*self._core_recompute(index), *core]
        qkv, out = Compute.of("attn_qkv", pre + qkv_t, index), Compute.of("attn_out", out_t, index)
        qkv_tp, out_tp = self.adapter_comms("qkv", phase, index), self.adapter_comms("proj", phase, index)
        if phase == "B":
            # backward order: the output projection's input gradient, the core, then the
            # QKV input gradient (before it, any rerun of the input norm / MLA up-projections)
            return self._host([out, *out_tp, *core, *self._attention_input_recompute(gemms, index), qkv, *qkv_tp], phase)
        return self._host([qkv, *qkv_tp, *core, out, *out_tp], phase)

    def _with_wgrad(self, body: list[Segment], block: str, index: int, wgrad: list[Segment]) -> list[Segment]:
        """A block's fused backward: its input-gradient ``body`` inside the TP collectives, the
        input gradient's reduce-scatter under the ``wgrad`` segments that follow."""
        return tensor.wrap_block(
            self.shapes, block, body, self._block_ub(block), index, backward=True, wgrad=wgrad,
            rs_reduce=self._rs_reduce(block, "B"),
        )  # fmt: skip

    def _op_recompute(self, index: int) -> Compute:
        """torchtitan's op-level selective checkpointing reruns, before a layer's backward,
        every forward op whose output it did not keep: the memory-bound ones (norms, rotary,
        activation, residual adds) and half of the matmuls (every other ``aten.mm``; see
        ``memory._op_checkpoint_bytes``); the attention kernel's output is kept."""
        m, ops = self.shapes.model, self.ops
        gemms = self.attention_gemms() + self.mlp_gemms(m.ffn)
        memory_bound = (
            ops.norm() + ops.attention_inputs(index) + ops.attention_output() + ops.residual()
            + ops.mlp_norm() + ops.activation(m.ffn / self.shapes.layout.tp) + ops.residual()
        )  # fmt: skip
        work = self._gemms(gemms, "F").scaled(0.5) + self._elementwise(memory_bound, "F")
        return Compute.of("recompute_ops", work, index, kind="recompute")

    def fuses_backward(self, index: int) -> bool:
        """Whether layer ``index``'s BW is more than its B followed by its W: the TP collective
        under the weight gradients (:attr:`fuses_wgrad`), or a MoE block's expert weight
        gradients before its dispatch's gradient (:meth:`_moe_backward`)."""
        return self.fuses_wgrad or (not self.merged_block and self.shapes.model.is_moe_layer(index))

    @cached_property
    def fuses_wgrad(self) -> bool:
        """Whether a fused backward runs the input gradient's TP collective under the weight
        gradients (Megatron's and TE's asynchronous linears: the reduce-scatter with sequence
        parallelism, the all-reduce without); otherwise BW is the layer's B followed by its W."""
        lay = self.shapes.layout
        synchronous = self.userbuffers is None and not self.scenario.overlap.tp_grad_async
        return lay.tp > 1 and not self.tp_async and not synchronous

    @cached_property
    def userbuffers(self) -> dict[str, UbOverlap] | None:
        """TransformerEngine's userbuffers overlaps (``overlap.tp_comm_cfg``) when they run:
        ``overlap.tp_comm`` with tp > 1 and sequence parallelism; None otherwise."""
        if not tp_overlaps_run(self.scenario.overlap, self.shapes.layout)[0]:
            return None
        return resolve(self.scenario.overlap.tp_comm_cfg)

    def _block_ub(self, block: str) -> BlockOverlaps | None:
        cfg, overlap = self.userbuffers, self.scenario.overlap
        if cfg is None:
            return None
        return block_overlaps(cfg, block, overlap if switches_act(overlap) else None)

    def _rs_reduce(self, block: str, phase: str) -> Work | None:
        """The forward reduce-scatter's local reduction kernel when it runs as a ring exchange
        (``userbuffers_traffic.ring_rs_reduce_bytes``): a memory-bound pass at the profile's HBM rate
        over the ``tp`` partials of this rank's output shard; None otherwise."""
        ub = self._block_ub(block)
        over = None if ub is None else ub.scatter if phase == "F" else ub.rs_dgrad if phase == "B" else None
        if over is None:
            return None
        tp = self.shapes.layout.tp
        fp8 = phase == "F" and scatters_fp8(over, self.scenario.training)
        nbytes = ring_rs_reduce_bytes(over, tp, self.shapes.tp_collective_bytes / tp, fp8)
        return Work.of(memory=self.km.memory(nbytes)) if nbytes else None

    def _overlap_of(self, phase: str, column: bool, block: str) -> UbOverlap | None:
        """The overlap beside this block's column- or row-parallel GEMMs in ``phase`` (the
        row-parallel weight gradients have none)."""
        ub = self._block_ub(block)
        if ub is None:
            return None
        # under rs_dgrad the input gradient's reduce-scatter sits beside the input-gradient GEMM
        # and nothing beside the weight gradients (bulk overlaps off)
        roles = {
            ("F", True): ub.gather, ("F", False): ub.scatter, ("B", True): ub.rs_dgrad or ub.input_gather,
            ("B", False): ub.grad_gather, ("W", True): None if ub.rs_dgrad else ub.grad_scatter,
        }  # fmt: skip
        return roles.get((phase, column))

    def _linear(self, gemms: list[Gemm], phase: str, block: str, column: bool = True) -> Work:
        """A block's column-parallel (qkv, fc1) or row-parallel (proj, fc2) GEMMs in ``phase``
        beside their userbuffers overlap: cut into the overlap's slices, each its own kernel at
        its own size and wave quantisation (one whole kernel for an atomic GEMM,
        ``UbOverlap.gemm_slices``), and launched on the SMs its ``set_sm_margin`` leaves
        (``UbOverlap.gemm_factor``). In W the row-parallel GEMMs overlap nothing."""
        if phase == "W":  # gemms = the block's column-parallel ones, then its row-parallel one
            over = self._overlap_of("W", True, block)
            factor = over.gemm_factor(self.km.profile.gpu.sm_count) if over else 1.0
            if factor == 1.0:
                return self._gemms(gemms, "W")
            return self._gemms(gemms[:-1], "W").scaled(factor) + self._gemms(gemms[-1:], "W")
        over = self._overlap_of(phase, column, block)
        if over is None:
            return self._gemms(gemms, phase)
        work = self._gemms(gemms, phase, splits=over.gemm_slices(self.shapes.layout.tp))
        return work.scaled(over.gemm_factor(self.km.profile.gpu.sm_count)) + self._gather_copy(phase, column, block)

    def _gather_copy(self, phase: str, column: bool, block: str) -> Work:
        """TransformerEngine's copy of this rank's shard into the userbuffer before the
        all-gather beside these GEMMs (``userbuffers_traffic.gather_copy_bytes``): a memory-bound pass
        at the profile's HBM rate on the compute stream, ahead of the GEMM; none beside a
        reduce-scatter, under PyTorch's async TP (not userbuffers) or where the backward
        gathers no input again (``Layout.sp_keeps_gather``)."""
        role = {("F", True): "gather", ("B", False): "grad_gather", ("B", True): "input_gather"}.get((phase, column))
        cfg = self.scenario.overlap.tp_comm_cfg
        if role is None or async_tp(self.scenario.overlap) or not self._gathers_into_buffer(role, block):
            return Work()
        shard = self.shapes.tp_gather_bytes / self.shapes.layout.tp
        quantised = self.shapes.training.precision in QUANTISED
        nbytes = gather_copy_bytes(role, shard, quantised, writes_in_place(cfg))
        return Work.of(memory=self.km.memory(nbytes)) if nbytes else Work()

    def _gathers_into_buffer(self, role: str, block: str) -> bool:
        """Whether this gather runs through a userbuffer (so its shard is copied in first): not a
        forward gather left to NCCL (``overlap.tp_comm_disable_qkv`` / ``_fc1``), nor a backward
        re-gather that is an NCCL call (``overlap.tp_comm_rs_dgrad``) or that does not run (the
        linear kept the gathered input, or its frozen weight takes no gradient in a LoRA run)."""
        ub = self._block_ub(block)
        if ub is None:
            return False
        if role == "gather":
            return not ub.gather.blocking
        if role == "input_gather":
            return ub.rs_dgrad is None and self.shapes.layout.regathers_input
        return True

    def _norm_work(self) -> Work:
        """One norm's forward (tokens x h, SP-sharded)."""
        return self._elementwise(self.ops.norm(), "F")

    def _attention_input_recompute(self, gemms: list[Gemm], index: int) -> list[Segment]:
        """Selective recomputation before the attention block's backward (Megatron-Core
        ``--recompute-modules``): ``layernorm`` reruns the input norm, ``mla_up_proj`` the MLA
        up-projections (the GEMMs whose input is a compressed latent)."""
        redo, m = self.scenario.training.recomputed, self.shapes.model
        work = self._norm_work() if "layernorm" in redo else Work()
        if "mla_up_proj" in redo and m.mla is not None:
            latents = {m.mla.q_lora_rank, m.mla.kv_lora_rank}
            work += self._gemms([g for g in gemms if g.k in latents], "F")
        return [Compute.of("recompute_attn_inputs", work, index, kind="recompute")] if work.total else []

    def _mlp_recompute(self, index: int, forward_work: Work) -> list[Segment]:
        """Selective recomputation before the MLP block's backward: ``layernorm`` reruns the
        pre-MLP norm, ``mlp`` the whole dense MLP forward (``forward_work``; its TP collectives
        are not rerun, an approximation), ``moe_act`` the experts' activation."""
        redo, m = self.scenario.training.recomputed, self.shapes.model
        # a parallel block with one norm has no pre-MLP norm to rerun
        work = self._elementwise(self.ops.mlp_norm(), "F") if "layernorm" in redo else Work()
        if m.is_moe_layer(index):
            if "moe_act" in redo:
                act = expert.activation_seconds(self.shapes, self.km, self.scenario.moe.expert_load)
                work += Work.of(memory=act)
        elif "mlp" in redo:
            work += forward_work
        return [Compute.of("recompute_mlp", work, index, kind="recompute")] if work.total else []

    def _core_recompute(self, index: int) -> tuple[Segment, ...]:
        """Selective recomputation (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 5): the core
        attention (scores, softmax, dropout, weighted values) is checkpointed and its forward
        reruns right before its backward. Megatron checkpoints it with flash attention too
        (``checkpoint_core_attention``), so the fused forward reruns as well."""
        forward = context.cp_attention(self.shapes, self.core_times("F", index), False, index)
        return as_recompute(forward)

    def _host(self, segments: list[Segment], phase: str) -> list[Segment]:
        """``segments`` with the host's time to issue them (``parallelism/host.py``)."""
        m, eff = self.shapes.model, self.km.profile.efficiency
        local = m.experts / self.shapes.layout.ep if m.experts else 0.0
        graphs = frozenset(self.scenario.training.cuda_graphs)
        casts = self.km.cast_kernels(local) if local else 0.0
        attention = host.AttentionInputs.of(m.mla is not None, bool(m.mla and m.mla.q_lora_rank), m.has_qk_norm)
        layer = host.LayerIssue(local, graphs, casts, attention)
        charged = host.charge(segments, phase, layer, eff.host_op_us * 1e-6, eff.kernel_launch_us * 1e-6)
        return host.blocking(charged) if self.scenario.training.launch_blocking else charged

    def _wgrad_host(self, segments: list[Segment], tensors: int) -> list[Segment]:
        """A block's weight-gradient segments under ``training.launch_blocking`` with DeepSpeed's
        BF16_Optimizer (``training.grad_accum_cast``): its ``tensors`` parameter tensors' casts
        and adds into the fp32 gradient, :data:`host.HP_GRAD_OPS` Python ops each, no longer
        hidden under the GPU's work (``parallelism/host.py`` :func:`host.blocking`)."""
        training = self.scenario.training
        if not (training.launch_blocking and training.grad_accum_cast):
            return segments
        ops = host.HP_GRAD_OPS * tensors
        return host.blocking(segments, ops * self.km.profile.efficiency.host_op_us * 1e-6)

    def _block_tensors(self, part: str, linears: int) -> int:
        """Parameter tensors of a dense block: its norm's, then ``linears`` weights and the
        biases of model part ``part`` (``attn``: the QKV and output projections' own)."""
        m = self.shapes.model
        biases = (m.has_bias("qkv") + m.has_bias("attn_out")) if part == "attn" else linears * m.has_bias("mlp")
        return m.norm_tensors + linears + biases

    @staticmethod
    def _order(phase: str, attention: list[Segment], mlp: list[Segment]) -> list[Segment]:
        """Forward runs attention then MLP; backward the reverse."""
        return attention + mlp if phase == "F" else mlp + attention

    def _mlp_segments(self, index: int, phase: str) -> list[Segment]:
        m = self.shapes.model
        if m.is_moe_layer(index):
            grouped = GROUPED_BY_FRAMEWORK.get(self.scenario.framework or "", DEFAULT_GROUPED)
            moe = expert.moe_block(
                self.shapes, self.km, self.scenario.moe, phase, index, grouped, ep_pairs=self.scenario.overlap.ep_comm
            )
            if phase == "W":
                return self._host(moe, phase)
            norm = Compute.of("moe_norm", self._elementwise(self.ops.norm() + self.ops.residual(), phase), index)
            # the pre-MLP norm's backward after the block's (it ran first)
            body = self._host([norm, *moe] if phase == "F" else [*moe, norm], phase)
            if phase == "B":
                body = [*self._mlp_recompute(index, Work()), *body]
            if self._moe_routes_shard():
                return body
            return tensor.wrap_block(
                self.shapes, "moe", body, self._block_ub("mlp"), index, backward=phase == "B", regather_first=True,
                rs_reduce=self._rs_reduce("mlp", phase),
            )
        if self.tp_async:
            return self._async_mlp(index, phase)
        gemms = self.mlp_gemms(m.ffn)
        if phase == "W" and self.shapes.layout.lora is not None:
            return self.adapter_wgrad("mlp", index)
        if phase == "W":
            wgrad: list[Segment] = [Compute.of("mlp_wgrad", self._linear(gemms, "W", "mlp"), index)]
            return self._wgrad_host(wgrad, self._block_tensors("mlp", len(gemms)))
        if phase == "BW":
            return self._with_wgrad(self._mlp_body(index, "B"), "mlp", index, self._mlp_segments(index, "W"))
        return tensor.wrap_block(self.shapes, "mlp", self._mlp_body(index, phase), self._block_ub("mlp"), index,
                                 backward=phase == "B", rs_reduce=self._rs_reduce("mlp", phase))  # fmt: skip

    def _moe_routes_shard(self) -> bool:
        """Whether a MoE block under sequence parallelism routes the token shard it is given,
        with no collective over the attention's TP group around it: Megatron-Core's MoE layer
        takes [S/TP, B, H] and its dispatchers move tokens over the EP and expert-TP groups only
        (token_dispatcher.py: "num_local_tokens: S/TP*B"; alltoall: permute, A2A(EP), AG(ETP),
        experts, RS(ETP), A2A(EP), unpermute). A shared expert is a tensor-parallel MLP on the
        attention's TP group (its fc1 gathers the shard, its fc2 reduce-scatters), so the block
        keeps them then, as it does where the framework gathers the MoE input itself
        (``Framework.moe_tp_gather``: torchtitan). Without sequence parallelism the
        tensor-parallel all-reduce stays."""
        if not self.shapes.layout.sequence_parallel or self.shapes.model.shared_experts:
            return False
        name = self.scenario.framework
        return not (name and get_framework(name).moe_tp_gather)

    def _mlp_body(self, index: int, phase: str) -> list[Segment]:
        """The dense MLP block's compute in ``phase`` (F or B)."""
        m, lay = self.shapes.model, self.shapes.layout
        gemms = self.mlp_gemms(m.ffn)
        work = self._linear(gemms[:-1], phase, "mlp") + self._linear(gemms[-1:], phase, "mlp", column=False)
        work += self.adapter_work(BLOCK_TARGETS["mlp"], phase)
        ops = self.ops
        memory_bound = ops.mlp_norm() + ops.activation(m.ffn / lay.tp) + ops.residual()
        work += self._elementwise(memory_bound, phase)
        work += self._elementwise(ops.fp8_store_casts(m.ffn / lay.tp), phase, backward_scale=1)
        order = BLOCK_TARGETS["mlp"] if phase == "F" else BLOCK_TARGETS["mlp"][::-1]
        lora_tp = [c for target in order for c in self.adapter_comms(target, phase, index)]
        body: list[Segment] = self._host([Compute.of("mlp", work, index), *lora_tp], phase)
        if phase == "B":
            forward = Work()
            if "mlp" in self.scenario.training.recomputed:
                forward = self._gemms(gemms, "F") + self._elementwise(memory_bound, "F")
            body = [*self._mlp_recompute(index, forward), *body]
        return body
