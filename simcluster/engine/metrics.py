"""Summary metrics from the recorded events: bubble, exposed communication, busy time."""

from __future__ import annotations

import numpy as np
import pandas as pd

PIPELINE_KINDS = ("forward", "backward_input", "backward_weight", "backward", "recompute")
# embd: the tied-embedding gradient all-reduce between the first and last pipeline stage
EXPOSED_GROUPS = ("tp", "cp", "ep", "dp", "pp", "embd")
NON_PIPELINE_GROUPS = tuple(g for g in EXPOSED_GROUPS if g != "pp")


def union_length(intervals: np.ndarray) -> float:
    """Total length covered by a set of [start, end] intervals."""
    if len(intervals) == 0:
        return 0.0
    iv = intervals[np.argsort(intervals[:, 0], kind="stable")]
    total = 0.0
    cur_s, cur_e = iv[0]
    for s, e in iv[1:]:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return float(total + cur_e - cur_s)


def _merge(intervals: np.ndarray) -> list[tuple[float, float]]:
    if len(intervals) == 0:
        return []
    iv = intervals[np.argsort(intervals[:, 0], kind="stable")]
    out = [list(iv[0])]
    for s, e in iv[1:]:
        if s > out[-1][1]:
            out.append([s, e])
        else:
            out[-1][1] = max(out[-1][1], e)
    return [(float(a), float(b)) for a, b in out]


def uncovered(comm: np.ndarray, compute: np.ndarray) -> float:
    """Length of the union of ``comm`` intervals not covered by any ``compute`` interval."""
    cover = _merge(compute)
    total = 0.0
    j = 0
    for s, e in _merge(comm):
        while j < len(cover) and cover[j][1] <= s:
            j += 1  # both lists are sorted and disjoint: a two-pointer sweep
        length = e - s
        k = j
        while k < len(cover) and cover[k][0] < e:
            length -= min(e, cover[k][1]) - max(s, cover[k][0])
            k += 1
        total += max(length, 0.0)
    return total


def exposed_comm(events: pd.DataFrame) -> dict[str, float]:
    """Per group (tp, cp, ep, dp, pp, embd): communication time with the compute stream idle,
    worst rank."""
    out: dict[str, float] = {}
    comm = events[events["group"] != ""]
    if comm.empty:
        return {g: 0.0 for g in EXPOSED_GROUPS}
    for group in EXPOSED_GROUPS:
        worst = 0.0
        sel = comm[(comm["group"] == group) & (comm["kind"] != "recv")]
        for rank, rows in sel.groupby("rank", sort=True):
            compute = events[(events["rank"] == rank) & (events["stream"] == "compute")]
            value = uncovered(
                rows[["start_s", "end_s"]].to_numpy(), compute[["start_s", "end_s"]].to_numpy()
            )
            worst = max(worst, value)
        out[group] = worst
    return out


def bubble_fraction(events: pd.DataFrame) -> tuple[float, list[float]]:
    """Pipeline bubble: the largest per-stage idle time inside the stage's own span (first
    F/B/W start to last F/B/W end), over the longest span (Zero Bubble paper's definition; 1F1B
    gives (p-1)/(m+p-1) on stage 0). Time blocked on exposed communication of any group but the
    pipeline's own (TP/CP/EP inside a layer, a data-parallel parameter gather or gradient
    reduce, the tied-embedding reduce) is not counted as bubble: it is reported as exposed
    communication, and counting it twice would show a bubble on a single-stage layout.

    Load imbalance is not bubble: a stage with less work than the busiest one (the first stage
    with a layer fewer, say) waits for the others by that difference whatever the schedule, so
    each stage's idle is counted against the busiest stage's work, span - max busy.
    """
    pipe = events[events["kind"].isin(PIPELINE_KINDS)]
    if pipe.empty:
        return 0.0, []
    spans: list[float] = []
    busies: list[float] = []
    for _stage, rows in pipe.groupby("stage", sort=True):
        rank = rows["rank"].min()
        lo, hi = float(rows["start_s"].min()), float(rows["end_s"].max())
        mine = events[
            (events["rank"] == rank) & (events["start_s"] >= lo) & (events["end_s"] <= hi)
        ]
        compute = mine[mine["kind"].isin(PIPELINE_KINDS)][["start_s", "end_s"]].to_numpy()
        comm = mine[mine["group"].isin(NON_PIPELINE_GROUPS)][["start_s", "end_s"]].to_numpy()
        busy = union_length(compute) + uncovered(comm, compute)
        spans.append(hi - lo)
        busies.append(busy)
    longest, busiest = max(spans), max(busies)
    idle = [max(0.0, s - busiest) for s in spans]
    per_stage = [i / longest if longest > 0 else 0.0 for i in idle]
    return max(per_stage), per_stage
