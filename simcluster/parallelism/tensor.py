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

from simcluster.parallelism.segments import Comm, Compute, Segment, Work
from simcluster.parallelism.shapes import Shapes
from simcluster.userbuffers import BlockOverlaps, column_linear
from simcluster.userbuffers_traffic import scatters_fp8


def wrap_block(
    shapes: Shapes,
    block: str,
    body: list[Segment],
    ub: BlockOverlaps | None,
    layer: int,
    backward: bool = False,
    regather_first: bool = False,
    wgrad: list[Segment] | None = None,
    rs_reduce: Work | None = None,
) -> list[Segment]:
    """Surround a block's compute with its TP collectives (none when tp == 1).

    Forward and backward have the same shape in execution order: with SP an all-gather before
    and a reduce-scatter after (the backward of a reduce-scatter is an all-gather and vice
    versa); without SP one all-reduce after the block. ``ub`` = the block's TransformerEngine
    userbuffers overlaps (``overlap.tp_comm``; None: blocking collectives): the collectives
    run under the block's GEMMs, holding the SMs their kernels take (``UbOverlap.comm_sms``).

    A backward ``body`` runs in backward order: the row-parallel input gradient first (under
    the gathered output gradient), the column-parallel one last. The backward's re-gather of
    the block's input goes under that last GEMM, as Megatron and TransformerEngine launch it
    right before the column-parallel input-gradient GEMM (``regather_first``: under the first
    compute instead, for an MoE block whose experts follow its norm); there is none where the
    linears kept the gathered input (``Layout.sp_keeps_gather``, parallelism/saved_gather.py). ``wgrad``: the block's
    weight-gradient segments, run right after it (a fused backward); the input gradient's
    reduce-scatter (with sequence parallelism) or all-reduce (without) is then issued before
    them and runs under them, except beside a LoRA run's frozen linears (``frozen``: then it
    blocks before them) and under ``overlap.tp_comm_rs_dgrad`` (then it ran beside the
    input-gradient GEMM, ``BlockOverlaps.rs_dgrad``). ``rs_reduce``: the kernel that sums the partials a forward
    reduce-scatter run as a ring exchange leaves (``userbuffers_traffic.ring_rs_reduce_bytes``), on
    the compute stream after the exchange's last slice.
    """
    lay = shapes.layout
    after = list(wgrad or [])
    if lay.tp == 1:
        return body + after
    # a LoRA run's base linears take no weight gradient: TransformerEngine (which then turns its
    # bulk overlaps off) and Megatron's linears wait for the input gradient's collective right
    # after issuing it, with no GEMM of theirs to hide it under (the adapters' weight
    # gradients are their own modules' work, later)
    frozen = backward and lay.lora is not None
    if lay.sequence_parallel:
        return _sequence_parallel(shapes, block, body, ub, layer, backward, regather_first, after, rs_reduce, frozen)
    # forward: the row-parallel output is all-reduced; backward: the conjugate all-reduce of the
    # column-parallel input gradients (Megatron's f/g operators), then any weight gradients
    under_wgrad = bool(after) and not frozen
    reduce = Comm(
        f"{block}_tp_ar", "tp", "all_reduce", shapes.tp_collective_bytes, under_wgrad, layer, holds_sms=under_wgrad
    )
    return [*body, reduce, *after]


def _sequence_parallel(
    shapes: Shapes, block: str, body: list[Segment], ub: BlockOverlaps | None, layer: int, backward: bool,
    regather_first: bool, after: list[Segment], rs_reduce: Work | None, frozen: bool,
) -> list[Segment]:  # fmt: skip
    """:func:`wrap_block` with sequence parallelism: an all-gather before the block, a
    reduce-scatter after it, and in the backward the re-gather of the input."""
    lay = shapes.layout
    size = shapes.tp_collective_bytes
    overlap = ub is not None
    # the reduce-scatter run in slices beside the GEMM: forward, always with userbuffers; backward,
    # under overlap.tp_comm_rs_dgrad
    sliced = None if ub is None else ub.rs_dgrad if backward else ub.scatter
    if not backward and sliced is not None and scatters_fp8(sliced, shapes.training):
        size = shapes.tp_gather_bytes  # the row-parallel GEMM's FP8 output slices
    # PyTorch's async TP leaves the input gradient's reduce-scatter a blocking NCCL call
    # (userbuffers.PYTORCH_ASYNC_TP), as a frozen linear does: after the block's GEMMs, exposed
    blocking_rs = backward and sliced is None and (frozen or (ub is not None and ub.grad_scatter.blocking))
    # in a fused backward the input gradient's collective is asynchronous, beside the
    # weight-gradient GEMMs (an NCCL call without userbuffers, whose CTAs take SMs)
    under_wgrad = bool(after) and not blocking_rs and sliced is None
    # a forward gather left to NCCL (overlap.tp_comm_disable_qkv / _fc1) blocks
    gather_over = ub is not None and (backward or not ub.gather.blocking)
    first = Comm(
        f"{block}_tp_ag", "tp", "all_gather", _gather_bytes(shapes, block, not (backward or gather_over)), gather_over,
        layer, nccl=not gather_over,
    )  # fmt: skip
    # a sliced reduce-scatter reduces (pipeline) or passes on (ring exchange) slice i while slice
    # i + 1 computes, so the last slice's share follows the GEMM, exposed
    tail = size / sliced.slices(lay.tp) if sliced is not None else 0.0
    scatter_sms = 0 if ub is None else (sliced or ub.grad_scatter).comm_sms
    last = Comm(
        f"{block}_tp_rs", "tp", "reduce_scatter", size - tail, (overlap or under_wgrad) and not blocking_rs,
        layer, holds_sms=under_wgrad and not overlap, sms=scatter_sms, nccl=not overlap or blocking_rs,
    )  # fmt: skip
    out = _place(first, body, None if under_wgrad or blocking_rs else last, overlap)
    if blocking_rs:
        out.append(last)
    if backward and lay.regathers_input:
        _insert_regather(out, shapes, block, ub, layer, regather_first, last)
    if tail:
        out.append(Comm(f"{block}_tp_rs_tail", "tp", "reduce_scatter", tail, False, layer, nccl=False))
        if rs_reduce is not None and rs_reduce.total > 0:
            out.append(Compute.of(f"{block}_tp_rs_reduce", rs_reduce, layer))
    return out + ([last, *after] if under_wgrad else after)


def _gather_bytes(shapes: Shapes, block: str, forward_nccl: bool) -> float:
    """Bytes of the block's opening all-gather: FP8 when its linears run in FP8
    (``Shapes.tp_gather_bytes``), but 16-bit where a LoRA adapter beside the column-parallel
    linear reads the gathered norm output: TransformerEngine's LayerNormLinear then gathers the
    16-bit output it returns (``return_layernorm_output_gathered``; ``forward_nccl``: the forward
    gather is an NCCL call, the only one NeMo asks that of) and casts the gathered tensor to FP8
    after (that cast not modelled)."""
    lora = shapes.layout.lora
    if not forward_nccl or lora is None or column_linear(block) not in lora.targets:
        return shapes.tp_gather_bytes
    return shapes.tp_collective_bytes


def _insert_regather(
    out: list[Segment], shapes: Shapes, block: str, ub: BlockOverlaps | None, layer: int, regather_first: bool,
    last: Comm,
) -> None:  # fmt: skip
    """The backward's re-gather of the block's input for its weight gradient, into ``out``
    (a linear that kept the gathered input gathers nothing again: saved_gather.py; a LoRA run's
    frozen linear has no weight gradient to read it, simcluster/lora.py). An NCCL call (without
    userbuffers, or under overlap.tp_comm_rs_dgrad, TransformerEngine's ``gather_along_first_dim``
    with ``async_op``) takes SMs from the GEMMs it runs under; a bulk overlap its own SM count."""
    nccl = ub is None or ub.rs_dgrad is not None
    regather = Comm(
        f"{block}_tp_ag_input", "tp", "all_gather", shapes.tp_gather_bytes, True, layer,
        holds_sms=nccl, sms=0 if ub is None or nccl else ub.input_gather.comm_sms, nccl=nccl,
    )  # fmt: skip
    computes = [i for i, s in enumerate(out) if isinstance(s, Compute)]
    at = computes[0] if regather_first else computes[-1]
    if not regather_first and ub is not None and out[at - 1] is last:
        at -= 1  # issued before the reduce-scatter that follows the same GEMM
    out.insert(at, regather)


def _place(first: Comm, body: list[Segment], last: Comm | None, overlap: bool) -> list[Segment]:
    tail = [] if last is None else [last]
    if not overlap or len(body) < 1:
        return [first, *body, *tail]
    # overlapped: the AG runs under the first GEMM, the RS under the last one
    computes = [i for i, s in enumerate(body) if isinstance(s, Compute)]
    out = list(body)
    if last is not None:
        out.insert(computes[-1], last)
    out.insert(computes[0], first)
    return out
