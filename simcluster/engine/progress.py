"""Drive a SimPy run with a progress bar (stderr, only on a terminal and for long runs), or,
for ``show=None`` with stderr piped, the plain lines of :mod:`simcluster.progress` (from 10 s
on: an all-ranks run of thousands of GPUs takes many minutes)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import simpy

_BATCH = 20000  # SimPy steps between progress updates


def run_with_progress(
    env: simpy.Environment, done: Callable[[], int], total: int, show: bool | None = None
) -> None:
    """Run ``env`` to completion; show pipeline ops done / total after the first second."""
    if show is None and not sys.stderr.isatty():
        _run_with_lines(env, done, total)
        return
    if not show:
        env.run()
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    start = time.perf_counter()
    progress: Progress | None = None
    task = None
    try:
        while _step_batch(env):
            if progress is None and time.perf_counter() - start > 1.0:
                progress = Progress(
                    TextColumn("simulating"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("pipeline ops"),
                    TimeElapsedColumn(),
                    TextColumn("left"),  # an all-ranks run of hundreds of GPUs takes many minutes
                    TimeRemainingColumn(),
                    transient=True,
                    console=None,
                )
                progress.start()
                task = progress.add_task("sim", total=total)
            if progress is not None and task is not None:
                progress.update(task, completed=done())
    finally:
        if progress is not None:
            progress.stop()


def _run_with_lines(env: simpy.Environment, done: Callable[[], int], total: int) -> None:
    """Run ``env`` to completion, printing piped progress lines of pipeline ops done / total."""
    from simcluster.progress import PlainLines, Tracker

    tracker = Tracker(total, float(total))
    lines = PlainLines("simulating (pipeline ops)", tracker, sys.stderr)

    def count() -> None:
        ops = done() - tracker.done
        if ops > 0:
            tracker.advance(float(ops), True, ops)
            lines.on_advance()

    while _step_batch(env):
        count()
        lines.on_tick()
    count()
    lines.finish()


def _step_batch(env: simpy.Environment) -> bool:
    """Run up to ``_BATCH`` events; False once the schedule is empty (the run is over)."""
    try:
        for _ in range(_BATCH):
            env.step()
    except simpy.core.EmptySchedule:
        return False
    return True
