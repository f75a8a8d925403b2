"""How one pipeline op changes its stage's activation stash: the rule the engine's timeline,
the memory walk (``memory_report.activation_walk``) and the held-microbatch count share."""

from __future__ import annotations


def stash_change(kind: str, size: float, kept: float) -> float:
    """Bytes an op of ``kind`` adds to the stash of a chunk whose forward stashes ``size`` and
    whose split backward leaves ``kept`` for its weight gradients: F saves the activations; B
    frees what the weight gradients do not read (under full recomputation it adds the linear
    inputs it recomputed, more than F kept); W frees the rest; a fused BW frees everything."""
    return {"F": size, "B": kept - size, "W": -kept, "BW": -size}[kind]
