"""A rank's data-parallel traffic: gradient buckets reduced as the backward readies them
(with the framework's pass over each first), ZeRO-1/2 parameter gathers waited for layer by
layer, and ZeRO-3's per-unit gathers and reduce-scatters (hybrid sharding included)."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from simcluster.engine.comms import GROUP_DIM
from simcluster.engine.plan import HEAD, StagePlan, Unit
from simcluster.engine.shared import Shared
from simcluster.parallelism.data import (
    Bucket,
    cast_buffer_bytes,
    gather_bytes,
    grad_reduce_bytes,
    grad_wire_bytes,
    param_bytes,
)
from simcluster.parallelism.fp8_weights import requantises_mxfp8_parameters
from simcluster.parallelism.segments import PHASE_KIND, Work
from simcluster.parallelism.zero3_coordinator import coordinated, knob, prefetch_window
from simcluster.parallelism.zeropp import GradientAllToAll, WeightGather
from simcluster.schedules import PipeOp

if TYPE_CHECKING:
    from simcluster.engine.pair_stream import Lane


#: the stream PyTorch FSDP's HSDP all-reduce across replicas runs on (_replica_all_reduce)
REPLICA_STREAM = "comm_dp_ar"


def _forward_position(layer: int) -> float:
    """Where a unit's layer index runs in a chunk's forward: the embedding (-1) first, the
    LM head (``HEAD``) last."""
    if layer == HEAD:
        return math.inf
    return -math.inf if layer < 0 else float(layer)


def _first_in_forward(layers: tuple[int, ...]) -> int:
    """The layer of ``layers`` (unit indices, any order) that a chunk's forward runs first."""
    return min(layers, key=_forward_position)


def _unit_id(unit: Unit) -> tuple[int, ...]:
    """A unit's layers in a phase-independent order (a backward unit lists them reversed)."""
    return tuple(sorted(unit.layers))


class DataParallelOps:
    """Mixin of :class:`~simcluster.engine.worker.Worker`: its data-parallel and ZeRO traffic."""

    shared: Shared
    rank: int
    stage: int
    reductions: list[simpy.Process]
    buckets_started: set[tuple[int, int]]
    gathers: dict[tuple, simpy.Event]
    copied_out: set[tuple]
    dequantized: set[tuple]
    _last_dp: simpy.Process | None
    _last_ar: simpy.Process | None
    scattered: simpy.Event | None
    z3_bucket: list[Unit]
    # (microbatch, chunk) of a forward -> the microbatch whose backward, just before it, kept
    # its gathers (FSDP2's reshard_after_backward false)
    kept_gathers: dict[tuple[int, int], int]
    host_t: float  # the host clock (engine/worker.py)

    if TYPE_CHECKING:

        @property
        def plan(self) -> StagePlan: ...

        def _compute(self, seconds: float) -> Generator: ...

        def _record(
            self, kind: str, name: str, mb: int, chunk: int, layer: int, start: float, work: Work
        ) -> None: ...

        def _host_sync(self) -> None: ...

        def _grad_transient(self, nbytes: float) -> None: ...

    def _memory_pass(
        self, seconds: float, lane: Lane | None, kind: str, name: str, mb: int, chunk: int, layer: int
    ) -> Generator:
        """Run ``seconds`` of memory-bound kernels on this GPU's compute stream, in this op's
        turn on the stream an F&B pair shares (``lane``), and record them as ``name``."""
        if lane is None:
            start = self.shared.env.now
            yield from self._compute(seconds)
        else:
            req = yield from lane.acquire()
            with req:
                start = self.shared.env.now
                yield from self._compute(seconds)
        self._record(kind, name, mb, chunk, layer, start, Work.of(memory=seconds))

    def _bucket_hooks(
        self, chunk: int, unit: Unit, kind: str, mb: int, early: bool = False, lane: Lane | None = None
    ) -> Generator:
        """Start, in bucket order, the reduction of the buckets this unit's backward completes,
        each once; ``early``: only up to the last one that closes on the unit's MLP weights;
        ``lane``: this op's turn on the compute stream an F&B pair shares.

        Without ``overlap.dp_grad_reduce`` ZeRO-0/1 reduce after the last backward (the step's
        end), but ZeRO-2 keeps no whole gradient to wait with: each bucket is reduced as it
        fills, every microbatch, and the backward waits for it (DeepSpeed's stage 2 with
        overlap_comm off: average_tensor on the current stream)."""
        overlapped = self.shared.ctx.scenario.overlap.dp_grad_reduce
        if not overlapped and self.shared.ctx.layout.zero != 2:
            return
        mine = [
            i for i, b in enumerate(self.plan.buckets)
            if b.chunk == chunk and b.ready_layer in unit.layers and (i, mb) not in self.buckets_started
        ]  # fmt: skip
        if early:
            last = max((i for i in mine if self.plan.buckets[i].early), default=-1)
            mine = [i for i in mine if i <= last]
        for i in mine:
            b = self.plan.buckets[i]
            self.buckets_started.add((i, mb))
            yield from self._bucket_pass(b, kind, mb, lane)
            if overlapped:
                if self._waits_for_reductions() and self.reductions:
                    # the compute stream waits for the reduction stream (DeepSpeed's two ipg
                    # buffers): the bucket before this one must be reduced first
                    before = self.reductions[-1]
                    if not before.triggered:
                        yield before
                self._spawn_reduction(self._reduce_bucket(b))
            else:
                yield self._spawn_dp(self._reduce_bucket(b))

    def _overlapped_reductions(self) -> bool:
        """Gradient reductions run beside the backward (ZeRO-3's always do)."""
        sc = self.shared.ctx.scenario
        overlapped: bool = sc.parallel.zero == 3 or sc.overlap.dp_grad_reduce
        return overlapped

    def _zero3_default_stream(self) -> bool:
        """DeepSpeed's ZeRO-3 with ``overlap_comm`` false (``overlap.dp_grad_reduce: false``
        under its coordinator): stage3.py's ``reduce_and_partition_stream`` and
        parameter_offload.py's ``__allgather_stream`` are then the default stream, so every
        parameter gather and gradient reduce-scatter runs in order with the compute kernels."""
        sc = self.shared.ctx.scenario
        return coordinated(sc) and not sc.overlap.dp_grad_reduce

    def _waits_for_reductions(self) -> bool:
        """The framework keeps one overlapped gradient reduction in flight
        (``dp.wait_reduction``; by default FSDP2's)."""
        return self.shared.ctx.scenario.wait_reduction and self._overlapped_reductions()

    def _backward_sync(self) -> str:
        """How a backward that reduced gradients ends (``dp.backward_sync``; by default FSDP2's
        stream wait, else none)."""
        return self.shared.ctx.scenario.backward_sync if self._overlapped_reductions() else "none"

    def _synchronize_reductions(self, host: bool) -> Generator:
        """The end of a backward that reduced gradients: the compute stream waits for every
        reduction in flight (FSDP2's root post-backward callback, ``wait_event`` on the last
        reduce-scatter and each group's post-reduce event); ``host``: the host waits too
        (DeepSpeed's ``independent_gradient_partition_epilogue``: the last bucket is flushed,
        then ``get_accelerator().synchronize()`` at ZeRO-1/2,
        ``reduce_and_partition_stream.synchronize()`` at ZeRO-3), so the next forward is issued
        from a standstill."""
        for proc in self.reductions:
            if not proc.triggered:
                yield proc
        if host:
            self._host_sync()

    def _bucket_pass(self, bucket: Bucket, kind: str, mb: int, lane: Lane | None = None) -> Generator:
        """The framework's pass over a gradient bucket before it is reduced (Megatron's NaN
        check and 1/dp scaling), on the compute stream: the reduction starts after it and the
        backward's next kernels wait for it."""
        if self.shared.bucket_pass_seconds is None:
            return
        seconds = self.shared.bucket_pass_seconds(bucket)
        if seconds <= 0:
            return
        yield from self._memory_pass(seconds, lane, kind, "grad_bucket_pass", mb, bucket.chunk, bucket.layers[0])
        # the bucket's flat copy (dp.flatten_copies) and cast (dp.reduce_dtype), held on the
        # stash until its reduction is copied back (recorded at the pass's end)
        self._grad_transient(cast_buffer_bytes(self.shared.ctx.scenario, self.shared.ctx.layout, bucket.params))
        if self.shared.ctx.scenario.dp.nan_check:
            # Megatron asserts the norm is not NaN on the host (`assert not norm.isnan()`): the
            # host waits for the pass, so the backward after it is issued from a standstill
            self._host_sync()

    def _spawn_dp(self, work: Generator) -> simpy.Process:
        """Start a data-parallel collective (a gradient reduction or a parameter gather).

        The framework issues these on the data-parallel stream in program order, which is the
        same on every rank. The engine runs each as its own process, so their order on the
        stream is the order they reach it; that is program order while the ranks run alike,
        but not when a slower GPU or NIC shifts one rank's timing, nor under hybrid sharding,
        where a reduction is two collectives (a reduce-scatter inside the replica, then an
        all-reduce across replicas) and a later bucket's reduce-scatter could slip between
        them on one rank and not on another. Then the ranks wait for each other for ever, so
        in those cases each one starts when the one issued before it has finished.
        """
        env = self.shared.env
        if self.shared.ctx.layout.zero_replicas <= 1 and not self.shared.stragglers:
            return env.process(work)
        before = self._last_dp

        def in_order() -> Generator:
            if before is not None and not before.triggered:
                yield before
            yield from work

        self._last_dp = env.process(in_order())
        return self._last_dp

    def _spawn_reduction(self, work: Generator) -> None:
        self.reductions.append(self._spawn_dp(work))

    def _reduce_bucket(self, bucket: Any) -> Generator:
        sc = self.shared.ctx.scenario
        op = self.shared.ctx.layout.grad_collective
        nbytes = bucket.params * grad_wire_bytes(sc)
        yield from self._dp_reduce(bucket.group, op, nbytes, f"grad_{op}", -1, bucket.chunk, bucket.layers[0])

    def _sharding(self, group: str) -> str:
        """The group ZeRO shards over: the replica's ranks under hybrid sharding (dense and
        expert alike)."""
        if self.shared.ctx.layout.zero_replicas <= 1:
            return group
        return {"dp": "dps", "edp": "edps"}.get(group, group)

    def _dp_reduce(
        self, group: str, op: str, nbytes: float, name: str, mb: int, chunk: int, layer: int,
        sharded: simpy.Event | None = None, replicas: bool = True, lead_s: float = 0.0,
    ) -> Generator:
        """A gradient reduction; under hybrid sharding the reduce-scatter stays inside the
        replica and the replicas then all-reduce their shard (PyTorch HSDP, Megatron's
        distributed-optimizer instances) unless ``replicas`` is false (a microbatch whose shard
        is only accumulated). ``sharded`` succeeds after the first collective; ``lead_s``: its
        input's production the stream waits for (:meth:`Comms.collective`). Both collectives
        reduce with the framework's ``dp.reduce_op`` (Megatron-Core's start_grad_sync uses one
        reduce_op for the reduce-scatter and the all-reduce across instances; FSDP2's
        foreach_reduce one op for both)."""
        comms, shard = self.shared.comms, self._sharding(group)
        redop = self.shared.ctx.scenario.dp.reduce_op
        yield from comms.collective(
            self.rank, self.stage, shard, op, nbytes, name, mb, chunk, layer, lead_s=lead_s, redop=redop
        )
        if sharded is not None:
            sharded.succeed()
        if shard != group and replicas:
            lay = self.shared.ctx.layout
            dense = group == "dp"
            part = nbytes / (lay.zero_group if dense else lay.expert_zero_group)
            across = "dpr" if dense else "edpr"
            if lay.torch_fsdp:
                self._replica_all_reduce(across, part, f"{name}_replicas", mb, chunk, layer)
                return
            yield from comms.collective(
                self.rank, self.stage, across, "all_reduce", part, f"{name}_replicas", mb, chunk, layer, redop=redop
            )

    def _replica_all_reduce(
        self, group: str, nbytes: float, name: str, mb: int, chunk: int, layer: int
    ) -> None:
        """PyTorch FSDP's HSDP all-reduce of a reduce-scattered shard across the replicas, on a
        stream of its own: FSDP1's ``_all_reduce_stream`` (``_init_streams``: a new stream when
        any state uses hybrid sharding; ``_reduce_grad`` waits it on the post-backward stream,
        then all-reduces there) and FSDP2's ``all_reduce_stream`` (``foreach_reduce``:
        ``all_reduce_stream.wait_stream(reduce_scatter_stream)``), over the replicate process
        group, whose NCCL stream is not the shard group's. So the next unit's reduce-scatter and
        gathers do not queue behind it; the all-reduces keep their issue order among themselves,
        and the backward's end waits for them (``_synchronize_reductions``). It reduces with
        ``dp.reduce_op``, as the reduce-scatter before it."""
        before, comms = self._last_ar, self.shared.comms
        redop = self.shared.ctx.scenario.dp.reduce_op

        def in_order() -> Generator:
            if before is not None and not before.triggered:
                yield before
            yield from comms.collective(
                self.rank, self.stage, group, "all_reduce", nbytes, name, mb, chunk, layer, stream=REPLICA_STREAM,
                redop=redop,
            )

        self._last_ar = self.shared.env.process(in_order())
        self.reductions.append(self._last_ar)

    def _gather_bucket(self, bucket: Any) -> Generator:
        ctx = self.shared.ctx
        mxfp8 = requantises_mxfp8_parameters(ctx.scenario.training, ctx.layout, ctx.profile.gpu.compute_capability)
        nbytes = gather_bytes(ctx.scenario, bucket.params, bucket.layer_params, fp8_on_wire=not mxfp8)
        yield from self.shared.comms.collective(
            self.rank,
            self.stage,
            self._sharding(bucket.group),
            "all_gather",
            nbytes,
            "param_all_gather",
            -1,
            bucket.chunk,
            _first_in_forward(bucket.layers),  # the first layer whose forward waits for it
        )

    def _start_param_gathers(self) -> None:
        # issued in forward order, waited for layer by layer: chunks in model order, and in a
        # chunk by the first layer a bucket's forward needs, so the dense and the expert
        # buckets (separate buffers, each gathered in its own forward order: Megatron-Core's
        # next_param_gather_bucket_group chains) interleave layer by layer; a layer split
        # over several buckets keeps their reversed backward order
        buckets = self.plan.buckets
        order = sorted(
            range(len(buckets)),
            key=lambda i: (buckets[i].chunk, _forward_position(_first_in_forward(buckets[i].layers)), -i),
        )
        for b in (self.plan.buckets[i] for i in order):
            proc = self._spawn_dp(self._gather_bucket(b))
            for layer in b.layers:
                self.gathers[(b.chunk, layer)] = proc

    def _wait_param_gather(self, chunk: int, unit: Unit) -> Generator:
        for layer in unit.layers:
            ev = self.gathers.get((chunk, layer))
            if ev is not None and not ev.triggered:
                yield ev

    def _gather_key(self, op: PipeOp) -> tuple:
        """Which gather of a unit's parameters an op uses: its own (freed after the op), its
        microbatch's forward one (kept for the backward: zero3.reshard_after_forward false),
        the step's (kept from the first forward to the last backward under a pipeline, or
        with FSDP2's reshard_after_backward false too), or the previous microbatch's backward
        one (a forward after a backward that kept its gathers: FSDP2's unshard is then a
        no-op, ``FSDPParamGroup.unshard`` on an unsharded group)."""
        lay = self.shared.ctx.layout
        if lay.zero3_keep_for_backward:
            whole_step = lay.zero3_pipelined or lay.zero3_keep_after_backward
            return ("step", op.chunk) if whole_step else ("F", op.microbatch, op.chunk)
        if lay.zero3_keep_after_backward:
            if op.kind != "F":
                return ("B", op.microbatch, op.chunk)
            after = self.kept_gathers.get((op.microbatch, op.chunk))
            return ("B", after, op.chunk) if after is not None else (op.kind, op.microbatch, op.chunk)
        return (op.kind, op.microbatch, op.chunk)

    def _is_root(self, unit: Unit) -> bool:
        """Whether ``unit`` belongs to FSDP1's root FlatParameter (``zero3.buffers: flat``):
        the embedding and the LM head, which an auto-wrap policy over the transformer blocks
        leaves to the root."""
        return self.shared.ctx.layout.fsdp1_root and all(layer < 0 for layer in unit.layers)

    def _root_unit(self, chunk: int) -> Unit:
        """FSDP1's root FlatParameter of ``chunk``: its root units as one unit, gathered and
        reduced as one collective each."""
        roots = [u for u in self.plan.chunks[chunk].phases["F"] if self._is_root(u)]
        return Unit(
            layers=tuple(layer for u in roots for layer in u.layers),
            segments=(),
            params=sum(u.params for u in roots),
            layer_params=sum(u.layer_params for u in roots),
            expert_params=sum(u.expert_params for u in roots),
            expert_layer_params=sum(u.expert_layer_params for u in roots),
        )

    def _gather_id(self, units: list[Unit], j: int, op: PipeOp) -> tuple:
        """The key of unit j's gather: FSDP1's root one per microbatch's forward, kept for its
        backward (``_post_forward_reshard`` frees every unit's but the root's)."""
        if self._is_root(units[j]):
            return (("F", op.microbatch, op.chunk), "root")
        key = (self._gather_key(op), _unit_id(units[j]))
        after = self.kept_gathers.get((op.microbatch, op.chunk)) if op.kind == "F" else None
        if after is not None and key not in self.gathers:
            # a unit the backward did not gather, its forward's kept for it (ChunkPlan.zero3_kept),
            # stays gathered into this forward as well
            kept = (("F", after, op.chunk), _unit_id(units[j]))
            if kept in self.gathers:
                # the same gather, under this forward's key for the forwards after it
                own = (("F", op.microbatch, op.chunk), _unit_id(units[j]))
                self.gathers[own] = self.gathers[kept]
                for done in (self.copied_out, self.dequantized):
                    if kept in done:
                        done.add(own)
                return own
        return key

    def _zero3_issue_gather(
        self, units: list[Unit], j: int, op: PipeOp, skip: int, issued: float | None = None
    ) -> None:
        """Issue unit j's all-gather unless it was issued already or is among the first ``skip``
        units, still gathered from the forward (FSDP1's root: all its units at once, when the
        forward reaches the first); ``issued``: the host's time of issuing it, if later than
        now (the collective cannot start before)."""
        if j >= len(units) or j < skip:
            return
        gkey = self._gather_id(units, j, op)
        if gkey not in self.gathers:
            unit = self._root_unit(op.chunk) if self._is_root(units[j]) else units[j]
            wait = 0.0 if issued is None else max(0.0, issued - self.shared.env.now)
            self.gathers[gkey] = self._spawn_dp(self._after(wait, self._zero3_all_gather(unit, op)))

    def _after(self, seconds: float, work: Generator) -> Generator:
        """``work`` once ``seconds`` have passed (a collective the host issues later)."""
        if seconds > 0:
            yield self.shared.env.timeout(seconds)
        yield from work

    def _forward_issue(self, units: list[Unit], i: int, op: PipeOp) -> float | None:
        """When PyTorch FSDP's host issues the forward all-gather of unit i+1, as the GPU
        starts unit i (the rate limiter's release, FSDP1 ``_limiter_utils.py``): with
        ``zero3.forward_prefetch`` at unit i's pre-forward hook, before its kernels
        (``_runtime_utils.py`` ``_pre_forward_unshard`` -> ``_prefetch_handle``
        FORWARD); without it at unit i+1's own hook, once the host has issued unit i's kernels
        (FSDP2's ``pre_forward`` -> ``unshard``, its implicit prefetch). A host running ahead
        of the GPU issues either before now; None where the engine does not time it (not
        PyTorch FSDP, or not the forward)."""
        lay = self.shared.ctx.layout
        if op.kind != "F" or not lay.torch_fsdp:
            return None
        if self.shared.ctx.scenario.zero3.forward_prefetch:
            return self.host_t
        return self.host_t + sum(seg.host for seg in units[i].segments)

    def _zero3_gather(
        self, units: list[Unit], i: int, op: PipeOp, skip: int, lane: Lane | None = None
    ) -> Generator:
        """Gather unit i's parameters (prefetching unit i+1 when zero3.prefetch: in the backward
        before unit i's computation only with ``zero3.backward_prefetch: pre``, see
        :meth:`_zero3_post_compute`; under DeepSpeed's coordinator only when its window leaves
        room); the first ``skip`` units are still gathered from the forward; ``lane``: this
        op's turn on the compute stream an F&B pair shares, which FSDP2's copy-out runs on."""
        sc = self.shared.ctx.scenario
        zero3 = sc.zero3
        ahead = zero3.prefetch and (op.kind == "F" or zero3.backward_prefetch == "pre")
        if ahead and coordinated(sc):
            ahead = prefetch_window(sc, units[i].params - units[i].persistent) > 0
        if self._zero3_default_stream():
            # a prefetch queued on the compute stream runs before this unit's kernels anyway:
            # the same serial time as gathering each unit when it is needed
            ahead = False
        self._zero3_issue_gather(units, i, op, skip)
        if ahead:
            self._zero3_issue_gather(units, i + 1, op, skip, self._forward_issue(units, i, op))
        gkey = self._gather_id(units, i, op)
        ev = self.gathers.get(gkey)
        if ev is None:
            return
        if not ev.triggered:
            yield ev
        yield from self._dequantize(units[i], op, gkey, lane)
        copies = self.shared.fsdp2_copy_seconds
        if copies is not None and gkey not in self.copied_out:
            # the gathered buffer copied into per-parameter tensors, once per gather (none for
            # FSDP1's FlatParameter, used in place)
            self.copied_out.add(gkey)
            seconds = copies[0](units[i].params)
            kind = PHASE_KIND[op.kind]
            if seconds > 0:
                yield from self._memory_pass(seconds, lane, kind, "fsdp2_copy_out", op.microbatch, op.chunk, units[i].layers[0])

    def _zero3_post_compute(self, units: list[Unit], i: int, op: PipeOp, skip: int = 0) -> None:
        """After unit i's gradient computation, before its reduce-scatter: FSDP1's
        BACKWARD_POST prefetch of unit i+1 (``_post_backward_reshard`` ->
        ``_prefetch_handle``), unless it is among the first ``skip`` units, still gathered
        from the forward. With BACKWARD_PRE it went out before the computation; with None it
        goes out at unit i+1's own pre-backward hook, behind this reduce-scatter."""
        zero3 = self.shared.ctx.scenario.zero3
        if zero3.prefetch and zero3.backward_prefetch == "post":
            self._zero3_issue_gather(units, i + 1, op, skip)

    def _secondary(self, op: PipeOp) -> bool:
        """ZeRO++ hpZ: whether a gather for ``op`` reads the secondary partition, which exists
        for every gather of the step after a unit's first (the first microbatch's forward)."""
        return self.shared.ctx.layout.hpz > 1 and not (op.kind == "F" and op.microbatch == 0)

    def _zero3_all_gather(self, unit: Unit, op: PipeOp) -> Generator:
        """All-gather a unit's parameters: one collective per group that shards them
        (:meth:`Unit.shards`), the layer's dense parameters first, as its pre-forward hook
        gathers them before the experts' does. ZeRO++ (dense parameters): over the hpZ group
        from the secondary partition, and with qwZ each call quantized on this stream and
        gathered as int8 data and fp32 scales (``parallelism/zeropp.py``)."""
        sc = self.shared.ctx.scenario
        for group, params, layer_params in unit.gathered_shards():
            # DeepSpeed's coordinator gathers the dense part in its prefetch calls, in order
            sizes = unit.gather_calls if group == "dp" and unit.gather_calls else (params,)
            total = sum(sizes)
            shard = self._sharding(group)
            if group == "dp" and self._secondary(op):
                shard = "dph"
            ranks = len(self.shared.comms.group_of(GROUP_DIM[shard], self.rank))
            # one rank gathers nothing (partition_parameters.py: num_partitions == 1)
            quantized = group == "dp" and sc.zero3.quantized_weights and ranks > 1
            for size in sizes:
                share = size / total
                nbytes = gather_bytes(sc, params * share, layer_params * share)
                label = "hpz_param_all_gather" if shard == "dph" else "zero3_param_all_gather"
                names = [(label, nbytes)]
                if quantized:
                    q = WeightGather(params * share, ranks)
                    yield from self._side_pass(q.quantize_bytes(param_bytes(sc)))
                    names = [(label, q.data_bytes), (label.replace("param", "param_scales"), q.scale_bytes)]
                for name, size_bytes in names:
                    yield from self.shared.comms.collective(
                        self.rank, self.stage, shard, "all_gather", size_bytes, name, op.microbatch, op.chunk,
                        unit.layers[0],
                    )

    def _side_pass(self, nbytes: float) -> Generator:
        """A memory-bound kernel on a communication stream (ZeRO++'s quantization): its time on
        the stream, before the collective it feeds."""
        seconds = self.shared.memory_seconds(nbytes) if self.shared.memory_seconds else 0.0
        if seconds > 0:
            yield self.shared.env.timeout(seconds * self.shared.stragglers.compute_factor(self.rank))

    def _dequantize(self, unit: Unit, op: PipeOp, gkey: tuple, lane: Lane | None) -> Generator:
        """qwZ: the gathered int8 buffer dequantized on the compute stream when the module waits
        for it (``AllGatherCoalescedHandle.wait``), once per gather."""
        sc = self.shared.ctx.scenario
        if not sc.zero3.quantized_weights or gkey in self.dequantized or self.shared.memory_seconds is None:
            return
        self.dequantized.add(gkey)
        dense = next((p for g, p, _ in unit.gathered_shards() if g == "dp"), 0.0)
        if dense <= 0:
            return
        group = "dph" if self._secondary(op) else self._sharding("dp")
        ranks = len(self.shared.comms.group_of(GROUP_DIM[group], self.rank))
        if ranks <= 1:
            return
        q = WeightGather(dense, ranks)
        seconds = self.shared.memory_seconds(q.dequantize_bytes(param_bytes(sc)))
        kind = PHASE_KIND[op.kind]
        yield from self._memory_pass(seconds, lane, kind, "qwz_dequantize", op.microbatch, op.chunk, unit.layers[0])

    def _zero3_bucketed(self, unit: Unit, op: PipeOp, cap: int, last: bool) -> list[simpy.Process]:
        """DeepSpeed's ZeRO-3 gradient bucket (``zero3.reduce_bucket_size``): a unit's gradients
        join the bucket, which is first reduce-scattered if they would overflow it (stage3.py
        ``__add_grad_to_ipg_bucket``: ``elements_in_ipg_bucket + numel > reduce_bucket_size``
        with a non-empty bucket), and what is left goes out at the backward's end
        (``independent_gradient_partition_epilogue``); one collective per bucket and group."""
        pending, started = self.z3_bucket, []
        if pending and sum(u.params for u in pending) + unit.params > cap:
            self._spawn_reduction(self._zero3_reduce(_merged(pending), op))
            started.append(self.reductions[-1])
            pending.clear()
        pending.append(unit)
        if last:
            self._spawn_reduction(self._zero3_reduce(_merged(pending), op))
            started.append(self.reductions[-1])
            pending.clear()
        return started

    def _zero3_post_backward(
        self, unit: Unit, op: PipeOp, lane: Lane | None = None, last: bool = False
    ) -> Generator:
        """Start the reduce-scatter of a unit whose backward is done. Where the framework keeps
        one in flight (FSDP2, ``_waits_for_reductions``), its post_backward first makes the
        compute stream wait for the previous reduce-scatter (``wait_event`` on its
        ``reduce_scatter_state``: the input buffer is freed only then), then copy-casts the
        gradients into the reduce-scatter buffer on the compute stream (``foreach_reduce``,
        torch 2.5 on; before, on the reduce-scatter stream behind the previous one, which the
        compute stream then waited for: the same timing). FSDP1's root FlatParameter is
        reduced once, after the last of its units' backward (its gradient exists only then)."""
        if self._is_root(unit):
            units = self.plan.chunks[op.chunk].phases[op.kind]
            if unit is not [u for u in units if self._is_root(u)][-1]:
                return
            unit = self._root_unit(op.chunk)
        if not self._waits_for_reductions():
            cap = knob(self.shared.ctx.scenario.zero3.reduce_bucket_size)
            if cap is None:
                self._spawn_reduction(self._zero3_reduce(unit, op))
                return
            for reduction in self._zero3_bucketed(unit, op, cap, last):
                if self._zero3_default_stream() and not reduction.triggered:
                    yield reduction  # on the default stream: the backward waits for it
            return
        if self.scattered is not None and not self.scattered.triggered:
            yield self.scattered
        copies = self.shared.fsdp2_copy_seconds
        seconds = copies[1](unit.params) if copies is not None else 0.0
        if seconds > 0:
            kind = PHASE_KIND[op.kind]
            yield from self._memory_pass(seconds, lane, kind, "fsdp2_copy_in", op.microbatch, op.chunk, unit.layers[0])
        self.scattered = self.shared.env.event()
        self._spawn_reduction(self._zero3_reduce(unit, op, copied=True, scattered=self.scattered))

    def _zero3_reduce_all(self, units: list[Unit], op: PipeOp) -> Generator:
        """A stage's gradient reduce-scatters one after another (its copy-ins on the same
        stream, each before its own collective)."""
        for unit in units:
            if unit.params > 0:
                yield from self._zero3_reduce(unit, op)

    def _zero3_reduce(
        self, unit: Unit, op: PipeOp, copied: bool = False, scattered: simpy.Event | None = None
    ) -> Generator:
        """A unit's gradient reduce-scatters on its stream, one per group that shards its
        parameters (:meth:`Unit.shards`); ``copied``: FSDP2's copy-in already ran on the
        compute stream; ``scattered`` succeeds once the reduce-scatter itself is done
        (before an HSDP all-reduce across replicas)."""
        copies = self.shared.fsdp2_copy_seconds
        lead = 0.0
        if copies is not None and not copied:  # FSDP2 copy-casts on the reduce-scatter stream
            seconds = copies[1](unit.params) * self.shared.stragglers.compute_factor(self.rank)
            if self.shared.ctx.layout.fsdp1_root:
                # FSDP1 casts on its post-backward stream after issuing nothing else there:
                # NCCL's stream waits for the cast in this reduce-scatter's place in the queue
                lead = seconds
            else:
                yield self.shared.env.timeout(seconds)
        sc = self.shared.ctx.scenario
        # HSDP: with set_requires_all_reduce(False) the replicas all-reduce only the last
        # microbatch's accumulated shard (zero3.replica_all_reduce)
        replicas = (
            sc.zero3.replica_all_reduce == "every_microbatch"
            or self.plan.last_backward.get(op.chunk) == op.microbatch
        )
        # the experts' own FSDP group first: their backward ends before the rest of the layer's
        parts = sorted(unit.shards(), key=lambda part: part[0] == "dp")
        for n, (group, params, _) in enumerate(parts):
            if group == "dp" and sc.zero3.quantized_gradients and self.shared.ctx.layout.zero_group > 1:
                yield from self._quantized_reduce(params, op, unit.layers[0])
                if n == len(parts) - 1 and scattered is not None:
                    scattered.succeed()
                continue
            yield from self._dp_reduce(
                group,
                "reduce_scatter",
                params * grad_reduce_bytes(sc),
                "zero3_grad_reduce_scatter",
                op.microbatch,
                op.chunk,
                unit.layers[0],
                scattered if n == len(parts) - 1 else None,
                replicas,
                lead if n == 0 else 0.0,
            )
        if not parts and scattered is not None:
            scattered.succeed()  # nothing to reduce

    def _quantized_reduce(self, params: float, op: PipeOp, layer: int) -> Generator:
        """ZeRO++ qgZ in place of a reduce-scatter (``all_to_all_quant_reduce``): int4 data and
        fp32 scales all-to-all'd inside the node, then across nodes, with the kernels between
        on this stream (``parallelism/zeropp.py``)."""
        sc, lay = self.shared.ctx.scenario, self.shared.ctx.layout
        local = len(self.shared.comms.group_of("dpl", self.rank))
        q = GradientAllToAll(params, local, lay.zero_group // local, float(self.shared.ctx.model.hidden))
        width = param_bytes(sc)
        quantize, reduce, finish = q.pass_bytes(width)
        steps = (("dpl", q.intra_bytes, "qgz_intra_all_to_all", quantize), ("dpx", q.inter_bytes, "qgz_inter_all_to_all", reduce))
        for group, (data, scales), name, before in steps:
            yield from self._side_pass(before)
            for nbytes, suffix in ((data, ""), (scales, "_scales")):
                yield from self.shared.comms.collective(
                    self.rank, self.stage, group, "all_to_all", nbytes, name + suffix, op.microbatch, op.chunk, layer
                )
        yield from self._side_pass(finish)


def _merged(units: list[Unit]) -> Unit:
    """Units reduced as one bucket: their layers, in backward order, and parameters summed."""
    return Unit(
        tuple(x for u in units for x in u.layers),
        (),
        sum(u.params for u in units),
        sum(u.layer_params for u in units),
        expert_params=sum(u.expert_params for u in units),
        expert_layer_params=sum(u.expert_layer_params for u in units),
    )
