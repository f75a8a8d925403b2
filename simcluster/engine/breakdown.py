"""Where a step's time goes, per pipeline stage: compute by category, exposed communication
by group, and the rest (pipeline bubble and waits).

For one GPU of each stage the step's wall time [0, step] is split without double counting:

- compute-stream time by what it is spent on (``segments.CATEGORIES``: GEMMs, attention,
  memory-bound kernels, the loss, fp32 gradient accumulation, the optimizer) plus
  ``recompute`` (activation recomputation, whatever it reruns);
- communication while the compute stream is idle, each instant given to one group in the
  order of ``metrics.EXPOSED_GROUPS`` (so a DP gradient reduce running next to a tied-embedding
  sync is counted once);
- ``idle``: the rest — the pipeline bubble, waiting for another stage's activations or
  gradients, and the time after this GPU's work ends and before the slowest GPU's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: the CLI's parser and error paths stay free of pandas
    import pandas as pd

from simcluster.engine.metrics import EXPOSED_GROUPS, by_rank, uncovered
from simcluster.parallelism.segments import CATEGORIES

COMPUTE_KEYS = (*CATEGORIES, "recompute", "other")
# short names for narrow table cells
SHORT = {
    "memory": "mem-bound", "grad_accum": "grad adds", "host": "host-bound", "idle": "idle",
    **{f"comm_{g}": f"{g} comm" for g in EXPOSED_GROUPS}, "comm_host": "host copies",
}  # fmt: skip
LABELS = {
    "gemm": "GEMMs",
    "attention": "attention",
    "memory": "memory-bound",
    "loss": "loss",
    "grad_accum": "gradient accumulation adds",
    "optimizer": "optimizer",
    "host": "host-bound (GPU waits on Python)",
    "recompute": "recompute",
    "other": "other compute",
    "idle": "idle (bubble, waits)",
    **{f"comm_{g}": f"exposed {g}" for g in EXPOSED_GROUPS},
    "comm_host": "exposed copies to/from host memory",
}


def _exposed_by_group(events: pd.DataFrame, rank: int, mine: pd.DataFrame | None = None) -> dict[str, float]:
    if mine is None:
        mine = events[events["rank"] == rank]
    cover = mine[mine["stream"] == "compute"][["start_s", "end_s"]].to_numpy()
    comm = mine[(mine["group"] != "") & (mine["kind"] != "recv")]
    out: dict[str, float] = {}
    for group in EXPOSED_GROUPS:
        iv = comm[comm["group"] == group][["start_s", "end_s"]].to_numpy()
        out[f"comm_{group}"] = uncovered(iv, cover) if len(iv) else 0.0
        if len(iv):
            cover = np.concatenate([cover, iv]) if len(cover) else iv
    return out


def stage_breakdown(
    events: pd.DataFrame,
    compute_time: dict[int, dict[str, float]],
    rank: int,
    step: float,
    rows: pd.DataFrame | None = None,
) -> dict[str, float]:
    """Seconds of ``step`` on ``rank`` by category; the values add up to ``step``
    (``rows``: the rank's events when the caller has them, ``metrics.by_rank``)."""
    spent = compute_time.get(rank, {})
    out = {k: float(spent.get(k, 0.0)) for k in COMPUTE_KEYS}
    out.update(_exposed_by_group(events, rank, rows))
    out["idle"] = max(0.0, step - sum(out.values()))
    return out


def step_breakdown(
    events: pd.DataFrame, compute_time: dict[int, dict[str, float]], pp: int, step: float
) -> dict:
    """Per stage (its lowest simulated rank) and the stage with the most compute."""
    per_stage: list[dict[str, float]] = []
    # each stage's lowest rank, and its rows, found in one pass over the events
    lowest = events.groupby("stage")["rank"].min()
    rows = by_rank(events)
    for stage in range(pp):
        if stage not in lowest.index:
            per_stage.append({k: 0.0 for k in (*COMPUTE_KEYS, "idle")})
            continue
        rank = int(lowest[stage])
        per_stage.append(stage_breakdown(events, compute_time, rank, step, rows[rank]))
    return {"stage": busiest_stage(per_stage), "per_stage": per_stage}


def busiest_stage(per_stage: list[dict[str, float]]) -> int:
    """The stage whose breakdown has the most compute."""
    return max(range(len(per_stage)), key=lambda s: sum(per_stage[s].get(k, 0.0) for k in COMPUTE_KEYS))


# idle is the step less the other parts, so float rounding leaves ~1e-13 s of it where a GPU
# never waits; a part this small a share of its step is that residue, not time spent
RESIDUE = 1e-9


def negligible(seconds: float, step: float) -> bool:
    """Whether ``seconds`` of a ``step`` is rounding residue (or nothing) rather than a part."""
    return seconds <= RESIDUE * step


def shares(seconds: dict[str, float], step: float, floor: float = 0.005) -> list[tuple[str, float]]:
    """(label, fraction of the step) for the parts above ``floor``, largest first."""
    parts = [(LABELS.get(k, k), v / step) for k, v in seconds.items() if step > 0 and v / step >= floor]
    return sorted(parts, key=lambda kv: -kv[1])


def busiest(summary: dict) -> dict[str, float]:
    """The busiest stage's breakdown of a run summary (seconds by part)."""
    b = summary["time_breakdown_s"]
    stage: dict[str, float] = b["per_stage"][b["stage"]]
    return stage


def busiest_shares(summary: dict) -> list[tuple[str, float]]:
    """:func:`shares` of the busiest stage of a run summary."""
    return shares(busiest(summary), summary["step_time_s"])


def largest_besides_gemm(summary: dict) -> tuple[str, float]:
    """The key (``comm_tp``, ``idle``, ``attention`` ...) and step share of the busiest
    stage's largest part other than GEMMs (the work a layout cannot avoid): what to look at
    first when comparing layouts."""
    rest = [(k, v) for k, v in busiest(summary).items() if k != "gemm" and v > 0]
    if not rest or summary["step_time_s"] <= 0:
        return "", 0.0
    key, seconds = max(rest, key=lambda kv: kv[1])
    return key, seconds / summary["step_time_s"]
