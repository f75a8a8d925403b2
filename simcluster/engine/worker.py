"""One simulated GPU: walks its stage's schedule, runs compute and starts communication.

Dependencies follow the schedule's model positions: F(mb) at virtual stage k waits for the
activation from k-1, B(mb) at k for the gradient from k+1; W follows B on the same stage.
Gradient buckets are reduced as they become ready on the last microbatch; the optimizer waits
for all reductions and, with tied embeddings split over stages, the embedding gradient sync; ZeRO-1/2 parameter all-gathers are waited for layer by layer in the
forward (overlapped) or run after the optimizer (not overlapped).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from simcluster.engine.comms import Comms
from simcluster.engine.offload import ActivationOffload
from simcluster.engine.plan import HEAD, StagePlan, Unit
from simcluster.engine.recorder import Recorder
from simcluster.parallelism import tied
from simcluster.parallelism.data import Bucket, gather_bytes, grad_reduce_bytes
from simcluster.parallelism.segments import PHASE_KIND, Comm, Compute, Segment, Work
from simcluster.schedules import PipeOp, locate
from simcluster.stragglers import Stragglers

#: the event name of clearing the gradient buffer at a step's start (dp.zero_grad_buffer)
GRAD_ZERO = "zero_grad_buffer"
# compute segments of a layer's MLP (dense or MoE): their weight gradients precede attention's
_MLP_SEGMENTS = ("mlp", "moe", "experts", "router", "unpermute")


def _forward_position(layer: int) -> float:
    """Where a unit's layer index runs in a chunk's forward: the embedding (-1) first, the
    LM head (``HEAD``) last."""
    if layer == HEAD:
        return math.inf
    return -math.inf if layer < 0 else float(layer)


def _first_in_forward(layers: tuple[int, ...]) -> int:
    """The layer of ``layers`` (unit indices, any order) that a chunk's forward runs first."""
    return min(layers, key=_forward_position)


def _mlp_cut(unit: Unit) -> int | None:
    """Index just after the last MLP compute of a unit holding one transformer layer (the
    point where the MLP's weight gradients exist) when attention work follows it, or None.
    The frameworks defer some weight gradients (the LM head's into the next layer's unit), so
    the cut is after the MLP's last segment, not its first."""
    if sum(1 for layer in unit.layers if layer >= 0) != 1:
        return None
    last = None
    attention_after = False
    for i, seg in enumerate(unit.segments):
        if not isinstance(seg, Compute) or seg.kind == "recompute":
            continue
        if seg.name.startswith(_MLP_SEGMENTS):
            last, attention_after = i, False
        elif seg.name.startswith("attn"):
            attention_after = True
    return last + 1 if last is not None and attention_after else None


def _unit_id(unit: Unit) -> tuple[int, ...]:
    """A unit's layers in a phase-independent order (a backward unit lists them reversed)."""
    return tuple(sorted(unit.layers))


@dataclass
class Shared:
    """State shared by all workers of one simulation."""

    env: simpy.Environment
    comms: Comms
    recorder: Recorder
    ctx: Any  # Context
    plans: list[StagePlan]
    optimizer_seconds: list[float]
    p2p_bytes: float
    # seconds FSDP2's copy-out after a gather / copy-in before a reduce-scatter take, given the
    # unit's parameters (None unless zero3.buffers: copies)
    fsdp2_copy_seconds: tuple[Callable[[float], float], Callable[[float], float]] | None = None
    stragglers: Stragglers = field(default_factory=Stragglers)
    # host seconds per stage of unpacking the post-optimizer parameter gather tensor by tensor
    # (dp.param_unpack: per_tensor; empty otherwise)
    unpack_seconds: list[float] = field(default_factory=list)
    # compute-stream seconds of the framework's pass over a gradient bucket before its
    # reduction (dp.nan_check, dp.prescale; None when neither)
    bucket_pass_seconds: Callable[[Bucket], float] | None = None
    # bytes per second of a GPU's host link for activation copies (0: no activation offload)
    host_link_bytes_per_s: float = 0.0
    # seconds per stage of the optimizer's host side (training.optimizer_offload: copies over
    # the host link and the CPU update; empty or zero without it)
    offloaded_seconds: list[float] = field(default_factory=list)
    # compute-stream seconds per stage of clearing the gradient buffer before the first forward
    # (dp.zero_grad_buffer; empty otherwise)
    grad_zero_seconds: list[float] = field(default_factory=list)
    # host seconds of one op issued from Python (efficiency.host_op_us): the first kernel of a
    # block waits that long after the host starts issuing it; a sync's read-back as long
    host_op_s: float = 0.0
    # bytes of the receiving stage's TP all-gather after a scatter/gather pipeline transfer
    # (overlap.pp_scatter_gather; 0: the whole tensor is sent)
    p2p_gather_bytes: float = 0.0
    arrivals: dict[tuple, simpy.Event] = field(default_factory=dict)
    # serial p2p: a receiver has entered its blocking receive for this input
    receives: dict[tuple, simpy.Event] = field(default_factory=dict)

    def arrival(self, key: tuple) -> simpy.Event:
        ev = self.arrivals.get(key)
        if ev is None:
            ev = self.arrivals[key] = self.env.event()
        return ev

    def receive(self, key: tuple) -> simpy.Event:
        ev = self.receives.get(key)
        if ev is None:
            ev = self.receives[key] = self.env.event()
        return ev


@dataclass
class Pace:
    """The two ops of an F&B pair: their shared compute stream, and the backward's progress.

    The forward does not start its layer i before the backward has started its layer i - 1,
    so the pair is interleaved layer by layer, as DualPipe arranges a forward and a backward chunk
    (DeepSeek-V3 report Fig. 4: one layer's attention, dispatch, MLP and combine of each
    direction alternating) and Megatron-Core's combined 1F1B calls them. Left free, the
    shorter forward would run ahead and leave the backward's last layers, and their
    all-to-alls, with nothing to hide under.
    """

    lock: simpy.Resource
    started: list[simpy.Event]

    def step(self, unit: int, lead: bool) -> Generator:
        """Before ``unit``: the backward (``lead``) announces it; the forward waits until the
        backward has started the layer before (so the forward leads by at most one layer)."""
        if lead:
            if unit < len(self.started):
                self.started[unit].succeed()
            return
        ahead = unit - 1
        if 0 <= ahead < len(self.started) and not self.started[ahead].triggered:
            yield self.started[ahead]


@dataclass
class Worker:
    """The SimPy process of one simulated rank."""

    shared: Shared
    rank: int
    stage: int
    activations: float = 0.0
    reductions: list[simpy.Process] = field(default_factory=list)
    # (bucket index, microbatch) whose reduction has started (ZeRO-2 reduces every microbatch)
    buckets_started: set[tuple[int, int]] = field(default_factory=set)
    gathers: dict[tuple, simpy.Event] = field(default_factory=dict)
    # ZeRO-3 gathers already copied out into per-parameter tensors (zero3.buffers: copies)
    copied_out: set[tuple] = field(default_factory=set)
    _last_dp: simpy.Process | None = None
    # when the host (the rank's Python thread) has issued everything so far; it runs ahead of
    # the GPU until a segment with ``sync`` makes it wait (Compute.host, Compute.sync)
    host_t: float = 0.0
    end_time: float = 0.0
    ops_done: int = 0
    _offload: ActivationOffload | None = None

    @property
    def offload(self) -> ActivationOffload:
        """This rank's activation copies to and from host memory (created on first use)."""
        if self._offload is None:
            self._offload = ActivationOffload(self.shared.env, self.shared.host_link_bytes_per_s, self._record_copy)
        return self._offload

    def _record_copy(self, stream: str, name: str, key: tuple, start: float, end: float, nbytes: float) -> None:
        mb, chunk, layer = key
        self.shared.recorder.add(
            self.rank, self.stage, stream, "copy", "host", name, mb, chunk, layer, start, end, nbytes
        )

    @property
    def plan(self) -> StagePlan:
        return self.shared.plans[self.stage]

    # --- helpers ------------------------------------------------------------------------
    def _record(
        self, kind: str, name: str, mb: int, chunk: int, layer: int, start: float, work: Work
    ) -> None:
        self.shared.recorder.spent(self.rank, kind, work, self.shared.env.now - start)
        self.shared.recorder.add(
            self.rank,
            self.stage,
            "compute",
            kind,
            "",
            name,
            mb,
            chunk,
            layer,
            start,
            self.shared.env.now,
        )

    def _memory(self, loss: float = 0.0) -> None:
        """Record this stage's memory now; ``loss`` = the loss's transient logit copies held."""
        self.shared.recorder.memory(
            self.stage, self.shared.env.now, self.plan.static_bytes, self.activations + loss, loss=loss
        )

    def _compute(self, seconds: float) -> Generator:
        # a known straggler's kernels take longer (stragglers.py); compute also slows while an
        # interfering collective holds SMs (engine/interference.py)
        seconds *= self.shared.stragglers.compute_factor(self.rank)
        share = self.shared.comms.sm_share
        if share is None:
            yield self.shared.env.timeout(seconds)
        else:
            yield from share.compute(self.rank, seconds)

    def _comm(self, seg: Comm, mb: int, chunk: int) -> Generator:
        yield from self.shared.comms.collective(
            self.rank, self.stage, seg.group, seg.op, seg.nbytes, seg.name, mb, chunk, seg.layer,
            holds_sms=seg.holds_sms, sms=seg.sms,
        )

    def run_segments(
        self,
        segments: tuple[Segment, ...] | list[Segment],
        kind: str,
        mb: int,
        chunk: int,
        lock: simpy.Resource | None = None,
    ) -> Generator:
        """Execute segments in order; overlapped comms run under the next compute block.

        Several overlapped comms in a row (an MLP block's all-gather and reduce-scatter around
        one fused compute segment) all run under that block, one after the other on their
        stream; a blocking comm first waits for the overlapped ones before it.
        ``lock`` is the compute stream when two ops share it (an F&B pair).
        """
        env = self.shared.env
        pending: list[simpy.Process] = []
        for seg in segments:
            if isinstance(seg, Comm):
                issued = self._issue(seg.host)
                if seg.overlap:
                    pending.append(env.process(self._issued_comm(seg, mb, chunk, issued)))
                    continue
                for p in pending:
                    yield p
                pending = []
                yield from self._host_wait(issued, mb, chunk, seg.layer)
                yield env.process(self._comm(seg, mb, chunk))
                continue
            issued = self._issue(seg.host)
            if seg.seconds > 0 or seg.host > 0:
                if lock is not None:
                    with lock.request() as req:
                        yield req
                        yield from self._host_compute(seg, kind, mb, chunk, issued)
                else:
                    yield from self._host_compute(seg, kind, mb, chunk, issued)
            if seg.sync:
                self._host_sync()
            for p in pending:
                yield p
            pending = []
        for p in pending:
            yield p

    # --- the host ------------------------------------------------------------------------
    def _issue(self, host: float) -> float:
        """Advance the host clock by ``host`` seconds of issuing; returns when it is done."""
        self.host_t += host
        return self.host_t

    def _host_sync(self) -> None:
        """A device-to-host read the next ops depend on: the host waits for the GPU to get
        here, then spends one Python op reading the value back."""
        self.host_t = max(self.host_t, self.shared.env.now) + self.shared.host_op_s

    def _host_wait(self, until: float, mb: int, chunk: int, layer: int) -> Generator:
        """The compute stream idles until the host has issued its next kernel."""
        env = self.shared.env
        if until > env.now:
            start = env.now
            yield env.timeout(until - env.now)
            self._record("host", "host_issue", mb, chunk, layer, start, Work.of(host=env.now - start))

    def _host_compute(self, seg: Compute, kind: str, mb: int, chunk: int, issued: float) -> Generator:
        """A compute block issued by a host that may lag the GPU: its kernels run as they are
        issued, so the block cannot start before the host issued its first kernel (one Python
        op's time) nor end before the host issued its last."""
        env = self.shared.env
        yield from self._host_wait(issued - seg.host + min(seg.host, self.shared.host_op_s), mb, chunk, seg.layer)
        if seg.seconds > 0:
            start = env.now
            yield from self._compute(seg.seconds)
            self._record(seg.kind or kind, seg.name, mb, chunk, seg.layer, start, seg.work)
        yield from self._host_wait(issued, mb, chunk, seg.layer)

    def _issued_comm(self, seg: Comm, mb: int, chunk: int, issued: float) -> Generator:
        """An overlapped collective starts once the host has issued it."""
        env = self.shared.env
        if issued > env.now:
            yield env.timeout(issued - env.now)
        yield from self._comm(seg, mb, chunk)

    # --- the step -----------------------------------------------------------------------
    def run(self) -> Generator:
        env = self.shared.env
        sc = self.shared.ctx.scenario
        self._memory()
        zero = self.shared.ctx.layout.zero
        if zero in (1, 2) and sc.overlap.param_gather:
            self._start_param_gathers()
        if self.shared.grad_zero_seconds and self.shared.grad_zero_seconds[self.stage] > 0:
            # the buffer is cleared before the first forward; the parameter gathers launched by
            # the previous step's optimizer run beside it on their own stream
            start = env.now
            seconds = self.shared.grad_zero_seconds[self.stage]
            yield from self._compute(seconds)
            self._record("optimizer", GRAD_ZERO, -1, -1, -1, start, Work.of(optimizer=seconds))
        previous: PipeOp | None = None
        serial = sc.overlap.pp_p2p == "serial"
        ops = self.plan.ops
        i = 0
        while i < len(ops):
            op = ops[i]
            if i + 1 < len(ops) and ops[i + 1].overlap:
                # F&B pair (DualPipe, Megatron's combined 1F1B): both inputs first, then the
                # two run interleaved layer by layer on the compute stream so each one's
                # communication hides behind the other's compute
                pair = ops[i + 1]
                yield from self._wait_inputs(op)
                yield from self._wait_inputs(pair)
                backward_units = self.plan.chunks[pair.chunk].phases[pair.kind]
                pace = Pace(simpy.Resource(env, capacity=1), [env.event() for _ in backward_units])
                procs = [
                    env.process(self._execute(op, previous, pace)),
                    env.process(self._execute(pair, previous, pace, lead=True)),
                ]
                yield procs[0] & procs[1]
                sends = [self._send_outputs(x) for x in (op, pair)]
                previous = pair
                i += 2
                self.ops_done += 2
            elif serial:
                yield from self._serial_step(op, previous)
                sends = []
                previous = op
                i += 1
                self.ops_done += 1
            else:
                yield from self._wait_inputs(op)
                yield from self._execute(op, previous)
                sends = [self._send_outputs(op)]
                previous = op
                i += 1
                self.ops_done += 1
            for send in sends:
                if send is not None and not sc.overlap.pp_comm:
                    yield send  # blocking p2p (Megatron without overlap_p2p_comm)
        if serial and previous is not None:
            yield from self._blocking_send(previous)
        if not sc.overlap.dp_grad_reduce:
            for b in self.plan.buckets:
                yield from self._bucket_pass(b, "optimizer", -1)
                yield env.process(self._reduce_bucket(b))
        for proc in self.reductions:
            if not proc.triggered:
                yield proc
        if self.plan.tied_params > 0:
            # after the DP reduction, before the optimizer, blocking (see parallelism/tied.py)
            yield from self.shared.comms.collective(
                self.rank,
                self.stage,
                tied.GROUP,
                "all_reduce",
                self.plan.tied_params * grad_reduce_bytes(sc),
                tied.NAME,
            )
        start = env.now
        seconds = self.shared.optimizer_seconds[self.stage]
        yield from self._compute(seconds)
        self._record("optimizer", "optimizer_step", -1, -1, -1, start, Work.of(optimizer=seconds))
        host = self.shared.offloaded_seconds[self.stage] if self.shared.offloaded_seconds else 0.0
        if host > 0:
            # the host link and the CPU: neither a slow GPU nor NCCL's SMs stretch it
            start = env.now
            yield env.timeout(host)
            self._record("optimizer", "optimizer_offload", -1, -1, -1, start, Work.of(optimizer=host))
        if zero in (1, 2) and not sc.overlap.param_gather:
            for b in self.plan.buckets:
                yield env.process(self._gather_bucket(b))
        if self.shared.unpack_seconds and self.shared.unpack_seconds[self.stage] > 0:
            start = env.now
            seconds = self.shared.unpack_seconds[self.stage]
            yield env.timeout(seconds)  # host time: neither a slow GPU nor NCCL's SMs stretch it
            self._record("host", "param_unpack", -1, -1, -1, start, Work.of(host=seconds))
        yield from self._drain()
        self.end_time = env.now

    def _drain(self) -> Generator:
        # the step ends when this rank's outstanding gathers and sends are done
        for ev in list(self.gathers.values()):
            if not ev.triggered:
                yield ev

    def _input_key(self, op: PipeOp) -> tuple | None:
        """The arrival this op waits for (None: its input is local, e.g. the first stage's F)."""
        sh = self.shared
        sched, spec = sh.ctx.schedule, sh.ctx.spec
        k = sched.virtual_stage(spec, self.stage, op.chunk, op.microbatch)
        if op.kind == "F" and k > 0:
            return (self.rank, "F", op.microbatch, k)
        if op.kind in ("B", "BW") and k < sched.virtual_stages(spec) - 1:
            return (self.rank, "B", op.microbatch, k)
        return None

    def _wait_inputs(self, op: PipeOp) -> Generator:
        key = self._input_key(op)
        if key is not None:
            yield self.shared.arrival(key)

    def _serial_step(self, op: PipeOp, previous: PipeOp | None) -> Generator:
        """DeepSpeed's pipeline engine (pipe/schedule.py TrainSchedule): each step's
        instructions run one after another, every send and receive blocking. A forward step
        receives its activation, then sends the previous backward's gradient; a backward step
        sends the previous forward's activation, then receives its gradient (warm-up and
        cool-down steps keep the same order around their empty slot)."""
        receive_first = previous is not None and previous.kind in ("B", "BW") and op.kind == "F"
        if previous is not None and not receive_first:
            yield from self._blocking_send(previous)
        key = self._input_key(op)
        if key is not None:
            receiving = self.shared.receive(key)
            if not receiving.triggered:
                receiving.succeed()
            yield self.shared.arrival(key)
        if previous is not None and receive_first:
            yield from self._blocking_send(previous)
        yield from self._execute(op, previous)

    def _blocking_send(self, op: PipeOp) -> Generator:
        send = self._send_outputs(op)
        if send is not None:
            yield send

    def _execute(
        self, op: PipeOp, previous: PipeOp | None, pace: Pace | None = None, lead: bool = False
    ) -> Generator:
        cplan = self.plan.chunks[op.chunk]
        kind = PHASE_KIND[op.kind]
        units = cplan.phases[op.kind]
        zero3 = self.shared.ctx.layout.zero == 3
        pipelined = self.shared.ctx.layout.zero3_pipelined
        # ZeRO-0/1 reduce gradients once per step (last microbatch); ZeRO-2 keeps only a gradient
        # shard, so it reduce-scatters every microbatch (DeepSpeed stage 2 with accumulation)
        last_mb = (
            self.plan.last_backward.get(op.chunk) == op.microbatch
            or self.shared.ctx.layout.zero == 2
        )
        if op.kind == "F":
            self.activations += cplan.activation_bytes
            self._memory()
        resident = (
            previous is not None
            and previous.kind == "F"
            and previous.microbatch == op.microbatch
            and previous.chunk == op.chunk
        )
        lock = pace.lock if pace is not None else None
        offloaded = cplan.offload_bytes if op.kind in ("F", "B", "BW") else {}
        for i, unit in enumerate(units):
            if pace is not None:
                yield from pace.step(i, lead)
            if offloaded:
                yield from self._offload_before(op, units, i, offloaded)
            if zero3 and op.kind != "W":
                yield from self._zero3_gather(units, i, op, skip_first=resident and op.kind != "F")
            elif op.kind == "F":
                yield from self._wait_param_gather(op.chunk, unit)
            # the loss's logit copies live only while the LM head and the loss run
            loss = op.kind == "F" and HEAD in unit.layers and cplan.loss_transient_bytes > 0
            if loss:
                self._memory(loss=cplan.loss_transient_bytes)
            hooks = op.kind in ("W", "BW") and not zero3 and last_mb
            cut = _mlp_cut(unit) if hooks else None
            if cut is None:
                yield from self.run_segments(unit.segments, kind, op.microbatch, op.chunk, lock)
            else:
                # buckets that close on this layer's MLP weights go out before its attention
                yield from self.run_segments(unit.segments[:cut], kind, op.microbatch, op.chunk, lock)
                # with every bucket ahead of them (buckets are in gradient order, and the
                # frameworks launch them in that order: the LM head's, deferred into this unit
                # ahead of the MLP's weight gradients, goes first)
                yield from self._bucket_hooks(op.chunk, unit, kind, op.microbatch, early=True)
                yield from self.run_segments(unit.segments[cut:], kind, op.microbatch, op.chunk, lock)
            if loss:
                self._memory()
            if offloaded and op.kind == "F":
                for layer in unit.layers:
                    if layer in offloaded:
                        self.offload.save((op.microbatch, op.chunk, layer), offloaded[layer])
            if op.kind in ("W", "BW"):
                if zero3 and not pipelined:
                    self._spawn_zero3_reduce(unit, op)
                elif last_mb and not zero3:
                    yield from self._bucket_hooks(op.chunk, unit, kind, op.microbatch)
        if pipelined and op.kind in ("W", "BW") and last_mb:
            # torch.distributed.pipelining runs FSDP's post-backward for the whole stage after
            # its last backward: every layer's reduce-scatter issued then, in forward order
            self._spawn_reduction(self._zero3_reduce_all(list(reversed(units)), op))
        frac = self.plan.wgrad_fraction
        if op.kind == "B":
            self.activations -= cplan.activation_bytes * (1 - frac)
            self._memory()
        elif op.kind == "W":
            self.activations -= cplan.activation_bytes * frac
            self._memory()
        elif op.kind == "BW":
            self.activations -= cplan.activation_bytes
            self._memory()

    def _offload_before(self, op: PipeOp, units: list[Unit], i: int, offloaded: dict[int, float]) -> Generator:
        """Before unit ``i``: in the forward, the copy out of the unit two back must be done (two
        buffers); in the backward, this unit's copy back is started if it was not, the next
        unit's is started, and this one waits for its own."""
        def keys(unit: Unit) -> list[tuple]:
            return [(op.microbatch, op.chunk, layer) for layer in unit.layers if layer in offloaded]

        if op.kind == "F":
            if i >= 2:
                yield from self.offload.wait(self.offload.saved.get(k) for k in keys(units[i - 2]))
            return
        for k in keys(units[i]):
            self.offload.load(k, offloaded[k[2]])
        if i + 1 < len(units):
            for k in keys(units[i + 1]):
                self.offload.load(k, offloaded[k[2]])
        yield from self.offload.wait(self.offload.loaded.get(k) for k in keys(units[i]))

    def _send_outputs(self, op: PipeOp) -> simpy.Process | None:
        sh = self.shared
        sched, spec = sh.ctx.schedule, sh.ctx.spec
        if op.kind == "W":
            return None
        k = sched.virtual_stage(spec, self.stage, op.chunk, op.microbatch)
        target = k + 1 if op.kind == "F" else k - 1
        if target < 0 or target >= sched.virtual_stages(spec):
            return None
        dst_stage, _ = locate(sched, spec, target, op.microbatch)
        direction = "F" if op.kind == "F" else "B"
        lay = sh.ctx.layout
        coords = lay.coords(self.rank)
        dst = lay.rank(tp=coords["tp"], cp=coords["cp"], dp=coords["dp"], pp=dst_stage)
        event = sh.arrival((dst, direction, op.microbatch, target))
        if dst_stage == self.stage:
            event.succeed()
            return None
        pairs = sh.comms.stage_pairs(self.stage, dst_stage)
        name = "activation" if direction == "F" else "gradient"

        serial = sh.ctx.scenario.overlap.pp_p2p == "serial"

        def transfer() -> Generator:
            if serial:  # NCCL send/recv: the data moves once the receiver is in its receive
                yield sh.receive((dst, direction, op.microbatch, target))
            yield from sh.comms.p2p(
                self.rank,
                dst,
                self.stage,
                dst_stage,
                sh.p2p_bytes,
                name,
                op.microbatch,
                op.chunk,
                pairs,
            )
            if sh.p2p_gather_bytes:  # the receiver reassembles the slices over its TP group
                yield from sh.comms.collective(
                    dst, dst_stage, "ppg", "all_gather", sh.p2p_gather_bytes, f"{name} gather",
                    op.microbatch, op.chunk,
                )  # fmt: skip
            event.succeed()

        return sh.env.process(transfer())

    # --- data parallel / ZeRO -------------------------------------------------------------
    def _bucket_hooks(self, chunk: int, unit: Unit, kind: str, mb: int, early: bool = False) -> Generator:
        """Start, in bucket order, the reduction of the buckets this unit's backward completes,
        each once; ``early``: only up to the last one that closes on the unit's MLP weights."""
        if not self.shared.ctx.scenario.overlap.dp_grad_reduce:
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
            yield from self._bucket_pass(b, kind, mb)
            self._spawn_reduction(self._reduce_bucket(b))

    def _bucket_pass(self, bucket: Bucket, kind: str, mb: int) -> Generator:
        """The framework's pass over a gradient bucket before it is reduced (Megatron's NaN
        check and 1/dp scaling), on the compute stream: the reduction starts after it and the
        backward's next kernels wait for it."""
        if self.shared.bucket_pass_seconds is None:
            return
        seconds = self.shared.bucket_pass_seconds(bucket)
        if seconds <= 0:
            return
        start = self.shared.env.now
        yield from self._compute(seconds)
        self._record(kind, "grad_bucket_pass", mb, bucket.chunk, bucket.layers[0], start, Work.of(memory=seconds))
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
        nbytes = bucket.params * grad_reduce_bytes(sc)
        yield from self._dp_reduce(bucket.group, op, nbytes, f"grad_{op}", -1, bucket.chunk, bucket.layers[0])

    def _sharding(self, group: str) -> str:
        """The group ZeRO shards over: the replica's ranks under hybrid sharding (dense only)."""
        return "dps" if group == "dp" and self.shared.ctx.layout.zero_replicas > 1 else group

    def _dp_reduce(
        self, group: str, op: str, nbytes: float, name: str, mb: int, chunk: int, layer: int
    ) -> Generator:
        """A gradient reduction; under hybrid sharding the reduce-scatter stays inside the
        replica and the replicas then all-reduce their shard (PyTorch HSDP, Megatron's
        distributed-optimizer instances)."""
        comms, shard = self.shared.comms, self._sharding(group)
        yield from comms.collective(self.rank, self.stage, shard, op, nbytes, name, mb, chunk, layer)
        if shard != group:
            part = nbytes / self.shared.ctx.layout.zero_group
            yield from comms.collective(
                self.rank, self.stage, "dpr", "all_reduce", part, f"{name}_replicas", mb, chunk, layer
            )

    def _gather_bucket(self, bucket: Any) -> Generator:
        nbytes = gather_bytes(self.shared.ctx.scenario, bucket.params, bucket.layer_params)
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
        microbatch's forward one (kept for the backward: zero3.reshard_after_forward false), or
        the step's (kept from the first forward to the last backward under a pipeline)."""
        lay = self.shared.ctx.layout
        if lay.zero3_keep_for_backward:
            return ("step", op.chunk) if lay.zero3_pipelined else ("F", op.microbatch, op.chunk)
        return (op.kind, op.microbatch, op.chunk)

    def _zero3_gather(self, units: list[Unit], i: int, op: PipeOp, skip_first: bool) -> Generator:
        """Gather unit i's parameters (prefetching unit i+1 when zero3.prefetch)."""
        prefetch = self.shared.ctx.scenario.zero3.prefetch
        key = self._gather_key(op)
        want = [i, i + 1] if prefetch else [i]
        for j in want:
            if j >= len(units) or (j == 0 and skip_first):
                continue
            gkey = (key, _unit_id(units[j]))
            if gkey not in self.gathers:
                nbytes = gather_bytes(self.shared.ctx.scenario, units[j].params, units[j].layer_params)
                self.gathers[gkey] = self._spawn_dp(
                    self.shared.comms.collective(
                        self.rank,
                        self.stage,
                        self._sharding("dp"),
                        "all_gather",
                        nbytes,
                        "zero3_param_all_gather",
                        op.microbatch,
                        op.chunk,
                        units[j].layers[0],
                    )
                )
        gkey = (key, _unit_id(units[i]))
        ev = self.gathers.get(gkey)
        if ev is None:
            return
        if not ev.triggered:
            yield ev
        copies = self.shared.fsdp2_copy_seconds
        if copies is not None and gkey not in self.copied_out:
            # the gathered buffer copied into per-parameter tensors, once per gather
            self.copied_out.add(gkey)
            start = self.shared.env.now
            seconds = copies[0](units[i].params)
            yield from self._compute(seconds)
            kind = PHASE_KIND[op.kind]
            work = Work.of(memory=seconds)
            self._record(kind, "fsdp2_copy_out", op.microbatch, op.chunk, units[i].layers[0], start, work)

    def _spawn_zero3_reduce(self, unit: Unit, op: PipeOp) -> None:
        self._spawn_reduction(self._zero3_reduce(unit, op))

    def _zero3_reduce_all(self, units: list[Unit], op: PipeOp) -> Generator:
        """A stage's gradient reduce-scatters one after another (its copy-ins on the same
        stream, each before its own collective)."""
        for unit in units:
            if unit.params > 0:
                yield from self._zero3_reduce(unit, op)

    def _zero3_reduce(self, unit: Unit, op: PipeOp) -> Generator:
        copies = self.shared.fsdp2_copy_seconds
        if copies is not None:  # FSDP2 copy-casts the gradients on the reduce-scatter stream
            seconds = copies[1](unit.params) * self.shared.stragglers.compute_factor(self.rank)
            yield self.shared.env.timeout(seconds)
        yield from self._dp_reduce(
            "dp",
            "reduce_scatter",
            unit.params * grad_reduce_bytes(self.shared.ctx.scenario),
            "zero3_grad_reduce_scatter",
            op.microbatch,
            op.chunk,
            unit.layers[0],
        )
