"""The warm-up and cool-down reorders of the adaptive V scheduler (sail-sg's
``v_auto_schedule.py``: ``process_warmup_without_increasing_peak_mem``,
``release_w_in_warmup_if_under_memory``, ``process_cooldown``, whose docstrings draw both
phases; the "reordering" of Qi et al., "Pipeline Parallelism with Controllable Memory").

The repeated block's warm-up and cool-down leave idle slots the steady state does not have. With
the schedule's peak P (chunk activations), stage i's warm-up is rewritten as: F in each of its
first 2(p-1-i) slots from slot i (the forwards of chunk 0 while the later stages fill), then i+1 pairs F f, then B W f (or B W F once its f are done) until the passes it had
before its first b are back, with at most min(i+1, P//2) f and P minus those F (the fork's
``#f = min(i+1, peak_mem//2)``, ``#F = peak_mem - #f``). The cool-down puts (P+1)//2 of the
last b and min(i+1, P - those) of the last B of stage i two slots apart from fixed slots after
stage 0's last f, and the weight passes its tail freed back in the first idle slots after the
stage's last remaining one, W before w.
"""

from __future__ import annotations

from simcluster.schedules.v_auto_block import IDLE, Grid, peak, stage_peaks
from simcluster.schedules.v_auto_squeeze import Infeasible, squeeze


def _put(row: list[str], slot: int, kind: str) -> None:
    """Write into an idle slot. Where the fork would write over a pass (losing it, so that its
    later assertions stop the search) or past the end, the block is skipped instead."""
    if not 0 <= slot < len(row) or row[slot] != IDLE:
        raise Infeasible
    row[slot] = kind


class _Writer:
    """One stage's warm-up written slot by slot from ``slot`` on, each pass at most ``cap``
    times."""

    def __init__(self, row: list[str], slot: int) -> None:
        self.row, self.slot = row, slot
        self.done = dict.fromkeys("FfBW", 0)

    def step(self, kind: str, cap: int) -> None:
        """Write ``kind`` in this slot if fewer than ``cap`` were written, and move on."""
        if self.done[kind] < cap:
            _put(self.row, self.slot, kind)
            self.done[kind] += 1
        self.slot += 1


def _clear_warmup(row: list[str]) -> dict[str, int]:
    """Empty ``row``'s slots before its first b; return how many of each pass they held."""
    have = dict.fromkeys("FfBW", 0)
    for j, kind in enumerate(row):
        if kind == "b":
            break
        if kind != IDLE:
            if kind not in have:  # a w before the first b: the fork's assertion
                raise Infeasible
            have[kind] += 1
        row[j] = IDLE
    return have


def reorder_warmup(grid: Grid, m: int) -> Grid:
    """The warm-up rewritten as the module docstring says; then squeezed."""
    p = len(grid)
    budget = min(peak(grid), 2 * p)
    for i, row in enumerate(grid):
        have = _clear_warmup(row)
        cap_f1 = min(i + 1, budget // 2, m, have["f"])
        cap_f0 = min(budget - min(i + 1, budget // 2, m), m, have["F"])
        out = _Writer(row, i)
        for _ in range(2 * (p - 1 - i)):
            out.step("F", cap_f0)
        for _ in range(i + 1):
            out.step("F", cap_f0)
            out.step("f", cap_f1)
        while any(out.done[k] < have[k] for k in "FfBW"):
            out.step("B", have["B"])
            out.step("W", have["W"])
            if out.done["f"] < have["f"]:
                if out.done["f"] >= out.done["F"]:
                    raise Infeasible  # an f before its F (the fork's assertion)
                out.step("f", have["f"])
            else:
                out.step("F", have["F"])
    return squeeze(grid, m)


def release_weights(grid: Grid, budget: int) -> Grid:
    """Few microbatches (m <= p): each stage moves its first weight passes to the end until its
    peak reaches ``budget``, so the warm-up runs more forwards instead of idling; every stage is
    padded by the same number of slots."""
    peaks = stage_peaks(grid)
    pad = budget - min(peaks)
    out = []
    for row, own in zip(grid, peaks, strict=True):
        row = list(row)
        moved: list[str] = []
        for j, kind in enumerate(row):
            if own + len(moved) >= budget:
                break
            if kind in "Ww":
                moved.append(kind)
                row[j] = IDLE
        out.append(row + moved + [IDLE] * (pad - len(moved)))
    return out


def reorder_cooldown(grid: Grid, m: int) -> Grid:
    """The cool-down rewritten as the module docstring says; then squeezed."""
    p = len(grid)
    budget = peak(grid)
    if budget > 2 * p:
        raise Infeasible
    n_b0 = min((budget + 1) // 2, m)
    n_b1 = min(budget - n_b0, m)
    anchor = -1
    for i, row in enumerate(grid):
        took, last_f1 = _take_tail(row, min(i + 1, n_b1), n_b0, budget)
        if i == 0:
            anchor = last_f1
        for k in range(took["b"]):
            _put(row, anchor - i + 2 * p - 2 * k, "b")
        for k in range(took["B"]):
            slot = anchor + 1 + i - 2 * k
            if not 0 <= slot < len(row):
                raise Infeasible
            row[slot] = "B"  # over whatever is there, as the fork (a W lost comes back below)
    return squeeze(_weights_back(grid), m)


def _take_tail(row: list[str], max_b1: int, n_b0: int, budget: int) -> tuple[dict[str, int], int]:
    """Clear a stage's last ``max_b1`` B and ``n_b0`` b, then the weight passes of its tail;
    how many of each were cleared, and the slot of its last f (-1: none)."""
    took = dict.fromkeys("BbWw", 0)
    last_f1 = -1
    for j in range(len(row) - 1, -1, -1):
        kind = row[j]
        if kind == "f" and last_f1 < 0:
            last_f1 = j
        if kind == "B" and took["B"] < max_b1:
            row[j] = IDLE
            took["B"] += 1
        if kind == "b" and took["b"] < n_b0:
            row[j] = IDLE
            took["b"] += 1
    # free the tail's weight passes: at least one per backward taken, and budget in all
    for j in range(len(row) - 1, -1, -1):
        if took["W"] >= took["B"] and took["w"] >= took["b"] and took["W"] + took["w"] >= budget:
            break
        if row[j] in "Ww":
            took[row[j]] += 1
            row[j] = IDLE
    return took, last_f1


def _weights_back(grid: Grid) -> Grid:
    """Pending weight passes in the idle slots after the stage's last remaining one (W before
    w), the rest appended; stages padded to one length."""
    rows = []
    for row in grid:
        row = list(row)
        last = max((j for j, kind in enumerate(row) if kind in "Ww"), default=-1)
        pending = {"W": 0, "w": 0}
        for j, kind in enumerate(row):
            if kind in "Bb":
                pending["W" if kind == "B" else "w"] += 1
            elif kind in "Ww":
                pending[kind] -= 1
            elif kind == IDLE and j > last:
                for weight in "Ww":
                    if pending[weight] > 0:
                        row[j] = weight
                        pending[weight] -= 1
                        break
        rows.append(row + ["W"] * max(pending["W"], 0) + ["w"] * max(pending["w"], 0))
    width = max(len(row) for row in rows)
    return [row + [IDLE] * (width - len(row)) for row in rows]
