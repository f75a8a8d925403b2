"""Where the step goes, per pipeline stage: one horizontal bar per stage, stacked by category.

Reads the summary's ``time_breakdown_s`` (engine/breakdown.py): compute by what it is spent on,
exposed communication by group, idle. A stage whose bar is mostly idle waits for the others
(bubble, load imbalance); a long exposed segment names the group to overlap or shrink.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from simcluster.engine.breakdown import LABELS, negligible
from simcluster.output.style import BREAKDOWN_COLORS, fitting_legend, text_color, time_scale

# compute by category and exposed communication by group: colours of their own, none shared
# with the timeline's event kinds except where the meaning is one (see style.SAME_MEANING)
COLORS: dict[str, str] = BREAKDOWN_COLORS
ORDER = tuple(COLORS)
FLAG_COLOR = "#C62828"  # a flagged bar's label: red as the ✗ of the tables


@dataclass(frozen=True)
class Bar:
    """One bar: its label, its parts (seconds by category) and the whole they are shares of."""

    label: str
    parts: Mapping[str, float]
    total: float
    flagged: bool = False  # its label in FLAG_COLOR (compare: a layout that does not fit)
    detail: str = ""  # a second line under the label (compare: the layout and its GPUs)
    end: str = ""  # written after the bar's end (compare: its total and throughput)


def draw_breakdown(summary: Mapping[str, Any], title: str = "") -> Figure:
    """One bar per pipeline stage of a run; empty categories are left out."""
    step = float(summary["step_time_s"])
    per_stage = summary["time_breakdown_s"]["per_stage"]
    bars = [Bar(f"stage {i}", part, step) for i, part in enumerate(per_stage)]
    return draw_bars(bars, title or "where the step goes")


def draw_bars(bars: Sequence[Bar], title: str, xlabel: str = "time in the step") -> Figure:
    """Horizontal bars stacked by category (``ORDER``) on one axis, each part labelled by its
    share of its own bar's ``total`` where wide enough (bars of steps of different lengths
    show the same shares as a table of each step would); the legend lists the categories any
    bar has, in ``ORDER``; a category too thin to see in every bar (under :data:`THIN_PX`)
    carries its largest share there, so the entry does not send the reader looking for it."""
    span = max((max(bar.total, sum(bar.parts.values())) for bar in bars), default=0.0)
    scale = time_scale(span)
    drawn = [{k: v for k, v in bar.parts.items() if not negligible(v, bar.total)} for bar in bars]
    shown = [k for k in ORDER if any(k in parts for parts in drawn)]
    two_lines = any(bar.detail for bar in bars)
    fig = Figure(figsize=(10, 1.6 + (0.6 if two_lines else 0.45) * len(bars)))
    ax = fig.add_subplot(1, 1, 1)
    labels = _stack(ax, bars, drawn, shown, scale.factor)
    ax.set_yticks(range(len(bars)), [f"{bar.label}\n{bar.detail}" if bar.detail else bar.label for bar in bars])
    for tick, bar in zip(ax.get_yticklabels(), bars, strict=True):
        if bar.flagged:
            tick.set_color(FLAG_COLOR)
    ax.invert_yaxis()
    ax.set_xlim(0, span * scale.factor)
    ax.set_xlabel(f"{xlabel} ({scale.unit})")
    ax.set_title(title, fontsize=10)
    # room under the axes for the legend's rows at five columns (more below if it needs them)
    rows = -(-len(shown) // LEGEND_COLUMNS)
    fig.tight_layout(rect=(0, _legend_room(rows) / fig.get_figheight(), 1, 1))
    _write_ends(ax, bars, span, scale.factor)
    # a share is written on its part only where the part is wide enough on paper for it: a short
    # bar beside a long one (compare: 8B beside 70B) has 6% parts a few pixels wide, whose
    # labels would run into each other
    px_per_unit = ax.transData.transform((1.0, 0.0))[0] - ax.transData.transform((0.0, 0.0))[0]
    entries = _legend_entries(bars, drawn, shown, scale.factor, px_per_unit)
    handles = [Patch(facecolor=COLORS[k], label=LABELS[k]) for k in shown]
    # the notes lengthen entries: as many columns as fit the width, the figure taller by the rows
    # that adds (the axes keep their width, so the thin parts measured above stay as measured)
    more = 0
    if shown:
        _, columns = fitting_legend(fig, handles, entries, LEGEND_COLUMNS, loc="lower center", fontsize=8, frameon=False)
        more = -(-len(shown) // columns) - rows
    if more > 0:
        fig.set_figheight(fig.get_figheight() + _legend_room(rows + more) - _legend_room(rows))
        fig.tight_layout(rect=(0, _legend_room(rows + more) / fig.get_figheight(), 1, 1))
    for left, width, y, text, key in labels:
        if width * px_per_unit >= label_px(text):
            ax.text(left + width / 2, y, text, ha="center", va="center", fontsize=LABEL_PT,
                    color=text_color(COLORS[key]))  # fmt: skip
    return fig


def _stack(
    ax: Any, bars: Sequence[Bar], drawn: Sequence[Mapping[str, float]], shown: Sequence[str], factor: float
) -> list[tuple[float, float, int, str, str]]:
    """Draw each bar's parts left to right in ``shown``'s order; return the share labels wide
    enough in share to be written (left, width, y, text, key), placed once the axes are sized."""
    labels: list[tuple[float, float, int, str, str]] = []
    for y, (bar, parts) in enumerate(zip(bars, drawn, strict=True)):
        left = 0.0
        for key in shown:
            width = parts.get(key, 0.0) * factor
            if width <= 0:
                continue
            ax.barh(y, width, left=left, color=COLORS[key], edgecolor="white", linewidth=0.5)
            share = parts[key] / bar.total if bar.total > 0 else 0.0
            if share >= 0.06:
                labels.append((left, width, y, f"{100 * share:.0f}%", key))
            left += width
    return labels


def _write_ends(ax: Any, bars: Sequence[Bar], span: float, factor: float) -> None:
    """Room right of the longest bar for its end text, then each bar's end text written there."""
    ends = [(y, bar) for y, bar in enumerate(bars) if bar.end]
    if not ends:
        return
    room = max(label_px(bar.end) for _, bar in ends) + 8.0
    axes_px = ax.get_window_extent().width
    ax.set_xlim(0, span * factor / max(0.35, 1.0 - room / axes_px))
    for y, bar in ends:
        end = max(bar.total, sum(bar.parts.values())) * factor
        ax.annotate(bar.end, (end, y), xytext=(4, 0), textcoords="offset points", ha="left", va="center",
                    fontsize=LABEL_PT, color=FLAG_COLOR if bar.flagged else "#333333")  # fmt: skip


def _legend_entries(
    bars: Sequence[Bar], drawn: Sequence[Mapping[str, float]], shown: Sequence[str], factor: float, px_per_unit: float
) -> list[str]:
    """The legend's text per shown category: its label, with its largest share where none of
    its parts is :data:`THIN_PX` wide."""
    entries = []
    for key in shown:
        widest_px = max(parts.get(key, 0.0) * factor * px_per_unit for parts in drawn)
        entries.append(LABELS[key])
        if widest_px < THIN_PX:
            top = max(parts.get(key, 0.0) / bar.total for bar, parts in zip(bars, drawn, strict=True) if bar.total > 0)
            entries[-1] += f" ({share_text(top)}, too thin to see)"
    return entries


LABEL_PT = 8.0
#: a category none of whose parts is this wide is named in the legend with its share: under
#: its 0.5 pt white edges (~0.7 px each side) a part this narrow shows no colour of its own
#: (llama3-8b-8xh100's 13 ms optimizer step, 0.2% of the step, 0.8 px in compare.png)
THIN_PX = 2.0
LEGEND_COLUMNS = 5  # at most; fewer where the entries do not fit the width


def _legend_room(rows: int) -> float:
    """Inches under the axes for a legend of ``rows`` rows at 8 pt."""
    return 0.08 + 0.2 * rows


def share_text(share: float) -> str:
    """A thin category's largest share of its bar, for the legend: '0.2%', or '<0.1%'."""
    return "<0.1%" if share < 0.0005 else f"{100 * share:.1f}%"


def label_px(text: str, dpi: float = 100.0) -> float:
    """Pixels a share label of ``text`` takes at :data:`LABEL_PT` (digits ~0.6 em) with a
    pixel of room each side."""
    return len(text) * 0.6 * LABEL_PT * dpi / 72 + 2.0
