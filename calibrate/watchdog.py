"""Stop a run whose current step exceeds ``--timeout`` (a hung rank), keeping the partial file.

Two things can notice a hung peer: the communication backend's own timeout (raised in the main
thread as an exception) and this watchdog (a background thread, for steps the backend cannot
time out, such as a kernel that never returns). Both report through one :class:`FailureReport`,
so a failing rank prints exactly one line and records the reason in the partial file whichever
fires first. The watchdog waits a grace period past ``--timeout`` so the backend's exception,
which unwinds cleanly, normally wins; on expiry it reports and ends the process with status 3
(``os._exit``: a thread stuck in a collective cannot be unwound).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

EXIT_TIMEOUT = 3


class FailureReport:
    """Print one ``error: rank R: ...`` line and record it, at most once per process.

    ``partial`` is the file this rank keeps its measurements in (None on a rank that writes
    none); the line names it only when it exists."""

    def __init__(
        self, rank: int, partial: str | None, record: Callable[[str], None] | None = None
    ) -> None:
        self._rank = rank
        self._partial = partial
        self._record = record
        # re-entrant: a signal handler may report while the main thread is reporting
        self._lock = threading.RLock()
        self._done = False
        self._reporting = False

    @property
    def reporting(self) -> bool:
        """Whether a report is being recorded and printed right now."""
        return self._reporting

    def fail(self, message: str) -> None:
        """Record ``message`` in the partial file and print it; later calls are silent."""
        with self._lock:
            if self._done:
                return
            self._done = self._reporting = True
            try:
                self._report(message)
            finally:
                self._reporting = False

    def _report(self, message: str) -> None:
        where = ""
        if self._record is not None:
            try:
                self._record(message)
            except Exception as exc:  # the failure itself is what to report
                where = f"; the measurements could not be saved ({' '.join(str(exc).split())})"
        if not where and self._partial is not None and os.path.isfile(self._partial):
            where = f"; measurements so far are in {self._partial}"
        print(f"error: rank {self._rank}: {message}{where}", file=sys.stderr, flush=True)


class Watchdog:
    """Deadline per guarded step; one daemon thread per process."""

    def __init__(self, timeout_s: float, report: FailureReport, grace_s: float = 0.0) -> None:
        self.timeout_s = timeout_s
        self._grace_s = grace_s
        self._report = report
        self._label: str | None = None
        self._deadline = float("inf")
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, daemon=True, name="calibrate-watchdog").start()

    @contextmanager
    def guard(self, label: str) -> Iterator[None]:
        """Run the body under the deadline."""
        with self._lock:
            self._label = label
            self._deadline = time.monotonic() + self.timeout_s + self._grace_s
        try:
            yield
        finally:
            with self._lock:
                self._label, self._deadline = None, float("inf")

    def _watch(self) -> None:
        while True:
            time.sleep(min(0.2, self.timeout_s / 4))
            with self._lock:
                label, late = self._label, time.monotonic() > self._deadline
            if late:
                self._report.fail(
                    f"during '{label}': did not finish within --timeout {self.timeout_s:g} s "
                    "(a rank hung or died)"
                )
                os._exit(EXIT_TIMEOUT)
