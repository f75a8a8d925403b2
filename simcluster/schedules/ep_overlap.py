"""Megatron-Core's expert-parallel communication overlap (``overlap.ep_comm``).

With ``--overlap-moe-expert-parallel-comm`` Megatron-Core runs the steady state of its
schedule as combined steps: the forward of one microbatch and the backward of another, split
into their attention, dispatch, expert and combine parts and interleaved, so each one's
all-to-alls run under the other's compute (the "combined 1F1B" schedule). It requires
``ep > 1`` and, with pipeline parallelism, the interleaved schedule (Megatron-Bridge
``comm_overlap`` validation: "if PP > 1, set virtual_pipeline_model_parallel_size"); without
pipeline parallelism the forward of microbatch i+1 is combined with the backward of
microbatch i, so two microbatches' activations are alive at once, the backward's released
layer by layer as the forward's are saved (about one microbatch and a layer: the engine's
``pair_ledger.py``); with it, every rank runs one more warm-up forward than the schedule's own.

Here the pairs are marked on the schedule's op orders (``PipeOp.overlap`` on the backward
of each pair, as DualPipe's F&B pairs are); the engine runs a pair's two ops on one compute
stream, interleaved unit by unit, once both inputs are there.
"""

from __future__ import annotations

from dataclasses import replace

from simcluster.schedules.base import PipeOp

BACKWARD = ("B", "BW")


def pair_forward_backward(ops: list[PipeOp]) -> list[PipeOp]:
    """One stage's 1F1B-shaped order (warm-up forwards, then one forward and one backward
    alternating, then the backward drain) with one more warm-up forward, and each steady-state
    forward combined with the backward that follows it. Megatron-Core: "When enabling
    overlap_moe_expert_parallel_comm, we schedule one extra micro-batch forward step before
    the 1f1b stages ... to ensure the forward and backward computations are independent in
    all 1f1b steps" (``pipeline_parallel/schedules.py``); so every pair holds two different
    microbatches (or chunks), and the extra warm-up forward keeps one more microbatch's
    activations alive."""
    forwards = [op for op in ops if op.kind == "F"]
    backwards = [op for op in ops if op.kind in BACKWARD]
    if len(forwards) + len(backwards) != len(ops):
        raise ValueError("EP overlap pairs forwards with fused backwards (F and BW ops only)")
    # forwards before the first backward = the schedule's warm-up + the first steady-state
    # forward; with one more warm-up step all of them run alone
    warmup = next((i for i, op in enumerate(ops) if op.kind in BACKWARD), len(ops))
    out = forwards[:warmup]
    for k, forward in enumerate(forwards[warmup:]):
        out += [forward, replace(backwards[k], overlap=True)]
    out += backwards[len(forwards) - warmup:]
    return out


def pair_orders(orders: list[list[PipeOp]]) -> list[list[PipeOp]]:
    """:func:`pair_forward_backward` on every stage."""
    return [pair_forward_backward(ops) for ops in orders]
