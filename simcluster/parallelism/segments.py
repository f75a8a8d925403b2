"""The units of work the engine executes: compute blocks and communication operations."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Compute:
    """Work on the compute stream (one or more fused kernels), in seconds."""

    name: str
    seconds: float
    layer: int = -1
    kind: str = ""  # event kind; "" = the kind of the phase it belongs to


@dataclass(frozen=True)
class Comm:
    """A collective or p2p exchange on a parallel group's communication stream.

    ``overlap`` = the comm runs concurrently with the next Compute segment (Megatron's
    tp-comm-overlap, ring attention); otherwise the compute stream waits for it.
    """

    name: str
    group: str  # tp, cp, ep, dp, pp
    op: str  # all_reduce, all_gather, reduce_scatter, all_to_all, send_recv
    nbytes: float
    overlap: bool = False
    layer: int = -1


Segment = Compute | Comm


def as_recompute(segments: list[Segment] | tuple[Segment, ...]) -> tuple[Segment, ...]:
    """The same work rerun before a backward: compute relabelled ``recompute_*``, comms kept."""
    return tuple(
        replace(s, kind="recompute", name=f"recompute_{s.name}") if isinstance(s, Compute) else s
        for s in segments
    )

# schedule op kind -> event kind of its compute
PHASE_KIND = {"F": "forward", "B": "backward_input", "W": "backward_weight", "BW": "backward"}
