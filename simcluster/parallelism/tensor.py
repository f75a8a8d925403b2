"""Tensor parallelism (Megatron): the collectives around each attention and MLP block.

Forward per block: TP alone = one all-reduce after the row-parallel GEMM; TP+SP = an all-gather
before the column-parallel GEMM and a reduce-scatter after the row-parallel one (Korthikanti et
al. 2022, Fig. 5). Backward mirrors it (the conjugate collectives on the gradients), and with SP
it all-gathers the block's input once more: the column-parallel linear saved only its sequence
shard, and its weight gradient needs the whole sequence. Megatron's
``LinearWithGradAccumulationAndAsyncCommunication.backward`` (and nanotron's
``tp_recompute_allgather``) launch that gather asynchronously under the input-gradient GEMM.
With ``overlap.tp_comm`` the collective runs concurrently with its adjacent GEMM, as
Megatron's --tp-comm-overlap does with chunked GEMMs.
"""

from __future__ import annotations

from simcluster.parallelism.segments import Comm, Compute, Segment
from simcluster.parallelism.shapes import Shapes

#: slices of TransformerEngine's pipelined GEMM + reduce-scatter (``initialize_ub`` default
#: ``num_splits`` for "pipeline"; NeMo's and Megatron-Bridge's H100/B200 presets use 4 too)
PIPELINE_SPLITS = 4


def wrap_block(
    shapes: Shapes, block: str, body: list[Segment], overlap: bool, layer: int, backward: bool = False
) -> list[Segment]:
    """Surround a block's compute with its TP collectives (none when tp == 1).

    Forward and backward have the same shape in execution order: with SP an all-gather before
    and a reduce-scatter after (the backward of a reduce-scatter is an all-gather and vice
    versa); without SP one all-reduce after the block.
    """
    lay = shapes.layout
    if lay.tp == 1:
        return body
    size = shapes.tp_collective_bytes
    if lay.sequence_parallel:
        gather = shapes.tp_gather_bytes  # FP8 when the linears run in FP8
        first = Comm(f"{block}_tp_ag", "tp", "all_gather", gather, overlap, layer)
        # TransformerEngine's pipelined reduce-scatter (forward): slice i is reduced while GEMM
        # slice i + 1 runs, so the last slice's reduction follows the GEMM, exposed
        tail = size / PIPELINE_SPLITS if overlap and not backward else 0.0
        last = Comm(f"{block}_tp_rs", "tp", "reduce_scatter", size - tail, overlap, layer)
        out = _place(first, body, last, overlap)
        if tail:
            out.append(Comm(f"{block}_tp_rs_tail", "tp", "reduce_scatter", tail, False, layer))
        if backward:
            # without userbuffers (overlap.tp_comm) the gather is an async NCCL call: its CTAs
            # take SMs from the GEMMs it runs under
            regather = Comm(f"{block}_tp_ag_input", "tp", "all_gather", gather, True, layer, holds_sms=not overlap)
            first_compute = next(i for i, s in enumerate(out) if isinstance(s, Compute))
            out.insert(first_compute, regather)
        return out
    # forward: the row-parallel output is all-reduced; backward: the conjugate all-reduce of the
    # column-parallel input gradients (Megatron's f/g operators)
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
