"""The stash of an F&B pair, moved in the order the framework's host issues the two ops' layers.

The two ops of a pair share one compute stream and take turns on it (``pair_stream.py``), so
their kernels interleave at the expert-parallel exchanges. Their memory follows the host's
order instead: Megatron-Core's combined 1F1B issues forward layer i together with backward
layer i and releases that backward layer's state before the next pair of layers
(``stash.pair_steps``), and PyTorch's caching allocator hands what a released layer freed to
the kernels issued after it on the stream. A unit's move is made on the timeline once the
engine has run its op to it (a forward unit as it starts, a backward unit as it ends) and
every move before it in that order has been made; the memory walk (``memory_report``) takes
the same steps, so the two agree on the pair's peak.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from simcluster.stash import pair_steps


@dataclass
class PairLedger:
    """The pair's unit moves (``moves``: per op, "F" and "B", the bytes each unit adds), the
    order they are made in (``steps``), and ``apply``, which makes one on the stash."""

    moves: dict[str, list[float]]
    apply: Callable[[float], None]
    steps: list[tuple[str, int]] = field(default_factory=list)
    reached: dict[str, int] = field(default_factory=lambda: {"F": 0, "B": 0})
    made: int = 0

    @classmethod
    def open(cls, forward: list[float], backward: list[float], apply: Callable[[float], None]) -> PairLedger:
        """A ledger for a forward and a backward of these unit moves."""
        return cls({"F": forward, "B": backward}, apply, pair_steps(len(forward), len(backward)))

    def reach(self, who: str, unit: int) -> None:
        """Op ``who`` ("F" or "B") has reached the move of its unit ``unit``: make every move
        now due, in order."""
        self.reached[who] = max(self.reached[who], unit + 1)
        while self.made < len(self.steps):
            op, i = self.steps[self.made]
            if self.reached[op] <= i:
                return
            self.apply(self.moves[op][i])
            self.made += 1

    @property
    def done(self) -> bool:
        """Whether every unit's move has been made."""
        return self.made == len(self.steps)
