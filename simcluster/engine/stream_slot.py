"""A stream's one slot: a collective holds its stream until it ends, and the next waits.

SimPy's ``Resource(capacity=1)`` does the same with two events per use (the request, the
release) and a hand-over through both; a step runs hundreds of thousands of collectives, so
the slot is taken at once when free (no event) and handed to the first waiter on release.
Waiters are served in the order they asked, as the Resource serves its queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator

import simpy


class StreamSlot:
    """One stream of one rank: free, or held by one collective (``take`` / ``give``)."""

    __slots__ = ("_env", "_held", "_waiting")

    def __init__(self, env: simpy.Environment) -> None:
        self._env = env
        self._held = False
        self._waiting: deque[simpy.Event] = deque()

    def ask(self) -> simpy.Event | None:
        """Ask for the stream: None when it is free (now held), else the event that fires when
        it is handed over (every earlier asker done). Two slots asked for at once (a pipeline
        transfer's send and receive streams) keep their places in both queues."""
        if not self._held:
            self._held = True
            return None
        turn = self._env.event()
        self._waiting.append(turn)
        return turn

    def take(self) -> Generator[simpy.Event, object, None]:
        """Hold the stream: at once when it is free, else when every earlier asker is done."""
        turn = self.ask()
        if turn is not None:
            yield turn  # the holder that gives the stream to this waiter keeps it held

    def give(self) -> None:
        """Release the stream to the first waiter, if any."""
        if self._waiting:
            self._waiting.popleft().succeed()
        else:
            self._held = False
