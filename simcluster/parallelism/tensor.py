"""Tensor parallelism (Megatron): the collectives around each attention and MLP block.

Forward per block: TP alone = one all-reduce after the row-parallel GEMM; TP+SP = an all-gather
before the column-parallel GEMM and a reduce-scatter after the row-parallel one (Korthikanti et
al. 2022, Fig. 5). Backward mirrors it (the conjugate collectives on the gradients).
With ``overlap.tp_comm`` the collective runs concurrently with its adjacent GEMM, as
Megatron's --tp-comm-overlap does with chunked GEMMs.
"""

from __future__ import annotations

from simcluster.parallelism.segments import Comm, Compute, Segment
from simcluster.parallelism.shapes import Shapes


def wrap_block(
    shapes: Shapes, block: str, body: list[Segment], backward: bool, overlap: bool, layer: int
) -> list[Segment]:
    """Surround a block's compute with its TP collectives (none when tp == 1)."""
    lay = shapes.layout
    if lay.tp == 1:
        return body
    size = shapes.tp_collective_bytes
    if lay.sequence_parallel:
        first = Comm(f"{block}_tp_ag", "tp", "all_gather", size, overlap, layer)
        last = Comm(f"{block}_tp_rs", "tp", "reduce_scatter", size, overlap, layer)
        return _place(first, body, last, overlap)
    if backward:  # the conjugate of the forward all-reduce is an all-reduce of input grads
        return body + [Comm(f"{block}_tp_ar", "tp", "all_reduce", size, False, layer)]
    return body + [Comm(f"{block}_tp_ar", "tp", "all_reduce", size, False, layer)]


def _place(first: Comm, body: list[Segment], last: Comm, overlap: bool) -> list[Segment]:
    if not overlap or len(body) < 1:
        return [first, *body, last]
    # overlapped: the AG runs under the first GEMM, the RS under the last one
    computes = [i for i, s in enumerate(body) if isinstance(s, Compute)]
    out = list(body)
    out.insert(computes[-1], last)
    out.insert(computes[0], first)
    return out
