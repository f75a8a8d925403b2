"""``simcluster memory --out``: each pipeline stage's memory at its peak as a stacked bar, with
the GPU's capacity, from the static walk (no simulation), and the same numbers as a table.

The bars stack the `memory` table's columns (parameters, gradients, optimizer states,
activations, other, comm buffers); the activations are split into the stash and, hatched, the
transient that sets the stage's peak on top of it, one hatch and legend entry per kind (a gradient
bucket's copy, a weight pass's gradients, the loss's logits: ``memory_report.walk_peak``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib import patheffects
from matplotlib.figure import Figure

from simcluster.output.report_files import write_report_files
from simcluster.output.style import MEMORY_STYLES, fitting_title
from simcluster.peak_parts import BUCKET_COPY, CP_ATTENTION, LOSS_LOGITS, WEIGHT_GRADS
from simcluster.units import GiB, format_bytes

#: the stem of the files ``memory --out`` writes (``run --out`` writes memory.png, the timeline)
STEM = "memory_stages"
#: the bars' layers bottom to top: (column of the per-stage document, label, colour)
LAYERS: tuple[tuple[str, str, str], ...] = (
    ("params_bytes", MEMORY_STYLES["params"].label, MEMORY_STYLES["params"].color),
    ("grads_bytes", MEMORY_STYLES["grads"].label, MEMORY_STYLES["grads"].color),
    ("optimizer_bytes", MEMORY_STYLES["optimizer"].label, MEMORY_STYLES["optimizer"].color),
    ("stash_bytes", "activations (stash)", MEMORY_STYLES["activations"].color),
    ("transient_bytes", "transient", MEMORY_STYLES["activations"].color),
    ("other_bytes", MEMORY_STYLES["other"].label, MEMORY_STYLES["other"].color),
    ("comm_buffers_bytes", "comm buffers", "#BDBDBD"),
)
#: the transient layer is drawn once per kind of transient, each with its hatch and a legend
#: name short enough for two legend columns on a narrow figure (the CLI line says it in full,
#: ``peak_parts.PEAK_PARTS``)
TRANSIENTS = {
    BUCKET_COPY: ("////", "gradient bucket copy or cast"),
    WEIGHT_GRADS: ("\\\\\\\\", "weight pass's 16-bit grads"),
    LOSS_LOGITS: ("xxxx", "loss's logit copies"),
    CP_ATTENTION: ("....", "CP attention buffers"),
}
#: a legend entry's width on the figure: inches per character at font size 8, and the handle
_LEGEND_IN_PER_CHAR, _LEGEND_HANDLE_IN = 0.062, 0.55


def stage_frame(doc: dict[str, Any]) -> pd.DataFrame:
    """One row per stage of the ``memory --json`` document: the bars' layers (bytes), what
    sets the activations' peak and the total."""
    rows = []
    for st in doc["per_stage"]:
        stash = st["peak_stash_bytes"]
        rows.append({
            "stage": st["stage"],
            "params_bytes": st["params_bytes"],
            "grads_bytes": st["grads_bytes"],
            "optimizer_bytes": st["optimizer_bytes"],
            "stash_bytes": stash,
            "transient_bytes": st["activations_bytes"] - stash,
            "peak_part": st["peak_part"],
            "other_bytes": st["other_bytes"],
            "comm_buffers_bytes": st["comm_buffers_bytes"],
            "total_bytes": st["total_bytes"],
        })  # fmt: skip
    return pd.DataFrame(rows)


def draw_memory_stages(frame: pd.DataFrame, capacity_bytes: float, title: str = "") -> Figure:
    """The stacked bars, one per stage, and the capacity as a dashed line."""
    n = len(frame)
    width = min(max(6.5, 0.45 * n + 2.5), 18.0)
    fig = Figure(figsize=(width, 4.6), layout="constrained")
    ax = fig.subplots()
    x = frame["stage"].to_numpy()
    bottom = pd.Series(0.0, index=frame.index)
    for column, label, color in LAYERS:
        if column == "transient_bytes":
            bottom = _draw_transients(ax, x, frame, bottom, label, color)
            continue
        height = frame[column] / GiB
        if not (height > 0).any():
            continue  # a layer no stage holds stays out of the legend
        ax.bar(x, height, bottom=bottom, width=0.8, color=color, label=label, linewidth=0.0)
        bottom = bottom + height
    ax.axhline(
        capacity_bytes / GiB, color="#C62828", linestyle="--", linewidth=1.2, label="capacity", zorder=3,
        path_effects=[patheffects.withStroke(linewidth=3.0, foreground="white")],
    )  # fmt: skip
    worst = int(frame["total_bytes"].idxmax())
    peak = float(frame["total_bytes"].iloc[worst])
    ax.annotate(
        format_bytes(peak), (x[worst], peak / GiB), xytext=(0, 3), textcoords="offset points",
        ha="center", fontsize=8, zorder=4,
        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
    )  # fmt: skip
    ax.set_ylim(0, max(peak, capacity_bytes) / GiB * 1.12)
    ax.set_xticks(x if n <= 32 else x[:: max(1, n // 16)])
    ax.set_xlabel("pipeline stage", fontsize=9)
    ax.set_ylabel("memory per GPU at the stage's peak (GiB)", fontsize=9)
    ax.grid(axis="y", color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)
    verdict = "fits" if peak <= capacity_bytes else "does not fit"
    headline = f"peak {format_bytes(peak)} on stage {int(x[worst])} of {format_bytes(capacity_bytes)}: {verdict}"
    fitting_title(fig, f"{title}\n{headline}" if title else headline)
    handles, labels = ax.get_legend_handles_labels()
    entry_in = _LEGEND_IN_PER_CHAR * max(map(len, labels)) + _LEGEND_HANDLE_IN
    ncols = max(1, min(len(labels), 4, int(width // entry_in)))
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=8, frameon=False)
    return fig


def _draw_transients(ax: Any, x: Any, frame: pd.DataFrame, bottom: pd.Series, label: str, color: str) -> pd.Series:
    """The transients on the stashes, hatched, one legend entry per kind present (each stage
    peaks on one kind, so the kinds' bars never stack on one stage); returns the new bottom."""
    height = frame["transient_bytes"] / GiB
    for part, (hatch, name) in TRANSIENTS.items():
        mine = height.where(frame["peak_part"] == part, 0.0)
        if (mine > 0).any():
            ax.bar(
                x, mine, bottom=bottom, width=0.8, color="white", edgecolor=color, hatch=hatch, linewidth=0.0,
                label=f"{label}: {name}",
            )  # fmt: skip
    return bottom + height


def write_memory_stages(out_dir: str | os.PathLike[str], doc: dict[str, Any], json_text: str, title: str) -> dict[str, Path]:
    """Write memory_stages.csv, .json (``json_text``, the ``--json`` document) and .png into
    ``out_dir`` atomically; returns file name -> final path."""
    frame = stage_frame(doc)
    figure = draw_memory_stages(frame, doc["capacity_bytes"], title)
    return write_report_files(out_dir, STEM, frame, json_text, figure)
