"""The plan of one training step: per pipeline stage, the schedule's ops and the work of each.

Pure data (no SimPy): for every chunk a stage holds, the segments of one microbatch's F, B, W
and fused BW, grouped per parameter unit (a layer, with the embedding folded into the first and
the LM head into the last) so that ZeRO-3 gathers and gradient buckets attach to layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from simcluster.compute import KernelModel
from simcluster.context import Context
from simcluster.grad_lifetime import grad_transient_bytes
from simcluster.memory import (
    StageParams,
    chunk_activation_bytes,
    loss_transient_bytes,
    offloaded_layer_bytes,
    stage_params,
    stash_cumulative_shares,
    static_memory,
    wgrad_retained_bytes,
    wgrad_retained_fraction,
    with_weight_copies,
)
from simcluster.nccl_ctas import scenario_channels
from simcluster.network import collective_time
from simcluster.parallelism.context import working_bytes
from simcluster.parallelism.data import (
    Bucket,
    bucket_cap_params,
    build_buckets,
    cast_buffer_bytes,
    reduction_working_bytes,
    unit_params,
)
from simcluster.parallelism.fp8_amax import amax_reduction
from simcluster.parallelism.head_wgrad_deferral import (
    deferred_microbatches,
    drain_buffer_bytes,
    flush_segments,
    kept_bytes,
    split_head_wgrad,
)
from simcluster.parallelism.layer import LayerBuilder
from simcluster.parallelism.partitioned_checkpoints import input_gather, partitions
from simcluster.parallelism.segments import Compute, Segment, as_recompute
from simcluster.parallelism.shapes import Shapes
from simcluster.parallelism.tied import tied_sync_params
from simcluster.parallelism.zero3_coordinator import (
    coordinated,
    gather_calls,
    kept_units,
    knob,
    persistent_params,
)
from simcluster.placement import HEAD_LAYER, Chunk
from simcluster.scenario import TrainingSection
from simcluster.schedules import OpCosts, PipeOp
from simcluster.stash import freed_share
from simcluster.topology import Cluster, build_cluster
from simcluster.tp_overlap_buffers import run_buffer_bytes
from simcluster.variability import slowest_gpu_slowdown

HEAD = HEAD_LAYER  # the layer index a unit uses for the LM head and loss (-1: the embedding)


@dataclass(frozen=True)
class Unit:
    """One parameter unit's work in one phase."""

    layers: tuple[int, ...]  # layer indices it covers (-1 embedding, -2 head)
    segments: tuple[Segment, ...]
    params: float  # parameters per GPU (for ZeRO-3 gathers)
    layer_params: float = 0.0  # of which transformer-layer weights (training.fp8_param_gather)
    #: of ``params``, routed experts (sharded over the expert-data-parallel group), and of
    #: those, the transformer layer's (the rest are the LM head's MTP experts)
    expert_params: float = 0.0
    expert_layer_params: float = 0.0
    #: of the dense ``params``, those DeepSpeed's ZeRO-3 keeps whole and never gathers
    #: (``zero3.param_persistence_threshold``: norms, biases)
    persistent: float = 0.0
    #: DeepSpeed's coordinator: dense elements of each all_gather_coalesced that gathers the
    #: unit (empty: one collective for the unit)
    gather_calls: tuple[float, ...] = ()

    def gathered_shards(self) -> tuple[tuple[str, float, float], ...]:
        """:meth:`shards` without the persistent parameters: what a ZeRO-3 gather moves."""
        if self.persistent <= 0:
            return self.shards()
        return tuple(
            (g, p - self.persistent, max(0.0, lp - self.persistent)) if g == "dp" else (g, p, lp)
            for g, p, lp in self.shards()
            if g != "dp" or p > self.persistent
        )

    def shards(self) -> tuple[tuple[str, float, float], ...]:
        """(group, parameters, of which transformer-layer weights) of each collective that
        gathers the unit or reduces its gradients under ZeRO-3: the dense parameters over the
        data-parallel group (``dp``: dp x cp, or the replica under hybrid sharding), the routed
        experts over the group that shards them (``edp``: the ranks holding the same expert
        shard, or those of them in the replica), as the static memory shards them
        (``memory.static_memory``). torchtitan wraps each MoE layer's experts in a
        ``fully_shard`` of their own on the expert-data-parallel mesh (models/llama4/infra/
        parallelize.py ``apply_fsdp``: ``transformer_block.moe.experts`` on the dp-mod-ep mesh,
        the rest of the block on the dp mesh), so they are separate collectives.
        Groups without parameters are left out."""
        dense = self.params - self.expert_params
        parts = (
            ("dp", dense, self.layer_params - self.expert_layer_params),
            ("edp", self.expert_params, self.expert_layer_params),
        )
        return tuple(p for p in parts if p[1] > 0)


@dataclass
class ChunkPlan:
    """Work of one microbatch through one chunk, per phase, as ordered units."""

    chunk: Chunk
    phases: dict[str, list[Unit]] = field(default_factory=dict)
    activation_bytes: float = 0.0
    loss_transient_bytes: float = 0.0  # held only during the forward of a chunk with the loss
    # (forward, backward) bytes a layer's context-parallel attention holds beyond the stash
    # while it runs, counted with the chunk's whole stash: at its forward's end and its
    # backward's start (an upper bound by the stash of what follows the last attention)
    cp_working_bytes: tuple[float, float] = (0.0, 0.0)
    wgrad_bytes: float = 0.0  # of a microbatch's activations, held from its B to its W
    # (start, end) bytes of 16-bit weight gradients held beyond the static memory by the op
    # that computes them (W or BW), on the stash at its start and at its end (grad_lifetime.py)
    grad_transient_bytes: tuple[float, float] = (0.0, 0.0)
    # layer index -> activation bytes of one microbatch kept in host memory between its forward
    # and backward (training.activation_offload_layers)
    offload_bytes: dict[int, float] = field(default_factory=dict)
    # after each forward unit, the share of activation_bytes saved so far (the last is 1.0);
    # a backward phase's unit i frees what forward unit n - 1 - i saved
    stash_shares: tuple[float, ...] = ()
    # ZeRO-3: the forward's last units still gathered when the same microbatch's backward
    # follows at once (FSDP: the last one; DeepSpeed: those within its reuse distance)
    zero3_kept: int = 1
    # parallel.defer_head_wgrad: the W and BW units of a deferred microbatch (the LM head's
    # weight-gradient GEMMs left out: parallelism/head_wgrad_deferral.py); empty: none deferred
    deferred: dict[str, list[Unit]] = field(default_factory=dict)
    deferred_gemms: tuple[Compute, ...] = ()  # the GEMMs left out, one microbatch's

    def seconds(self, phase: str) -> float:
        return sum(
            s.seconds for u in self.phases[phase] for s in u.segments if isinstance(s, Compute)
        )


@dataclass
class StagePlan:
    """Everything one stage's GPU does in a step."""

    stage: int
    ops: list[PipeOp]
    chunks: list[ChunkPlan]
    buckets: list[Bucket]
    last_backward: dict[int, int]  # chunk -> microbatch of its last W (or BW) on this stage
    params_dense: float
    params_expert: float
    static_bytes: dict[str, float]
    tied_params: float = 0.0  # tied embedding gradient elements all-reduced with the partner stage
    #: parallel.defer_head_wgrad: how many microbatches' LM-head weight gradients the head's
    #: chunk leaves out (the first ones), and the drain that runs them after the last op
    deferred_microbatches: int = 0
    head_flush: tuple[Segment, ...] = ()
    #: the bytes each deferred microbatch's input and output gradient keep from its W (or BW)
    #: of the head's chunk to the drain (head_wgrad_deferral.kept_bytes)
    deferred_kept_bytes: float = 0.0


def _units(builder: LayerBuilder, ctx: Context, chunk: Chunk, phase: str) -> list[Unit]:
    """Per-layer units of one phase in execution order (backward phases run layers in reverse)."""
    layers = list(chunk.layer_indices)
    if not layers:  # a virtual stage holding only the embedding and/or the LM head
        return [_edge_unit(builder, ctx, chunk, phase)]
    order = layers if phase == "F" else list(reversed(layers))
    if ctx.layout.fsdp1_root and (chunk.embedding or chunk.head):
        # FSDP1: the embedding and the LM head are the root FlatParameter's, apart from the
        # blocks' units (dp_ops gathers and reduces them as one)
        inner = replace(chunk, embedding=False, head=False)
        edges = {
            layer: Unit((layer,), tuple(build(phase)), sum(p := unit_params(ctx.model, ctx.layout, chunk, layer)), expert_params=p[1])
            for present, layer, build in ((chunk.embedding, -1, builder.embedding), (chunk.head, HEAD, builder.head_and_mtp))
            if present
        }  # fmt: skip
        first, last = (-1, HEAD) if phase == "F" else (HEAD, -1)
        return [
            *([edges[first]] if first in edges else []),
            *_units(builder, ctx, inner, phase),
            *([edges[last]] if last in edges else []),
        ]
    units: list[Unit] = []
    for layer in order:
        segs: list[Segment] = []
        covered = [layer]
        first_in_model, last_in_model = layer == layers[0], layer == layers[-1]
        if phase == "F" and chunk.embedding and first_in_model:
            segs += builder.embedding("F")
            covered.insert(0, -1)
        if phase != "F" and chunk.head and last_in_model:
            segs += builder.head_and_mtp(phase)
            covered.insert(0, HEAD)
        segs += builder.layer(layer, phase)
        if (phase == "F" and last_in_model) or (phase != "F" and first_in_model):
            # the chunk's FP8 autocast ends here (forward) or its first module's backward runs
            segs += amax_reduction(ctx.scenario, ctx.model, ctx.layout, layers, phase)
        if phase == "F" and chunk.head and last_in_model:
            segs += builder.head_and_mtp("F")
            covered.append(HEAD)
        if phase != "F" and chunk.embedding and first_in_model:
            segs += builder.embedding(phase)
            covered.append(-1)
        params = {u: unit_params(ctx.model, ctx.layout, chunk, u) for u in covered}
        units.append(
            Unit(
                tuple(covered),
                tuple(segs),
                sum(sum(p) for p in params.values()),
                sum(params[layer]),
                expert_params=sum(p[1] for p in params.values()),
                expert_layer_params=params[layer][1],
                persistent=_persistent(ctx, covered),
                gather_calls=_gather_calls(ctx, chunk, covered, phase),
            )
        )
    return units


def _gather_calls(ctx: Context, chunk: Chunk, covered: list[int], phase: str) -> tuple[float, ...]:
    """The coordinator's all_gather_coalesced calls for a unit (``zero3_coordinator.gather_calls``)."""
    window = knob(ctx.scenario.zero3.prefetch_bucket_size)
    if not coordinated(ctx.scenario) or window is None or ctx.layout.zero3_pipelined:
        return ()
    if not ctx.scenario.zero3.prefetch:
        window = 0  # nothing fetched ahead: each submodule's parameters in a call of their own
    return gather_calls(ctx.model, ctx.layout, chunk, covered, window, forward=phase == "F")


def _persistent(ctx: Context, covered: list[int]) -> float:
    """Dense parameters of a unit's layers that DeepSpeed's ZeRO-3 keeps whole."""
    threshold = knob(ctx.scenario.zero3.param_persistence_threshold) or 0
    if ctx.layout.zero != 3 or ctx.layout.zero3_pipelined or threshold <= 0:
        return 0.0
    return sum(persistent_params(ctx.model, ctx.layout, u, threshold) for u in covered)


def _edge_unit(builder: LayerBuilder, ctx: Context, chunk: Chunk, phase: str) -> Unit:
    segs: list[Segment] = []
    covered: list[int] = []
    parts = [(chunk.embedding, -1, builder.embedding), (chunk.head, HEAD, builder.head_and_mtp)]
    for present, unit, build in parts if phase == "F" else reversed(parts):
        if present:
            segs += build(phase)
            covered.append(unit)
    params = [unit_params(ctx.model, ctx.layout, chunk, u) for u in covered]
    return Unit(
        tuple(covered),
        tuple(segs),
        sum(sum(p) for p in params),
        expert_params=sum(p[1] for p in params),
        persistent=_persistent(ctx, covered),
        gather_calls=_gather_calls(ctx, chunk, covered, phase),
    )


def _recompute(builder: LayerBuilder, units_b: list[Unit], chunk: Chunk, training: TrainingSection) -> list[Unit]:
    """Full recomputation: a recomputed layer's forward reruns right before its backward
    (every layer, or the chunk's first ``training.recompute_num_layers``). Only the
    transformer layers are checkpointed (Megatron's ``recompute_granularity full`` wraps the
    decoder block): the embedding, LM head and loss run once. With
    ``training.recompute_partitioned`` each rerun waits for its input's TP all-gather."""
    redone = {x for pos, x in enumerate(chunk.layer_indices) if training.fully_recomputed(pos)}
    # a partitioned checkpoint is all-gathered over the TP group before its layer reruns
    gather = partitions(training, builder.shapes.layout)
    out = []
    for u in units_b:
        redo: tuple[Segment, ...] = ()
        for layer in u.layers:
            if layer in redone:
                first = (input_gather(builder.shapes, layer),) if gather else ()
                redo += first + as_recompute(builder.layer(layer, "F"))
        out.append(replace(u, segments=redo + u.segments))
    return out


def _fuse(builder: LayerBuilder, units_b: list[Unit], units_w: list[Unit]) -> list[Unit]:
    """BW: each unit's input- and weight-gradient work back to back (as Megatron's autograd);
    a transformer layer's own part is the builder's fused backward (``LayerBuilder.layer``
    phase BW: each block's weight gradients right after its input gradients, a MoE block's
    before its dispatch's gradient)."""
    out = []
    for b, w in zip(units_b, units_w, strict=True):
        layers = [u for u in b.layers if u >= 0]
        if not layers or not builder.fuses_backward(layers[0]):  # the layer's BW is its B then its W
            out.append(replace(b, segments=b.segments + w.segments))
            continue
        own_b, own_w = builder.layer(layers[0], "B"), builder.layer(layers[0], "W")
        fused = builder.layer(layers[0], "BW")
        # the unit's segments are [edge parts before, the layer's, edge parts after] per phase
        i, j = _find(b.segments, own_b), _find(w.segments, own_w)
        segments = (
            b.segments[:i] + w.segments[:j] + tuple(fused)
            + b.segments[i + len(own_b):] + w.segments[j + len(own_w):]
        )  # fmt: skip
        out.append(replace(b, segments=segments))
    return out


def _find(segments: tuple[Segment, ...], part: list[Segment]) -> int:
    """Where ``part`` starts inside ``segments`` (it is there, contiguous)."""
    n = len(part)
    return next(i for i in range(len(segments) - n + 1) if list(segments[i : i + n]) == part)


def _chunk_plan(builder: LayerBuilder, ctx: Context, chunk: Chunk) -> ChunkPlan:
    sc = ctx.scenario
    f = _units(builder, ctx, chunk, "F")
    b = _units(builder, ctx, chunk, "B")
    w = _units(builder, ctx, chunk, "W")
    bw = _fuse(builder, b, w)
    if sc.training.recompute == "full":
        b = _recompute(builder, b, chunk, sc.training)
        bw = _recompute(builder, bw, chunk, sc.training)
    cp = ChunkPlan(chunk, {"F": f, "B": b, "W": w, "BW": bw})
    rows = sc.moe.padded_rows
    cp.activation_bytes = chunk_activation_bytes(ctx.model, ctx.layout, sc.training, chunk, rows)
    cp.offload_bytes = offloaded_layer_bytes(ctx.model, ctx.layout, sc.training, chunk, rows)
    cp.wgrad_bytes = wgrad_retained_bytes(ctx.model, ctx.layout, sc.training, chunk, rows)
    cp.stash_shares = stash_cumulative_shares(
        ctx.model, ctx.layout, sc.training, chunk, [u.layers for u in f], rows
    )
    if chunk.head:
        cp.loss_transient_bytes = loss_transient_bytes(ctx.model, ctx.layout, sc.training)
    cp.cp_working_bytes = cp_working(ctx, chunk)
    cp.grad_transient_bytes = chunk_grad_transient(ctx, chunk)
    if coordinated(sc):
        cp.zero3_kept = kept_units([u.params for u in f], sc.zero3.max_reuse_distance)
    if chunk.head and _deferred_count(ctx):
        _defer_head_wgrad(cp)
    return cp


def chunk_stash_shares(ctx: Context, chunk: Chunk) -> tuple[float, ...]:
    """How a chunk's stash builds up over its forward units as the plan groups them
    (``ChunkPlan.stash_shares``), without building the plan: FSDP1 gives the embedding and
    the LM head units of their own (:func:`_units`)."""
    units = chunk.unit_layers()
    if ctx.layout.fsdp1_root and chunk.layer_indices and (chunk.embedding or chunk.head):
        units = [[x] for x in chunk.layer_indices]
        units = [*([[-1]] if chunk.embedding else []), *units, *([[HEAD]] if chunk.head else [])]
    sc = ctx.scenario
    return stash_cumulative_shares(ctx.model, ctx.layout, sc.training, chunk, units, sc.moe.padded_rows)


def _deferred_count(ctx: Context) -> int:
    """Microbatches whose LM-head weight gradient waits for the flush (parallel.defer_head_wgrad)."""
    par = ctx.scenario.parallel
    return deferred_microbatches(par.defer_head_wgrad, par.head_wgrad_deferral_limit, ctx.layout.pp, ctx.layout.microbatches)


def head_deferral(ctx: Context, chunks: list[Chunk]) -> tuple[int, int, float]:
    """A stage's deferred LM-head weight gradients (parallel.defer_head_wgrad): the index of its
    chunk with the head, how many microbatches defer, and the bytes each keeps until the drain;
    (-1, 0, 0.0) on a stage without the head or without deferral."""
    head = next((c for c, ch in enumerate(chunks) if ch.head), -1)
    count = _deferred_count(ctx) if head >= 0 else 0
    if not count:
        return -1, 0, 0.0
    return head, count, kept_bytes(ctx.model, ctx.layout, ctx.scenario.training)


def drain_buffers(ctx: Context, chunks: list[Chunk]) -> float:
    """The drain's all-gather buffers a stage keeps all run (head_wgrad_deferral.drain_buffer_bytes)."""
    _, count, _ = head_deferral(ctx, chunks)
    return drain_buffer_bytes(ctx.model, ctx.layout, ctx.scenario.training, count)


def _defer_head_wgrad(cp: ChunkPlan) -> None:
    """The head chunk's W and BW units without the LM head's weight-gradient GEMMs, which a
    deferred microbatch leaves to the flush."""
    for phase in ("W", "BW"):
        units = []
        for u in cp.phases[phase]:
            kept, removed = split_head_wgrad(u.segments)
            if removed:
                cp.deferred_gemms = removed
            units.append(replace(u, segments=kept))
        cp.deferred[phase] = units


def stage_buckets(ctx: Context, stage: int, chunks: list[Chunk]) -> list[Bucket]:
    """The gradient buckets of one pipeline stage's chunks (``build_buckets``)."""
    sc = ctx.scenario
    # Megatron-Core buckets only pipeline rank 0's first model chunk, or none of them
    # (get_model's disable_bucketing under overlap_param_gather_with_optimizer_step)
    stages = sc.dp.bucket_stages
    whole = [stages == "none" or (stages == "first" and (stage > 0 or c > 0)) for c in range(len(chunks))]
    return build_buckets(ctx.model, ctx.layout, chunks, bucket_cap_params(sc, ctx.layout), whole)


def chunk_reduction_copies(ctx: Context, stage: int, chunks: list[Chunk]) -> list[list[tuple[float, float]]]:
    """Per chunk, each bucket's flat copy and cast (``cast_buffer_bytes``: dp.flatten_copies,
    dp.reduce_dtype) as (share, bytes), which the engine holds on the stash from the bucket's
    pass until its reduction (engine/dp_ops.py ``_bucket_pass``): ``share`` is how much of its
    weight-gradient op's stash change is made when the pass runs (``stash.freed_share``):
    after the unit the bucket closes on frees its stash, or before, where the bucket closes on
    its layer's MLP weights and goes out ahead of the attention's backward (engine/worker.py
    ``_unit_compute``), with the buckets before it in that unit. None (empty lists) at ZeRO-3,
    which has no ZeRO 0-2 bucket pass, and where the layout makes no copies."""
    out: list[list[tuple[float, float]]] = [[] for _ in chunks]
    if ctx.layout.zero == 3 or cast_buffer_bytes(ctx.scenario, ctx.layout, 1.0) == 0:
        return out
    closing: dict[tuple[int, int], list[Bucket]] = {}  # (chunk, backward unit) -> its buckets
    units = [chunk.unit_layers() for chunk in chunks]
    backward_unit = [{layer: i for i, layers in enumerate(reversed(mine)) for layer in layers} for mine in units]
    for b in stage_buckets(ctx, stage, chunks):
        closing.setdefault((b.chunk, backward_unit[b.chunk][b.ready_layer]), []).append(b)
    for c, chunk in enumerate(chunks):
        shares = chunk_stash_shares(ctx, chunk)
        for i in range(len(shares)):
            mine = closing.get((c, i), [])
            ahead = max((k for k, b in enumerate(mine) if b.early), default=-1)
            for k, b in enumerate(mine):
                share = freed_share(shares, i - 1 if k <= ahead else i)
                out[c].append((share, cast_buffer_bytes(ctx.scenario, ctx.layout, b.params)))
    return out


def reduction_copies_at(ctx: Context) -> str:
    """When a stage's bucket passes run (engine/worker.py): ``every`` backward (ZeRO-2 reduces
    each microbatch), the ``last`` backward of each chunk (overlapped ZeRO 0-1), or at the
    ``end``, after the last backward (ZeRO 0-1 without overlap.dp_grad_reduce)."""
    if ctx.layout.zero == 2:
        return "every"
    return "last" if ctx.scenario.overlap.dp_grad_reduce else "end"


def chunk_grad_transient(ctx: Context, chunk: Chunk) -> tuple[float, float]:
    """(start, end) 16-bit gradient bytes of ``chunk``'s weight-gradient op beyond the static
    memory (``grad_lifetime.grad_transient_bytes`` for the chunk's parameters on one GPU)."""
    params = stage_params(ctx.model, ctx.layout, [chunk]).total
    return grad_transient_bytes(ctx.model, ctx.layout, ctx.scenario.training, chunk, params)


def cp_working(ctx: Context, chunk: Chunk) -> tuple[float, float]:
    """(forward, backward) working bytes of the context-parallel attention of ``chunk``'s
    layers (``context.working_bytes``; 0 without cp or attention layers). The backward reruns
    the forward first where the attention is recomputed (full recomputation of a layer, or
    selective ``core_attn``)."""
    training = ctx.scenario.training
    attends = len(chunk.layer_indices) > 0 or (chunk.head and ctx.model.mtp_layers > 0)
    if ctx.layout.cp == 1 or not attends:
        return 0.0, 0.0
    shapes = Shapes(ctx.model, ctx.layout, training)
    recomputed = training.fully_recomputed(0) or "core_attn" in training.recomputed
    return working_bytes(shapes, False), working_bytes(shapes, True, recomputed)


def schedule_costs(
    ctx: Context, chunk_plans: list[list[ChunkPlan]], p2p_s: float, static_bytes: list[float]
) -> OpCosts:
    """The op times a cost-aware schedule plans with, as sail-sg's Zero Bubble runtime gathers
    them after its profiling iterations: each pass's median over the stages and their chunks
    (used for every one), the stage-to-stage transfer, and what W frees of F's stash (the runtime measures
    the memory each pass allocates; here the model's own share kept for weight gradients). The
    pass times are the kernels' (TP/CP communication a pass waits on is not added; the runtime's
    timers would include what is exposed). ``static_bytes``: each stage's memory besides its
    activations (parameters, gradients, optimizer state, fixed overhead)."""

    def median(phase: str) -> float:
        times = sorted(plan.seconds(phase) for plans in chunk_plans for plan in plans)
        return max(times[len(times) // 2], 1e-12)

    kept = wgrad_retained_fraction(ctx.model, ctx.layout, ctx.scenario.training)
    stage_kept = None
    if ctx.scenario.training.recompute == "full":
        stage_kept = _recompute_kept(chunk_plans)
        kept = sorted(stage_kept)[len(stage_kept) // 2]
    room = activation_room(ctx, chunk_plans, static_bytes)
    m = ctx.model
    # sail-sg's V heuristic: f_mem 34h + 5as, w_mem -32h per layer (Korthikanti's activations
    # per token, its share kept for W), whatever the run's kernels or recomputation
    estimate = 32 * m.hidden / (34 * m.hidden + 5 * m.heads * ctx.scenario.training.seq_len)
    return OpCosts(
        median("F"), median("B"), median("W"), p2p_s, kept, room,
        w_memory_estimate=estimate, stage_w_memory=stage_kept,
    )  # fmt: skip


def _recompute_kept(chunk_plans: list[list[ChunkPlan]]) -> tuple[float, ...]:
    """Under full recomputation, per stage, what a microbatch's W frees in units of its F stash
    (the unit :func:`activation_room` counts in, the stage's first chunk): B reruns the forward
    and keeps the linear layers' inputs until W, more than F's stash of layer inputs, so B adds
    memory (above 1). sail-sg's runtime likewise plans with each stage's measured F, B and W
    allocations."""
    return tuple(
        plans[0].wgrad_bytes / plans[0].activation_bytes if plans[0].activation_bytes > 0 else 1.0
        for plans in chunk_plans
    )


ADAPTIVE_MEMORY_SHARE = 0.85  # sail-sg's --zero-bubble-adaptive-memory-limit-percentile default


def activation_room(
    ctx: Context, chunk_plans: list[list[ChunkPlan]], static_bytes: list[float]
) -> tuple[float, ...]:
    """Per stage, how many microbatches' F stash fit in 85% of the GPU's memory once its
    ``static_bytes`` and the loss's transient are in (Zero Bubble's adaptive memory limit)."""
    rooms = []
    for plans, static in zip(chunk_plans, static_bytes, strict=True):
        # the 16-bit gradients held at a backward's start sit on the whole stash (those at
        # its end on one microbatch's fewer)
        fixed = static + max(
            max(p.loss_transient_bytes, *p.cp_working_bytes, p.grad_transient_bytes[0]) for p in plans
        )
        unit = max(plans[0].activation_bytes, 1.0)
        rooms.append((ADAPTIVE_MEMORY_SHARE * ctx.capacity_bytes - fixed) / unit)
    return tuple(rooms)


def _static_bytes(ctx: Context, params: StageParams, chunks: list[Chunk]) -> dict[str, float]:
    """A stage's memory besides its activations, by kind (ZeRO-3's gathered unit and its
    gradients, and the gradient copies in reduction buckets, counted with the parameters and
    gradients; the TP overlaps' buffers with the fixed overhead)."""
    p_b, g_b, o_b = static_memory(ctx.model, ctx.layout, ctx.scenario.training, params)
    p_b = with_weight_copies(p_b, ctx.model, ctx.layout, ctx.scenario.training, chunks, ctx.profile.gpu.compute_capability)
    work_p, work_g = reduction_working_bytes(ctx.scenario, ctx.model, ctx.layout, chunks, params.total)
    other = ctx.scenario.training.memory_overhead_gib * 2**30
    # the TP overlaps' persistent buffers go with the fixed overhead on the memory timeline
    other += sum(run_buffer_bytes(ctx.scenario, ctx.model, ctx.layout, ctx.profile.gpu.compute_capability).values())
    other += drain_buffers(ctx, chunks)  # the deferred head wgrad's gather buffers, kept all run
    return {"params": p_b + work_p, "grads": g_b + work_g, "optimizer": o_b, "other": other}


def build_plans(ctx: Context, km: KernelModel, p2p_s: float = 0.0) -> list[StagePlan]:
    """Plans for every pipeline stage; ``p2p_s`` is one stage-to-stage transfer alone (what a
    cost-aware schedule plans with)."""
    sc = ctx.scenario
    shapes = Shapes(ctx.model, ctx.layout, sc.training)
    builder = LayerBuilder(shapes, km, sc)
    chunk_plans = [[_chunk_plan(builder, ctx, c) for c in chunks] for chunks in ctx.chunks]
    params = [stage_params(ctx.model, ctx.layout, chunks) for chunks in ctx.chunks]
    static = [_static_bytes(ctx, p, chunks) for p, chunks in zip(params, ctx.chunks, strict=True)]
    costs = None
    if ctx.schedule.cost_aware:
        costs = schedule_costs(ctx, chunk_plans, p2p_s, [sum(s.values()) for s in static])
    orders = ctx.stage_orders(costs)
    tied = tied_sync_params(ctx.model, ctx.layout, ctx.chunks)
    plans = []
    for stage, chunks in enumerate(ctx.chunks):
        cplans = chunk_plans[stage]
        ops = orders[stage]
        last = {}
        for op in ops:
            if op.kind in ("W", "BW"):
                last[op.chunk] = op.microbatch
        deferred = _deferred_count(ctx) if any(p.deferred_gemms for p in cplans) else 0
        gemms = next((p.deferred_gemms for p in cplans if p.deferred_gemms), ())
        # the drain all-gathers each kept input shard with sequence parallelism (16-bit: the
        # head runs at the activation precision)
        gather = shapes.tp_collective_bytes if ctx.layout.tp > 1 and ctx.layout.sequence_parallel else 0.0
        plans.append(
            StagePlan(
                stage=stage,
                ops=ops,
                chunks=cplans,
                buckets=stage_buckets(ctx, stage, chunks),
                last_backward=last,
                params_dense=params[stage].dense,
                params_expert=params[stage].expert,
                static_bytes=static[stage],
                tied_params=tied[stage],
                deferred_microbatches=deferred,
                head_flush=tuple(flush_segments(gemms, deferred, gather)),
                deferred_kept_bytes=head_deferral(ctx, chunks)[2] if deferred else 0.0,
            )
        )
    return plans


def kernel_model(ctx: Context) -> KernelModel:
    """The kernel model a simulation of ``ctx`` runs with (the slowest GPU's pace)."""
    sc = ctx.scenario
    slowdown = slowest_gpu_slowdown(ctx.profile.gpu.speed_spread, sc.cluster.gpus)
    return KernelModel.of_training(ctx.profile, sc.training, slowdown)


def pipeline_p2p_seconds(ctx: Context, cluster: Cluster) -> float:
    """One activation transfer from stage 0 to stage 1 alone on the network (0 without pp)."""
    lay = ctx.layout
    if lay.pp < 2 or ctx.scenario.cluster.network == "ideal":
        return 0.0
    send, gather = Shapes(ctx.model, lay, ctx.scenario.training).pipe_transfer(
        ctx.scenario.overlap.pp_scatter_gather
    )
    # on the pp and tp communicators' channels when the scenario's NCCL limits change them
    channels = scenario_channels(ctx.scenario.cluster, ctx.profile.efficiency.collective_sms, ("pp", "ppg"))
    seconds = collective_time(
        "send_recv", send, cluster, [lay.representative(0), lay.representative(1)], channels=channels.get("pp", 0)
    )
    if gather:
        seconds += collective_time(
            "all_gather", gather, cluster, lay.group("tp", lay.representative(1)), channels=channels.get("ppg", 0)
        )
    return seconds


def planned_orders(ctx: Context) -> list[list[PipeOp]]:
    """Each stage's op order as a simulation of ``ctx`` runs it (cost-aware schedules plan
    with the modelled op times)."""
    if not ctx.schedule.cost_aware:
        return ctx.stage_orders()
    cluster = build_cluster(ctx.profile, ctx.scenario.cluster.gpus, ctx.layout.gpus_per_node)
    plans = build_plans(ctx, kernel_model(ctx), pipeline_p2p_seconds(ctx, cluster))
    return [plan.ops for plan in plans]
