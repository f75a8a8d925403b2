"""What TransformerEngine's userbuffers overlaps move beyond their collectives' own bytes: the
FP8 slices of a forward reduce-scatter into an FP8 buffer, the reduction kernel that ends a
ring-exchange reduce-scatter, and the copy of a rank's shard into the buffer before an
overlapped all-gather (the overlaps themselves: :mod:`simcluster.userbuffers`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simcluster.scenario import TrainingSection
    from simcluster.userbuffers import UbOverlap


def scatters_fp8(scatter: UbOverlap, training: TrainingSection) -> bool:
    """Whether a forward reduce-scatter overlap (proj_fprop or fc2_fprop) moves FP8 partial
    outputs, 1 byte per element: its buffer is FP8 (``fp8_buf``) in an FP8 run with delayed
    scaling. The row-parallel GEMM then writes its output in FP8 into the buffer (the
    ``GEMM1_OUTPUT`` / ``GEMM2_OUTPUT`` scaling slot) and the reduce-scatter sums the FP8
    slices into a 16-bit output: TransformerEngine 1.x ``_Linear`` / ``_LayerNormMLP`` forward
    (``ub_obj_projout.is_fp8_ubuf()``: ``proj_out_tetype = fp8_dtype_forward``), its
    ``split_overlap_rs`` (``reducescatter2_userbuff_stridedoutput_fp8``) and ring exchange
    (``reduce_fp8_in_bf16_out``); TransformerEngine >= 2.2 asks for the FP8 output where the
    buffer is FP8 (``if get_ub(...).is_fp8_ubuf(): fp8_output = True``), and its GEMM writes it
    straight into the buffer only for the delayed-scaling quantizer (``IsFloat8Quantizers``
    in ``gemm.cpp``). ``initialize_ub`` keeps ``fp8_buf`` for the two forward names whatever
    their method (they stay in its default ``pipeline`` list). Under current or block scaling
    the GEMM's output is 16-bit beside an 8-bit buffer, a combination TransformerEngine's
    code does not convert (read, not run): such runs are costed 16-bit, as without the flag."""
    return scatter.fp8_buf and training.precision == "fp8" and training.fp8_recipe == "delayed"


def ring_rs_reduce_bytes(scatter: UbOverlap, tp: int, shard_bytes: float, fp8: bool = False) -> float:
    """HBM bytes of the reduction kernel that ends a forward reduce-scatter run as a ring
    exchange (``scatter``: proj_fprop or fc2_fprop; ``shard_bytes``: one rank's share of the
    output, 16-bit; ``fp8``: the partials are FP8, :func:`scatters_fp8`); zero for the other
    methods.

    A ring exchange only moves the GEMM's partial outputs: each rank computes, slice by slice,
    its partial of every rank's shard and passes it on, so it ends holding ``tp`` partials of
    its own shard, which one memory-bound kernel sums. TransformerEngine's
    ``CommOverlapP2PBase::split_overlap_rs`` (``comm_gemm_overlap.cpp``) waits for the last
    GEMM slice and the last send/recv, then runs ``reduce_bf16`` on the main stream: it reads
    the ``tp`` contiguous chunks of the buffer (``_ubufs[tp - 1]`` onwards: the local partial
    and the ``tp - 1`` received) and writes one shard (``userbuffers.cu``
    ``reduce_bf16_cuda``, fp32 accumulation); with an FP8 buffer (``fp8``) it runs
    ``reduce_fp8_in_bf16_out`` instead, which reads the ``tp`` partials at 1 byte per element
    and writes the 16-bit shard. PyTorch's
    ``_fused_matmul_reduce_scatter_impl`` (``torch/distributed/_symmetric_memory``) does the
    same: ``_pipelined_produce_and_all2all`` fills ``stacked_partials`` (tp shards in the
    output dtype), then one ``torch.sum`` over the first dimension on the current stream.
    Nothing overlaps it: it waits for the exchange and the next op waits for it.

    A pipelined reduce-scatter sums inside its userbuffers kernel
    (``userbuffers_fp16_sum_inplace_gpu_rr_rs_oop`` reads every peer's slice over NVLink and
    writes the sum), as a bulk one does (``reducescatter2_userbuff_inplace``), and a blocking
    NCCL call reduces inside NCCL's kernels: none runs a separate kernel.
    """
    if scatter.method != "ring_exchange" or tp <= 1:
        return 0.0
    read = tp * shard_bytes / 2 if fp8 else tp * shard_bytes
    return read + shard_bytes  # tp partials read, one 16-bit shard written


def writes_in_place(cfg: str | Mapping[str, Any] | None) -> bool:
    """Whether ``overlap.tp_comm_cfg`` names a TransformerEngine that writes a forward gather's
    input, and an FP8 output gradient, straight into the buffer's local chunk: the TE 1.x defaults
    (``te-1``) and the NeMo 2.0-2.2 presets (``@nemo-2.0``, the TE 1.x / 2.0 containers of
    late 2024 and early 2025). Every other preset, a mapping (over TE 2.x's defaults, as
    :func:`resolve` reads it) and the default are the current TE 2.x path."""
    return isinstance(cfg, str) and (cfg == "te-1" or cfg.endswith("@nemo-2.0"))


def gather_copy_bytes(role: str, shard_bytes: float, quantised: bool, in_place: bool) -> float:
    """HBM bytes (read and written) of TransformerEngine's copy of this rank's shard into the
    userbuffer before an all-gather it overlaps (``role``: a :class:`BlockOverlaps` gather field;
    ``shard_bytes``: one rank's share of the gathered operand, FP8 when the GEMMs are).

    The buffer's local chunk must hold the shard before the ring exchange or bulk gather starts,
    and TE copies it there on the compute stream (a device-to-device ``cudaMemcpyAsync`` on the
    current stream), ahead of the GEMM:

    * ``input_gather`` (qkv_dgrad, fc1_dgrad: the backward re-gather of the saved input), in
      every version: TE 1.x ``copy_input_to_ubuf(ln_out, 1)`` (``layernorm_linear.py``,
      ``layernorm_mlp.py`` backward), TE 2.x ``ub_obj_dgrad.copy_into_buffer(ln_out, ...,
      local_chunk=True)``;
    * ``grad_gather`` (proj_dgrad, fc2_dgrad: the output gradient), in TE 1.x for a 16-bit
      gradient only (``grad_output_preprocess``: ``copy_input_to_ubuf(grad_output, True)``; an
      FP8 one is cast straight into ``get_ubuf_output(0)``), in TE 2.x always (quantised first,
      then ``copy_into_buffer``, later ``fill_userbuffers_buffer_for_all_gather``);
    * ``gather`` (qkv_fprop, fc1_fprop: the norm's output), only since TransformerEngine's
      pull request 1711 (2025, "MXFP8 support in Userbuffers": the norm writes its own tensor,
      then ``fill_userbuffers_buffer_for_all_gather`` copies it); TE 1.x and the 2.x before it
      let the norm write into the buffer (``ln_out = ub_obj.get_ubuf_output(0)``, later
      ``get_buffer(..., local_chunk=True)``).

    ``in_place``: the older path (:func:`writes_in_place`). A blocking NCCL call and PyTorch's
    async TP gather from the tensor itself: no copy (callers pass userbuffers roles only).
    """
    if role == "gather" and in_place:
        return 0.0
    if role == "grad_gather" and in_place and quantised:
        return 0.0
    return 2 * shard_bytes
