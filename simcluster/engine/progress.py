"""Drive a SimPy run with a progress bar (stderr, only on a terminal and for long runs)."""

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
    if show is None:
        show = sys.stderr.isatty()
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
        while True:
            try:
                for _ in range(_BATCH):
                    env.step()
            except simpy.core.EmptySchedule:
                break
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
