"""Run one training step of a scenario on SimPy and summarise it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import simpy

from simcluster.compute import KernelModel
from simcluster.context import Context, build_context
from simcluster.engine.breakdown import step_breakdown
from simcluster.engine.comms import Comms
from simcluster.engine.interference import SmShare
from simcluster.engine.metrics import PIPELINE_KINDS, bubble_of, exposed_comm, pipeline_spans
from simcluster.engine.offload import backlog
from simcluster.engine.plan import StagePlan, build_plans, kernel_model, pipeline_p2p_seconds
from simcluster.engine.progress import run_with_progress
from simcluster.engine.recorder import STREAM_OF_GROUP, Recorder
from simcluster.engine.result import SimResult
from simcluster.engine.shared import Shared
from simcluster.engine.worker import GRAD_ZERO, Worker
from simcluster.errors import InternalError, UserError
from simcluster.flops import recompute_flops_per_token, token_flops
from simcluster.names import run_heading
from simcluster.nccl_ctas import scenario_channels
from simcluster.network import Network
from simcluster.parallelism.data import (
    Bucket,
    clip_bytes_per_local_param,
    flatten_copy_bytes,
    fsdp2_copy_bytes,
    grad_reduce_bytes,
    grad_wire_bytes,
    optimizer_bytes_per_param,
    param_bytes,
    reduce_cast_bytes,
)
from simcluster.parallelism.fsdp2_accumulation import accumulates_unsharded, reduce_width
from simcluster.parallelism.offload import (
    GPU_BYTES_PER_OFFLOADED_PARAM,
    local_optimizer_params,
    missing_host_figures,
    offload_seconds,
)
from simcluster.parallelism.segments import Comm
from simcluster.parallelism.shapes import Shapes
from simcluster.parallelism.step_tail import stage_tail_seconds
from simcluster.parallelism.unpack import stage_tensors, unpack_seconds
from simcluster.progress import showing
from simcluster.scenario import Scenario
from simcluster.stragglers import degrade_nics, resolve
from simcluster.topology import build_cluster


def _activation_link(ctx: Context) -> float:
    """The host link's bytes per second for activation copies (0 without activation offload)."""
    training = ctx.scenario.training
    if training.activation_offload_layers == 0 and not training.offload_modules:
        return 0.0
    if missing_host_figures(ctx.profile.node, optimizer=False):
        field, off = ("training.offload_modules", "[]") if training.offload_modules else ("training.activation_offload_layers", "0")
        raise UserError(
            field,
            f"hardware profile '{ctx.profile.name}' gives no node.host_link_GBps (GPU-to-host bandwidth "
            f"per GPU per direction); add it to the profile (cluster.profile overrides work too) or set {off}",
        )
    host_link = ctx.profile.node.host_link_GBps
    assert host_link is not None  # missing_host_figures above raised without it
    return host_link * 1e9


def _fsdp2_copies(
    ctx: Context, km: KernelModel
) -> tuple[Callable[[float], float], Callable[[float], float]] | None:
    """Seconds of FSDP2's copies around a unit's gather and reduce-scatter (or None); for
    FSDP1, whose gathered FlatParameter is used in place, only the cast of a unit's unsharded
    gradient to a wider reduce dtype on the post-backward stream before its reduce-scatter
    (``_post_backward_hook``: ``flat_param.grad.to(handle._reduce_dtype)``)."""
    if ctx.layout.fsdp1_root:
        widen = grad_reduce_bytes(ctx.scenario) != param_bytes(ctx.scenario)
        cast_b = param_bytes(ctx.scenario) + grad_reduce_bytes(ctx.scenario)
        return (lambda params: 0.0, lambda params: km.memory(params * cast_b)) if widen else None
    if not ctx.layout.fsdp2_copies:
        return None
    out_b, in_b = fsdp2_copy_bytes(ctx.scenario)
    if accumulates_unsharded(ctx.layout):
        # the synchronising post-backward copies the reduce-dtype accumulator in, not the
        # 16-bit gradient (fsdp2_accumulation.py; foreach_reduce reads unsharded_accumulated_grad)
        in_b += reduce_width(ctx.scenario.training) - param_bytes(ctx.scenario)
    return (lambda params: km.memory(params * out_b), lambda params: km.memory(params * in_b))


def _bucket_pass_seconds(ctx: Context, km: KernelModel) -> Callable[[Bucket], float] | None:
    """Seconds of the framework's pass over a gradient bucket before its reduction: a norm
    reads it once (``dp.nan_check``), scaling by 1/dp reads and writes it (``dp.prescale``),
    PyTorch DDP copies each 16-bit gradient into the bucket and, after the backward, back
    (``dp.bucket_copies``: two reads and two writes; the copy back is charged here with the
    copy in, a simplification that moves it before the bucket's reduction); None when there is
    no pass. Megatron scales dense and expert buckets alike by 1/(dp x cp), so there is nothing
    to scale only when that group is one rank."""
    dp, lay = ctx.scenario.dp, ctx.layout
    # dense buckets reduce over dp x cp (comms.GROUP_DIM), as cast_buffer_bytes counts them
    reduced = len(lay.group("dpcp", lay.representative(0))) > 1
    scaled = dp.prescale and reduced
    passes = (1 if dp.nan_check else 0) + (2 if scaled else 0)
    # .grad is in the parameters' dtype (fp32 under autocast, as the buckets' memory counts
    # it): copied in (read, write) and back (read, write)
    copies = 4 * param_bytes(ctx.scenario) if dp.bucket_copies else 0.0
    # a bucket reduced in another dtype than it accumulates in (dp.reduce_dtype) is cast to it
    # and copied back, and one of many tensors flattened and copied back (dp.flatten_copies);
    # the norm and the 1/dp scaling act on the cast (DeepSpeed's allreduce_bucket scales
    # tensor_to_allreduce). The copies back are charged here with the casts, the simplification
    # dp.bucket_copies makes
    casts = reduce_cast_bytes(ctx.scenario) + flatten_copy_bytes(ctx.scenario) if reduced else 0.0
    if not passes and not copies and not casts:
        return None
    bytes_per_param = grad_wire_bytes(ctx.scenario) * passes + copies + casts
    return lambda bucket: km.memory(bucket.params * bytes_per_param)


def _grad_zero_seconds(ctx: Context, km: KernelModel, plans: list[StagePlan]) -> list[float]:
    """Per stage, seconds of clearing the gradient buffer at the step's start
    (``dp.zero_grad_buffer``): one write of every local gradient. Only ZeRO 0-1 keep the whole
    buffer on every rank; without the flag gradients are freed instead (nothing to write)."""
    if not ctx.scenario.dp.zero_grad_buffer or ctx.layout.zero > 1:
        return []
    per_param = grad_reduce_bytes(ctx.scenario)
    return [km.memory((p.params_dense + p.params_expert) * per_param) for p in plans]


def simulate(
    scenario: Scenario | Context,
    hardware: str | None = None,
    all_ranks: bool | None = None,
    progress: bool | None = False,
) -> SimResult:
    """Simulate one optimizer step; ``all_ranks`` simulates every GPU instead of one per stage.

    ``progress`` shows a progress bar on stderr (None: when stderr is a terminal).
    """
    wall = time.perf_counter()
    ctx = scenario if isinstance(scenario, Context) else build_context(scenario, hardware)
    sc = ctx.scenario
    km = kernel_model(ctx)
    cluster = build_cluster(ctx.profile, sc.cluster.gpus, ctx.layout.gpus_per_node)
    stragglers = resolve(sc.simulation.stragglers, ctx.layout.world, cluster.num_nodes)
    degrade_nics(cluster, stragglers.nic)
    # known stragglers break the symmetry the one-rank-per-stage shortcut relies on
    every = bool(stragglers) or (sc.simulation.all_ranks if all_ranks is None else all_ranks)
    with showing(progress):  # a long schedule search (v-auto) shows its progress as the run does
        plans = build_plans(ctx, km, pipeline_p2p_seconds(ctx, cluster))
    env = simpy.Environment()
    network = Network(env, cluster, ideal=sc.cluster.network == "ideal")
    recorder = Recorder()
    eff = ctx.profile.efficiency
    channels = scenario_channels(sc.cluster, eff.collective_sms, tuple(STREAM_OF_GROUP))
    share = SmShare(
        env, ctx.profile.gpu.sm_count, eff.collective_sms, _userbuffer_sms(plans), channels,
        eff.nvls_sms if ctx.profile.node.nvls else None,
    )  # fmt: skip
    comms = Comms(env, network, ctx.layout, every, recorder, share if share.enabled else None, channels)
    opt_bpp = optimizer_bytes_per_param(sc)
    clip_bpp = clip_bytes_per_local_param(sc)
    host_share = sc.training.optimizer_offload
    optimizer_seconds, offloaded_seconds = [], []
    for plan in plans:
        local = local_optimizer_params(ctx.layout, plan.params_dense, plan.params_expert)
        on_gpu = local * (opt_bpp * (1.0 - host_share) + GPU_BYTES_PER_OFFLOADED_PARAM * host_share)
        on_gpu += (plan.params_dense + plan.params_expert) * clip_bpp
        optimizer_seconds.append(km.memory(on_gpu))
        offloaded_seconds.append(offload_seconds(ctx, local * host_share))
    p2p_bytes, p2p_gather_bytes = Shapes(ctx.model, ctx.layout, sc.training).pipe_transfer(
        sc.overlap.pp_scatter_gather
    )
    shared = Shared(
        env,
        comms,
        recorder,
        ctx,
        plans,
        optimizer_seconds,
        p2p_bytes,
        _fsdp2_copies(ctx, km),
        stragglers,
        unpack_seconds=_unpack_seconds(ctx),
        tail_seconds=_tail_seconds(ctx, plans),
        bucket_pass_seconds=_bucket_pass_seconds(ctx, km),
        offloaded_seconds=offloaded_seconds,
        host_link_bytes_per_s=_activation_link(ctx),
        grad_zero_seconds=_grad_zero_seconds(ctx, km, plans),
        host_op_s=ctx.profile.efficiency.host_op_us * 1e-6,
        p2p_gather_bytes=p2p_gather_bytes,
        memory_seconds=km.memory,
    )
    ranks = (
        range(ctx.layout.world)
        if every
        else [ctx.layout.representative(s) for s in range(ctx.layout.pp)]
    )
    workers = [Worker(shared, r, ctx.layout.coords(r)["pp"]) for r in ranks]
    runs = [env.process(w.run()) for w in workers]
    total_ops = sum(len(plans[w.stage].ops) for w in workers)
    run_with_progress(env, lambda: sum(w.ops_done for w in workers), total_ops, progress)
    # a rank can also stop after its last op, waiting on a collective its peers issued in
    # another order (its step would then end at 0)
    early = [w for w in workers if w.ops_done < len(plans[w.stage].ops)]
    late = [w for w, run in zip(workers, runs, strict=True) if not run.triggered and w not in early]
    if early or late:
        # an engine bug, not a bad input: ranks waiting for each other leave SimPy with no event
        where = "before their last op" if early else "after their last op"
        raise InternalError(
            f"the simulation of '{sc.name}' ({ctx.layout.describe()}) deadlocked: ranks "
            f"{[w.rank for w in early or late][:8]} stopped {where} at t={env.now:.6g} s"
        )
    events = recorder.events()
    step = _step_time(sc, workers, events)
    memory = recorder.memory_frame()
    summary = _summary(ctx, plans, events, memory, step, len(events), time.perf_counter() - wall)
    summary["time_breakdown_s"] = step_breakdown(events, recorder.compute_time, ctx.layout.pp, step)
    summary["slowest_gpu"] = {"speed_spread": ctx.profile.gpu.speed_spread, "tensor_core_slowdown": km.slowdown}
    summary["stragglers"] = stragglers.to_dict()
    backlogs = _offload_backlogs(workers, summary["peak_memory_bytes"]["per_stage"])
    if backlogs is not None:
        summary["offload_backlog_bytes"] = max(backlogs)
        summary["offload_backlog_per_stage"] = backlogs
    labels = {w.rank: _label(ctx, w.rank, stragglers.compute_factor(w.rank)) for w in workers}
    gpus = sc.cluster.gpus
    heading = run_heading(sc.name, ctx.model.name)  # the model after --set model=..., not only the file's name
    title = f"{heading} — {ctx.layout.describe()} on {ctx.profile.name} ({gpus} GPU{'' if gpus == 1 else 's'})"
    return SimResult(summary, events, memory, ctx.capacity_bytes, labels, title)


def _offload_backlogs(workers: list[Worker], walked: list[float]) -> list[float] | None:
    """Per stage, the most any of its ranks' offloaded bytes, as the copies' timing leaves them
    on the GPU, take its memory above the walked peak (``engine/offload.backlog``); None
    without activation offload."""
    per_stage: list[float] | None = None
    for w in workers:
        if (moved := w.offload_peak()) is not None:
            per_stage = per_stage or [0.0] * len(walked)
            per_stage[w.stage] = max(per_stage[w.stage], backlog(moved, walked[w.stage]))
    return per_stage


def _unpack_seconds(ctx: Context) -> list[float]:
    """Per stage, the host time of unpacking the post-optimizer gather tensor by tensor."""
    if ctx.scenario.dp.param_unpack != "per_tensor":
        return []
    op_s = ctx.profile.efficiency.kernel_launch_us * 1e-6
    return [
        unpack_seconds(stage_tensors(ctx.model, chunks), ctx.layout.zero_group, op_s)
        for chunks in ctx.chunks
    ]


def _tail_seconds(ctx: Context, plans: list[StagePlan]) -> list[float]:
    """Per stage, the host time of the step's eager tail (``training.step_tail``)."""
    if ctx.scenario.training.step_tail == "none":
        return []
    return [stage_tail_seconds(ctx, chunks, plan.buckets) for chunks, plan in zip(ctx.chunks, plans, strict=True)]


def _step_time(sc: Scenario, workers: list[Worker], events: Any) -> float:
    """One step's time: from the common start to the last GPU's end, or, with the optimizer's
    post-validation, the longest span of one GPU (its first pipeline op to its optimizer), the
    period at which steps repeat once nothing synchronises the stages between them (the Zero
    Bubble paper's "largest execution time of all stages")."""
    if not sc.training.optimizer_post_validation:
        return max(w.end_time for w in workers)
    pipe = events[events["kind"].isin(PIPELINE_KINDS)]
    first = pipe.groupby("rank")["start_s"].min()
    # a GPU's gradient-buffer clear belongs to its period, but not the wait for its first input
    # after it: in steady state the clear runs right before that input arrives
    clears = events[events["name"] == GRAD_ZERO]
    clear_s = (clears["end_s"] - clears["start_s"]).groupby(clears["rank"]).sum()
    clear_at = clears.groupby("rank")["start_s"].min()

    def start(rank: int) -> float:
        begin = float(first.get(rank, 0.0))
        if rank in clear_s.index:
            begin = max(float(clear_at[rank]), begin - float(clear_s[rank]))
        return begin

    return max(w.end_time - start(w.rank) for w in workers)


def _label(ctx: Context, rank: int, slow: float = 1.0) -> str:
    """A timeline row's name: the rank's coordinates on the parallel dimensions the layout
    has (a "cp 0" on every row of a job without context parallelism only widens the margin),
    its place in its expert-parallel group with experts."""
    lay = ctx.layout
    c = lay.coords(rank)
    parts = [f"stage {c['pp']}"]
    parts += [f"{dim} {c[dim]}" for dim, size in (("tp", lay.tp), ("cp", lay.cp)) if size > 1]
    if lay.ep > 1:
        parts.append(f"ep {lay.group('ep', rank).index(rank)}")
    if lay.dp > 1:
        parts.append(f"dp {c['dp']}")
    mark = f", straggler x{slow:g}" if slow != 1.0 else ""
    return f"{' / '.join(parts)} (rank {rank}{mark})"


def _summary(
    ctx: Context, plans: list, events: Any, memory: Any, step: float, n_events: int, wall: float
) -> dict[str, Any]:
    sc, lay = ctx.scenario, ctx.layout
    tokens = lay.global_batch * lay.seq_len
    # attention counted over each token's document in packed sequences, the work the model needs
    attended = sc.training.attended_tokens
    flops = token_flops(ctx.model, attended, lay.lora)
    model_flops = flops.total * tokens
    full = [
        x for p in plans for c in p.chunks for pos, x in enumerate(c.chunk.layer_indices)
        if sc.training.fully_recomputed(pos)
    ]  # fmt: skip
    hardware_flops = model_flops + tokens * recompute_flops_per_token(ctx.model, attended, sc.training, full)
    gpus = sc.cluster.gpus
    peak = ctx.profile.training_peak_flops(sc.training.precision)
    spans, busies = pipeline_spans(events)
    bubble, per_stage_bubble = bubble_of(spans, busies)
    peaks = memory.groupby("stage", sort=True)["total"].max()
    per_stage_peak = [float(peaks.get(s, 0.0)) for s in range(lay.pp)]
    # how much of the highest point is the loss's transient logit copies (0 if none)
    at_peak = memory.loc[memory["total"].idxmax()] if len(memory) else None
    loss_at_peak = float(at_peak["loss"]) if at_peak is not None else 0.0
    worst = max(
        range(lay.pp), key=lambda s: sum(c.seconds("F") + c.seconds("BW") for c in plans[s].chunks)
    )
    per_mb = {
        "forward": sum(c.seconds("F") for c in plans[worst].chunks),
        "backward_input": sum(c.seconds("B") for c in plans[worst].chunks),
        "backward_weight": sum(c.seconds("W") for c in plans[worst].chunks),
    }
    max_peak = max(per_stage_peak)
    return {
        "scenario": sc.name,
        "model": ctx.model.name,
        "layout": lay.describe(),
        "framework": sc.framework,
        "framework_release": sc.framework_release,
        "parallel": {
            "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "etp": lay.etp,
            "vpp": lay.vpp, "zero": lay.zero, "zero_shard": lay.zero_group if lay.zero else None,
        },  # fmt: skip
        "hardware": ctx.profile.name,
        "gpus": gpus,
        "microbatches": lay.microbatches,
        "pipeline_flushes": sc.training.pipeline_flushes,
        "step_time_s": step,
        "optimizer_post_validation": sc.training.optimizer_post_validation,
        "tokens_per_s": tokens / step,
        "tokens_per_s_per_gpu": tokens / step / gpus,
        "model_flops_per_step": model_flops,
        "model_tflops_per_gpu": model_flops / step / gpus / 1e12,
        "mfu": model_flops / (step * gpus * peak),
        "hardware_flops_per_step": hardware_flops,
        "hfu": hardware_flops / (step * gpus * peak),
        "bubble_fraction": bubble,
        "bubble_fraction_per_stage": per_stage_bubble,
        # what the bubble is worked out from: each stage's span of pipeline ops and busy time in it
        "pipeline_spans_s": {"span": spans, "busy": busies},
        "exposed_comm_s": exposed_comm(events),
        "peak_memory_bytes": {"per_stage": per_stage_peak, "max": max_peak, "loss_transient": loss_at_peak},
        "capacity_bytes": ctx.capacity_bytes,
        "fits_in_memory": max_peak <= ctx.capacity_bytes,
        "compute_per_microbatch_s": per_mb,
        "events": n_events,
        "sim_wall_s": wall,
        "network": sc.cluster.network,
        "all_ranks": bool(events["rank"].nunique() > lay.pp) if len(events) else False,
    }


def _userbuffer_sms(plans: list[StagePlan]) -> int:
    """The most SMs any TransformerEngine userbuffers overlap of the run holds (``Comm.sms``)."""
    return max(
        (seg.sms for plan in plans for chunk in plan.chunks for phase in chunk.phases.values()
         for unit in phase for seg in unit.segments if isinstance(seg, Comm)),
        default=0,
    )  # fmt: skip
