"""Drive a SimPy run and count its pipeline ops into :func:`simcluster.progress.progress_bar`
(which decides between a terminal's bar, from 1 s on, and piped lines, from 10 s on: an
all-ranks run of thousands of GPUs takes many minutes)."""

from __future__ import annotations

from collections.abc import Callable

import simpy

_BATCH = 20000  # SimPy steps between progress updates
#: seconds before a terminal shows a simulation's bar: most runs take less
BAR_DELAY_S = 1.0


def run_with_progress(
    env: simpy.Environment, done: Callable[[], int], total: int, show: bool | None = None
) -> None:
    """Run ``env`` to completion, showing pipeline ops ``done()`` of ``total`` on stderr
    (``show``: None for a bar on a terminal or lines when piped, True the bar, False nothing)."""
    if show is False:
        env.run()
        return
    from simcluster.progress import progress_bar

    counted = 0
    with progress_bar("simulating", total, show=show, delay_s=BAR_DELAY_S, unit="pipeline ops") as advance:
        while True:
            more = _step_batch(env)
            ops = done() - counted
            if ops > 0:
                advance(cost=float(ops), count=ops)
                counted += ops
            if not more:
                break


def _step_batch(env: simpy.Environment) -> bool:
    """Run up to ``_BATCH`` events; False once the schedule is empty (the run is over)."""
    try:
        for _ in range(_BATCH):
            env.step()
    except simpy.core.EmptySchedule:
        return False
    return True
