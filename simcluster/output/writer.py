"""``write_all``: every output file of a run, written into one directory atomically.

All files are rendered into a staging directory next to ``out_dir`` and only then moved into
place (see :mod:`simcluster.output.atomic`), so a failure part-way (bad input, full disk,
unwritable place) leaves no half-written output behind.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

import pandas as pd

from simcluster.errors import UserError
from simcluster.output.atomic import write_output_files
from simcluster.output.breakdown_plot import draw_breakdown
from simcluster.output.events import (
    events_to_csv_bytes,
    events_to_parquet_bytes,
    parquet_available,
    span,
    validate_events,
)
from simcluster.output.gantt import describe_step, draw_gantt
from simcluster.output.memory_plot import draw_memory, memory_plot_data
from simcluster.output.perfetto import jsonable, trace_gzip, trace_text
from simcluster.output.style import figure_bytes

TIMELINE_PNG = "timeline.png"
TIMELINE_SVG = "timeline.svg"
TRACE_JSON = "trace.json"
TRACE_JSON_GZ = "trace.json.gz"
EVENTS_CSV = "events.csv"
EVENTS_PARQUET = "events.parquet"
MEMORY_PNG = "memory.png"
BREAKDOWN_PNG = "breakdown.png"
SUMMARY_JSON = "summary.json"


#: summary keys that measure the machine the simulation ran on, not the simulated step: left
#: out of the files written, so one scenario writes the same bytes every time
MACHINE_KEYS: tuple[str, ...] = ("sim_wall_s",)


def recorded_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary as the output files record it: without :data:`MACHINE_KEYS`."""
    return {key: value for key, value in summary.items() if key not in MACHINE_KEYS}


def summary_json(summary: Mapping[str, Any]) -> str:
    """The summary as stable JSON text (sorted keys, 2-space indent, NaN refused)."""
    try:
        return (
            json.dumps(dict(summary), indent=2, sort_keys=True, allow_nan=False, default=jsonable)
            + "\n"
        )
    except (TypeError, ValueError) as exc:
        raise UserError("summary", f"cannot be written as JSON: {exc}") from exc


def _step_time(summary: Mapping[str, Any]) -> float | None:
    """The step length to mark on the timelines; None when there is none to mark: with the
    optimizer's post-validation the step time is a steady-state period shorter than the one
    step the events cover (later stages end after it), so no step boundary exists to draw."""
    if summary.get("optimizer_post_validation"):
        return None
    step = summary.get("step_time_s")
    return float(step) if _positive(step) else None


def _positive(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def write_all(
    out_dir: str | os.PathLike[str],
    events: pd.DataFrame,
    memory: pd.DataFrame,
    capacity_bytes: float,
    summary: Mapping[str, Any],
    rank_labels: Mapping[int, str] | None = None,
    title: str = "",
    svg: bool = False,
    window: tuple[float, float] | None = None,
    gzip_trace: bool = False,
    progress: Callable[..., None] | None = None,
) -> dict[str, Path]:
    """Write timeline.png (+ .svg), trace.json, events.csv (+ .parquet), memory.png,
    breakdown.png (when the summary has ``time_breakdown_s``) and summary.json into
    ``out_dir``; returns file name -> final path. ``window`` (seconds) zooms the timeline;
    ``gzip_trace`` writes trace.json.gz instead of trace.json (and removes a trace.json left
    there by an earlier run, as a plain trace removes an earlier trace.json.gz). Any other
    file an earlier run wrote there and this one does not (timeline.svg, breakdown.png) is
    removed as well, by the directory's manifest (``atomic.MANIFEST``); the user's files stay.
    summary.json and the trace leave out :data:`MACHINE_KEYS` (the simulation's wall time):
    the same inputs write the same bytes.

    Raises ``UserError("--out", ...)`` when ``out_dir`` cannot be written; then nothing of
    this run is left in ``out_dir``. Inputs are validated before anything is written.
    ``progress``: :func:`simcluster.progress.progress_bar`'s ``advance``, told each of the
    :data:`WRITE_STEPS` as it starts and ends (DeepSeek-V3's 171k events took 20 s, silent).
    """
    step_under_way = _stepper(progress)
    frame = validate_events(events)
    recorded = recorded_summary(summary)
    summary_text = summary_json(recorded)
    labels = dict(rank_labels or {})
    step = _step_time(summary)
    heading = title or str(summary.get("scenario", ""))
    subtitle = describe_step(summary, heading)
    # Render everything in memory first: bad inputs fail before the directory is touched.
    step_under_way("timeline.png")
    fig, _ = draw_gantt(frame, labels, heading, subtitle, step, window)
    files: dict[str, bytes] = {TIMELINE_PNG: figure_bytes(fig, "png")}
    if svg:
        files[TIMELINE_SVG] = figure_bytes(fig, "svg")
    step_under_way("memory.png and breakdown.png")
    _, last = span(frame)
    mem = memory_plot_data(memory, capacity_bytes, end_s=last, backlog=summary.get("offload_backlog_per_stage"))
    files[MEMORY_PNG] = figure_bytes(draw_memory(mem, heading), "png")
    if "time_breakdown_s" in summary and _positive(summary.get("step_time_s")):
        # with the optimizer's post-validation the stages' parts add up to the steady-state
        # period: no step boundary to mark on the timeline, but a step to split all the same
        period = " (steady state)" if summary.get("optimizer_post_validation") else ""
        # on the heading's first line: a second one ("with --set ...") ends the title
        first, newline, rest = heading.partition("\n")
        what = f"{first}: where the step{period} goes{newline}{rest}"
        files[BREAKDOWN_PNG] = figure_bytes(draw_breakdown(summary, what), "png")
    step_under_way("trace.json.gz" if gzip_trace else "trace.json")
    text = trace_text(frame, labels, memory, {"title": heading, **recorded})
    if gzip_trace:
        files[TRACE_JSON_GZ] = trace_gzip(text)
    else:
        files[TRACE_JSON] = text.encode()
    del text
    step_under_way("events.csv and .parquet")
    files[EVENTS_CSV] = events_to_csv_bytes(frame)
    if parquet_available():
        files[EVENTS_PARQUET] = events_to_parquet_bytes(frame)
    files[SUMMARY_JSON] = summary_text.encode()

    step_under_way("the files, atomically")
    other_trace = TRACE_JSON if gzip_trace else TRACE_JSON_GZ
    # the set varies (--svg, --gzip-trace, breakdown.png, events.parquet): the manifest lets a
    # reused --out lose the previous run's files this run did not write
    written = write_output_files(out_dir, files, superseded=(other_trace,), owner="run")
    step_under_way(None)
    return written


#: the parts of :func:`write_all` its ``progress`` counts
WRITE_STEPS = 5


def _stepper(progress: Callable[..., None] | None) -> Callable[[str | None], None]:
    """``step_under_way(name)``: the previous step done, ``name`` under way (None: the last done)."""
    started = False

    def step_under_way(name: str | None) -> None:
        nonlocal started
        if progress is None:
            return
        if started:
            progress()
        started = True
        if name is not None:
            progress(name, cost=0.0, count=0)

    return step_under_way
