"""What a host offload costs a step against full recomputation, by the kernel model.

The fit hints (:mod:`simcluster.fit_hints`) order their changes by what they usually cost in
step time. Two of them, activations and the optimizer moved to the host, cost very different
amounts from one job to the next (a PCIe host link against NVLink-C2C, many microbatches or
one), so each is priced here against the change it competes with, full recomputation: seconds
from the kernel model and the hardware profile's host figures, no simulation, milliseconds a
call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcluster.memory import offloaded_layer_bytes, stage_params
from simcluster.parallelism.offload import (
    GPU_BYTES_PER_OFFLOADED_PARAM,
    local_optimizer_params,
    offload_seconds,
)

if TYPE_CHECKING:
    from simcluster.context import Context
    from simcluster.parallelism.segments import Comm
    from simcluster.placement import Chunk


def _part_seconds(ctx: Context, parts: list[tuple[Chunk, tuple[str, ...]]]) -> list[float]:
    """Each (chunk, phases) part's time: its layers' kernels in those phases and the
    collectives among them the compute waits for (recomputation reruns those too: the TP
    all-reduces or all-gathers, the expert all-to-alls), each alone on an idle network. One
    layer builder and one cluster for all the parts."""
    from simcluster.engine.plan import kernel_model
    from simcluster.parallelism.layer import LayerBuilder
    from simcluster.parallelism.segments import Comm, Compute
    from simcluster.parallelism.shapes import Shapes

    sc = ctx.scenario
    builder = LayerBuilder(Shapes(ctx.model, ctx.layout, sc.training), kernel_model(ctx), sc)
    segments = [[s for i in c.layer_indices for p in phases for s in builder.layer(i, p)] for c, phases in parts]
    waited = [s for part in segments for s in part if isinstance(s, Comm) and s.group in _LAYER_GROUPS and not s.overlap]
    comm = _comm_seconds(ctx, waited)
    return [
        sum(s.seconds for s in part if isinstance(s, Compute)) + sum(comm.get(id(s), 0.0) for s in part)
        for part in segments
    ]


#: the parallel groups a layer's forward talks over (the data- and pipeline-parallel traffic
#: is not rerun by recomputation)
_LAYER_GROUPS = ("tp", "cp", "ep")


def _comm_seconds(ctx: Context, comms: list[Comm]) -> dict[int, float]:
    """Seconds of each of ``comms`` (by id) on the first rank's groups, alone on an idle
    network: a cluster of the fewest whole nodes that holds those groups, since a
    ten-thousand-GPU graph would take seconds to build for a hint."""
    from simcluster.network import collective_time
    from simcluster.topology import build_cluster

    if not comms or ctx.scenario.cluster.network == "ideal":
        return {}
    lay = ctx.layout
    rank = lay.representative(0)
    groups = {name: lay.group(name, rank) for name in {c.group for c in comms}}
    gpn = lay.gpus_per_node
    span = max(max(g) for g in groups.values()) + 1
    cluster = build_cluster(ctx.profile, min(-(-span // gpn) * gpn, lay.world), gpn)
    return {id(c): collective_time(c.op, c.nbytes * c.uneven, cluster, groups[c.group]) for c in comms}


def activation_offload_beats_recompute(ctx: Context) -> bool:
    """Whether offloaded activations cost a microbatch less than full recomputation would: the
    copies out of the first chunk's offloaded layers stream over the host link
    (``host_link_GBps``) beside the chunk's forward, the copies back beside its backward, and
    what outlasts them waits (Megatron-Core's offload: the next layers' compute runs while a
    layer's activations move); full recomputation adds the chunk's forward once more. Llama 3
    8B at 8K tokens on H100's PCIe: 670 ms of copies beside a 210 ms forward and a 509 ms
    backward, 622 ms waiting against 210 ms recomputed (simulated: 0.61 s a microbatch waits on
    the copies); Llama 3 70B on 64 H100 under ZeRO-3 with 79 layers offloaded: 1,556 ms
    waiting against a 1,811 ms forward (simulated: 15.8 s a step against 16.1 s recomputing).
    True without offloaded layers or the host figure (the hint is not offered then)."""
    sc = ctx.scenario
    chunk = ctx.chunks[0][0]
    moved = offloaded_layer_bytes(ctx.model, ctx.layout, sc.training, chunk, sc.moe.padded_rows)
    link = ctx.profile.node.host_link_GBps
    if not moved or not link:
        return True
    copies = sum(moved.values()) / (link * 1e9)
    forward, backward = _part_seconds(ctx, [(chunk, ("F",)), (chunk, ("B", "W"))])
    waiting = max(0.0, copies - forward) + max(0.0, copies - backward)
    return waiting < forward


def recompute_seconds(ctx: Context) -> float:
    """What full recomputation adds to a step on the first stage: its chunks' forward again
    for every microbatch, and the first chunk's once more for each of the pp - 1 warm-up slots
    a pipeline's critical path runs (1F1B's (m + p - 1) slots, Narayanan et al. 2021)."""
    chunks = ctx.chunks[0]
    forwards = _part_seconds(ctx, [(c, ("F",)) for c in chunks])
    return ctx.layout.microbatches * sum(forwards) + (ctx.layout.pp - 1) * forwards[0]


def optimizer_offload_seconds(ctx: Context) -> float:
    """What the optimizer on the host adds to a step on the first stage: the gradients' copy
    out, the CPU update and the weights' copy back (:func:`offload_seconds`, the simulation's
    own), less the GPU update it replaces (its HBM passes by the kernel model)."""
    from simcluster.engine.plan import kernel_model
    from simcluster.parallelism.data import optimizer_bytes_per_param

    sc = ctx.scenario
    params = stage_params(ctx.model, ctx.layout, ctx.chunks[0])
    local = local_optimizer_params(ctx.layout, params.dense, params.expert) * sc.training.optimizer_offload
    saved = kernel_model(ctx).memory(local * (optimizer_bytes_per_param(sc) - GPU_BYTES_PER_OFFLOADED_PARAM))
    return offload_seconds(ctx, local) - saved


def optimizer_offload_beats_recompute(ctx: Context) -> bool:
    """Whether the optimizer on the host (``ctx``'s ``training.optimizer_offload``) costs a step
    less than full recomputation would (:func:`recompute_seconds`): a sharded optimizer under
    many microbatches steps on the host in less than the forwards recomputing takes; one
    microbatch of a large replicated optimizer over PCIe does not."""
    return optimizer_offload_seconds(ctx) < recompute_seconds(ctx)
