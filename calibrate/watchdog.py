"""Stop a run whose current step exceeds ``--timeout`` (a hung rank), keeping the partial file.

A background thread checks the deadline of the step in progress; on expiry it prints one line
and ends the process with status 3 (``os._exit``: a thread stuck in a collective cannot be
unwound). The runner writes the partial profile after every step, so nothing measured is lost.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

EXIT_TIMEOUT = 3


class Watchdog:
    """Deadline per guarded step; one daemon thread per process."""

    def __init__(self, timeout_s: float, rank: int, partial: str) -> None:
        self.timeout_s = timeout_s
        self._rank = rank
        self._partial = partial
        self._label: str | None = None
        self._deadline = float("inf")
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, daemon=True, name="calibrate-watchdog").start()

    @contextmanager
    def guard(self, label: str) -> Iterator[None]:
        """Run the body under the deadline."""
        with self._lock:
            self._label, self._deadline = label, time.monotonic() + self.timeout_s
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
                print(
                    f"error: --timeout: rank {self._rank}: '{label}' did not finish within "
                    f"{self.timeout_s:g} s (a rank hung or died); measurements so far are in "
                    f"{self._partial}",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(EXIT_TIMEOUT)
