"""Per-GPU token counts and activation sizes under TP / SP / CP sharding."""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.activation_widths import act_bytes, attention_widths
from simcluster.compute import DTYPE_BYTES, QUANTISED
from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.scenario import TrainingSection


@dataclass(frozen=True)
class Shapes:
    """Sizes one GPU sees for one microbatch."""

    model: ModelSpec
    layout: Layout
    training: TrainingSection

    @property
    def tokens(self) -> float:
        """Tokens of this rank's sequence shard (all TP ranks process them): b*s/cp."""
        return self.training.micro_batch * self.training.seq_len / self.layout.cp

    @property
    def elt(self) -> int:
        return act_bytes(self.training.precision)

    @property
    def attention_widths(self) -> tuple[int, int, int, int]:
        """Per-token widths (all heads) of Q, K, V and the attention output
        (:func:`~simcluster.memory.attention_widths`)."""
        return attention_widths(self.model)

    @property
    def hidden_bytes(self) -> float:
        """b*s*h*bytes/cp: one full hidden-state tensor of the microbatch on this rank."""
        return self.tokens * self.model.hidden * self.elt

    @property
    def p2p_bytes(self) -> float:
        """Pipeline send/recv of activations or gradients (SP keeps them sharded by tp)."""
        shard = self.layout.tp if self.layout.sequence_parallel else 1
        return self.hidden_bytes / shard

    def pipe_transfer(self, scatter_gather: bool) -> tuple[float, float]:
        """(bytes each rank sends to the next stage, bytes of the receiving TP group's
        all-gather; 0 for none) of one pipeline transfer.

        With ``scatter_gather`` (``overlap.pp_scatter_gather``) and the tensor replicated over
        the TP group (no sequence parallelism), each TP rank sends its 1/tp slice and the
        receivers all-gather the whole tensor over their TP group (Narayanan et al. SC'21,
        Sec. 4.1: the scatter/gather optimisation; Megatron-LM 2021
        ``split_tensor_into_1d_equal_chunks`` / ``gather_split_1d_tensor``). Under sequence
        parallelism the tensor is already split by tp, so nothing changes.
        """
        tp = self.layout.tp
        if not scatter_gather or tp == 1 or self.layout.sequence_parallel:
            return self.p2p_bytes, 0.0
        return self.hidden_bytes / tp, self.hidden_bytes

    @property
    def tp_collective_bytes(self) -> float:
        """nccl-tests size of one TP collective (AG output / RS input / AR buffer): b*s*h*bytes/cp."""
        return self.hidden_bytes

    @property
    def tp_gather_bytes(self) -> float:
        """nccl-tests size of a TP all-gather of a transformer linear's operand under SP.

        With FP8 GEMMs the gathered operand is the FP8 one, 1 byte per element: TransformerEngine
        quantises a column-parallel input before gathering it (``LayerNormLinear``: the norm
        writes FP8, then ``gather_along_first_dim(..., quantizer=...)``) and the output
        gradient of a row-parallel linear before its backward gather; its userbuffers give
        every all-gather overlap (``qkv_fprop``, ``fc1_fprop``, ``proj_dgrad``, ``fc2_dgrad``,
        ``qkv_dgrad``, ``fc1_dgrad``) an FP8 buffer under an FP8 recipe (``initialize_ub``:
        "AllGather buffers use fp8 when using fp8 recipe"). Reduce-scatters carry 16-bit
        partial sums, except a forward one into an FP8 userbuffer (``userbuffers_traffic.scatters_fp8``).
        The per-tensor scale is a few bytes and is left out.

        NVFP4 gathers its quantised operand the same way, 4 bits and an E4M3 scale per 16
        values: TransformerEngine's NVFP4 quantizer reduces the amax over the gathering group
        first (``with_amax_reduction``) so every rank casts to one scale; the forward gathers
        the rowwise copy, the backward re-gather the Hadamard-transformed columnwise one.
        """
        if self.training.precision in QUANTISED:
            return self.tokens * self.model.hidden * DTYPE_BYTES[self.training.precision]
        return self.hidden_bytes

    @property
    def moe_tokens(self) -> float:
        """Tokens one rank routes through the MoE block: its tp-th share of the sequence shard."""
        return self.tokens / self.layout.tp
