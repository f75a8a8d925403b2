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
    chunk_stash_shares,
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
from simcluster.stash import pair_steps, stash_change, unit_moves
from simcluster.tp_overlap_buffers import run_buffer_bytes


@dataclass(frozen=True)
class WalkPeak:
    """A stage's activation peak (bytes), what sets it (``part``: :data:`STASH` or the
    transient on top of it) and the stash under it then (``stash``, bytes)."""

    bytes: float
    part: str
    stash: float


@dataclass
class _PairStates:
    """Where an F&B pair's stash stood (bytes) for the transients its ops hold: at its
    highest, after its first move (a backward's start sees at most that: the forward's
    first unit), and the highest a backward's end can see (where the moves can stop once the
    backward has made its own: before a forward move, or at the end)."""

    top: float
    after_first: float
    after_backward: float


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

    def pair(self, moves: list[tuple[str, float]]) -> _PairStates:
        """An F&B pair's unit moves (("F" or "B", bytes), in ``stash.pair_steps``' order) made
        on the stash, each a point of the timeline; what the pair's transients sit on."""
        start = self.live
        # once the backward has made its units, the moves stop only before a forward move the
        # forward has not reached, or at the end; before the first only for a backward of one
        # unit, which has no turn to wait for (a longer one hands the stream over and waits
        # for the forward's first part, which makes the forward's first move)
        single = sum(1 for who, _ in moves if who == "B") == 1
        states = _PairStates(start, start, start if single else float("-inf"))
        for k, (_, change) in enumerate(moves):
            self.live += change
            self.over(0.0, STASH)
            states.top = max(states.top, self.live)
            if k == 0:
                states.after_first = self.live
            if k + 1 == len(moves) or moves[k + 1][0] == "F":
                states.after_backward = max(states.after_backward, self.live)
        return states

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
    shares: Sequence[Sequence[float]] | None = None,
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
    ``every``) or its last one (``last``) when ``share`` of the op's stash change is made, or
    after the last op (``end``; ``engine.plan.reduction_copies_at``). The engine tracks the
    same stash along the simulated timeline. ``deferred`` (chunk, count, bytes:
    ``engine.plan.head_deferral``) adds the bytes at the end of each W or BW of that chunk for
    microbatches below count, Megatron's deferred LM-head weight-gradient buffers, freed by the
    drain after the last op.

    An F&B pair (a backward marked ``overlap`` after a forward) moves its stash unit by unit in
    the host's order of their layers (``stash.pair_steps``), ``shares[c]`` being chunk c's
    stash built up over its units (``memory.stash_cumulative_shares``; default: one unit); its
    ops' transients sit on the highest stash the engine can reach while each is held
    (:class:`_PairStates`), so with them the walk is an upper bound of the timeline.
    """
    walk = _StageWalk(
        ops, chunk_bytes, chunk_bytes if wgrad_bytes is None else wgrad_bytes, transient, working, grads,
        copies, copies_at, deferred, shares,
    )  # fmt: skip
    return walk.run()


@dataclass
class _StageWalk:
    """:func:`walk_peak`'s inputs, and the walk over them."""

    ops: Sequence[Any]
    chunk_bytes: Sequence[float]
    kept: Sequence[float]
    transient: Sequence[float] | None
    working: Sequence[tuple[float, float]] | None
    grads: Sequence[tuple[float, float]] | None
    copies: Sequence[Sequence[tuple[float, float]]] | None
    copies_at: str
    deferred: tuple[int, int, float]
    shares: Sequence[Sequence[float]] | None
    w: _Walk = field(default_factory=_Walk)

    def run(self) -> WalkPeak:
        """Walk the ops, then the drain and the step end's copies."""
        last = {op.chunk: i for i, op in enumerate(self.ops) if op.kind in ("W", "BW")}
        i = 0
        while i < len(self.ops):
            op = self.ops[i]
            nxt = self.ops[i + 1] if i + 1 < len(self.ops) else None
            if nxt is not None and nxt.overlap and op.kind == "F" and nxt.kind in ("B", "BW"):
                self.pair(op, nxt, _copies_made(nxt, i + 1, self.copies_at, last))
                i += 2
                continue
            self.single(op, _copies_made(op, i, self.copies_at, last))
            i += 1
        w, copies = self.w, self.copies
        w.live -= self.deferred[1] * self.deferred[2]  # the drain, before the step end's reductions
        if copies and self.copies_at == "end":
            w.over(max((size for chunk in copies for _, size in chunk), default=0.0), BUCKET_COPY)
        return w.top

    def change(self, op: Any) -> float:
        """The op's whole stash change (``stash.stash_change``)."""
        return stash_change(op.kind, self.chunk_bytes[op.chunk], self.kept[op.chunk])

    def single(self, op: Any, copies_made: bool) -> None:
        """One op alone: its stash change with its transients."""
        w, change = self.w, self.change(op)
        if copies_made and self.copies:
            for share, size in self.copies[op.chunk]:
                w.over(size, BUCKET_COPY, w.live + change * share)
        fwd, bwd = self.working[op.chunk] if self.working else (0.0, 0.0)
        if op.kind == "F":
            w.forward(change, self.transient[op.chunk] if self.transient else 0.0, fwd)
            return
        g_start, g_end = self.grads[op.chunk] if self.grads else (0.0, 0.0)
        w.backward(op, change, bwd, g_start, g_end, self.deferred)

    def pair(self, f: Any, b: Any, copies_made: bool) -> None:
        """An F&B pair: their units' moves in the host's order, their transients on the stash
        each can see (:class:`_PairStates`)."""
        w = self.w
        f_moves = unit_moves("F", self.change(f), self.unit_shares(f.chunk))
        b_moves = unit_moves(b.kind, self.change(b), self.unit_shares(b.chunk))
        moves = {"F": f_moves, "B": b_moves}
        at = w.pair([(who, moves[who][i]) for who, i in pair_steps(len(f_moves), len(b_moves))])
        loss = self.transient[f.chunk] if self.transient else 0.0
        fwd = self.working[f.chunk][0] if self.working else 0.0
        w.over(max(loss, fwd), LOSS_LOGITS if loss >= fwd else CP_ATTENTION, at.top)
        bwd = self.working[b.chunk][1] if self.working else 0.0
        g_start, g_end = self.grads[b.chunk] if self.grads else (0.0, 0.0)
        w.over(bwd, CP_ATTENTION, at.after_first)
        if b.kind == "BW":
            w.over(g_start, WEIGHT_GRADS, at.after_first)
            w.over(g_end, WEIGHT_GRADS, at.after_backward)
        if copies_made and self.copies:
            for _, size in self.copies[b.chunk]:
                w.over(size, BUCKET_COPY, at.top)
        chunk, count, size = self.deferred
        if b.kind == "BW" and b.chunk == chunk and b.microbatch < count:
            # kept from the backward's end, beside whatever the forward had still to move
            w.over(size, STASH, at.top)
            w.live += size

    def unit_shares(self, chunk: int) -> Sequence[float]:
        """Chunk ``chunk``'s stash built up over its units (one unit by default)."""
        return self.shares[chunk] if self.shares else (1.0,)


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
        shares = [chunk_stash_shares(ctx, ch) for ch in chunks]
        top = walk_peak(
            orders[stage], cb, kept, loss, working, grads, copies, reduction_copies_at(ctx), head_deferral(ctx, chunks),
            shares,
        )  # fmt: skip
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
    most that with F&B pairs: the walk takes their stash moves in the same order as the engine,
    but puts their ops' transients on the highest stash each could see, an upper bound). The
    fuzzer and the random-layout tests hold every simulation to it."""
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

