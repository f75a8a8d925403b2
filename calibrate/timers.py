"""Device timers: CUDA events on GPUs, synchronized ``perf_counter`` on CPU.

Both time ``iters`` back-to-back calls of a function after ``warmup`` untimed calls and return
the mean seconds per call. The device decides the timer (registry below); the measuring code is
the same for both.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from simcluster.errors import UserError


class Timer(Protocol):
    """Mean seconds per call of ``fn`` over ``iters`` calls after ``warmup`` calls.

    ``drain=False`` starts the clock without waiting for the device's other streams, so work
    queued there (collectives in flight) keeps running under the timed calls.
    """

    def __call__(
        self, fn: Callable[[], object], iters: int, warmup: int, drain: bool = True
    ) -> float: ...


@dataclass(frozen=True)
class PerfCounterTimer:
    """Host wall clock; exact on CPU where ops complete before returning."""

    def __call__(
        self, fn: Callable[[], object], iters: int, warmup: int, drain: bool = True
    ) -> float:
        for _ in range(warmup):
            fn()
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) / iters


@dataclass(frozen=True)
class CudaEventTimer:
    """CUDA events on the current stream: device time, launch queueing excluded."""

    def __call__(
        self, fn: Callable[[], object], iters: int, warmup: int, drain: bool = True
    ) -> float:
        for _ in range(warmup):
            fn()
        if drain:  # a whole-device sync would also wait for other streams' collectives
            torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        seconds: float = start.elapsed_time(stop) / 1e3 / iters  # elapsed_time is in ms
        return seconds


TIMERS: dict[str, Callable[[], Timer]] = {"cpu": PerfCounterTimer, "cuda": CudaEventTimer}


def timer_for(device: str) -> Timer:
    """The timer for a device type ('cpu' or 'cuda')."""
    if device not in TIMERS:
        raise UserError("--device", f"unknown device '{device}'; use one of {', '.join(TIMERS)}")
    return TIMERS[device]()


def synchronize(device: str) -> None:
    """Wait for queued device work (no-op on CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


#: timed calls are split into this many runs and the median run kept, so one interruption (a
#: preempted CPU rank, another process's kernel) does not move a shape's rate
RUNS = 5


def robust_time(timer: Timer, fn: Callable[[], object], iters: int) -> float:
    """Seconds per call: the median of :data:`RUNS` runs' means over ``iters`` calls in all
    (one run when there are fewer calls than runs)."""
    runs = RUNS if iters >= RUNS else 1
    return statistics.median(
        timer(fn, iters=max(1, iters // runs), warmup=1 if i == 0 else 0) for i in range(runs)
    )
