"""Persistent memory of the tensor-parallel comm+GEMM overlaps: userbuffers and symmetric memory.

TransformerEngine's userbuffers (``overlap.tp_comm``, simcluster.userbuffers) are allocated
once, by ``initialize_ub`` (transformer_engine/pytorch/module/base.py), and held for the whole
run, shared by every layer:

* one communicator per overlap name (qkv/proj/fc1/fc2 x fprop/dgrad/wgrad, the ten of
  :data:`simcluster.userbuffers.NAMES`), each with its own buffer of the one ``shape`` the
  framework passes: Megatron-LM, Megatron-Core and Megatron-Bridge pass
  ``[seq_length * micro_batch_size // context_parallel_size, hidden_size]``
  (``_initialize_tp_communicators``), the whole (unsharded) sequence, h wide, whichever GEMM the
  buffer serves (the gathered inputs and output gradients are h wide, and so are the
  reduce-scattered outputs and input gradients);
* its element is 1 byte (``torch.uint8``) in an FP8 run (``use_fp8``: Megatron's ``args.fp8 is
  not None``; Megatron-Bridge's ``UserBufferQuantizationMode.FP8``) for the all-gather overlaps
  (``layers_all_gather_overlap``: qkv_fprop, qkv_dgrad, proj_dgrad, fc1_fprop, fc1_dgrad,
  fc2_dgrad) and for a forward reduce-scatter whose settings ask for ``fp8_buf`` (only honoured
  for proj_fprop and fc2_fprop, the names TE lists as ``pipeline``); else the activation dtype
  (bf16). NeMo's and Megatron-Bridge's ``PipelineOverlapCfg`` default ``fp8_buf = (False,)``,
  a one-element tuple, which is truthy and reaches TransformerEngine as it is
  (Megatron-Bridge ``CommOverlapConfig.setup``: ``asdict(tp_comm_overlap_cfg)``): their
  pipelined forward reduce-scatters get FP8 buffers in an FP8 run (:attr:`UbOverlap.fp8_buf`;
  under delayed scaling they then move FP8 slices, ``userbuffers_traffic.scatters_fp8``);
  NVFP4 runs set no ``fp8`` and get 16-bit buffers;
* a ring-exchange reduce-scatter holds ``2 tp - 1`` chunks of ``shape / tp`` for the partial
  products it receives (``CommOverlapP2PBase``: ``buffer_bytes / tp_size * (tp_size * 2 - 1)``,
  comm_gemm_overlap.cpp); every other communicator (ring-exchange all-gather, pipeline, bulk)
  holds ``shape`` (``CommOverlapBase`` / ``CommOverlapP2PBase``);
* the cuBLAS workspace grows to ``_NUM_MAX_UB_STREAMS = 3`` copies (``get_workspace().repeat``)
  for the GEMM slices on concurrent streams: two more than the one TE always holds (32 MiB from
  compute capability 9 on, 4 MiB before: ``get_cublas_workspace_size_bytes``), which
  ``training.memory_overhead_gib`` already allows for.

Not counted: the communicator's own flags (``create_communicator_grouped2``: region 0 of about
1.6 MB plus 128 KiB of flags), the rounding of each buffer up to the multicast granularity
(``register_user_buffer_collective``), an atomic GEMM's counters and its transient output
buffer (``cudaMallocAsync`` / ``cudaFreeAsync`` inside the call), and the two ``external``
communicators (proj_wgrad, fc2_wgrad: FP8 all-gather buffers of ``shape``) that TransformerEngine
added with its MXFP8 weight-gradient overlap (NVIDIA/TransformerEngine#1982, 2025), which the
releases of the runs simcluster is checked against may predate. Megatron-Bridge's
``first_last_layers_bf16`` adds a second, 16-bit set of communicators; simcluster has no such
setting.

PyTorch's async TP (``pytorch-async-tp``) keeps one symmetric-memory workspace per TP group
(``torch/distributed/_symmetric_memory``: ``get_symm_mem_workspace`` caches it in
``_group_name_to_workspace_tensor`` and only ever grows it) of the largest request: a fused
all-gather's local shard (``_pipelined_multi_all_gather_and_consume``: the shards' bytes) and a
fused reduce-scatter's two output chunks (``_pipelined_produce_and_all2all``:
``out_chunks[0]`` x 2 for its double buffering), the latter the larger: ``2 s b h / tp``
16-bit elements.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcluster.userbuffers import (
    FORWARD_RS,
    NAMES,
    UbOverlap,
    async_tp,
    reduce_scatter_buffer,
    resolve,
    tp_overlaps_run,
)

if TYPE_CHECKING:
    from simcluster.layout import Layout
    from simcluster.model import ModelSpec
    from simcluster.scenario import Scenario

#: TransformerEngine's ``layers_all_gather_overlap``: the communicators whose buffer is FP8 in an
#: FP8 run whatever their settings say
FP8_GATHERS = ("qkv_fprop", "qkv_dgrad", "proj_dgrad", "fc1_fprop", "fc1_dgrad", "fc2_dgrad")
#: TransformerEngine's ``layers_reduce_scatter_overlap`` (the wgrad names are bulk RS overlaps)
REDUCE_SCATTERS = (*FORWARD_RS, "qkv_wgrad", "fc1_wgrad")
UB_STREAMS = 3  # TransformerEngine's _NUM_MAX_UB_STREAMS
UB_ELEMENT_BYTES = 2  # initialize_ub's dtype, torch.bfloat16 unless given (Megatron gives none)


@dataclass(frozen=True)
class BufferShape:
    """The one userbuffer shape of a run: ``rows`` = seq_len x micro_batch / cp, ``hidden``
    wide; ``act_bytes`` the activation element, ``fp8`` whether the run initialises FP8
    buffers (``use_fp8``)."""

    rows: float
    hidden: int
    tp: int
    act_bytes: int
    fp8: bool


def userbuffer_bytes(name: str, over: UbOverlap, shape: BufferShape) -> float:
    """Bytes of overlap ``name``'s userbuffer (see the module docstring); 0 for an overlap
    that is not a userbuffers communicator (``nccl``: PyTorch's blocking collective)."""
    if over.method == "nccl":
        return 0.0
    # a moved *_dgrad buffer's fp8_buf is honoured for a pipeline only (userbuffers._entry)
    moved = reduce_scatter_buffer(name, over)
    fp8 = shape.fp8 and ((name in FP8_GATHERS and not moved) or ((name in FORWARD_RS or moved) and over.fp8_buf))
    whole = shape.rows * shape.hidden * (1 if fp8 else shape.act_bytes)
    if over.method == "ring_exchange" and (name in REDUCE_SCATTERS or moved):
        return whole / shape.tp * (2 * shape.tp - 1)
    return whole


def cublas_workspace_bytes(compute_capability: float | None) -> float:
    """TransformerEngine's cuBLAS workspace (``get_cublas_workspace_size_bytes``): 32 MiB from
    compute capability 9 (Hopper) on, 4 MiB before (an unknown GPU: the larger)."""
    return 32 * 2**20 if compute_capability is None or compute_capability >= 9 else 4 * 2**20


def symmetric_workspace_bytes(shape: BufferShape) -> float:
    """PyTorch async TP's symmetric-memory workspace of one TP group: two 16-bit output chunks
    of a fused reduce-scatter (``s b / tp`` rows, h wide), larger than a fused all-gather's
    shard (one such chunk, or an FP8 one)."""
    shard = shape.rows / shape.tp * shape.hidden * shape.act_bytes
    return 2 * shard


def overlap_buffer_bytes(
    cfg: Mapping[str, UbOverlap] | None, pytorch: bool, shape: BufferShape, compute_capability: float | None
) -> dict[str, float]:
    """Persistent bytes per GPU of a run's TP overlaps by what holds them: each userbuffers
    communicator and the extra cuBLAS workspace copies (TransformerEngine), or the
    symmetric-memory workspace (PyTorch's async TP, ``pytorch``); empty when ``cfg`` is None
    (no overlap runs)."""
    if cfg is None:
        return {}
    if pytorch:
        return {"symmetric_memory": symmetric_workspace_bytes(shape)}
    out = {name: userbuffer_bytes(name, cfg[name], shape) for name in NAMES}
    out["cublas_workspace"] = (UB_STREAMS - 1) * cublas_workspace_bytes(compute_capability)
    return out


def run_buffer_bytes(
    scenario: Scenario, model: ModelSpec, layout: Layout, compute_capability: float | None
) -> dict[str, float]:
    """:func:`overlap_buffer_bytes` of a run: its overlaps when ``overlap.tp_comm`` runs (tp > 1
    with sequence parallelism), on the framework's buffer shape."""
    ub_runs = tp_overlaps_run(scenario.overlap, layout)[0]
    cfg = resolve(scenario.overlap.tp_comm_cfg) if ub_runs else None
    pytorch = async_tp(scenario.overlap)
    training = scenario.training
    element = (4 if training.precision == "fp32" else 2) if pytorch else UB_ELEMENT_BYTES
    shape = BufferShape(
        rows=training.seq_len * training.micro_batch / layout.cp, hidden=model.hidden, tp=layout.tp,
        act_bytes=element, fp8=training.precision == "fp8",
    )  # fmt: skip
    return overlap_buffer_bytes(cfg, pytorch, shape, compute_capability)
