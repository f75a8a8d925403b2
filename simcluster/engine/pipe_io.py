"""A rank's pipeline inputs and outputs: which arrival an op waits for, the activation or
gradient it sends to the neighbouring stage, and DeepSpeed's serial send/receive order."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import simpy

from simcluster.engine.shared import Shared
from simcluster.schedules import PipeOp

if TYPE_CHECKING:
    from simcluster.engine.pair_stream import Lane


class PipelineIO:
    """Mixin of :class:`~simcluster.engine.worker.Worker`: its point-to-point pipeline traffic."""

    shared: Shared
    rank: int
    stage: int

    if TYPE_CHECKING:

        def _execute(
            self, op: PipeOp, previous: PipeOp | None, lane: Lane | None = None
        ) -> Generator: ...

    def _input_key(self, op: PipeOp) -> tuple | None:
        """The arrival this op waits for (None: its input is local, e.g. the first stage's F)."""
        sh = self.shared
        sched, spec = sh.ctx.schedule, sh.ctx.spec
        k = sched.virtual_stage(spec, self.stage, op.chunk, op.microbatch)
        if op.kind == "F" and k > 0:
            return (self.rank, "F", op.microbatch, k)
        if op.kind in ("B", "BW") and k < sh.routes.virtual_stages - 1:
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
        cool-down steps keep the same order around their empty slot). Megatron-DeepSpeed's
        ZB-H1 steps the other way round (``Schedule.serial_receives_first``)."""
        first = self.shared.ctx.schedule.serial_receives_first
        receive_first = previous is not None and _pass(op) == first != _pass(previous)
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

    def _flush_of(self, op: PipeOp) -> int:
        """Which of the step's pipeline flushes (``training.pipeline_flushes``) ``op`` is in:
        microbatches are numbered on from one flush to the next (``Context.stage_orders``)."""
        flush: int = op.microbatch // self.shared.ctx.spec.m
        return flush

    def _blocking_send(self, op: PipeOp) -> Generator:
        send = self._send_outputs(op)
        if send is not None:
            yield send

    def _send_outputs(self, op: PipeOp) -> simpy.Process | None:
        sh = self.shared
        sched, spec = sh.ctx.schedule, sh.ctx.spec
        if op.kind == "W":
            return None
        k = sched.virtual_stage(spec, self.stage, op.chunk, op.microbatch)
        target = k + 1 if op.kind == "F" else k - 1
        routes = sh.routes
        if target < 0 or target >= routes.virtual_stages:
            return None
        dst_stage, _ = routes.locate(target, op.microbatch)
        direction = "F" if op.kind == "F" else "B"
        dst = routes.peer(self.rank, dst_stage)
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


def _pass(op: PipeOp) -> str:
    """"F", "B" (an input gradient, with or without its weight gradients) or "W"."""
    return "B" if op.kind == "BW" else op.kind
