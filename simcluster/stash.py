"""How one pipeline op changes its stage's activation stash: the rule the engine's timeline,
the memory walk (``memory_report.activation_walk``) and the held-microbatch count share, and
the order an F&B pair's two ops move it in."""

from __future__ import annotations

from collections.abc import Sequence


def stash_change(kind: str, size: float, kept: float) -> float:
    """Bytes an op of ``kind`` adds to the stash of a chunk whose forward stashes ``size`` and
    whose split backward leaves ``kept`` for its weight gradients: F saves the activations; B
    frees what the weight gradients do not read (under full recomputation it adds the linear
    inputs it recomputed, more than F kept); W frees the rest; a fused BW frees everything."""
    return {"F": size, "B": kept - size, "W": -kept, "BW": -size}[kind]


def freed_share(shares: Sequence[float], i: int) -> float:
    """The share of an op's stash change a backward phase has made after its unit ``i``, from
    ``shares``, the chunk's stash built up over its forward units (cumulative fractions,
    ``memory.stash_cumulative_shares``): units run in reverse, so unit i undoes forward units
    n - 1 - i … n - 1 (exactly 1.0 after the last; 0.0 before the first, i = -1)."""
    n = len(shares)
    if i < 0:
        return 0.0
    return 1.0 if i >= n - 1 else 1.0 - shares[n - 2 - i]


def unit_moves(kind: str, change: float, shares: Sequence[float]) -> list[float]:
    """The bytes each of an op's units adds to the stash (negative: frees), in the order they
    run: a forward's unit ``i`` saves ``shares[i] - shares[i - 1]`` of the op's ``change``, a
    backward's unit ``i`` makes :func:`freed_share`'s step of it."""
    if kind == "F":
        cumulative = list(shares)
    else:
        cumulative = [freed_share(shares, i) for i in range(len(shares))]
    previous = [0.0, *cumulative[:-1]]
    return [change * (now - before) for now, before in zip(cumulative, previous, strict=True)]


def pair_steps(forward_units: int, backward_units: int) -> list[tuple[str, int]]:
    """The order in which an F&B pair's units move the stash, ("F" or "B", unit index): the
    host's order in Megatron-Core's combined 1F1B (``TransformerModelChunkSchedulePlan.run``):
    forward layer i issued with backward layer i (the i-th the backward pops, in reverse) for
    as many layers as both have, each backward layer's state released after its pair, then the
    backward's remaining layers, then the forward's. The caching allocator reuses what a
    released layer freed for the kernels issued after it on the same stream, so the stash
    follows this order, not the two ops' kernels one by one."""
    both = min(forward_units, backward_units)
    steps = [step for i in range(both) for step in (("F", i), ("B", i))]
    steps += [("B", i) for i in range(both, backward_units)]
    steps += [("F", i) for i in range(both, forward_units)]
    return steps
