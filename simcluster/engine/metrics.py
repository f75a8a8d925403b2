"""Summary metrics from the recorded events: bubble, exposed communication, busy time."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: the CLI's parser and error paths stay free of pandas
    import pandas as pd

PIPELINE_KINDS = ("forward", "backward_input", "backward_weight", "backward", "recompute")
# embd: the tied-embedding gradient all-reduce between the first and last pipeline stage;
# host: activation copies to and from host memory (training.activation_offload_layers, offload_modules)
EXPOSED_GROUPS = ("tp", "cp", "ep", "dp", "pp", "embd", "host")
NON_PIPELINE_GROUPS = tuple(g for g in EXPOSED_GROUPS if g != "pp")


def union_length(intervals: np.ndarray) -> float:
    """Total length covered by a set of [start, end] intervals."""
    s, e = _merge(intervals)
    if len(s) == 0:
        return 0.0
    # summed run by run in time order, the last run's end added before its start is taken off
    return float(sum((e[:-1] - s[:-1]).tolist()) + e[-1] - s[-1])


def _merge(intervals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint (starts, ends) covering the union of ``intervals`` (touching ones
    joined). Vectorised: a new run begins where a start passes every earlier end."""
    if len(intervals) == 0:
        return np.empty(0), np.empty(0)
    iv = intervals[np.argsort(intervals[:, 0], kind="stable")]
    starts, ends = iv[:, 0], np.maximum.accumulate(iv[:, 1])
    first = np.flatnonzero(np.r_[True, starts[1:] > ends[:-1]])
    last = np.r_[first[1:] - 1, len(iv) - 1]
    return starts[first], ends[last]


def uncovered(comm: np.ndarray, compute: np.ndarray) -> float:
    """Length of the union of ``comm`` intervals not covered by any ``compute`` interval."""
    s, e = _merge(comm)
    if len(s) == 0:
        return 0.0
    cs, ce = _merge(compute)
    if len(cs) == 0:
        return float(np.sum(e - s))
    before = np.r_[0.0, np.cumsum(ce - cs)]  # covered length before each cover interval

    def covered_until(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(cs, x, side="right")  # cover intervals starting at or before x
        j = np.maximum(i - 1, 0)
        inside = np.where(i > 0, np.clip(x - cs[j], 0.0, ce[j] - cs[j]), 0.0)
        covered: np.ndarray = before[j] * (i > 0) + inside
        return covered

    free = (e - s) - (covered_until(e) - covered_until(s))
    return float(np.sum(np.maximum(free, 0.0)))


def by_rank(events: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """Each rank's rows, in the frame's order (the rows ``events[events["rank"] == rank]``
    selects): split once, where a mask per rank and group scanned every row of a step's
    million events each time."""
    return {int(rank): rows for rank, rows in events.groupby("rank", sort=True)}


def exposed_comm(events: pd.DataFrame) -> dict[str, float]:
    """Per group (tp, cp, ep, dp, pp, embd): communication time with the compute stream idle,
    worst rank."""
    out: dict[str, float] = {}
    comm = events[events["group"] != ""]
    if comm.empty:
        return {g: 0.0 for g in EXPOSED_GROUPS}
    compute = by_rank(events[events["stream"] == "compute"])
    none = np.empty((0, 2))
    for group in EXPOSED_GROUPS:
        worst = 0.0
        sel = comm[(comm["group"] == group) & (comm["kind"] != "recv")]
        for rank, rows in sel.groupby("rank", sort=True):
            mine = compute.get(int(rank))
            value = uncovered(
                rows[["start_s", "end_s"]].to_numpy(),
                mine[["start_s", "end_s"]].to_numpy() if mine is not None else none,
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
    communication, and counting it twice would show a bubble on a single-stage layout; nor is
    waiting for the host to issue kernels (``host`` events).

    Load imbalance is not bubble: a stage with less work than the busiest one (the first stage
    with a layer fewer, say) waits for the others by that difference whatever the schedule, so
    each stage's idle is counted against the busiest stage's work, span - max busy.
    """
    return bubble_of(*pipeline_spans(events))


def pipeline_spans(events: pd.DataFrame) -> tuple[list[float], list[float]]:
    """Per stage (its lowest simulated rank): the span from its first pipeline op's start to
    its last one's end, and the time in it the stage was busy (:func:`bubble_fraction`)."""
    pipe = events[events["kind"].isin(PIPELINE_KINDS)]
    if pipe.empty:
        return [], []
    spans: list[float] = []
    busies: list[float] = []
    ranks = by_rank(events)
    for _stage, rows in pipe.groupby("stage", sort=True):
        rank = rows["rank"].min()
        lo, hi = float(rows["start_s"].min()), float(rows["end_s"].max())
        own = ranks[int(rank)]
        mine = own[(own["start_s"] >= lo) & (own["end_s"] <= hi)]
        # a wait for the host to issue kernels is host-bound time (the breakdown's), not bubble
        compute = mine[mine["kind"].isin((*PIPELINE_KINDS, "host"))][["start_s", "end_s"]].to_numpy()
        comm = mine[mine["group"].isin(NON_PIPELINE_GROUPS)][["start_s", "end_s"]].to_numpy()
        busy = union_length(compute) + uncovered(comm, compute)
        spans.append(hi - lo)
        busies.append(busy)
    return spans, busies


def bubble_of(spans: list[float], busies: list[float]) -> tuple[float, list[float]]:
    """:func:`bubble_fraction` of the stages' spans and busy times: the largest share and each
    stage's."""
    if not spans:
        return 0.0, []
    longest, busiest = max(spans), max(busies)
    idle = [max(0.0, s - busiest) for s in spans]
    per_stage = [i / longest if longest > 0 else 0.0 for i in idle]
    return max(per_stage), per_stage
