"""V-shape building blocks and their repetition, the first half of the adaptive V scheduler of
Qi et al., "Pipeline Parallelism with Controllable Memory" (NeurIPS'24, arXiv 2405.15362, §3
and Appendix A), as sail-sg's ``zerobubble/scheduler/v_auto_schedule.py`` builds them.

A schedule is a grid of unit slots per stage holding one pass each: ``F``/``f`` the forward of
chunk 0/1, ``B``/``b`` the input backward of chunk 1/0 (chunk 1 holds the loss, so its
backward runs first), ``W``/``w`` the weight pass of chunk 1/0, ``" "`` idle. A building block
puts one microbatch's six passes at slots modulo the period of 6 on every stage (F, f, B, b
each take one slot of the 6; two are left for W and w). Stage 0's block has F at 0 and f, B, b
at three distinct slots of 1..5 (60 blocks); each next stage's block shifts F and B by a step
k of 1..5 slots and f and b by one slot back (the uniform offsets ``[k, -1, k, -1]``: the
chunk-0 forward and the chunk-1 backward travel down the stages k slots apart, the other two
travel up one slot apart). The first ``n0`` stages use step k0, the rest k1 <= k0. W and w
take the first free slot after B and b. A step that puts two passes of a stage in the same
slot leaves no block. The block's lifespan on each stage sets its peak activation memory.

Memory is counted in chunk activations, the fork's unit: F and f stash one, W and w free one,
B and b free nothing; 1F1B's p microbatches of a whole stage are 2p units.
"""

from __future__ import annotations

from itertools import accumulate

PERIOD = 6  # slots of the building block (four passes and two weight passes)
PASSES = "FfBbWw"
IDLE = " "
_STASH = {"F": 1, "f": 1, "W": -1, "w": -1, "B": 0, "b": 0, IDLE: 0}  # chunk activations
Grid = list[list[str]]  # per stage, the pass in each slot
Block = tuple[tuple[int, ...], ...]  # per stage, the slot (mod PERIOD) of F, f, B, b, W, w

#: the uniform offsets a stage's block may take from the previous stage's: F and B step k,
#: f and b step back one slot (v_auto_schedule.py's ``available_offsets``)
STEPS = (1, 2, 3, 4, 5)


def with_weight_slots(slots: list[int]) -> tuple[int, ...]:
    """F, f, B, b slots plus W and w, each in the first free slot after its backward (B's W
    placed first)."""
    taken = set(slots)
    out = [*slots, -1, -1]
    for backward, weight in ((2, 4), (3, 5)):
        for shift in range(1, PERIOD):
            slot = (slots[backward] + shift) % PERIOD
            if slot not in taken:
                out[weight] = slot
                taken.add(slot)
                break
    return tuple(out)


def first_stage_blocks() -> list[tuple[int, ...]]:
    """Stage 0's 60 candidate blocks in the fork's order (f's slot, then B's, then b's)."""
    out = []
    for f1 in range(1, PERIOD):
        for b1 in range(1, PERIOD):
            for b0 in range(1, PERIOD):
                if len({f1, b1, b0}) == 3:
                    out.append(with_weight_slots([0, f1, b1, b0]))
    return out


def stage_blocks(first: tuple[int, ...], k0: int, k1: int, n0: int, p: int) -> Block | None:
    """Every stage's block: stage s+1 shifts stage s's F and B by k0 (s < n0) or k1, f and b by
    -1 (mod 6); None when two passes of a stage would share a slot."""
    blocks = [first]
    for s in range(p - 1):
        k = k0 if s < n0 else k1
        prev = blocks[-1]
        slots = [(prev[t] + shift) % PERIOD for t, shift in enumerate((k, -1, k, -1))]
        if len(set(slots)) < 4:
            return None
        blocks.append(with_weight_slots(slots))
    return tuple(blocks)


def repeat(block: Block, m: int) -> Grid:
    """The block repeated for m microbatches (v_auto_schedule.py's ``init_repeated_schedule``
    and ``clear_invalid_index``): each stage's 6-slot pattern laid end to end, then, walking F
    down the stages, f up, B down and b up, each pass's first microbatch is its first
    occurrence after the pass it waits for (after the start of the second period for stage 0's
    F), W and w the first after their backward; occurrences before the first and from the
    (m+1)-th on are cleared."""
    p = len(block)
    length = PERIOD * (4 * p + m + 1)
    grid = []
    for slots in block:
        pattern = [IDLE] * PERIOD
        for t, slot in enumerate(slots):
            pattern[slot] = PASSES[t]
        grid.append(pattern * (length // PERIOD))
    at = PERIOD
    for kind in "FfBb":
        stages = range(p) if kind in "FB" else range(p - 1, -1, -1)
        for s in stages:
            while grid[s][at] != kind:
                at += 1
            _keep_m(grid[s], at, m)
            at += 1
            if kind in "Bb":
                weight = "W" if kind == "B" else "w"
                _keep_m(grid[s], grid[s].index(weight, at), m)
    return grid


def _keep_m(row: list[str], first: int, m: int) -> None:
    """Clear the pass at ``first``'s occurrences before it and from m periods after it."""
    for slot in [*range(first - PERIOD, -1, -PERIOD), *range(first + PERIOD * m, len(row), PERIOD)]:
        row[slot] = IDLE


def stage_peaks(grid: Grid) -> list[int]:
    """Each stage's largest stash over its slots, in chunk activations."""
    return [max(0, *accumulate(_STASH[kind] for kind in row)) for row in grid]


def peak(grid: Grid) -> int:
    """The largest stash over every stage, in chunk activations."""
    return max(stage_peaks(grid))
