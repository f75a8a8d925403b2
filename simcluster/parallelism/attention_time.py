"""The attention core's time on one GPU: fused kernels at their measured curves (sliding windows,
attention chunks, causal masks), context parallelism's per-step kernels (ring blocks, all-gather
prefixes), and Megatron's unfused batched-GEMM path."""

from __future__ import annotations

from collections.abc import Callable

from simcluster.parallelism import context, window_tiles
from simcluster.parallelism.builder_base import BuilderBase

#: score-sized passes an unfused attention forward adds for ALiBi's bias: the bias is the input
#: of a ``torch.baddbmm`` with ``beta=1.0`` (bigscience-workshop/Megatron-DeepSpeed
#: ``megatron/model/transformer.py`` ParallelAttention: ``matmul_result = alibi[...]`` of shape
#: [b * np, 1, sk], ``beta=0.0 if alibi is None else 1.0``; transformers' BloomAttention
#: ``alibi.baddbmm(..., beta=self.beta)``), so PyTorch first copies the broadcast bias into the
#: [b * np, sq, sk] output (ATen ``LinearAlgebra.cpp``: ``TORCH_META_FUNC(baddbmm)`` expands it,
#: then ``common_checks_baddbmm_bmm`` runs ``if (beta != 0.0) result.copy_(self)``), one write,
#: and the batched GEMM then reads it as C with beta = 1, one read; MPT's torch path
#: (``attn_weight + attn_bias`` after the QK^T matmul) reads and writes the scores once too
ALIBI_BIAS_PASSES = 2


class AttentionTimes(BuilderBase):
    """Mixin of :class:`~simcluster.parallelism.layer.LayerBuilder`: attention core seconds."""

    def attention_core(self, phase: str, index: int = 0) -> float:
        m, lay = self.shapes.model, self.shapes.layout
        if phase == "W":
            return 0.0
        d_qk, d_v = self.shapes.model.qk_v_head_dims
        b, s = self.attention_sequences()
        backward = phase == "B"
        if self.scenario.training.flash_attention:
            w = m.attention_span(index, s)
            if w < s and m.attention_chunk:
                return self._chunked_attention(b, s, w, m.heads / lay.tp, d_qk, d_v, backward) / lay.cp
            if w < s:
                # a sliding window: each query attends to the w keys before it, a band of
                # s*w - w^2/2 scores that the kernel computes in whole tiles (window_tiles.py)
                # at the rate of unmasked attention over w keys; its query tiles, each over about
                # w keys, fill the GPU as an equal-length call of this rank's queries would, so
                # they keep that call's occupancy share (KernelModel.attention_spread)
                t = self.km.attention(b, s, w, m.heads / lay.tp, d_qk, d_v, causal=False, backward=backward)
                kernel = self.km.profile.attention_kernel_in_use(self.scenario.training.attention_kernel)
                rows, keys = window_tiles.tile(kernel, (d_qk + d_v) / 2)
                share = self.km.attention_spread(b * m.heads / lay.tp, s / lay.cp, (d_qk + d_v) / 2)
                return t * window_tiles.band_scores(int(s), int(w), rows, keys) / (s * w) / lay.cp / share
            # causal work of the whole sequence, split evenly over cp ranks (load-balanced chunks)
            t = self.km.attention(b, s, s, m.heads / lay.tp, d_qk, d_v, causal=True, backward=backward)
            return t / lay.cp
        # Megatron's unfused path computes every score and masks them: no saving from a window.
        # With cp only Ulysses runs it (layout_checks.check_cp_comm): heads/cp of the whole sequence
        return self._unfused_attention(b, s, s, m.heads / (lay.tp * lay.cp), d_qk, d_v, backward)

    def attention_sequences(self) -> tuple[float, float]:
        """(sequences, tokens each) one microbatch's attention runs over: its sequences, or with
        packed documents (``training.document_tokens``: THD with cu_seqlens, each attending only
        within itself) its documents, so many sequences of their length (fused attention, and
        a p2p ring under cp, ``context._check_documents``)."""
        training = self.scenario.training
        tokens = float(training.attended_tokens)
        return training.micro_batch * training.seq_len / tokens, tokens

    def _chunked_attention(
        self, b: float, s: float, chunk: float, heads: float, d_qk: float, d_v: float, backward: bool
    ) -> float:
        """Chunked attention (``model.attention_chunk``, Llama 4): the sequence splits into
        aligned chunks whose queries attend causally to their own chunk's keys only, so the
        kernel runs as that many independent causal attentions of ``chunk`` tokens (the
        block-diagonal causal mask of transformers' ``create_chunked_causal_mask``,
        masking_utils.py) and a shorter last one when the chunk does not divide the sequence."""
        full = int(s // chunk)
        rest = s - full * chunk
        t = self.km.attention(b * full, chunk, chunk, heads, d_qk, d_v, causal=True, backward=backward)
        if rest > 0:
            t += self.km.attention(b, rest, rest, heads, d_qk, d_v, causal=True, backward=backward)
        return t

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
        if phase != "W" and lay.cp > 1 and lay.cp_comm == "a2a" and lay.cp_a2a_impl == "deepspeed":
            # DeepSpeed's single_all_to_all: one contiguous copy (read + write) of each tensor
            q, k, v, o = context.qkvo_bytes(self.shapes)
            return context.CoreTimes(total, relayout=tuple(self.km.memory(2 * x) for x in (q, k, v, o)))  # type: ignore[arg-type]
        if phase == "W" or lay.cp == 1 or lay.cp_comm not in ("p2p", "all_gather", "a2a+p2p") or not fused:
            return context.CoreTimes(total)
        d_qk, d_v = self.shapes.model.qk_v_head_dims
        # a2a+p2p: the ring runs over cp/cp_a2a ranks on cp_a2a times the tokens, 1/cp_a2a of the heads
        group = lay.cp_a2a if lay.cp_comm == "a2a+p2p" else 1
        b, s = self.attention_sequences()  # packed documents: each split over the ring as a sequence
        heads = self.shapes.model.heads / (lay.tp * group)
        ring = lay.cp // group
        c = s / (2 * ring)
        backward = phase == "B"

        def attend(sq: float, skv: float, causal: bool) -> float:
            return self.km.attention(b, sq, skv, heads, d_qk, d_v, causal=causal, backward=backward)

        if lay.cp_comm == "all_gather":
            return context.CoreTimes(total, prefix=self._prefix_attention(attend, ring, c))
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
        TFLOP/s at head dim 128). With ALiBi (``model.position: alibi``) the forward adds the
        bias's copy into the scores and the GEMM's read of it (:data:`ALIBI_BIAS_PASSES`); its
        backward has no gradient to give the bias (a buffer).
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
        if self.shapes.model.position == "alibi" and not backward:
            scores += km.memory(ALIBI_BIAS_PASSES * n * sq * skv * self.shapes.elt)
        return mm + scores
