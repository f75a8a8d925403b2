"""State every simulated rank of one run shares: the environment, the stage plans, the
per-stage costs computed before the run, and the pipeline arrivals the ranks wait on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import simpy

from simcluster.engine.comms import Comms
from simcluster.engine.plan import StagePlan
from simcluster.engine.recorder import Recorder
from simcluster.engine.routes import PipelineRoutes
from simcluster.parallelism.data import Bucket
from simcluster.stragglers import Stragglers


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
    # unit's parameters (None unless zero3.buffers: copies; with flat, FSDP1's cast of the
    # gradient to a wider reduce dtype as the copy-in, no copy-out)
    fsdp2_copy_seconds: tuple[Callable[[float], float], Callable[[float], float]] | None = None
    stragglers: Stragglers = field(default_factory=Stragglers)
    # host seconds per stage of unpacking the post-optimizer parameter gather tensor by tensor
    # (dp.param_unpack: per_tensor; empty otherwise)
    unpack_seconds: list[float] = field(default_factory=list)
    # host seconds per stage of the step's eager tail (training.step_tail: the optimizer's Python
    # after the norm's sync; empty with none), run beside the optimizer's kernels
    tail_seconds: list[float] = field(default_factory=list)
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
    # seconds of a memory-bound pass over so many HBM bytes (ZeRO++'s quantization kernels)
    memory_seconds: Callable[[float], float] | None = None
    arrivals: dict[tuple, simpy.Event] = field(default_factory=dict)
    # serial p2p: a receiver has entered its blocking receive for this input
    receives: dict[tuple, simpy.Event] = field(default_factory=dict)

    @cached_property
    def routes(self) -> PipelineRoutes:
        """The run's pipeline lookups (receiving stage and rank of an op's output), cached."""
        return PipelineRoutes(self.ctx.schedule, self.ctx.spec, self.ctx.layout)

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
