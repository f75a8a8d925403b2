"""Shared plot style: colors per event kind, time axis scale, deterministic figure bytes.

Plots are drawn on a bare :class:`matplotlib.figure.Figure` with the Agg canvas, never through
pyplot, so no global figure state or GUI backend is involved.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from simcluster.errors import UserError


@dataclass(frozen=True)
class KindStyle:
    """How one event kind is drawn: fill color and legend label."""

    color: str
    label: str


# Compute in blues/greens (F, B, W read as a family), communication in warm colors.
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

# Memory categories, bottom to top of the stack.
MEMORY_STYLES: dict[str, KindStyle] = {
    "params": KindStyle("#4C78A8", "parameters"),
    "grads": KindStyle("#72B7B2", "gradients"),
    "optimizer": KindStyle("#B279A2", "optimizer states"),
    "activations": KindStyle("#F58518", "activations"),
    "other": KindStyle("#BAB0AC", "other"),
}


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
