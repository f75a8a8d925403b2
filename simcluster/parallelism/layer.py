"""The work of one transformer layer for one microbatch on one GPU, per phase (F, B, W).

Compute times come from the kernel model (GEMM shapes under TP sharding, fused attention, the
memory-bound norms/activations/residuals); communication segments come from the parallelism
modules (TP, CP, EP). Phase B holds the input-gradient GEMMs and all backward communication;
phase W the weight-gradient GEMMs (zero-bubble schedules run it separately; BW fuses them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from simcluster.compute import KernelModel
from simcluster.parallelism import context, expert, host, tensor, tp_async, wgrad
from simcluster.parallelism.elementwise import STYLES, Elementwise, Traffic
from simcluster.parallelism.segments import Comm, Compute, Segment, Work, as_recompute
from simcluster.parallelism.shapes import Shapes
from simcluster.scenario import Scenario
from simcluster.userbuffers import BlockOverlaps, UbOverlap, block_overlaps, resolve


@dataclass(frozen=True)
class Gemm:
    """A linear layer y = x W on this GPU: tokens x k -> tokens x n."""

    k: float
    n: float


@dataclass
class LayerBuilder:
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
            return Work.of(gemm=sum(km.gemm(g.k, g.n, tokens, dtype) for g in gemms), grad_accum=accumulate)
        if phase == "B":
            mm = splits * sum(km.gemm(rows, g.k, g.n, dtype) for g in gemms)
            casts = sum(km.quantise(tokens * g.n, dtype, gradient=True) for g in gemms)
        else:
            mm = splits * sum(km.gemm(rows, g.n, g.k, dtype) for g in gemms)
            casts = sum(km.quantise(tokens * g.k, dtype) for g in gemms)
        return Work.of(gemm=mm, memory=casts)

    def _gemm_pieces(
        self, gemms: list[Gemm], phase: str, pieces: tuple[float, ...], dtype: str | None = None
    ) -> Work:
        """Forward or input-gradient GEMMs run as one kernel per piece of the tokens (each a
        fraction of them), with the FP8 casts of the pieces' operands (``tp_async``)."""
        tokens, km = self.shapes.tokens, self.km
        share = sum(pieces)
        if phase == "B":
            mm = sum(km.gemm(tokens * p, g.k, g.n, dtype) for p in pieces for g in gemms)
            casts = sum(km.quantise(tokens * share * g.n, dtype, gradient=True) for g in gemms)
        else:
            mm = sum(km.gemm(tokens * p, g.n, g.k, dtype) for p in pieces for g in gemms)
            casts = sum(km.quantise(tokens * share * g.k, dtype) for g in gemms)
        return Work.of(gemm=mm, memory=casts)

    @property
    def tp_async(self) -> bool:
        """Whether the dense blocks run nanotron's async TP linears (``overlap.tp_async``)."""
        lay = self.shapes.layout
        return self.scenario.overlap.tp_async and lay.tp > 1 and lay.sequence_parallel

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
        )

    def _elementwise(self, traffic: Traffic, phase: str) -> Work:
        """Memory-bound kernels: their bytes once forward, twice backward. Fused, a group is
        one kernel; eager (and nanotron), each operation pays its own launch gap."""
        if phase == "W" or traffic.bytes_per_token <= 0:
            return Work()
        scale = 2 if phase == "B" else 1
        seconds = self.km.memory(self.shapes.tokens * traffic.bytes_per_token * scale)
        if self.ops.eager:
            seconds += (traffic.kernels * scale - 1) * self.km.launch_s
        return Work.of(memory=seconds)

    def _head_dims(self) -> tuple[int, int]:
        """(query/key, value) head dimensions; MLA's differ."""
        m = self.shapes.model
        if m.mla is not None:
            return m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim, m.mla.v_head_dim
        return m.d_head, m.d_head

    def attention_core(self, phase: str, index: int = 0) -> float:
        m, lay = self.shapes.model, self.shapes.layout
        if phase == "W":
            return 0.0
        d_qk, d_v = self._head_dims()
        s = self.scenario.training.seq_len
        b = self.scenario.training.micro_batch
        backward = phase == "B"
        if self.scenario.training.flash_attention:
            w = m.attention_span(index, s)
            if w < s:
                # a sliding window: each query attends to the w keys before it, a band of
                # s*w - w^2/2 scores that the kernel tiles like unmasked attention over w keys
                t = self.km.attention(b, s, w, m.heads / lay.tp, d_qk, d_v, causal=False, backward=backward)
                return t * (1.0 - w / (2.0 * s)) / lay.cp
            # causal work of the whole sequence, split evenly over cp ranks (load-balanced chunks)
            t = self.km.attention(b, s, s, m.heads / lay.tp, d_qk, d_v, causal=True, backward=backward)
            return t / lay.cp
        # Megatron's unfused path computes every score and masks them: no saving from a window
        return self._unfused_attention(b, s / lay.cp, s, m.heads / lay.tp, d_qk, d_v, backward)

    def core_times(self, phase: str, index: int = 0) -> context.CoreTimes:
        """The attention core of ``phase`` as the layout's cp algorithm runs it: with ring
        attention over fused kernels, TE's per-step kernels (``context.py``): the rank's two
        chunks of c = s/2cp tokens attend to each other (causal over 2c), and each visiting
        block is attended without a mask, 2c queries against c keys for a block from an earlier
        rank and c against 2c from a later one (on average half of each). Their FLOPs add up to
        the rank's 1/cp of the causal work; the rates differ (a kernel's non-causal rate at the
        block's length)."""
        total = self.attention_core(phase, index)
        lay = self.shapes.layout
        fused = self.scenario.training.flash_attention
        if phase == "W" or lay.cp == 1 or lay.cp_comm not in ("p2p", "all_gather") or not fused:
            return context.CoreTimes(total)
        d_qk, d_v = self._head_dims()
        b, heads = self.scenario.training.micro_batch, self.shapes.model.heads / lay.tp
        c = self.scenario.training.seq_len / (2 * lay.cp)
        backward = phase == "B"

        def attend(sq: float, skv: float, causal: bool) -> float:
            return self.km.attention(b, sq, skv, heads, d_qk, d_v, causal=causal, backward=backward)

        if lay.cp_comm == "all_gather":
            return context.CoreTimes(total, prefix=self._prefix_attention(attend, lay.cp, c))
        diagonal = attend(2 * c, 2 * c, True)
        block = 0.5 * (attend(2 * c, c, False) + attend(c, 2 * c, False))
        return context.CoreTimes(total, diagonal, block)

    @staticmethod
    def _prefix_attention(attend: Callable[[float, float, bool], float], cp: int, c: float) -> float:
        """TE's all-gather context parallelism, one rank on average: each of its chunks j (i and
        2cp-1-i on rank i) attends its c queries to the j*c gathered keys before it without a
        mask and to itself causally (the bottom-right causal mask of one kernel, split where
        its cost differs). The FLOPs add up to the rank's 1/cp of the causal work."""
        def chunk(j: int) -> float:
            return (attend(c, j * c, False) if j else 0.0) + attend(c, c, True)

        return sum(chunk(i) + chunk(2 * cp - 1 - i) for i in range(cp)) / cp

    def _unfused_attention(
        self, b: float, sq: float, skv: float, heads: float, d_qk: float, d_v: float, backward: bool
    ) -> float:
        """Megatron's unfused core attention: batched GEMMs over (micro-batch x heads) on the full
        s x s scores (no causal skipping: the mask is applied inside the softmax), plus the
        memory-bound scale-mask-softmax and dropout on the scores.

        Forward: S = Q K^T (sq x skv x d_qk), softmax + dropout, O = P V (sq x d_v x skv).
        Backward: dP = dO V^T, dV = P^T dO, dS through softmax/dropout, dQ = dS K, dK = dS^T Q.
        Batched GEMMs of small matrices run at the size curve's small-GEMM efficiency, as
        measured for such BMMs (EleutherAI cookbook transformer sweep on A100: QK^T 92, AV 135
        TFLOP/s at head dim 128).
        """
        n = b * heads
        km = self.km
        if backward:
            mm = (
                km.gemm(sq, d_v, skv, count=n)  # dP
                + km.gemm(skv, d_v, sq, count=n)  # dV
                + km.gemm(sq, d_qk, skv, count=n)  # dQ
                + km.gemm(skv, d_qk, sq, count=n)  # dK
            )
        else:
            mm = km.gemm(sq, skv, d_qk, count=n) + km.gemm(sq, d_v, skv, count=n)
        # scores: softmax writes, dropout reads/writes (+ mask), the P V GEMM reads; x2 backward
        scores = km.memory(5 * n * sq * skv * self.shapes.elt * (2 if backward else 1))
        return mm + scores

    # --- layer segments ------------------------------------------------------------------
    def layer(self, index: int, phase: str) -> list[Segment]:
        """Segments of layer ``index`` for phase F, B, W or BW (B and W fused, as a schedule
        that does not split W off runs them)."""
        if phase == "BW":
            return self._fused_backward(index)
        attention = self._async_attention(index, phase) if self.tp_async else self._attention_segments(index, phase)
        segments = self._order(phase, attention, self._mlp_segments(index, phase))
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
        false, nanotron's async linears; MoE blocks) the layer's input gradients come first,
        then its weight gradients."""
        if not self.fuses_wgrad:
            return self.layer(index, "B") + self.layer(index, "W")
        if self.shapes.model.is_moe_layer(index):
            mlp = self._mlp_segments(index, "B") + self._mlp_segments(index, "W")
        else:
            mlp = self._mlp_segments(index, "BW")
        segments = mlp + self._attention_segments(index, "BW")
        if self.scenario.training.recompute == "op":
            segments = [self._op_recompute(index), *segments]
        return segments

    def _attention_segments(self, index: int, phase: str) -> list[Segment]:
        """The attention block: norm (sharded by SP), QKV, rotary, core, output projection,
        residual, inside its TP collectives (none in W)."""
        gemms = self.attention_gemms()
        if phase == "W":
            return [Compute.of("attn_wgrad", self._linear(gemms, "W", "attn"), index)]
        if phase == "BW":
            return self._with_wgrad(self._attention_body(index, "B"), "attn", index, self._attention_segments(index, "W"))
        return tensor.wrap_block(
            self.shapes, "attn", self._attention_body(index, phase), self._block_ub("attn"), index,
            backward=phase == "B",
        )  # fmt: skip

    def _attention_body(self, index: int, phase: str) -> list[Segment]:
        """The attention block's compute in ``phase`` (F or B), in execution order."""
        backward = phase != "F"
        ops = self.ops
        pre = self._elementwise(ops.norm() + ops.attention_inputs(), phase)
        gemms = self.attention_gemms()
        qkv_t, out_t = self._linear(gemms[:-1], phase, "attn"), self._linear(gemms[-1:], phase, "attn", column=False)
        out_t += self._elementwise(ops.attention_output() + ops.residual(), phase)
        core = context.cp_attention(self.shapes, self.core_times(phase, index), backward, index)
        redo = self.scenario.training.recomputed
        if phase == "B" and "core_attn" in redo:
            core = [*self._core_recompute(index), *core]
        qkv, out = Compute.of("attn_qkv", pre + qkv_t, index), Compute.of("attn_out", out_t, index)
        if phase == "B":
            # backward order: the output projection's input gradient, the core, then the
            # QKV input gradient (before it, any rerun of the input norm / MLA up-projections)
            return self._host([out, *core, *self._attention_input_recompute(gemms, index), qkv], phase)
        return self._host([qkv, *core, out], phase)

    def _with_wgrad(self, body: list[Segment], block: str, index: int, wgrad: list[Segment]) -> list[Segment]:
        """A block's fused backward: its input-gradient ``body`` inside the TP collectives, the
        input gradient's reduce-scatter under the ``wgrad`` segments that follow."""
        return tensor.wrap_block(
            self.shapes, block, body, self._block_ub(block), index, backward=True, wgrad=wgrad
        )

    def _op_recompute(self, index: int) -> Compute:
        """torchtitan's op-level selective checkpointing reruns, before a layer's backward,
        every forward op whose output it did not keep: the memory-bound ones (norms, rotary,
        activation, residual adds) and half of the matmuls (every other ``aten.mm``; see
        ``memory._op_checkpoint_bytes``); the attention kernel's output is kept."""
        m, ops = self.shapes.model, self.ops
        gemms = self.attention_gemms() + self.mlp_gemms(m.ffn)
        memory_bound = (
            ops.norm() + ops.attention_inputs() + ops.attention_output() + ops.residual()
            + ops.norm() + ops.activation(m.ffn / self.shapes.layout.tp) + ops.residual()
        )  # fmt: skip
        work = self._gemms(gemms, "F").scaled(0.5) + self._elementwise(memory_bound, "F")
        return Compute.of("recompute_ops", work, index, kind="recompute")

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
        lay = self.shapes.layout
        if not (self.scenario.overlap.tp_comm and lay.tp > 1 and lay.sequence_parallel):
            return None
        return resolve(self.scenario.overlap.tp_comm_cfg)

    def _block_ub(self, block: str) -> BlockOverlaps | None:
        cfg = self.userbuffers
        return None if cfg is None else block_overlaps(cfg, block)

    def _overlap_of(self, phase: str, column: bool, block: str) -> UbOverlap | None:
        """The overlap beside this block's column- or row-parallel GEMMs in ``phase`` (the
        row-parallel weight gradients have none)."""
        ub = self._block_ub(block)
        if ub is None:
            return None
        roles = {
            ("F", True): ub.gather, ("F", False): ub.scatter, ("B", True): ub.input_gather,
            ("B", False): ub.grad_gather, ("W", True): ub.grad_scatter,
        }  # fmt: skip
        return roles.get((phase, column))

    def _linear(self, gemms: list[Gemm], phase: str, block: str, column: bool = True) -> Work:
        """A block's column-parallel (qkv, fc1) or row-parallel (proj, fc2) GEMMs in ``phase``
        beside their userbuffers overlap: cut into the overlap's slices, each its own kernel at
        its own size and wave quantisation, and launched on the SMs its ``set_sm_margin``
        leaves (``UbOverlap.gemm_factor``). In W the row-parallel GEMMs overlap nothing."""
        if phase == "W":  # gemms = the block's column-parallel ones, then its row-parallel one
            over = self._overlap_of("W", True, block)
            factor = over.gemm_factor(self.km.profile.gpu.sm_count) if over else 1.0
            if factor == 1.0:
                return self._gemms(gemms, "W")
            return self._gemms(gemms[:-1], "W").scaled(factor) + self._gemms(gemms[-1:], "W")
        over = self._overlap_of(phase, column, block)
        if over is None:
            return self._gemms(gemms, phase)
        work = self._gemms(gemms, phase, splits=over.slices(self.shapes.layout.tp))
        return work.scaled(over.gemm_factor(self.km.profile.gpu.sm_count))

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
        work = self._norm_work() if "layernorm" in redo else Work()
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
        return host.charge(segments, phase, local, eff.host_op_us * 1e-6, eff.kernel_launch_us * 1e-6, graphs)

    @staticmethod
    def _order(phase: str, attention: list[Segment], mlp: list[Segment]) -> list[Segment]:
        """Forward runs attention then MLP; backward the reverse."""
        return attention + mlp if phase == "F" else mlp + attention

    def _mlp_segments(self, index: int, phase: str) -> list[Segment]:
        m = self.shapes.model
        if m.is_moe_layer(index):
            moe = expert.moe_block(self.shapes, self.km, self.scenario.moe, phase, index)
            if phase == "W":
                return self._host(moe, phase)
            norm = Compute.of("moe_norm", self._elementwise(self.ops.norm() + self.ops.residual(), phase), index)
            body = self._host([norm, *moe], phase)
            if phase == "B":
                body = [*self._mlp_recompute(index, Work()), *body]
            return tensor.wrap_block(
                self.shapes, "moe", body, self._block_ub("mlp"), index, backward=phase == "B", regather_first=True
            )
        if self.tp_async:
            return self._async_mlp(index, phase)
        gemms = self.mlp_gemms(m.ffn)
        if phase == "W":
            return [Compute.of("mlp_wgrad", self._linear(gemms, "W", "mlp"), index)]
        if phase == "BW":
            return self._with_wgrad(self._mlp_body(index, "B"), "mlp", index, self._mlp_segments(index, "W"))
        return tensor.wrap_block(self.shapes, "mlp", self._mlp_body(index, phase), self._block_ub("mlp"), index,
                                 backward=phase == "B")  # fmt: skip

    def _mlp_body(self, index: int, phase: str) -> list[Segment]:
        """The dense MLP block's compute in ``phase`` (F or B)."""
        m, lay = self.shapes.model, self.shapes.layout
        gemms = self.mlp_gemms(m.ffn)
        work = self._linear(gemms[:-1], phase, "mlp") + self._linear(gemms[-1:], phase, "mlp", column=False)
        ops = self.ops
        memory_bound = ops.norm() + ops.activation(m.ffn / lay.tp) + ops.residual()
        work += self._elementwise(memory_bound, phase)
        body: list[Segment] = self._host([Compute.of("mlp", work, index)], phase)
        if phase == "B":
            forward = Work()
            if "mlp" in self.scenario.training.recomputed:
                forward = self._gemms(gemms, "F") + self._elementwise(memory_bound, "F")
            body = [*self._mlp_recompute(index, forward), *body]
        return body

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
        return self._async_block("attn", index, phase, gemms, ops.attention_inputs(), row_extra, core, redo)

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
                forward = self._gemms(gemms, "F") + self._elementwise(ops.norm() + act + ops.residual(), "F")
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
        column, row = gemms[:-1], gemms[-1:]
        local, rest = tp_async.row_pieces(self.shapes.layout.tp)
        size = self.shapes.tp_collective_bytes
        beside = self._elementwise(column_extra, phase) if column_extra is not None else Work()
        if phase == "F":
            return tp_async.forward(block, index, size, tp_async.ForwardParts(
                norm=self._elementwise(ops.norm(), "F"),
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
            norm=self._elementwise(ops.norm(), "B"),
        ))  # fmt: skip

    def embedding(self, phase: str) -> list[Segment]:
        """Token embedding lookup (vocab-parallel: an all-reduce over tp, or RS with SP)."""
        if phase == "B":
            return []
        nbytes = self.shapes.tokens * self.shapes.model.hidden * self.shapes.elt
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
        return segs

    def head(self, phase: str) -> list[Segment]:
        """Final norm + vocab-parallel LM head + cross-entropy.

        The LM head runs at the activation precision even in FP8 training: Megatron-Core's
        output layer is its own ColumnParallelLinear, outside TransformerEngine's FP8 modules.
        """
        m, lay = self.shapes.model, self.shapes.layout
        g = [Gemm(m.hidden, m.vocab / lay.tp)]
        dtype = self.km.act_dtype
        ce = Work.of(loss=self.km.memory(self._cross_entropy_bytes(phase))) if phase != "W" else Work()
        if self.tp_async:
            return self._async_head(g, ce, phase, dtype) + self._loss_reductions(phase)
        if phase == "W":
            return [Compute.of("lm_head_wgrad", self._gemms(g, "W", dtype), -1)]
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
        """The vocab-parallel loss's all-reduces over tp, each of one fp32 value per token, each
        blocking: the unfused loss (Megatron's and nanotron's ``_VocabParallelCrossEntropy``)
        reduces the logits' max, the target logit and the sum of exponentials one by one; the
        fused one (Megatron-Core's ``fused_vocab_parallel_cross_entropy``) the max, then the
        other two concatenated. Small and latency-bound; forward only."""
        if phase != "F" or self.shapes.layout.tp == 1:
            return []
        per_token = self.shapes.tokens * 4.0
        if self.scenario.training.fused_cross_entropy:
            sizes = {"loss_tp_max": per_token, "loss_tp_sums": 2 * per_token}
        else:
            sizes = {"loss_tp_max": per_token, "loss_tp_target": per_token, "loss_tp_sum_exp": per_token}
        return [Comm(name, "tp", "all_reduce", size, False, -1) for name, size in sizes.items()]

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

    def _cross_entropy_bytes(self, phase: str) -> float:
        """HBM traffic of the vocab-parallel cross-entropy on this GPU's logits.

        Unfused (Megatron's and nanotron's ``vocab_parallel_cross_entropy``), in units of the
        fp32 logits L: forward casts the 16-bit logits to fp32 (0.5 L read + L write), takes the
        max (L), subtracts it in place (2 L), exponentiates in place (2 L), sums (L) and divides
        in place to keep the softmax for backward (2 L): 9.5 L. Backward multiplies the softmax by
        the loss gradient in place (2 L) and casts it back to 16 bits (1.5 L): 3.5 L.
        A fused kernel (``training.fused_cross_entropy``) reads the 16-bit logits once forward and
        writes the 16-bit gradient once backward.
        """
        elements = self.shapes.tokens * self.shapes.model.vocab / self.shapes.layout.tp
        if self.scenario.training.fused_cross_entropy:
            return elements * self.shapes.elt
        fp32_logits = elements * 4.0
        return fp32_logits * (9.5 if phase == "F" else 3.5)
