"""The compute stream the two ops of an F&B pair share, taken in the order the framework issues
to it.

A CUDA stream runs its kernels in the order they were issued. Megatron-Core's combined 1F1B
(``schedule_layer_1f1b`` in ``models/common/model_chunk_schedule_plan.py``) issues one layer pair
as: the backward's attention, the forward's attention, the backward's MLP, the forward's MLP;
each expert-parallel all-to-all goes to the communication stream at the point where the turn
changes hands, so it runs under the other op's part. DeepSeek-V3's DualPipe arranges a pair the
same way by hand (report Fig. 4). A kernel that waits for its all-to-all holds every kernel
issued after it, the other op's included: the order is fixed, not "whoever is ready".

So the stream is handed over by turns. The backward leads. Each op keeps its turn until it
reaches a blocking expert-parallel exchange (it issues the exchange, then the other op's part
runs), or the edge of a layer without one (a dense layer is one part, as Megatron schedules each
layer pair). Blocking collectives inside a part (tensor- or context-parallel ones) hold the
stream, as they do on the GPU. A fixed order also keeps the pair monotone: a faster link cannot
reorder the kernels and lengthen the step, as a ready-first rule could.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy
from simpy.resources.resource import Request

__all__ = ["FOLLOW", "LEAD", "Lane", "PairStream"]

#: the backward, which has the first turn, and the forward
LEAD, FOLLOW = "B", "F"


@dataclass
class PairStream:
    """The shared stream: its one slot (``slot``) and whose turn it is to issue to it."""

    env: simpy.Environment
    slot: simpy.Resource
    owner: str = LEAD
    finished: set[str] = field(default_factory=set)
    _handover: simpy.Event | None = None

    @classmethod
    def open(cls, env: simpy.Environment) -> PairStream:
        """A new stream; the backward has the first turn."""
        return cls(env, simpy.Resource(env, capacity=1))

    def _give(self, to: str) -> None:
        self.owner = to
        if self._handover is not None:
            event, self._handover = self._handover, None
            event.succeed()

    def wait_turn(self, who: str) -> Generator:
        """Until it is ``who``'s turn."""
        while self.owner != who:
            if self._handover is None:
                self._handover = self.env.event()
            yield self._handover

    def hand_over(self, who: str) -> None:
        """``who`` ends its part: the other op's next part is issued next (if it has one)."""
        other = FOLLOW if who == LEAD else LEAD
        if self.owner == who and other not in self.finished:
            self._give(other)

    def finish(self, who: str) -> None:
        """``who`` has issued all its kernels: the rest of the stream is the other op's."""
        self.finished.add(who)
        self.hand_over(who)


@dataclass(frozen=True)
class Lane:
    """One op's access to a :class:`PairStream` (``who``: "B" the backward, "F" the forward)."""

    stream: PairStream
    who: str

    def acquire(self) -> Generator[Any, Any, Request]:
        """Wait for this op's turn, then for the stream; the request releases on ``with``."""
        yield from self.stream.wait_turn(self.who)
        req = self.stream.slot.request()
        yield req
        return req

    def wait_turn(self) -> Generator:
        """Until it is this op's turn (what the host issues next is this op's)."""
        yield from self.stream.wait_turn(self.who)

    def hand_over(self) -> None:
        """End this op's part (see :meth:`PairStream.hand_over`)."""
        self.stream.hand_over(self.who)

    def finish(self) -> None:
        """This op has no more kernels for the stream."""
        self.stream.finish(self.who)
