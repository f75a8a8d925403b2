"""Megatron-Core's deferred LM-head weight gradient (``parallel.defer_head_wgrad``).

With ``--defer-embedding-wgrad-compute`` and pipeline parallelism, the output layer of the
last stage (``ColumnParallelLinear`` with ``embedding_activation_buffer`` and
``grad_output_buffer``, megatron/core/tensor_parallel/layers.py) keeps each microbatch's
input shard in its forward and its output gradient in its backward, where
``LinearWithGradAccumulationAndAsyncCommunication.backward`` then skips the weight-gradient GEMM
(``wgrad_compute = False`` while ``len(grad_output_buffer) < wgrad_deferral_limit``, or always
with the limit 0). After the stage's last backward the schedule calls
``finish_embedding_wgrad_compute`` (megatron/core/pipeline_parallel/schedules.py, before
``finalize_model_grads``), whose ``drain_embedding_wgrad_compute`` (megatron/core/utils.py) runs
the kept GEMMs one after another into ``main_grad``; with sequence parallelism it all-gathers
each kept input over the TP group again, the first one blocking and each next one
asynchronously under the previous GEMM (two buffers, ``mpu_0`` / ``mpu_1``).

The last stage's backward in the steady state gets shorter by the head's weight-gradient GEMM;
the GEMMs run in the flush, where the last stage otherwise waits for the earlier stages'
cool-down backwards. The deferred microbatches are the first ones the stage runs backward
(the buffer's order), microbatch 0 onwards. Not modelled: the kept tensors' memory (the input
shard and the vocab-wide output gradient of each deferred microbatch).
"""

from __future__ import annotations

from simcluster.parallelism.segments import Comm, Compute, Segment

#: the segment the LM head's weight gradient is (parallelism/head.py ``HeadBuilder.head``)
HEAD_WGRAD = "lm_head_wgrad"


def deferred_microbatches(defer: bool, limit: int, pp: int, microbatches: int) -> int:
    """How many microbatches' head weight gradients wait for the flush (0: none): every one
    with the limit 0, else the first ``limit``; none without pipeline parallelism, where
    Megatron's schedule has no flush to fill (``forward_backward_no_pipelining`` never calls
    ``finish_embedding_wgrad_compute``)."""
    if not defer or pp < 2:
        return 0
    return microbatches if limit == 0 else min(limit, microbatches)


def split_head_wgrad(segments: tuple[Segment, ...]) -> tuple[tuple[Segment, ...], tuple[Compute, ...]]:
    """``segments`` without the LM head's weight-gradient GEMMs, and those GEMMs (one per call
    of the output layer: the head, and each multi-token-prediction module's call of it)."""
    kept = tuple(s for s in segments if not (isinstance(s, Compute) and s.name == HEAD_WGRAD))
    removed = tuple(s for s in segments if isinstance(s, Compute) and s.name == HEAD_WGRAD)
    return kept, removed


def flush_segments(gemms: tuple[Compute, ...], count: int, gather_bytes: float) -> list[Segment]:
    """The drain of ``count`` microbatches' kept head weight gradients: per microbatch its
    ``gemms``; with ``gather_bytes`` > 0 (sequence parallelism, tp > 1) its input all-gathered
    first, the first gather blocking and every next one under the GEMMs before it."""
    out: list[Segment] = []
    for i in range(count):
        if gather_bytes > 0:
            if i == 0:
                out.append(Comm("lm_head_wgrad_ag", "tp", "all_gather", gather_bytes, False, -1))
            if i + 1 < count:
                # an async NCCL call beside the GEMM: its CTAs take SMs from it
                out.append(Comm("lm_head_wgrad_ag", "tp", "all_gather", gather_bytes, True, -1, holds_sms=True))
        out.extend(gemms)
    return out
