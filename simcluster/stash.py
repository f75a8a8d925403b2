"""How one pipeline op changes its stage's activation stash: the rule the engine's timeline,
the memory walk (``memory_report.activation_walk``) and the held-microbatch count share."""

from __future__ import annotations


def stash_change(kind: str, size: float, kept: float) -> float:
    """Bytes an op of ``kind`` adds to the stash of a chunk whose forward stashes ``size`` and
    whose split backward leaves ``kept`` for its weight gradients: F saves the activations; B
    frees what the weight gradients do not read (under full recomputation it adds the linear
    inputs it recomputed, more than F kept); W frees the rest; a fused BW frees everything."""
    return {"F": size, "B": kept - size, "W": -kept, "BW": -size}[kind]


def freed_share(shares: tuple[float, ...] | list[float], i: int) -> float:
    """The share of an op's stash change a backward phase has made after its unit ``i``, from
    ``shares``, the chunk's stash built up over its forward units (cumulative fractions,
    ``memory.stash_cumulative_shares``): units run in reverse, so unit i undoes forward units
    n - 1 - i … n - 1 (exactly 1.0 after the last; 0.0 before the first, i = -1)."""
    n = len(shares)
    if i < 0:
        return 0.0
    return 1.0 if i >= n - 1 else 1.0 - shares[n - 2 - i]
