"""One simulated GPU: walks its stage's schedule, runs compute and starts communication.

Dependencies follow the schedule's model positions: F(mb) at virtual stage k waits for the
activation from k-1, B(mb) at k for the gradient from k+1; W follows B on the same stage.
Gradient buckets are reduced as they become ready on the last microbatch; the optimizer waits
for all reductions and, with tied embeddings split over stages, the embedding gradient sync;
ZeRO-1/2 parameter all-gathers are waited for layer by layer in the forward (overlapped) or run
after the optimizer (not overlapped). The pipeline sends and receives are
:class:`~simcluster.engine.pipe_io.PipelineIO`'s, the data-parallel and ZeRO collectives
:class:`~simcluster.engine.dp_ops.DataParallelOps`'; the state all ranks share is
:class:`~simcluster.engine.shared.Shared`.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from functools import cached_property

import simpy

from simcluster.engine.dp_ops import DataParallelOps
from simcluster.engine.offload import ActivationOffload
from simcluster.engine.pair_ledger import PairLedger
from simcluster.engine.pair_stream import FOLLOW, LEAD, Lane, PairStream
from simcluster.engine.pipe_io import PipelineIO
from simcluster.engine.plan import HEAD, ChunkPlan, StagePlan, Unit
from simcluster.engine.shared import Shared
from simcluster.parallelism import tied
from simcluster.parallelism.data import grad_reduce_bytes
from simcluster.parallelism.segments import PHASE_KIND, Comm, Compute, Segment, Work
from simcluster.pipeline_p2p_overlap import send_blocks, waits_at_turns
from simcluster.schedules import PipeOp
from simcluster.stash import freed_share, stash_change, unit_moves

__all__ = ["GRAD_ZERO", "Worker"]

#: the event name of clearing the gradient buffer at a step's start (dp.zero_grad_buffer)
GRAD_ZERO = "zero_grad_buffer"
# compute segments of a layer's MLP (dense or MoE): their weight gradients precede attention's
_MLP_SEGMENTS = ("mlp", "moe", "experts", "router", "unpermute", "shared_experts")


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


def _enqueued_with(segments: tuple[Segment, ...] | list[Segment], i: int) -> range:
    """The collectives the host enqueues together from ``segments[i]``: an overlapped one
    alone, a blocking one with the blocking ones right after it."""
    first = segments[i]
    j = i + 1
    if isinstance(first, Comm) and not first.overlap:
        while j < len(segments):
            nxt = segments[j]
            if not isinstance(nxt, Comm) or nxt.overlap:
                break
            j += 1
    return range(i, j)


def _turn_points(segments: tuple[Segment, ...] | list[Segment]) -> frozenset[int]:
    """Where an op of an F&B pair hands the stream over: the first of a run of blocking
    collectives (:func:`_enqueued_with`) that holds an expert-parallel all-to-all. Megatron's
    dispatch and combine nodes carry the expert-TP all-gather after the all-to-all and its
    reduce-scatter before, all on the communication stream, so the turn passes before either."""
    out: set[int] = set()
    i = 0
    while i < len(segments):
        seg = segments[i]
        if not isinstance(seg, Comm) or seg.overlap:
            i += 1
            continue
        run = _enqueued_with(segments, i)
        if any(isinstance(s, Comm) and s.group == "ep" for s in segments[run.start : run.stop]):
            out.add(i)
        i = run.stop
    return frozenset(out)


def _exchanges(unit: Unit) -> bool:
    """Whether a unit issues a blocking expert-parallel all-to-all (where a pair's turn passes)."""
    return bool(_turn_points(unit.segments))


@dataclass
class Worker(PipelineIO, DataParallelOps):
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
    dequantized: set[tuple] = field(default_factory=set)
    _last_dp: simpy.Process | None = None
    _last_ar: simpy.Process | None = None  # PyTorch FSDP's last HSDP all-reduce (own stream)
    # the last ZeRO-3 reduce-scatter done (FSDP2 waits for it before issuing the next)
    scattered: simpy.Event | None = None
    # DeepSpeed ZeRO-3: units whose gradients sit in the contiguous bucket, not yet reduced
    z3_bucket: list[Unit] = field(default_factory=list)
    kept_gathers: dict[tuple[int, int], int] = field(default_factory=dict)
    # when the host (the rank's Python thread) has issued everything so far; it runs ahead of
    # the GPU until a segment with ``sync`` makes it wait (Compute.host, Compute.sync)
    host_t: float = 0.0
    end_time: float = 0.0
    ops_done: int = 0
    _offload: ActivationOffload | None = None
    # this stage's most activation memory with the offloads' moved bytes as the copies have them
    _most_moved: float = 0.0

    @property
    def offload(self) -> ActivationOffload:
        """This rank's activation copies to and from host memory (created on first use)."""
        if self._offload is None:
            self._offload = ActivationOffload(self.shared.env, self.shared.host_link_bytes_per_s, self._record_copy)
            self._offload.on_change = self._offload_memory
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

    @cached_property
    def _records_memory(self) -> bool:
        """Whether this rank draws its stage's memory timeline: when every rank is simulated,
        the stage's representative does (its ranks hold the same bytes at different times, and
        one timeline per stage is drawn)."""
        drawn: bool = self.rank == self.shared.ctx.layout.representative(self.stage)
        return drawn

    def _memory(self, loss: float = 0.0, working: float = 0.0) -> None:
        """Record this stage's memory now; ``loss`` = the loss's transient logit copies held,
        ``working`` = a context-parallel attention's buffers beyond the stash."""
        if not self._records_memory:
            return
        self.shared.recorder.memory(
            self.stage, self.shared.env.now, self.plan.static_bytes, self.activations + loss + working, loss=loss
        )
        self._offload_memory(loss + working)

    def _offload_memory(self, transient: float = 0.0) -> None:
        """The stage's memory with the offloads' moved bytes as they are now, not as walked."""
        if self._offload is not None and self._records_memory:
            moved = self._offload.resident - self._offload.allowance
            self._most_moved = max(self._most_moved, self.activations + transient + moved)

    def _cp_working(self, cplan: ChunkPlan, kind: str) -> None:
        """Record the context-parallel attention's working bytes on top of the stash as it is
        now (the whole chunk's: at F's end, at B's start), then the stash alone again."""
        working = cplan.cp_working_bytes[0 if kind == "F" else 1]
        if working > 0:
            self._memory(working=working)
            self._memory()

    def _grad_transient(self, nbytes: float) -> None:
        """Record the 16-bit weight gradients a backward holds beyond the static memory on the
        stash as it is now (grad_lifetime.py), then the stash alone again."""
        if nbytes > 0:
            self._memory(working=nbytes)
            self._memory()

    def _compute(self, seconds: float) -> Generator:
        # a known straggler's kernels take longer (stragglers.py); compute also slows while an
        # interfering collective holds SMs (engine/interference.py)
        seconds *= self.shared.stragglers.compute_factor(self.rank)
        share = self.shared.comms.sm_share
        if share is None:
            yield self.shared.env.timeout(seconds)
        else:
            yield from share.compute(self.rank, seconds)

    def _comm(self, seg: Comm, mb: int, chunk: int, ticket: int | None = None) -> Generator:
        yield from self.shared.comms.collective(
            self.rank, self.stage, seg.group, seg.op, seg.nbytes * seg.uneven, seg.name, mb, chunk, seg.layer,
            holds_sms=seg.holds_sms, sms=seg.sms, ticket=ticket, shown_bytes=seg.nbytes, nccl=seg.nccl,
        )

    def run_segments(
        self,
        segments: tuple[Segment, ...] | list[Segment],
        kind: str,
        mb: int,
        chunk: int,
        lane: Lane | None = None,
    ) -> Generator:
        """Execute segments in order; overlapped comms run under the next compute block.

        Several overlapped comms in a row (an MLP block's all-gather and reduce-scatter around
        one fused compute segment) all run under that block, one after the other on their
        stream; a blocking comm first waits for the overlapped ones before it.
        ``lane`` is this op's turn on the compute stream when two ops share it (an F&B pair):
        it hands the stream over as it issues a blocking expert-parallel exchange.
        """
        env = self.shared.env
        pending: list[simpy.Process] = []
        turns = _turn_points(segments) if lane is not None else frozenset()
        # the host enqueues a run of blocking collectives back to back (the GPU streams wait,
        # not the host), so the run takes its places in the issue order together
        tickets: dict[int, int] = {}
        for i, seg in enumerate(segments):
            if isinstance(seg, Comm):
                if lane is not None and i not in tickets:
                    # the host issues an op's collectives in the op's turn, as its kernels
                    yield from lane.wait_turn()
                issued = self._issue(seg.host)
                ticket = self._ticket_of(segments, i, tickets)
                if seg.overlap:
                    pending.append(env.process(self._issued_comm(seg, mb, chunk, issued, ticket)))
                    continue
                for p in pending:
                    yield p
                pending = []
                if lane is not None and i in turns:
                    lane.hand_over()
                # inside an F&B pair the other op's kernels may hold the compute stream while
                # this one waits to issue its collective: the wait is the collective's, not the
                # stream's, so it is not recorded there (nor counted as host-bound time twice)
                yield from self._host_wait(issued, mb, chunk, seg.layer, record=lane is None)
                yield from self._comm(seg, mb, chunk, ticket)
                continue
            yield from self._compute_segment(seg, kind, mb, chunk, lane)
            for p in pending:
                yield p
            pending = []
        for p in pending:
            yield p

    def _compute_segment(self, seg: Compute, kind: str, mb: int, chunk: int, lane: Lane | None) -> Generator:
        """One compute block: issued by the host, run on the compute stream (in this op's turn
        when two ops share it), then the host's sync on its result where it has one."""
        issued = self._issue(seg.host)
        if seg.seconds > 0 or seg.host > 0:
            if lane is not None:
                req = yield from lane.acquire()
                with req:
                    yield from self._host_compute(seg, kind, mb, chunk, issued)
            else:
                yield from self._host_compute(seg, kind, mb, chunk, issued)
        if seg.sync:
            self._host_sync(seg.sync_s)

    def _ticket_of(
        self, segments: tuple[Segment, ...] | list[Segment], i: int, tickets: dict[int, int]
    ) -> int:
        """The place in the issue order of the collective ``segments[i]``, its run's places
        taken together (:meth:`_take_tickets`) when it is the first of the run."""
        if i not in tickets:
            self._take_tickets(segments, i, tickets)
        return tickets[i]

    def _take_tickets(self, segments: tuple[Segment, ...] | list[Segment], i: int, tickets: dict[int, int]) -> None:
        """Places in the issue order for the run of collectives the host enqueues with
        ``segments[i]``, taken together."""
        for j in _enqueued_with(segments, i):
            run_seg = segments[j]
            assert isinstance(run_seg, Comm)  # _enqueued_with returns collectives
            tickets[j] = self.shared.comms.ticket(self.rank, run_seg.group)

    # --- the host ------------------------------------------------------------------------
    def _issue(self, host: float) -> float:
        """Advance the host clock by ``host`` seconds of issuing; returns when it is done."""
        self.host_t += host
        return self.host_t

    def _host_sync(self, read_s: float | None = None) -> None:
        """A device-to-host read the next ops depend on: the host waits for the GPU to get
        here, then spends ``read_s`` reading the value back (where measured), else one
        Python op."""
        self.host_t = max(self.host_t, self.shared.env.now) + (self.shared.host_op_s if read_s is None else read_s)

    def _host_wait(self, until: float, mb: int, chunk: int, layer: int, record: bool = True) -> Generator:
        """The compute stream idles until the host has issued its next kernel (``record``:
        the stream is this op's alone, so the wait is its host-bound time)."""
        env = self.shared.env
        if until > env.now:
            start = env.now
            yield env.timeout(until - env.now)
            if record:
                self._record("host", "host_issue", mb, chunk, layer, start, Work.of(host=env.now - start))

    def _host_compute(self, seg: Compute, kind: str, mb: int, chunk: int, issued: float) -> Generator:
        """A compute block issued by a host that may lag the GPU: its kernels run as they are
        issued, so the block cannot start before the host issued its first kernel (one Python
        op's time) nor end before the host issued its last."""
        env = self.shared.env
        # the host is usually ahead: test before entering _host_wait (a generator per call)
        first = issued - seg.host + min(seg.host, self.shared.host_op_s)
        if first > env.now:
            yield from self._host_wait(first, mb, chunk, seg.layer)
        if seg.seconds > 0:
            start = env.now
            yield from self._compute(seg.seconds)
            self._record(seg.kind or kind, seg.name, mb, chunk, seg.layer, start, seg.work)
        if issued > env.now:
            yield from self._host_wait(issued, mb, chunk, seg.layer)

    def _issued_comm(self, seg: Comm, mb: int, chunk: int, issued: float, ticket: int) -> Generator:
        """An overlapped collective starts once the host has issued it."""
        env = self.shared.env
        if issued > env.now:
            yield env.timeout(issued - env.now)
        yield from self._comm(seg, mb, chunk, ticket)

    # --- the step -----------------------------------------------------------------------
    def run(self) -> Generator:
        """One training step of this rank: the gradient buffer's clearing, the schedule's ops,
        the gradient reductions, the optimizer, and the outstanding transfers."""
        env = self.shared.env
        self._memory()
        yield from self._before_schedule()
        yield from self._run_schedule()
        yield from self._finish_gradients()
        yield from self._optimizer_step()
        yield from self._drain()
        self.end_time = env.now

    def _before_schedule(self) -> Generator:
        """ZeRO-1/2's overlapped parameter gathers are started and the gradient buffer cleared."""
        env = self.shared.env
        sc = self.shared.ctx.scenario
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

    def _run_schedule(self) -> Generator:
        """The schedule's ops in order: one at a time, F&B pairs taking turns, or a pipeline
        engine's serial steps, with their pipeline sends."""
        env = self.shared.env
        sc = self.shared.ctx.scenario
        previous: PipeOp | None = None
        serial = sc.overlap.pp_p2p == "serial"
        turns = not sc.overlap.pp_comm and waits_at_turns(sc)
        in_flight: simpy.Process | None = None  # torch's Schedule1F1B: one send between turns
        ops = self.plan.ops
        i = 0
        while i < len(ops):
            op = ops[i]
            if i + 1 < len(ops) and ops[i + 1].overlap:
                # F&B pair (DualPipe, Megatron's combined 1F1B): both inputs first, then the
                # two take turns on the compute stream so each one's all-to-alls hide behind
                # the other's compute
                pair = ops[i + 1]
                yield from self._wait_inputs(op)
                yield from self._wait_inputs(pair)
                stream = PairStream.open(env)
                ledger = self._pair_ledger(op, pair)
                procs = [
                    env.process(self._execute(op, previous, Lane(stream, FOLLOW), ledger)),
                    env.process(self._execute(pair, previous, Lane(stream, LEAD), ledger)),
                ]
                yield procs[0] & procs[1]
                sends = [self._send_outputs(x) for x in (op, pair)]
                previous = pair
                i += 2
                self.ops_done += 2
            elif serial:
                yield from self._serial_op(op, previous)
                sends = []
                previous = op
                i += 1
                self.ops_done += 1
            else:
                yield from self._wait_inputs(op)
                yield from self._execute(op, previous)
                if in_flight is not None:
                    yield in_flight  # the previous op's send, waited once this op has computed
                    in_flight = None
                send = self._send_outputs(op)
                if turns and not send_blocks(op, ops[i + 1] if i + 1 < len(ops) else None):
                    in_flight, send = send, None
                sends = [send]
                previous = op
                i += 1
                self.ops_done += 1
            for send in sends:
                if send is not None and not sc.overlap.pp_comm:
                    yield send  # blocking p2p (Megatron without overlap_p2p_comm)
        if serial and previous is not None:
            yield from self._blocking_send(previous)

    def _serial_op(self, op: PipeOp, previous: PipeOp | None) -> Generator:
        """One op of a pipeline engine's serial steps (``pp_p2p: serial``), ``previous`` the
        op before it, after that op's send when a new flush starts here."""
        if previous is not None and self._flush_of(previous) != self._flush_of(op):
            # a pipeline engine's step (one flush) ends with its last send done; the
            # next flush starts with nothing pending (DeepSpeed's TrainSchedule, the
            # cool-down's last slot)
            yield from self._blocking_send(previous)
            previous = None
        yield from self._serial_step(op, previous)

    def _finish_gradients(self) -> Generator:
        """After the last op: the deferred LM-head weight gradients, the buckets not reduced
        during the backward, the reductions still running, and the tied weights' all-reduce."""
        sc = self.shared.ctx.scenario
        zero = self.shared.ctx.layout.zero
        if self.plan.head_flush:
            # Megatron-Core's finish_embedding_wgrad_compute: after the schedule's last op,
            # before finalize_model_grads waits for (or starts) the gradient reductions
            head_chunk = next(c for c, p in enumerate(self.plan.chunks) if p.deferred_gemms)
            yield from self.run_segments(self.plan.head_flush, PHASE_KIND["W"], -1, head_chunk)
            # the drain popped every kept input and output gradient (head_wgrad_deferral.kept_bytes)
            self.activations -= self.plan.deferred_microbatches * self.plan.deferred_kept_bytes
            self._memory()
        # ZeRO-2 reduced every microbatch, ZeRO-3 each unit as its backward ended
        # (_zero3_post_backward): neither has buckets left to reduce here
        if not sc.overlap.dp_grad_reduce and zero < 2:
            for b in self.plan.buckets:
                yield from self._bucket_pass(b, "optimizer", -1)
                # in program order behind the reduce-scatters still queued (_spawn_dp)
                yield self._spawn_dp(self._reduce_bucket(b))
        for proc in self.reductions:
            if not proc.triggered:
                yield proc
        if self.plan.tied_params > 0:
            # after the DP reduction, before the optimizer, blocking (see parallelism/tied.py);
            # in the accumulated dtype, not dp.reduce_dtype's: DeepSpeed's pipeline engine
            # all-reduces the tied weight's gradient as it is (_exec_reduce_tied_grads:
            # dist.all_reduce(weight._hp_grad) under bf16), outside allreduce_bucket's cast
            yield from self.shared.comms.collective(
                self.rank,
                self.stage,
                tied.GROUP,
                "all_reduce",
                self.plan.tied_params * grad_reduce_bytes(sc),
                tied.NAME,
            )

    def _optimizer_step(self) -> Generator:
        """The optimizer (and its offloaded host part), then ZeRO-1/2's blocking parameter
        gathers and a per-tensor unpack."""
        env = self.shared.env
        sc = self.shared.ctx.scenario
        zero = self.shared.ctx.layout.zero
        start = env.now
        seconds = self.shared.optimizer_seconds[self.stage]
        yield from self._compute(seconds)
        self._record("optimizer", "optimizer_step", -1, -1, -1, start, Work.of(optimizer=seconds))
        tail = self.shared.tail_seconds[self.stage] if self.shared.tail_seconds else 0.0
        if tail > env.now - start:
            # the host's Python after the norm's sync issues the optimizer's kernels as it goes:
            # the GPU waits for whichever is longer (parallelism/step_tail.py)
            wait_start = env.now
            yield env.timeout(tail - (env.now - start))
            self._record("host", "optimizer_host", -1, -1, -1, wait_start, Work.of(host=env.now - wait_start))
        host = self.shared.offloaded_seconds[self.stage] if self.shared.offloaded_seconds else 0.0
        if host > 0:
            # the host link and the CPU: neither a slow GPU nor NCCL's SMs stretch it
            start = env.now
            yield env.timeout(host)
            self._record("optimizer", "optimizer_offload", -1, -1, -1, start, Work.of(optimizer=host))
        if zero in (1, 2) and not sc.overlap.param_gather:
            for b in self.plan.buckets:
                yield self._spawn_dp(self._gather_bucket(b))
        if self.shared.unpack_seconds and self.shared.unpack_seconds[self.stage] > 0:
            start = env.now
            seconds = self.shared.unpack_seconds[self.stage]
            yield env.timeout(seconds)  # host time: neither a slow GPU nor NCCL's SMs stretch it
            self._record("host", "param_unpack", -1, -1, -1, start, Work.of(host=seconds))

    def _drain(self) -> Generator:
        # the step ends when this rank's outstanding gathers and sends are done
        for ev in list(self.gathers.values()):
            if not ev.triggered:
                yield ev

    def _pair_ledger(self, forward: PipeOp, backward: PipeOp) -> PairLedger:
        """The stash moves of an F&B pair's units, made in the host's order (pair_ledger.py)."""
        f, b = self.plan.chunks[forward.chunk], self.plan.chunks[backward.chunk]
        return PairLedger.open(
            unit_moves("F", _stash_delta("F", f), f.stash_shares),
            unit_moves(backward.kind, _stash_delta(backward.kind, b), b.stash_shares),
            self._move_stash,
        )

    def _move_stash(self, nbytes: float) -> None:
        """Add ``nbytes`` to the stash and record it."""
        self.activations += nbytes
        self._memory()

    def _execute(
        self, op: PipeOp, previous: PipeOp | None, lane: Lane | None = None, ledger: PairLedger | None = None
    ) -> Generator:
        """Run one pipeline op: its chunk's units in order, each with its gathers, stash moves,
        offload copies and gradient hooks around its compute; an F&B pair's two ops share
        ``lane``'s stream and ``ledger``'s stash moves."""
        run = self._op_run(op, previous, ledger)
        self._before_units(op, previous, run)
        units = run.units
        for i, unit in enumerate(units):
            if lane is not None and i > 0 and not (_exchanges(unit) and _exchanges(units[i - 1])):
                lane.hand_over()  # a layer without expert all-to-alls is a part of its own
            yield from self._unit_inputs(op, run, i, lane)
            yield from self._unit_compute(op, run, unit, lane)
            yield from self._unit_outputs(op, run, i, lane)
        yield from self._after_units(op, run, lane)

    def _op_run(self, op: PipeOp, previous: PipeOp | None, ledger: PairLedger | None) -> _OpRun:
        """What the op's units read: its chunk plan and units, and how the layout treats them."""
        cplan = self.plan.chunks[op.chunk]
        layout = self.shared.ctx.layout
        units = cplan.phases[op.kind]
        head_deferred = op.kind in cplan.deferred and op.microbatch < self.plan.deferred_microbatches
        if head_deferred:
            units = cplan.deferred[op.kind]  # its LM-head weight gradient waits for the flush
        # ZeRO-0/1 reduce gradients once per step (last microbatch); ZeRO-2 keeps only a gradient
        # shard, so it reduce-scatters every microbatch (DeepSpeed stage 2 with accumulation)
        last_mb = self.plan.last_backward.get(op.chunk) == op.microbatch or layout.zero == 2
        resident = (
            previous is not None
            and previous.kind == "F"
            and previous.microbatch == op.microbatch
            and previous.chunk == op.chunk
        )
        return _OpRun(
            cplan=cplan,
            kind=PHASE_KIND[op.kind],
            units=units,
            head_deferred=head_deferred,
            zero3=layout.zero == 3,
            pipelined=layout.zero3_pipelined,
            # FSDP2 accumulates unsharded until the last microbatch, which alone reduce-scatters
            deferred=layout.zero3_deferred_sync,
            last_mb=last_mb,
            # a layer's activations are saved as its forward runs and freed as its backward
            # does; a pair's F and B move them in the host's order of their layers
            ledger=ledger,
            stash_from=self.activations,
            stash_delta=_stash_delta(op.kind, cplan),
            skip=self._zero3_skip(cplan, op, resident),
            offloaded=cplan.offload_bytes if op.kind in ("F", "B", "BW") else {},
        )

    def _before_units(self, op: PipeOp, previous: PipeOp | None, run: _OpRun) -> None:
        """The op's memory at its start, and the gathers a forward finds kept."""
        cplan = run.cplan
        if op.kind in ("B", "BW"):
            self._cp_working(cplan, op.kind)
        if op.kind in ("W", "BW"):
            self._grad_transient(cplan.grad_transient_bytes[0])
        if (
            self.shared.ctx.layout.zero3_keep_after_backward
            and op.kind == "F"
            and previous is not None
            and previous.kind in ("B", "BW")
            and previous.chunk == op.chunk
        ):
            # the backward just before kept its gathers: this forward all-gathers nothing
            self.kept_gathers[(op.microbatch, op.chunk)] = previous.microbatch

    def _unit_inputs(self, op: PipeOp, run: _OpRun, i: int, lane: Lane | None) -> Generator:
        """Before unit ``i`` computes: its offloaded copies, its parameters' gathers, and the
        stash its forward saves."""
        if run.offloaded:
            yield from self._offload_before(op, run.units, i, run.offloaded)
        if run.zero3 and op.kind != "W":
            if lane is not None:
                # FSDP's pre-forward/-backward hook issues the gather as the host reaches the
                # unit, in the pair's issue order
                yield from lane.wait_turn()
            yield from self._zero3_gather(run.units, i, op, skip=run.skip, lane=lane)
        elif op.kind == "F":
            yield from self._wait_param_gather(op.chunk, run.units[i])
        if op.kind == "F":
            if run.ledger is not None:
                run.ledger.reach("F", i)
            else:
                self._stash(run.stash_from, run.stash_delta, run.cplan.stash_shares[i])

    def _unit_compute(self, op: PipeOp, run: _OpRun, unit: Unit, lane: Lane | None) -> Generator:
        """The unit's segments, with the loss's transient memory and, where buckets close on
        its MLP weights, their hooks before its attention's."""
        cplan, kind = run.cplan, run.kind
        # the loss's logit copies live only while the LM head and the loss run
        loss = op.kind == "F" and HEAD in unit.layers and cplan.loss_transient_bytes > 0
        if loss:
            self._memory(loss=cplan.loss_transient_bytes)
        hooks = op.kind in ("W", "BW") and not run.zero3 and run.last_mb
        cut = _mlp_cut(unit) if hooks else None
        if cut is None:
            yield from self.run_segments(unit.segments, kind, op.microbatch, op.chunk, lane)
        else:
            # buckets that close on this layer's MLP weights go out before its attention
            yield from self.run_segments(unit.segments[:cut], kind, op.microbatch, op.chunk, lane)
            # with every bucket ahead of them (buckets are in gradient order, and the
            # frameworks launch them in that order: the LM head's, deferred into this unit
            # ahead of the MLP's weight gradients, goes first)
            yield from self._bucket_hooks(op.chunk, unit, kind, op.microbatch, early=True, lane=lane)
            yield from self.run_segments(unit.segments[cut:], kind, op.microbatch, op.chunk, lane)
        if loss:
            self._memory()

    def _unit_outputs(self, op: PipeOp, run: _OpRun, i: int, lane: Lane | None) -> Generator:
        """After unit ``i`` computes: the stash its backward frees, its activations' copy out,
        and its gradients' reductions."""
        unit = run.units[i]
        if op.kind != "F":
            if run.ledger is not None:
                run.ledger.reach("B", i)
            else:
                self._stash(run.stash_from, run.stash_delta, freed_share(run.cplan.stash_shares, i))
        if run.offloaded:
            yield from self._offload_after(op, unit, run.offloaded)
        zero3, pipelined = run.zero3, run.pipelined
        if zero3 and op.kind in ("B", "BW") and not pipelined:
            self._zero3_post_compute(run.units, i, op, run.skip)
        if op.kind in ("W", "BW"):
            if zero3 and not pipelined:
                if run.last_mb or not run.deferred:  # FSDP2's set_requires_gradient_sync(False)
                    last = i == len(run.units) - 1
                    yield from self._zero3_post_backward(unit, op, lane, last=last)
            elif run.last_mb and not zero3:
                yield from self._bucket_hooks(op.chunk, unit, run.kind, op.microbatch, lane=lane)

    def _after_units(self, op: PipeOp, run: _OpRun, lane: Lane | None) -> Generator:
        """The op's end: the stage's reductions it closes, and its memory after it."""
        cplan = run.cplan
        if op.kind == "F":
            self._cp_working(cplan, "F")
        backward_last = op.kind in ("W", "BW") and run.last_mb
        if run.pipelined and backward_last:
            # torch.distributed.pipelining runs FSDP's post-backward for the whole stage after
            # its last backward: every layer's reduce-scatter issued then, in forward order
            self._spawn_reduction(self._zero3_reduce_all(list(reversed(run.units)), op))
        if op.kind in ("W", "BW") and (run.last_mb or run.zero3) and not run.pipelined:
            sync = self._backward_sync()
            if sync != "none":
                yield from self._synchronize_reductions(host=sync == "host")
        if lane is not None:
            lane.finish()
        if op.kind in ("W", "BW"):
            self._grad_transient(cplan.grad_transient_bytes[1])
        if run.head_deferred:  # a W or BW (cplan.deferred has no other phase)
            # a deferred microbatch: Megatron's buffers keep the head's input and output gradient,
            # which the stash just freed, until the drain (head_wgrad_deferral.kept_bytes)
            self.activations += self.plan.deferred_kept_bytes
            self._memory()

    @staticmethod
    def _zero3_skip(cplan: ChunkPlan, op: PipeOp, resident: bool) -> int:
        """How many of a backward's first units are still gathered from the same microbatch's
        forward just before it (``ChunkPlan.zero3_kept``): neither gathered nor prefetched."""
        return cplan.zero3_kept if resident and op.kind != "F" else 0

    def _stash(self, start: float, delta: float, share: float) -> None:
        """Set the stash to ``share`` of an op's change since ``start`` (exactly ``start +
        delta`` at share 1.0, the op's whole change) and record it."""
        self.activations = start + delta * share
        self._memory()

    def _offload_after(self, op: PipeOp, unit: Unit, offloaded: dict[int, float]) -> Generator:
        """After a forward's unit computes: the copy out of its offloaded layers' activations
        is started, and with ``training.offload_max_inflight`` N the compute waits for the copy
        N layers back (Megatron-Core's ``_drain_offload_pending``: a queue per chunk handler and
        group name, ``wait_event`` on the oldest while more than N are queued; the layer's groups
        are one copy here); after a backward's unit, the stash's in-flight buffer goes with it."""
        if op.kind != "F":
            for layer in unit.layers:
                if layer in offloaded:
                    self.offload.release(offloaded[layer])
            if min(offloaded) in unit.layers:
                self.offload.allow(-max(offloaded.values()))
            return
        training = self.shared.ctx.scenario.training
        cap = training.offload_max_inflight if training.offload_modules else None  # TE's own waits otherwise
        order = sorted(offloaded)
        for layer in unit.layers:
            if layer in offloaded:
                if layer == order[0]:  # the memory walk's in-flight buffer of this stash
                    self.offload.allow(max(offloaded.values()))
                self.offload.save((op.microbatch, op.chunk, layer), offloaded[layer])
                back = order.index(layer) - cap if cap is not None else -1
                if back >= 0:
                    yield from self.offload.wait([self.offload.saved.get((op.microbatch, op.chunk, order[back]))])

    def offload_peak(self) -> float | None:
        """This stage's most memory (its static bytes included) with the offloads' moved bytes on
        the GPU as the copies' timing has them, to hold against its walked peak
        (:func:`simcluster.engine.offload.backlog`); None where nothing is offloaded or this rank
        draws no memory timeline."""
        if self._offload is None or not self._records_memory:
            return None
        return sum(self.plan.static_bytes.values()) + self._most_moved

    def _offload_before(self, op: PipeOp, units: list[Unit], i: int, offloaded: dict[int, float]) -> Generator:
        """Before unit ``i``: in the forward, the copy out of the unit two back must be done (two
        buffers; Megatron-Core's fine-grained offload, ``training.offload_modules``, does not
        wait); in the backward, this unit's copy back is started if it was not, the next unit's
        is started, and this one waits for its own."""
        def keys(unit: Unit) -> list[tuple]:
            return [(op.microbatch, op.chunk, layer) for layer in unit.layers if layer in offloaded]

        if op.kind == "F":
            if i >= 2 and not self.shared.ctx.scenario.training.offload_modules:
                yield from self.offload.wait(self.offload.saved.get(k) for k in keys(units[i - 2]))
            return
        for k in keys(units[i]):
            self.offload.load(k, offloaded[k[2]])
        if i + 1 < len(units):
            for k in keys(units[i + 1]):
                self.offload.load(k, offloaded[k[2]])
        yield from self.offload.wait(self.offload.loaded.get(k) for k in keys(units[i]))


@dataclass(slots=True)
class _OpRun:
    """What every unit of one pipeline op reads: its chunk plan, phase kind and units, and the
    layout's choices that shape them, worked out once at the op's start."""

    cplan: ChunkPlan
    kind: str  # the phase's kind of work (PHASE_KIND)
    units: list[Unit]
    head_deferred: bool  # its LM-head weight gradient waits for the pipeline flush
    zero3: bool
    pipelined: bool  # ZeRO-3 under torch.distributed.pipelining (post-backward per stage)
    deferred: bool  # FSDP2: only the last microbatch reduce-scatters
    last_mb: bool  # the op's gradients are reduced now (its chunk's last backward, or ZeRO-2)
    ledger: PairLedger | None  # an F&B pair's stash moves (None: the op moves its own)
    stash_from: float  # the stash at the op's start
    stash_delta: float  # how the whole op changes it
    skip: int  # a backward's first units still gathered from its forward (_zero3_skip)
    offloaded: dict[int, float]  # layer -> bytes of its activations copied to the host


def _stash_delta(kind: str, cplan: ChunkPlan) -> float:
    """How one op changes its stage's stash (:func:`simcluster.stash.stash_change`)."""
    return stash_change(kind, cplan.activation_bytes, cplan.wgrad_bytes)
