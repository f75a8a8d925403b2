"""Progress of long work on stderr, the one place that decides between a terminal's bar and
piped lines: ``sweep``'s layouts, ``validate``'s cases, ``compare``'s scenarios, one
simulation's pipeline ops (``engine/progress.py`` counts them into :func:`progress_bar`) and
``calibrate``'s measurements and ``measure-step``'s training steps (rank 0's).

On a terminal: a transient bar. Piped (CI, ``nohup``, ``| tee``): plain lines, since a bar is
not drawn there and an hour-long sweep that prints nothing looks hung. They start only once
the work has run :data:`QUIET_S` (short runs print nothing), then come at each tenth of the
items done, or after a silence of :data:`HEARTBEAT_S` or a quarter of the time elapsed,
whichever is longer (one slow layout still shows the command alive; a two-hour sweep prints a
few dozen lines, not hundreds), and one at the end. A line printed while a named item runs
(``advance(label, cost=0.0, count=0)``: calibrate's measurement) ends with it, so a measurement
that takes minutes on a CPU says which one it is.

The time left is the time so far scaled by the expected cost still to run over the cost done
(each item's cost from :func:`simcluster.cost_hint.cost_hint`: items differ by their
microbatches per step many times over), counting only items that ran: a sweep's layouts
skipped by the checks finish in milliseconds, all before the first simulation, and counted
as done work they made the first estimates far too short. Until a few items have run (at
least one per parallel worker) it says "estimating".
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

#: seconds before piped progress prints its first line
QUIET_S = 10.0
#: the shortest silence after which piped progress says it is still running
HEARTBEAT_S = 30.0
#: items that must have run before the time left is estimated
MIN_KNOWN = 3
#: seconds before a terminal shows the bar of work inside a simulation's set-up (a schedule's
#: planning), most of which is short
INNER_DELAY_S = 1.0

#: whether work deep inside a computation, which takes no ``show`` argument of its own (v-auto's
#: search, called from the schedule's ``build``), shows progress: :func:`showing` sets it
#: around the call, as the caller's own ``show``; nothing unless a caller asks
_INNER_SHOW: contextvars.ContextVar[bool | None] = contextvars.ContextVar("simcluster_inner_show", default=False)


def clock_text(seconds: float) -> str:
    """``h:mm:ss`` (``m:ss`` under an hour)."""
    whole = max(int(round(seconds)), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Tracker:
    """Counts and the cost-weighted estimate of the time left (thread-safe)."""

    def __init__(self, total: int, total_cost: float, parallel: int = 1) -> None:
        self.total = total
        self.left_cost = total_cost  # expected cost of the items not yet run (nor skipped)
        self.done = 0
        self.ran = 0
        self.ran_cost = 0.0
        self.min_known = max(MIN_KNOWN, parallel)
        self.lock = threading.Lock()

    def advance(self, cost: float, ran: bool, count: int = 1) -> None:
        """``count`` items finished: ``ran`` (their ``cost`` done) or skipped (never to come)."""
        with self.lock:
            self.done += count
            self.left_cost = max(self.left_cost - cost, 0.0)
            if ran:
                self.ran += count
                self.ran_cost += cost

    def left_s(self, elapsed: float) -> float | None:
        """Seconds left, or None while too few items have run to say."""
        with self.lock:
            if self.ran < min(self.min_known, self.total) or self.ran_cost <= 0:
                return None
            return elapsed * self.left_cost / self.ran_cost

    def line(self, label: str, elapsed: float) -> str:
        """``label: done/total, elapsed ... , about ... left``."""
        left = self.left_s(elapsed)
        if self.done >= self.total:
            return f"{label}: {self.done:,}/{self.total:,} done in {clock_text(elapsed)}"
        estimate = "time left: estimating" if left is None else f"about {clock_text(left)} left"
        return f"{label}: {self.done:,}/{self.total:,}, {clock_text(elapsed)} elapsed, {estimate}"


class PlainLines:
    """Piped progress: bounded plain lines on ``stream`` (see the module's docstring)."""

    def __init__(
        self,
        label: str,
        tracker: Tracker,
        stream: TextIO,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.tracker, self.stream, self.clock = label, tracker, stream, clock
        self.start = clock()
        self.last_line: float | None = None  # when the last line was printed
        self.last_text = ""
        self.last_tenth = 0
        self.said_done = False  # the last line printed is the closing one
        #: the item named as under way and not finished yet (the terminal bar's description)
        self.under_way: str | None = None
        self.print_lock = threading.Lock()

    def name(self, description: str, count: int) -> None:
        """Record the item under way: named by a call that counts nothing, cleared when an
        item finishes (the next one is named before it starts)."""
        with self.print_lock:
            self.under_way = description if count == 0 and description else None

    def _print(self, now: float) -> None:
        text = self.tracker.line(self.label, now - self.start)
        if self.under_way and self.tracker.done < self.tracker.total:
            text += f"; now: {self.under_way}"
        if text != self.last_text:  # the closing line right after the last tenth's, once
            self.stream.write(text + "\n")
            self.stream.flush()
        self.last_line, self.last_text = now, text
        self.said_done = self.tracker.done >= self.tracker.total

    def on_advance(self) -> None:
        """After an item: a line when a new tenth is done (once past the quiet start)."""
        with self.print_lock:
            now = self.clock()
            t = self.tracker
            tenth = math.floor(10 * t.done / t.total) if t.total else 10
            if tenth > self.last_tenth and now - self.start >= QUIET_S:
                self.last_tenth = tenth
                self._print(now)

    def on_tick(self) -> None:
        """Every second: a line after a long silence."""
        with self.print_lock:
            now = self.clock()
            elapsed = now - self.start
            since = now - (self.start if self.last_line is None else self.last_line)
            if elapsed >= QUIET_S and since >= max(HEARTBEAT_S, elapsed / 4) and not self.said_done:
                self._print(now)

    def finish(self) -> None:
        """The closing line, when any line came before (a short run stays silent) and it was
        not the last: a Dask cluster's shutdown after the last item had printed 'done' twice."""
        with self.print_lock:
            if self.last_line is not None and not self.said_done:
                self._print(self.clock())


@contextlib.contextmanager
def _ticking(lines: PlainLines) -> Iterator[None]:
    """Call ``lines.on_tick`` every second on a daemon thread while the work runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(1.0):
            lines.on_tick()

    thread = threading.Thread(target=loop, name="simcluster-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class TerminalBar:
    """Terminal progress: a transient Rich bar on stderr, drawn once the work has run
    ``delay_s`` (a one-second simulation shows none), with the tracker's time left."""

    def __init__(self, label: str, unit: str, tracker: Tracker, console: Console, delay_s: float) -> None:
        self.label, self.unit, self.tracker, self.console = label, unit, tracker, console
        self.delay_s = delay_s
        self.start = time.monotonic()
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.lock = threading.Lock()

    def _started(self) -> tuple[Progress, TaskID] | None:
        if self.bar is None and time.monotonic() - self.start >= self.delay_s:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            columns = [TextColumn(self.label), BarColumn(), MofNCompleteColumn()]
            if self.unit:
                columns.append(TextColumn(self.unit))
            columns += [TimeElapsedColumn(), TextColumn("{task.fields[left]}"), TextColumn("{task.description}")]
            self.bar = Progress(*columns, console=self.console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("", total=self.tracker.total, left="left: estimating")
        return None if self.bar is None or self.task is None else (self.bar, self.task)

    def on_advance(self, description: str) -> None:
        with self.lock:
            started = self._started()
            if started is None:
                return
            bar, task = started
            left = self.tracker.left_s(time.monotonic() - self.start)
            text = "left: estimating" if left is None else f"left {clock_text(left)}"
            bar.update(task, completed=self.tracker.done, description=description, left=text)

    def stop(self) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.stop()


@contextlib.contextmanager
def progress_bar(
    label: str,
    total: int,
    total_cost: float | None = None,
    parallel: int = 1,
    show: bool | None = None,
    delay_s: float = 0.0,
    unit: str = "",
) -> Iterator[Callable[..., None]]:
    """Progress for ``total`` items of expected cost ``total_cost`` in all (default: 1 each),
    ``parallel`` at a time; yields ``advance(description="", cost=1.0, ran=True, count=1)``,
    called as items finish (``ran`` False: skipped without work; ``cost=0.0, count=0`` names
    the item now under way without counting it, for items long enough to watch). ``show``: None for a bar on a
    terminal and plain lines when stderr is piped, True for the bar, False for nothing;
    ``delay_s`` holds the bar back for work that is usually short; ``unit`` names what is
    counted ("pipeline ops")."""
    from rich.console import Console

    tracker = Tracker(total, float(total) if total_cost is None else total_cost, parallel)
    if show is False:
        yield lambda description="", cost=1.0, ran=True, count=1: None
        return
    stderr = Console(stderr=True)
    if show is None and not stderr.is_terminal:
        lines = PlainLines(f"{label} ({unit})" if unit else label, tracker, sys.stderr)

        def advance_plain(description: str = "", cost: float = 1.0, ran: bool = True, count: int = 1) -> None:
            tracker.advance(cost, ran, count)
            lines.name(description, count)
            lines.on_advance()

        with _ticking(lines):
            yield advance_plain
        lines.finish()
        return
    bar = TerminalBar(label, unit, tracker, stderr, delay_s)

    def advance_bar(description: str = "", cost: float = 1.0, ran: bool = True, count: int = 1) -> None:
        tracker.advance(cost, ran, count)
        bar.on_advance(description)

    try:
        yield advance_bar
    finally:
        bar.stop()


@contextlib.contextmanager
def showing(show: bool | None) -> Iterator[None]:
    """Within the block, :func:`inner_progress` shows as ``show`` says (None: a bar on a
    terminal, lines when piped; False: nothing)."""
    token = _INNER_SHOW.set(show)
    try:
        yield
    finally:
        _INNER_SHOW.reset(token)


def inner_progress(label: str, total: int, unit: str) -> contextlib.AbstractContextManager[Callable[..., None]]:
    """:func:`progress_bar` for work inside a simulation's set-up, shown as the enclosing
    :func:`showing` says (nothing outside one)."""
    return progress_bar(label, total, show=_INNER_SHOW.get(), delay_s=INNER_DELAY_S, unit=unit)
