"""Shared plot style: colors per event kind, time axis scale, deterministic figure bytes.

Plots are drawn on a bare :class:`matplotlib.figure.Figure` with the Agg canvas, never through
pyplot, so no global figure state or GUI backend is involved.
"""

from __future__ import annotations

import io
import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text

from simcluster.errors import UserError


@dataclass(frozen=True)
class KindStyle:
    """How one event kind is drawn: fill color and legend label."""

    color: str
    label: str


# Every colour means one thing in every picture. The timeline colours events by what they
# are (compute phase F/B/W, collective kind); breakdown.png and compare.png colour the step by
# where it goes (compute by category, exposed communication by group); memory.png colours bytes
# by what they hold. These are different things, so they get different colours: compute phases
# in blues/greens, collective kinds in Tableau's warm colours, compute categories in indigo and
# teal, exposed communication groups in dark reds, plum, slate and ochre. Only the names in
# SAME_MEANING share a colour across pictures, because they are the same thing in both
# (recompute, the optimizer step, host-bound time, activation copies to and from host memory).
KIND_STYLES: dict[str, KindStyle] = {
    "forward": KindStyle("#4C78A8", "forward (F)"),
    "backward_input": KindStyle("#54A24B", "backward input (B)"),
    "backward_weight": KindStyle("#88D27A", "backward weight (W)"),
    "backward": KindStyle("#2E7D32", "backward (B+W)"),
    "recompute": KindStyle("#9ECAE9", "recompute"),
    "optimizer": KindStyle("#B279A2", "optimizer"),
    "host": KindStyle("#D4A6C8", "host-bound (GPU waits on Python)"),
    "all_reduce": KindStyle("#E45756", "all-reduce"),
    "all_gather": KindStyle("#F58518", "all-gather"),
    "reduce_scatter": KindStyle("#9D755D", "reduce-scatter"),
    "all_to_all": KindStyle("#FF9DA6", "all-to-all"),
    "broadcast": KindStyle("#BAB0AC", "broadcast"),
    "send": KindStyle("#EECA3B", "p2p send"),
    "recv": KindStyle("#D6B656", "p2p recv"),
    "copy": KindStyle("#17BECF", "activations to/from host"),
}

# Where the step goes (breakdown.png, compare.png): keys of engine.breakdown.LABELS.
BREAKDOWN_COLORS: dict[str, str] = {
    "gemm": "#393B79",
    "attention": "#6B6ECF",
    "memory": "#72B7B2",
    "loss": "#9C9EDE",
    "grad_accum": "#B5BD68",
    "optimizer": KIND_STYLES["optimizer"].color,
    "host": KIND_STYLES["host"].color,
    "recompute": KIND_STYLES["recompute"].color,
    "other": "#79706E",
    "comm_tp": "#843C39",
    "comm_cp": "#D6616B",
    "comm_ep": "#7B4173",
    "comm_dp": "#2F4F4F",
    "comm_embd": "#E7CB94",
    "comm_pp": "#8C6D31",
    "comm_host": KIND_STYLES["copy"].color,
    "idle": "#E5E5E5",
}

# Memory categories, bottom to top of the stack.
MEMORY_STYLES: dict[str, KindStyle] = {
    "params": KindStyle("#08519C", "parameters"),
    "grads": KindStyle("#A1D99B", "gradients"),
    "optimizer": KindStyle("#756BB1", "optimizer states"),
    "activations": KindStyle("#E377C2", "activations"),
    "other": KindStyle("#8C8C8C", "other"),
}

#: (timeline kind, breakdown category) pairs that are one thing and so share one colour
SAME_MEANING: frozenset[tuple[str, str]] = frozenset(
    {("recompute", "recompute"), ("optimizer", "optimizer"), ("host", "host"), ("copy", "comm_host")}
)

#: later virtual pipeline chunks keep their kind's colour and are hatched, one pattern a chunk
#: (chunk 0 plain); past the last pattern they repeat, and the legend names the chunks of each
CHUNK_HATCHES: tuple[str, ...] = ("", "////", "\\\\\\\\", "xxxx", "||||", "----", "++++", "....")


def chunk_hatch(chunk: int) -> str:
    """The hatch of virtual pipeline chunk ``chunk`` ('' for chunk 0 and events of no chunk)."""
    if chunk <= 0:
        return ""
    return CHUNK_HATCHES[1 + (chunk - 1) % (len(CHUNK_HATCHES) - 1)]


@dataclass(frozen=True)
class TimeScale:
    """Seconds -> axis unit: ``value_in_unit = seconds * factor``."""

    factor: float
    unit: str


def time_scale(span_s: float) -> TimeScale:
    """The axis unit that keeps tick labels short for a window of ``span_s`` seconds."""
    if span_s < 2e-3:
        return TimeScale(1e6, "µs")
    if span_s < 2.0:
        return TimeScale(1e3, "ms")
    return TimeScale(1.0, "s")


def text_color(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (WCAG relative luminance)."""
    r, g, b = matplotlib.colors.to_rgb(fill)

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    luminance = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    return "black" if luminance > 0.18 else "white"


def fitting_legend(
    fig: Figure, handles: Sequence[Any], labels: Sequence[str], max_columns: int, **kwargs: Any
) -> tuple[Legend, int]:
    """``fig``'s legend in as many columns (at most ``max_columns``) as fit the figure's width,
    and that count: entries past its edges are cut off in the saved image. ``kwargs`` go to
    ``fig.legend``."""
    for ncols in range(min(len(handles), max_columns), 0, -1):
        legend = fig.legend(handles=list(handles), labels=list(labels), ncols=ncols, **kwargs)
        if ncols == 1 or legend.get_window_extent().width <= fig.bbox.width:
            return legend, ncols
        legend.remove()
    raise ValueError("a legend needs at least one entry")


def fitting_title(fig: Figure, text: str, fontsize: float = 10) -> Text:
    """``fig``'s title, fitted to the figure's width: too wide, it breaks at its " — " (a run's
    name before it, its layout after), then wraps each line at spaces until it fits. A scenario's
    long name and layout would otherwise run past both edges of a narrow figure (the memory
    plots' 7 inches)."""
    title = fig.suptitle(text, fontsize=fontsize)
    if title.get_window_extent().width <= fig.bbox.width:
        return title
    text = text.replace(" — ", "\n")
    title.set_text(text)
    longest = max(len(line) for line in text.splitlines())
    for width in range(longest - 4, 19, -4):
        if title.get_window_extent().width <= fig.bbox.width:
            break
        wrapped = [textwrap.fill(line, width, break_long_words=False) for line in text.splitlines()]
        title.set_text("\n".join(wrapped))
    return title


# Metadata keys matplotlib would otherwise fill with a version or a date.
_METADATA: dict[str, dict[str, None]] = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"CreationDate": None, "Creator": None, "Producer": None},
}


def figure_bytes(fig: Figure, fmt: str, dpi: int = 100) -> bytes:
    """Render ``fig`` to bytes; identical inputs give identical bytes (fixed SVG id salt)."""
    fmt = fmt.lower()
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "simcluster", "svg.fonttype": "path"}):
        fig.savefig(buffer, format=fmt, dpi=dpi, metadata=_METADATA.get(fmt, {}))
    return buffer.getvalue()


def format_of(path: str | os.PathLike[str], field: str = "path") -> str:
    """Image format from a file name suffix: png, svg or pdf."""
    fmt = Path(path).suffix.lstrip(".").lower()
    if fmt not in _METADATA:
        raise UserError(
            field, f"cannot tell image format of '{path}'; end it in .png, .svg or .pdf"
        )
    return fmt
