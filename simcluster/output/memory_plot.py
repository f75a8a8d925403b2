"""Memory over time per pipeline stage: categories stacked, capacity line, peak annotated.

The memory timeline is a step function: each row of a stage holds from its ``time_s`` until
the next row of that stage (the last row until the end of the plotted window). The arrays the
plot draws are computed once by :func:`memory_plot_data` and returned, so tests (and users)
can check exactly what the picture shows. Under activation offload a stage whose copies to the
host fall behind gets a dotted line where the offloaded bytes still on the GPU take its peak
(the summary's ``offload_backlog_per_stage``, ``engine/offload.py``): the stacked timeline is
the memory walk's, which counts one layer's copy in flight.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib import patheffects
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from simcluster.errors import UserError
from simcluster.output.atomic import atomic_write_bytes
from simcluster.output.style import (
    KIND_STYLES,
    MEMORY_STYLES,
    figure_bytes,
    fitting_legend,
    fitting_title,
    format_of,
    time_scale,
)
from simcluster.units import GiB, format_bytes

MEMORY_CATEGORIES: tuple[str, ...] = tuple(MEMORY_STYLES)
MEMORY_COLUMNS: tuple[str, ...] = ("stage", "time_s", *MEMORY_CATEGORIES, "total")
#: a peak later than this share of its panel is labelled on its left
PEAK_LABEL_FLIPS_AT = 0.6
#: the offload backlog's line: the timeline's colour of the copies to and from the host, dotted
BACKLOG_COLOR = KIND_STYLES["copy"].color


def validate_memory(memory: pd.DataFrame) -> pd.DataFrame:
    """A checked copy of the memory timeline, sorted by (stage, time).

    ``total`` must equal the sum of the categories: the plot stacks the categories, so a
    mismatch would draw a peak different from the summary's.
    """
    if not isinstance(memory, pd.DataFrame):
        raise UserError("memory", f"expected a pandas DataFrame, got {type(memory).__name__}")
    missing = [c for c in MEMORY_COLUMNS if c not in memory.columns]
    if missing:
        raise UserError("memory", f"missing column(s) {missing}; required: {list(MEMORY_COLUMNS)}")
    frame = memory.loc[:, list(MEMORY_COLUMNS)].copy()
    try:
        frame["stage"] = frame["stage"].astype("int64")
        for col in MEMORY_COLUMNS[1:]:
            frame[col] = frame[col].astype("float64")
    except (TypeError, ValueError) as exc:
        raise UserError("memory", f"non-numeric value: {exc}") from exc
    if not np.isfinite(frame[list(MEMORY_COLUMNS[1:])].to_numpy()).all():
        raise UserError("memory", "memory values and times must be finite")
    stacked = frame[list(MEMORY_CATEGORIES)].sum(axis=1).to_numpy()
    if not np.allclose(stacked, frame["total"].to_numpy(), rtol=1e-9, atol=1.0):
        raise UserError("memory.total", "total must equal params+grads+optimizer+activations+other")
    return frame.sort_values(["stage", "time_s"], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class StageMemory:
    """The drawn step function of one stage: ``times`` has one more point than the rows
    (the window end), and each layer in ``layers`` repeats its last value there."""

    stage: int
    times_s: np.ndarray
    layers: dict[str, np.ndarray]  # category -> bytes, bottom to top
    top: np.ndarray  # stack height = sum of the layers
    #: how far the offloaded bytes the copies leave on the GPU take the peak above the stack
    backlog_bytes: float = 0.0

    @property
    def peak_bytes(self) -> float:
        return float(self.top.max())

    @property
    def backlogged_peak_bytes(self) -> float:
        """The peak with the offload backlog on it (the peak where there is none)."""
        return self.peak_bytes + self.backlog_bytes

    @property
    def peak_time_s(self) -> float:
        return float(self.times_s[int(self.top.argmax())])


@dataclass(frozen=True)
class MemoryPlotData:
    """Everything memory.png shows."""

    stages: tuple[StageMemory, ...]
    capacity_bytes: float

    @property
    def peak_bytes(self) -> float:
        """The highest stack over all stages (equals the summary's peak memory)."""
        return max((s.peak_bytes for s in self.stages), default=0.0)

    @property
    def peak_stage(self) -> int:
        return max(self.stages, key=lambda s: s.peak_bytes).stage

    @property
    def backlogged_peak(self) -> StageMemory | None:
        """The stage whose peak the offload backlog takes highest, if any stage has one."""
        behind = [s for s in self.stages if s.backlog_bytes > 0]
        return max(behind, key=lambda s: s.backlogged_peak_bytes) if behind else None


def memory_plot_data(
    memory: pd.DataFrame,
    capacity_bytes: float,
    end_s: float | None = None,
    backlog: Sequence[float] | None = None,
) -> MemoryPlotData:
    """The per-stage stacked step functions, extended to ``end_s`` (default: last row time);
    ``backlog``: each stage's offload backlog in bytes, by stage index (``run``'s
    ``offload_backlog_per_stage``)."""
    if not (isinstance(capacity_bytes, (int, float)) and capacity_bytes > 0):
        raise UserError(
            "capacity_bytes", f"must be a positive number of bytes, got {capacity_bytes}"
        )
    frame = validate_memory(memory)
    last = float(frame["time_s"].max()) if len(frame) else 0.0
    end = last if end_s is None else max(float(end_s), last)
    stages = []
    for stage, rows in frame.groupby("stage", sort=True):
        times = np.append(rows["time_s"].to_numpy(), end)
        layers = {}
        for cat in MEMORY_CATEGORIES:
            values = rows[cat].to_numpy()
            layers[cat] = np.append(values, values[-1])
        top = np.sum([layers[c] for c in MEMORY_CATEGORIES], axis=0)
        behind = float(backlog[int(stage)]) if backlog is not None and int(stage) < len(backlog) else 0.0
        stages.append(StageMemory(int(stage), times, layers, top, max(behind, 0.0)))
    return MemoryPlotData(tuple(stages), float(capacity_bytes))


def _draw_stage(ax: Axes, data: StageMemory, capacity: float, factor: float) -> None:
    x = data.times_s * factor
    bottom = np.zeros_like(x)
    for cat, style in MEMORY_STYLES.items():
        upper = bottom + data.layers[cat] / GiB
        ax.fill_between(
            x, bottom, upper, step="post", color=style.color, linewidth=0, label=style.label
        )
        bottom = upper
    ax.step(x, data.top / GiB, where="post", color="black", linewidth=0.8)
    # over a peak that does not fit the line crosses the filled bands (1.33 TiB against 80 GiB:
    # it ran through the parameters' dark blue, unseen): a white casing keeps it visible there
    ax.axhline(
        capacity / GiB, color="#C62828", linestyle="--", linewidth=1.2, label="capacity", zorder=3,
        path_effects=[patheffects.withStroke(linewidth=3.0, foreground="white")],
    )  # fmt: skip
    peak_x = data.peak_time_s * factor
    ax.plot([peak_x], [data.peak_bytes / GiB], marker="v", color="black", markersize=5)
    # the label on a white ground (a peak just under the capacity puts it across the dashed
    # line), and left of the marker when the peak is late (it would run out of the panel)
    late = x[-1] > x[0] and (peak_x - x[0]) / (x[-1] - x[0]) > PEAK_LABEL_FLIPS_AT
    ax.annotate(
        f"peak {format_bytes(data.peak_bytes)}",
        (peak_x, data.peak_bytes / GiB),
        xytext=(-4 if late else 4, 4),
        textcoords="offset points",
        ha="right" if late else "left",
        fontsize=8,
        zorder=4,
        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
    )
    if data.backlog_bytes > 0:
        ax.axhline(
            data.backlogged_peak_bytes / GiB, color=BACKLOG_COLOR, linestyle=":", linewidth=1.4,
            label="peak with offload backlog", zorder=3,
        )  # fmt: skip
    ax.set_title(f"stage {data.stage}", fontsize=9, loc="left")
    ax.set_xlim(x[0], x[-1] if x[-1] > x[0] else x[0] + 1)
    ax.grid(axis="y", color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)


def draw_memory(data: MemoryPlotData, title: str = "") -> Figure:
    """A figure with one small panel per stage, sharing axes so stages compare at a glance."""
    n = max(len(data.stages), 1)
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    # at least 7 inches wide: the title and the one-row legend must fit a single-stage figure
    fig = Figure(figsize=(max(3.6 * ncols + 0.6, 7.0), 2.3 * nrows + 1.3), layout="constrained")
    axes = np.atleast_1d(
        fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    ).ravel()
    span = max((float(s.times_s[-1] - s.times_s[0]) for s in data.stages), default=0.0)
    scale = time_scale(span)
    for index, (ax, stage) in enumerate(zip(axes, data.stages, strict=False)):
        _draw_stage(ax, stage, data.capacity_bytes, scale.factor)
        ax.tick_params(labelbottom=True, labelsize=8)  # panels above a blank cell need ticks
        if index + ncols >= len(data.stages):  # lowest panel of its column
            ax.set_xlabel(f"time ({scale.unit})", fontsize=8)
    for ax in axes[len(data.stages) :]:
        ax.set_visible(False)
    highest = max((s.backlogged_peak_bytes for s in data.stages), default=0.0)
    top = max(highest, data.capacity_bytes) / GiB
    axes[0].set_ylim(0, top * 1.12)
    fig.supylabel("memory per GPU (GiB)", fontsize=9)
    headline = (
        f"peak {format_bytes(data.peak_bytes)} on stage {data.peak_stage} of "
        f"{format_bytes(data.capacity_bytes)}"
        + (": does not fit" if data.peak_bytes > data.capacity_bytes else "")  # as `run` says it
        if data.stages
        else "no memory data"
    )
    if (behind := data.backlogged_peak) is not None:
        high = behind.backlogged_peak_bytes
        headline += (
            f"; the offload backlog takes stage {behind.stage} to {format_bytes(high)}"
            + (" (does not fit)" if high > data.capacity_bytes >= data.peak_bytes else "")
        )
    fitting_title(fig, f"{title}\n{headline}" if title else headline)
    # every stage's entries: the backlog's line may be on a later panel only
    handles, labels = [], []
    for ax in axes[: len(data.stages)]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if labels:  # as many columns as fit the width (the backlog's entry is a seventh)
        fitting_legend(fig, handles, labels, len(labels), loc="outside lower center", fontsize=8, frameon=False)
    return fig


def plot_memory(
    memory: pd.DataFrame,
    capacity_bytes: float,
    path: str | os.PathLike[str],
    title: str = "",
    end_s: float | None = None,
    backlog: Sequence[float] | None = None,
) -> MemoryPlotData:
    """Write the memory plot to ``path`` (png/svg/pdf, atomically); return the drawn data
    (``backlog``: :func:`memory_plot_data`'s)."""
    data = memory_plot_data(memory, capacity_bytes, end_s, backlog)
    fmt = format_of(path)
    atomic_write_bytes(path, figure_bytes(draw_memory(data, title), fmt))
    return data
