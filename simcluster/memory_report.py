"""Peak memory per stage from the schedule's op order.

Activations are stashed at F and released at B (the part W does not need) and W (or at the fused
BW), so a stage's activation peak depends only on its op order: this is where schedules differ (1F1B keeps p microbatches on
stage 0, AFAB keeps m, ZB-H2 up to 2p-1). Only a cost-aware schedule (ZB-1p/2p, ZB-V) needs op
times, to choose that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from simcluster.context import Context
from simcluster.engine.plan import (
    chunk_grad_transient,
    chunk_reduction_copies,
    cp_working,
    drain_buffers,
    head_deferral,
    planned_orders,
    reduction_copies_at,
)
from simcluster.held_microbatches import held_at_peak
from simcluster.memory import (
    StageMemory,
    chunk_activation_bytes,
    fp8_weight_bytes,
    loss_transient_bytes,
    offloaded_layer_bytes,
    stage_memory,
    stage_params,
    static_memory,
    wgrad_retained_bytes,
)
from simcluster.parallelism.data import reduction_working_bytes
from simcluster.peak_parts import BUCKET_COPY, CP_ATTENTION, LOSS_LOGITS, STASH, WEIGHT_GRADS
from simcluster.stash import stash_change
from simcluster.tp_overlap_buffers import run_buffer_bytes


@dataclass(frozen=True)
class WalkPeak:
    """A stage's activation peak (bytes), what sets it (``part``: :data:`STASH` or the
    transient on top of it) and the stash under it then (``stash``, bytes)."""

    bytes: float
    part: str
    stash: float


@dataclass
class _Walk:
    """The stash along :func:`walk_peak`'s op order and the highest point it reached."""

    live: float = 0.0
    top: WalkPeak = field(default_factory=lambda: WalkPeak(0.0, STASH, 0.0))

    def over(self, extra: float, part: str, stash: float | None = None) -> None:
        """Count ``extra`` bytes held on the stash (``stash``, by default the live one)."""
        under = self.live if stash is None else stash
        if under + extra > self.top.bytes:
            self.top = WalkPeak(under + extra, part if extra > 0 else STASH, under)

    def forward(self, change: float, loss: float, attention: float) -> None:
        """An F: the stash grows by ``change``, with the loss's logit copies or the context-
        parallel attention's working set, the larger, on top at its end."""
        self.live += change
        self.over(max(loss, attention), LOSS_LOGITS if loss >= attention else CP_ATTENTION)

    def backward(
        self,
        op: Any,
        change: float,
        attention: float,
        g_start: float,
        g_end: float,
        deferred: tuple[int, int, float],
    ) -> None:
        """A B, W or BW: the stash changes by ``change``; the context-parallel attention's
        working set on the stash at a B's (or BW's) start, the 16-bit weight gradients
        (``g_start``, ``g_end``) at a W's (or BW's) start and end, then :meth:`defer`."""
        if op.kind in ("B", "BW"):
            self.over(attention, CP_ATTENTION)
        if op.kind in ("W", "BW"):
            self.over(g_start, WEIGHT_GRADS)
        self.live += change
        if op.kind == "B":
            self.over(0.0, STASH)
        if op.kind in ("W", "BW"):
            self.over(g_end, WEIGHT_GRADS)
            self.defer(op, deferred)

    def defer(self, op: Any, deferred: tuple[int, int, float]) -> None:
        """After a W or BW: Megatron's deferred LM-head weight-gradient buffer of ``deferred``
        (chunk, count, bytes) kept, for that chunk's microbatches below count."""
        if op.chunk == deferred[0] and op.microbatch < deferred[1]:
            self.live += deferred[2]
            self.over(0.0, STASH)


def walk_peak(
    ops: Sequence[Any],
    chunk_bytes: Sequence[float],
    wgrad_bytes: Sequence[float] | None = None,
    transient: Sequence[float] | None = None,
    working: Sequence[tuple[float, float]] | None = None,
    grads: Sequence[tuple[float, float]] | None = None,
    copies: Sequence[Sequence[tuple[float, float]]] | None = None,
    copies_at: str = "end",
    deferred: tuple[int, int, float] = (-1, 0, 0.0),
) -> WalkPeak:
    """Peak stashed activation bytes over one stage's op order, with what sets it.

    F stashes a chunk's activations; B leaves what the weight gradients still need,
    ``wgrad_bytes[c]`` of chunk c (default: its whole stash; under full recomputation more than
    the stash, which B recomputed), and W frees that; a fused BW frees everything.
    ``transient[c]`` is held only during chunk c's forward on top of the stash (the loss's logit
    copies); ``working[c]`` (forward, backward) by its context-parallel attention, counted on
    the stash at F's end and at B's (or BW's) start; ``grads[c]`` (start, end) by the 16-bit
    weight gradients of its W or BW (simcluster.grad_lifetime), on the stash at that op's start
    and at its end; ``copies[c]`` by chunk c's gradient buckets' flat copies and casts, each
    (share, bytes) (``engine.plan.chunk_reduction_copies``), made in each W or BW (``copies_at``
    ``every``) or its last one (``last``) when ``share`` of the op's stash change is made (at
    the op's start in an F&B pair, whose stash moves whole at its edges), or after the last op
    (``end``; ``engine.plan.reduction_copies_at``). The engine tracks the same stash along the
    simulated timeline. ``deferred`` (chunk, count, bytes: ``engine.plan.head_deferral``) adds
    the bytes at the end of each W or BW of that chunk for microbatches below count, Megatron's
    deferred LM-head weight-gradient buffers, freed by the drain after the last op.
    """
    kept = chunk_bytes if wgrad_bytes is None else wgrad_bytes
    w = _Walk()
    last = {op.chunk: i for i, op in enumerate(ops) if op.kind in ("W", "BW")}
    for i, op in enumerate(ops):
        change = stash_change(op.kind, chunk_bytes[op.chunk], kept[op.chunk])
        if copies and _copies_made(op, i, copies_at, last):
            paired = op.overlap or (i + 1 < len(ops) and ops[i + 1].overlap)
            for share, size in copies[op.chunk]:
                w.over(size, BUCKET_COPY, w.live + (0.0 if paired else change * share))
        fwd, bwd = working[op.chunk] if working else (0.0, 0.0)
        g_start, g_end = grads[op.chunk] if grads else (0.0, 0.0)
        if op.kind == "F":
            w.forward(change, transient[op.chunk] if transient else 0.0, fwd)
            continue
        w.backward(op, change, bwd, g_start, g_end, deferred)
    w.live -= deferred[1] * deferred[2]  # the drain, before the step end's reductions
    if copies and copies_at == "end":
        w.over(max((size for chunk in copies for _, size in chunk), default=0.0), BUCKET_COPY)
    return w.top


def _copies_made(op: Any, index: int, copies_at: str, last: dict[int, int]) -> bool:
    """Whether the op at ``index`` makes its chunk's bucket copies: each W or BW under
    ``every``, the chunk's last one under ``last``, none under ``end``."""
    if op.kind not in ("W", "BW"):
        return False
    return copies_at == "every" or (copies_at == "last" and last[op.chunk] == index)


def activation_walk(*args: Any, **kwargs: Any) -> float:
    """The peak bytes of :func:`walk_peak` (same arguments)."""
    return walk_peak(*args, **kwargs).bytes


def memory_by_stage(ctx: Context) -> list[StageMemory]:
    """Memory of each stage's GPU at its activation peak, from the schedule order."""
    lay = ctx.layout
    training = ctx.scenario.training
    orders = planned_orders(ctx)
    rows = ctx.scenario.moe.padded_rows
    buffers = sum(run_buffer_bytes(ctx.scenario, ctx.model, lay, ctx.profile.gpu.compute_capability).values())
    out = []
    for stage, chunks in enumerate(ctx.chunks):
        cb = [chunk_activation_bytes(ctx.model, lay, training, ch, rows) for ch in chunks]
        loss = [loss_transient_bytes(ctx.model, lay, training) if ch.head else 0.0 for ch in chunks]
        kept = [wgrad_retained_bytes(ctx.model, lay, training, ch, rows) for ch in chunks]
        working = [cp_working(ctx, ch) for ch in chunks]
        grads = [chunk_grad_transient(ctx, ch) for ch in chunks]
        copies = chunk_reduction_copies(ctx, stage, chunks)
        top = walk_peak(
            orders[stage], cb, kept, loss, working, grads, copies, reduction_copies_at(ctx), head_deferral(ctx, chunks)
        )
        held = held_at_peak(orders[stage], cb, kept)
        mem = stage_memory(ctx.model, lay, training, stage, chunks, top.bytes, buffers, ctx.profile.gpu.compute_capability)
        mem = replace(mem, other_bytes=mem.other_bytes + drain_buffers(ctx, chunks))
        work_p, work_g = reduction_working_bytes(ctx.scenario, ctx.model, lay, chunks, mem.params_per_gpu)
        out.append(
            replace(
                mem, params_bytes=mem.params_bytes + work_p, grads_bytes=mem.grads_bytes + work_g,
                held=held, peak_part=top.part, peak_stash_bytes=top.stash,
            )
        )
    return out


def memory_summary(ctx: Context) -> dict[str, Any]:
    """The ``simcluster memory --json`` document (bytes per GPU, most loaded GPU first)."""
    stages = memory_by_stage(ctx)
    worst = max(stages, key=lambda m: m.total_bytes)
    cap = ctx.capacity_bytes
    host_optimizer = _host_optimizer_bytes(ctx, worst.stage)
    host_activations = _host_activation_bytes(ctx, worst.stage)
    return {
        "scenario": ctx.scenario.name,
        "model": ctx.model.name,
        "layout": ctx.layout.describe(),
        "hardware": ctx.profile.name,
        "params_total": ctx.model.params_total(),
        "params_active": ctx.model.params_active(),
        "params_per_gpu": worst.params_per_gpu,
        "frozen_params_per_gpu": worst.frozen_params_per_gpu,
        "params_bytes": worst.params_bytes,
        "grads_bytes": worst.grads_bytes,
        "optimizer_bytes": worst.optimizer_bytes,
        "activations_bytes": worst.activations_bytes,
        "other_bytes": worst.other_bytes,
        "comm_buffers_bytes": worst.comm_buffers_bytes,
        # of params_bytes: TE's quantised weight copies beyond the 16-bit weights (negative:
        # FP8 parameters taking less), parallelism/fp8_weights.py
        "fp8_weight_bytes": fp8_weight_bytes(
            ctx.model, ctx.layout, ctx.scenario.training, ctx.chunks[worst.stage], ctx.profile.gpu.compute_capability
        ),
        "comm_buffers": run_buffer_bytes(ctx.scenario, ctx.model, ctx.layout, ctx.profile.gpu.compute_capability),
        "total_bytes": worst.total_bytes,
        "capacity_bytes": cap,
        "fits": worst.total_bytes <= cap,
        "worst_stage": worst.stage,
        "host_optimizer_bytes": host_optimizer,
        "host_activation_bytes_per_microbatch": host_activations,
        **_host_node(ctx, host_optimizer, host_activations),
        "per_stage": [m.to_dict() for m in stages],
    }


def _host_node(ctx: Context, optimizer: float, activations: float) -> dict[str, Any]:
    """Host memory the offloads of one node take at most, and the node's (None: not in the
    profile), given one GPU's offloaded optimizer share and its offloaded activations per
    microbatch: every GPU's share, and the microbatches a 1F1B-style schedule keeps in flight on
    the first stage (up to pp x vpp)."""
    node = ctx.profile.node
    in_flight = min(ctx.spec.m, ctx.layout.pp * ctx.layout.vpp)  # one flush's microbatches at most
    per_gpu = optimizer + activations * in_flight
    capacity = node.host_memory_gib * 2**30 if node.host_memory_gib else None
    return {"host_bytes_per_node": per_gpu * node.gpus_per_node, "host_capacity_bytes": capacity}


def _host_activation_bytes(ctx: Context, stage: int) -> float:
    """Host memory one microbatch's offloaded activations take on one GPU of ``stage`` (all its
    chunks; one layer of them is in flight on the GPU, counted there)."""
    total = 0.0
    for chunk in ctx.chunks[stage]:
        moved = offloaded_layer_bytes(ctx.model, ctx.layout, ctx.scenario.training, chunk, ctx.scenario.moe.padded_rows)
        if moved:
            total += sum(moved.values()) - max(moved.values())
    return total


def _host_optimizer_bytes(ctx: Context, stage: int) -> float:
    """Host memory one GPU of ``stage`` uses for its offloaded optimizer share (0 without)."""
    share = ctx.scenario.training.optimizer_offload
    if share <= 0:
        return 0.0
    whole = ctx.scenario.training.model_copy(update={"optimizer_offload": 0.0})
    params = stage_params(ctx.model, ctx.layout, ctx.chunks[stage])
    return static_memory(ctx.model, ctx.layout, whole, params)[2] * share


def timeline_fault(ctx: Context, memory: Any, peaks: Sequence[float]) -> str | None:
    """What is wrong with a simulated memory timeline (``SimResult.memory`` and its per-stage
    peaks), None when it is sound: no stage's stash below zero, every stash freed by the step's
    end, and each stage's peak the one :func:`memory_by_stage` walks from the schedule order (at
    most that with F&B pairs, which interleave: the walk counts a pair's F whole before its B
    frees anything, an upper bound the timeline can stay under). The fuzzer and the random-layout
    tests hold every simulation to it."""
    if len(memory) == 0:
        return None
    act = memory["activations"]
    top = float(act.abs().max()) or 1.0
    if float(act.min()) < -1e-9 * top:
        return f"the stash goes below zero ({float(act.min()):.4g} bytes)"
    last = memory.groupby("stage")["activations"].last()
    if float(last.abs().max()) > 1e-9 * top:
        return f"stash left at the step's end {last.to_dict()}"
    pairs = any(op.overlap for ops in planned_orders(ctx) for op in ops)
    for stage, (peak, walked) in enumerate(zip(peaks, (m.total_bytes for m in memory_by_stage(ctx)), strict=True)):
        over = peak > walked * (1 + 1e-9)
        if over or (not pairs and abs(peak - walked) > 1e-9 * walked):
            return f"stage {stage}: simulated peak {peak:.6g} B, memory walk {walked:.6g} B"
    return None

