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
(the buffer's order), microbatch 0 onwards.

Memory (:func:`kept_bytes`, :func:`drain_buffer_bytes`): ``ColumnParallelLinear.forward``
appends each deferred call's ``input_parallel`` to ``embedding_activation_buffer`` and the
backward its ``grad_output`` to ``grad_output_buffer``; both lists hold them until the drain pops
them. Between a microbatch's forward and backward the input is the stash's own (the autograd
saved tensor, counted in ``memory.head_activation_bytes``); from its backward on, when the stash
would free it, the lists keep the input and the output gradient, so the last stage's memory
grows by :func:`kept_bytes` with each deferred backward until the drain. The drain's all-gathers
write into ``get_global_memory_buffer()`` tensors ``mpu_0`` and ``mpu_1`` (sequence parallelism),
which that buffer keeps allocated for the rest of the run: :func:`drain_buffer_bytes`.
"""

from __future__ import annotations

from simcluster.activation_widths import act_bytes
from simcluster.layout import Layout
from simcluster.memory import logit_elements
from simcluster.model import ModelSpec
from simcluster.parallelism.segments import Comm, Compute, Segment
from simcluster.scenario import TrainingSection

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


def output_layer_calls(model: ModelSpec) -> int:
    """Calls of the output layer per microbatch: the head's and each multi-token-prediction
    module's (each appends to the deferral buffers)."""
    return 1 + model.mtp_layers


def kept_bytes(model: ModelSpec, layout: Layout, training: TrainingSection) -> float:
    """Bytes one deferred microbatch keeps on the last stage from its backward to the drain,
    over its calls of the output layer: per call the input Megatron's
    ``ColumnParallelLinear.forward`` appends to ``embedding_activation_buffer``
    (``input_parallel``: the sequence-parallel shard s/cp x b x h/tp, or s/cp x b x h without
    sequence parallelism) and the output gradient ``LinearWithGradAccumulationAndAsyncCommunication
    .backward`` appends to ``grad_output_buffer`` (the vocab-parallel logits' gradient, s/cp x b
    x V/tp), both 16-bit (the output layer is not an FP8 linear and returns logits in the
    parameters' dtype; 4 bytes in fp32 training). megatron/core/tensor_parallel/layers.py."""
    e = act_bytes(training.precision)
    rep = layout.tp if layout.sequence_parallel else 1
    inputs = e * training.seq_len / layout.cp * training.micro_batch * model.hidden / rep
    grads = e * logit_elements(model, layout, training)
    return output_layer_calls(model) * (inputs + grads)


def drain_buffer_bytes(model: ModelSpec, layout: Layout, training: TrainingSection, count: int) -> float:
    """The drain's all-gather buffers, allocated at the first drain and kept by Megatron-Core's
    ``GlobalMemoryBuffer`` for the rest of the run (megatron/core/utils.py
    ``drain_embedding_wgrad_compute``: ``mpu_0`` for the first gathered input and ``mpu_1`` for
    the next, double-buffered; none without sequence parallelism, where the kept input is
    already whole): each one gathered input, s/cp x b x h, 16-bit."""
    if count < 1 or layout.tp < 2 or not layout.sequence_parallel:
        return 0.0
    buffers = min(2, count * output_layer_calls(model))
    return buffers * act_bytes(training.precision) * training.seq_len / layout.cp * training.micro_batch * model.hidden
