"""How many microbatches a stage holds activations for where its stash peaks: why a schedule's
memory differs from 1F1B's.

A forward stashes its activations until the microbatch's backward; a split backward (B) keeps
what the weight gradients read until its W. 1F1B's stage s holds p - s forward stashes at its
peak (Narayanan et al. 2021, sec. 2.2: p on the first stage); GPipe holds all m; a zero-bubble
schedule that defers weight passes holds their inputs as well, which under full recomputation
outweigh a forward's stash (only each layer's input). Counted per chunk pass (a microbatch
through one of a stage's chunks), over the order ``memory_report.activation_walk`` walks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simcluster.schedules import PipeOp
from simcluster.stash import stash_change

#: how each op kind moves the count of forward stashes, and of inputs kept for a W
_FORWARD = {"F": 1, "B": -1, "W": 0, "BW": -1}
_FOR_WEIGHTS = {"F": 0, "B": 1, "W": -1, "BW": 0}


@dataclass(frozen=True)
class Held:
    """Chunk passes whose activations a stage holds at its peak: stashed by their forward
    (backward not run yet), and kept by a backward-input pass for their W."""

    forward: int = 0
    for_weights: int = 0


def held_at_peak(ops: Sequence[PipeOp], chunk_bytes: Sequence[float], kept: Sequence[float]) -> Held:
    """What ``ops`` hold where their stash first reaches its largest (``chunk_bytes[c]`` stashed
    by chunk c's forward, ``kept[c]`` of it left by a B until its W; as activation_walk counts
    them, without transients). An F&B pair's two chunk passes both count as held at the pair's
    peak: each holds part of its stash there (the walk moves their layers in turn)."""
    live = best = 0.0
    forward = for_weights = 0
    held = Held()
    for op in ops:
        live += stash_change(op.kind, chunk_bytes[op.chunk], kept[op.chunk])
        forward += _FORWARD[op.kind]
        for_weights += _FOR_WEIGHTS[op.kind]
        if live > best:
            best, held = live, Held(forward, for_weights)
    return held

