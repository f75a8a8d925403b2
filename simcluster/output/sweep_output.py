"""What a layout sweep writes: sweep.csv, sweep.json and sweep.png (throughput against memory).

The picture answers the question a sweep is run for: which layouts fit, and which of those
is fastest. Each simulated layout is a point at (peak memory per GPU, tokens/s per GPU);
layouts that fit are filled, those that do not are hollow, the GPU's capacity is a dashed
line (one per memory size when hardware is swept) and the best five that fit are numbered,
with their settings in a key under the plot. A step line joins the layouts that fit and that no
other fitting layout beats on both axes (the Pareto front): the fastest layout for each memory
budget, the ones worth a look when memory headroom matters.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine

from simcluster.cost import Prices
from simcluster.output.report_files import write_report_files
from simcluster.sweep import SweepRow
from simcluster.units import GiB

_LABELLED = 5  # best layouts named on the plot


def sweep_frame(rows: Sequence[SweepRow], prices: Prices | None = None) -> pd.DataFrame:
    """One row per candidate in ranked order (skipped ones with their reason)."""
    frame = pd.DataFrame([r.to_dict(prices) for r in rows])
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame


# where a rank label may sit around its marker, in points: right-up first, then right-down
# (labels stay on one side of their markers where they can), the left corners, then further
# out; a label takes the first place clear of the labels before it
_OFFSETS = ((5, 3), (5, -11), (-14, 3), (-14, -11), (5, 12), (-14, 12), (5, -20), (-14, -20))
_LABEL_BOX = (12.0, 9.0)  # a two-character bold 8 pt label, in points (width, height)
_CHAR_PT = 6.0  # width of one more character of a bold 8 pt label
_SAME_POINT_PT = 2.0  # markers closer than this on paper are one point to the eye


def rank_label(ranks: Sequence[int]) -> str:
    """The label of markers drawn on one spot: ``#2``, ``#1–3`` for a run, ``#1,4`` otherwise."""
    if len(ranks) == 1:
        return f"#{ranks[0]}"
    if list(ranks) == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"#{ranks[0]}\u2013{ranks[-1]}"
    return "#" + ",".join(str(r) for r in ranks)


def coincident_groups(ax, anchors: Sequence[tuple[float, float]]) -> list[list[int]]:
    """Indices of ``anchors`` grouped by the spot they are drawn on, in first-seen order.

    Layouts with the same memory and throughput (a schedule swept at pp = 1, say) sit on one
    marker; one label naming all their ranks reads where a ring of labels would not."""
    to_points = 72.0 / ax.figure.dpi
    spots: list[tuple[float, float]] = []
    groups: list[list[int]] = []
    for index, anchor in enumerate(anchors):
        px, py = (v * to_points for v in ax.transData.transform(anchor))
        for spot, group in zip(spots, groups, strict=True):
            if abs(px - spot[0]) < _SAME_POINT_PT and abs(py - spot[1]) < _SAME_POINT_PT:
                group.append(index)
                break
        else:
            spots.append((px, py))
            groups.append([index])
    return groups


def label_offsets(
    ax, anchors: Sequence[tuple[float, float]], texts: Sequence[str] | None = None
) -> list[tuple[int, int]]:
    """Text offsets (points) for labels at ``anchors`` (data coordinates) that do not overlap.

    Greedy: each label tries the places of ``_OFFSETS`` in turn and keeps the first whose box
    misses every box placed before; when none does it keeps the first (labels never vanish).
    A label longer than two characters (``texts``) is that much wider, and its places left of
    the marker move left by as much so it still ends before the marker.
    """
    to_points = 72.0 / ax.figure.dpi
    placed: list[tuple[float, float, float]] = []  # left, bottom, width
    chosen: list[tuple[int, int]] = []
    base_width, height = _LABEL_BOX
    for index, anchor in enumerate(anchors):
        extra = _CHAR_PT * max(0, len(texts[index]) - 2) if texts else 0.0
        width = base_width + extra
        px, py = (v * to_points for v in ax.transData.transform(anchor))
        places = [(dx - round(extra) if dx < 0 else dx, dy) for dx, dy in _OFFSETS]
        pick = places[0]
        for dx, dy in places:
            x, y = px + dx, py + dy
            if all(_apart(x, y, width, box, height) for box in placed):
                pick = (dx, dy)
                break
        placed.append((px + pick[0], py + pick[1], width))
        chosen.append(pick)
    return chosen


def _apart(x: float, y: float, width: float, box: tuple[float, float, float], height: float) -> bool:
    """Whether a label box at (x, y) of ``width`` misses ``box`` (left, bottom, width)."""
    ox, oy, owidth = box
    return x + width <= ox or ox + owidth <= x or abs(y - oy) >= height


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (memory, throughput) points no other point beats on both axes (less or
    equal memory and more throughput, or less memory and equal throughput), by memory."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    for i in order:
        if not front or points[i][1] > points[front[-1]][1]:
            front.append(i)
    return front


def draw_sweep(rows: Sequence[SweepRow], title: str = "") -> Figure:
    """Tokens/s per GPU against peak memory per GPU for every simulated layout."""
    ran = [r for r in rows if r.summary is not None]
    fig = Figure(figsize=(8.0, 6.4), layout="constrained")
    ax = fig.subplots()
    # layout="constrained" above makes the engine a ConstrainedLayoutEngine, which takes rect
    engine = cast(ConstrainedLayoutEngine, fig.get_layout_engine())
    engine.set(rect=(0, 0.17, 1, 0.83))  # room for the key below
    fits = [r for r in ran if r.fits]
    over = [r for r in ran if not r.fits]

    def xy(group: list[SweepRow]) -> tuple[list[float], list[float]]:
        return (
            [r.summary["peak_memory_bytes"]["max"] / GiB for r in group],  # type: ignore[index]
            [r.summary["tokens_per_s_per_gpu"] for r in group],  # type: ignore[index]
        )

    if fits:
        ax.scatter(*xy(fits), s=36, color="#4C78A8", edgecolor="black", linewidth=0.5,
                   label="fits in memory", zorder=3)  # fmt: skip
    if over:
        ax.scatter(*xy(over), s=36, facecolor="none", edgecolor="#C62828", linewidth=1.0,
                   label="does not fit", zorder=3)  # fmt: skip
    # one line per GPU memory size (a sweep over hardware may compare 80 and 141 GiB GPUs)
    capacities = [r.summary["capacity_bytes"] / GiB for r in ran]  # type: ignore[index]
    for capacity in sorted(set(capacities)):
        ax.axvline(capacity, color="#C62828", linestyle="--", linewidth=1.0, label=f"GPU memory ({capacity:.0f} GiB)")
    if len(fits) > 1:
        mem, tps = xy(fits)
        front = pareto_front(list(zip(mem, tps, strict=True)))
        if len(front) > 1:
            ax.plot([mem[i] for i in front], [tps[i] for i in front], drawstyle="steps-post",
                    color="#4C78A8", linewidth=1.0, alpha=0.6, zorder=2,
                    label="fastest for its memory")  # fmt: skip
    best = fits[:_LABELLED]
    # from zero, with headroom: autoscaling pads the data's own range, which leaves the highest
    # and rightmost markers on the frame once the axes are stretched down to zero
    xs, ys = xy(ran)
    if ran:
        ax.set_xlim(0, 1.05 * max(xs + capacities))
        ax.set_ylim(0, 1.05 * max(ys))
    else:
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
    anchors = [(x[0], y[0]) for x, y in (xy([row]) for row in best)]
    fig.draw_without_rendering()  # settle the constrained layout: label distances are on paper
    groups = coincident_groups(ax, anchors)
    spots = [anchors[group[0]] for group in groups]
    texts = [rank_label([i + 1 for i in group]) for group in groups]
    offsets = label_offsets(ax, spots, texts)
    for text, spot, offset in zip(texts, spots, offsets, strict=True):
        ax.annotate(text, spot, xytext=offset, textcoords="offset points",
                    fontsize=8, fontweight="bold")  # fmt: skip
    if best:
        key = "\n".join(f"#{i}  {row.candidate.label}" for i, row in enumerate(best, start=1))
        fig.text(0.01, 0.0, f"best that fit:\n{key}", fontsize=8, va="bottom", ha="left",
                 family="monospace")  # fmt: skip
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("tokens/s per GPU")
    ax.grid(color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)
    skipped = sum(1 for r in rows if r.summary is None)
    headline = f"{len(ran)} layouts simulated, {len(fits)} fit" + (
        f", {skipped} skipped (cannot run)" if skipped else ""
    )
    fig.suptitle(f"{title}\n{headline}" if title else headline, fontsize=10)
    if ran:
        ax.legend(fontsize=8, loc="lower right")
    return fig


def write_sweep(
    out_dir: str | os.PathLike[str],
    rows: Sequence[SweepRow],
    json_text: str,
    title: str = "",
    prices: Prices | None = None,
) -> dict[str, Path]:
    """Write sweep.csv, sweep.json (``json_text``, the ``--json`` document) and sweep.png
    into ``out_dir`` atomically; returns file name -> final path."""
    frame = sweep_frame(rows, prices)
    return write_report_files(out_dir, "sweep", frame, json_text, draw_sweep(rows, title))
