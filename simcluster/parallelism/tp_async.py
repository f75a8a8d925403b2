"""nanotron's asynchronous tensor-parallel linears (``overlap.tp_async``).

With ``tp_mode: REDUCE_SCATTER`` (sequence parallelism) and ``tp_linear_async_communication``,
nanotron's column and row linears hide part of their collectives behind their own GEMMs
(huggingface/nanotron ``parallel/tensor_parallel/functional.py``:
``_ColumnLinearAsyncCommunication``, ``_RowLinearAsyncCommunication``). Per block (attention
or MLP), in execution order:

forward
    norm on the rank's sequence shard; the input all-gather starts asynchronously and the GEMM
    of the rank's own shard of tokens (1/tp of the rows) runs under it; after the wait the GEMMs
    of the rows before and after that shard; the block's middle (attention core, activation);
    the row-parallel GEMM, then its reduce-scatter, blocking.
backward
    the row linear starts the output gradient's all-gather and runs its own shard's
    input-gradient GEMM under it, then the other rows, then its weight gradient (autograd runs a
    linear's whole backward at once); the middle; the column linear starts the re-gather of its
    input (``tp_recompute_allgather``) under its input-gradient GEMM, then reduce-scatters that
    gradient under its weight-gradient GEMM; the norm's backward.

The overlapped collectives are NCCL kernels (torch.distributed ``async_op=True``), so they take
SMs from the GEMMs under them (``Comm.holds_sms``). The weight gradients run inside the backward, interleaved with the communication, which is
why ``overlap.tp_async`` needs a schedule that keeps each backward whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.parallelism.segments import Comm, Compute, Segment, Work


def row_pieces(tp: int) -> tuple[tuple[float], tuple[float, ...]]:
    """Token fractions of the GEMMs an async linear splits into: the rank's own shard, then the
    rows before and after it (one GEMM each). Shown for the middle rank ``tp // 2``: the
    first and last ranks run one GEMM of (tp - 1)/tp instead of two."""
    before = (tp // 2) / tp
    after = (tp - 1 - tp // 2) / tp
    return (1 / tp,), tuple(p for p in (before, after) if p > 0)


@dataclass(frozen=True)
class ForwardParts:
    """One block's forward work split where the async collectives start and end."""

    norm: Work
    column_local: Work
    column_rest: Work
    middle: tuple[Segment, ...]
    row: Work


@dataclass(frozen=True)
class BackwardParts:
    """One block's backward work (input and weight gradients) in the async order."""

    redo: tuple[Segment, ...]  # recomputation that runs before the block's backward
    row_local: Work
    row_rest: Work
    row_wgrad: Work
    middle: tuple[Segment, ...]
    column: Work
    column_wgrad: Work
    norm: Work


def forward(block: str, layer: int, nbytes: float, parts: ForwardParts) -> list[Segment]:
    """Segments of one block's forward (see the module docstring)."""
    return _nonempty([
        Compute.of(f"{block}_norm", parts.norm, layer),
        Comm(f"{block}_tp_ag", "tp", "all_gather", nbytes, True, layer, holds_sms=True),
        Compute.of(f"{block}_column_local", parts.column_local, layer),
        Compute.of(f"{block}_column", parts.column_rest, layer),
        *parts.middle,
        Compute.of(f"{block}_row", parts.row, layer),
        Comm(f"{block}_tp_rs", "tp", "reduce_scatter", nbytes, False, layer),
    ])


def backward(block: str, layer: int, nbytes: float, parts: BackwardParts, regather: bool = True) -> list[Segment]:
    """Segments of one block's backward, weight gradients included (see the module docstring);
    without ``regather`` (``tp_recompute_allgather`` false: the gathered input was kept,
    parallelism/saved_gather.py) the column linear's input is not gathered again."""
    return _nonempty([
        *parts.redo,
        Comm(f"{block}_tp_ag", "tp", "all_gather", nbytes, True, layer, holds_sms=True),
        Compute.of(f"{block}_row_local", parts.row_local, layer),
        Compute.of(f"{block}_row", parts.row_rest, layer),
        Compute.of(f"{block}_row_wgrad", parts.row_wgrad, layer),
        *parts.middle,
        *([Comm(f"{block}_tp_ag_input", "tp", "all_gather", nbytes, True, layer, holds_sms=True)] if regather else []),
        Compute.of(f"{block}_column", parts.column, layer),
        Comm(f"{block}_tp_rs", "tp", "reduce_scatter", nbytes, True, layer, holds_sms=True),
        Compute.of(f"{block}_column_wgrad", parts.column_wgrad, layer),
        Compute.of(f"{block}_norm", parts.norm, layer),
    ])


def _nonempty(segments: list[Segment]) -> list[Segment]:
    # an empty compute (no norm to run, say) would end an overlapped collective early: the
    # engine waits for pending collectives after each compute segment, even a 0 s one
    return [s for s in segments if not isinstance(s, Compute) or s.work.total > 0]
