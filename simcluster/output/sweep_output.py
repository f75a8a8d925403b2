"""What a layout sweep writes: sweep.csv, sweep.json and sweep.png (throughput against memory).

The picture answers the question a sweep is run for: which layouts fit, and which of those
is best. Each simulated layout is a point at (peak memory per GPU, tokens/s per GPU), or with
``--price`` at (peak memory per GPU, dollars per million tokens), the sweep's ranking then;
layouts that fit are filled, those that do not are hollow, the GPU's capacity is a dashed
line and the best five that fit are numbered as in the table, with their settings in a key
under the plot. A step line joins the layouts that fit and that no other fitting layout beats
on both axes (the Pareto front): the fastest (cheapest) layout for each memory budget, the
ones worth a look when memory headroom matters. A sweep over hardware gives each profile a
colour and marker: its points, its capacity line and its own front (a memory budget means
something on one GPU type), hollow where a layout does not fit that profile's memory. A sweep
over cluster sizes on one profile gives each size a marker (tokens/s per GPU compares them as
GPU-seconds per token; the front runs over all of them).
The y axis starts at 0 unless the points span less than a third of their maximum; then it
zooms to them and says so (a break mark, and the axis label)."""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.ticker import Formatter

from simcluster.cost import Prices, usd_decimals, usd_per_million_tokens
from simcluster.output.report_files import write_report_files
from simcluster.sweep import MEMORY_FIELD, SweepRow
from simcluster.units import GiB, format_bytes

_LABELLED = 5  # best layouts named on the plot
_SIZE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # one per cluster size of a --gpus sweep


def sweep_frame(rows: Sequence[SweepRow], prices: Prices | None = None, tokens: float | None = None) -> pd.DataFrame:
    """One row per candidate in ranked order (skipped ones with their reason)."""
    frame = pd.DataFrame([r.to_dict(prices, tokens) for r in rows])
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame


# where a rank label may sit around its marker, in points: right-up first, then right-down
# (labels stay on one side of their markers where they can), the left corners, then further
# out; a label takes the first place clear of the labels before it
_OFFSETS = ((5, 3), (5, -11), (-14, 3), (-14, -11), (5, 12), (-14, 12), (5, -20), (-14, -20))
_LABEL_BOX = (12.0, 9.0)  # a two-character bold 8 pt label, in points (width, height)
_CHAR_PT = 6.0  # width of one more character of a bold 8 pt label
_SAME_POINT_PT = 2.0  # markers closer than this on paper are one point to the eye
_MARKER_PT = 6.0  # a marker's width on paper: scatter's s=36 is its area in points squared


def rank_label(ranks: Sequence[int]) -> str:
    """The label of markers drawn on one spot: ``#2``, ``#1–3`` for a run, ``#1,4`` otherwise."""
    if len(ranks) == 1:
        return f"#{ranks[0]}"
    if list(ranks) == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"#{ranks[0]}\u2013{ranks[-1]}"
    return "#" + ",".join(str(r) for r in ranks)


def coincident_groups(ax: Axes, anchors: Sequence[tuple[float, float]]) -> list[list[int]]:
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


_Box = tuple[float, float, float, float]  # left, bottom, width, height (points)


def label_offsets(
    ax: Axes,
    anchors: Sequence[tuple[float, float]],
    texts: Sequence[str] | None = None,
    markers: Sequence[tuple[float, float]] = (),
) -> list[tuple[int, int]]:
    """Text offsets (points) for labels at ``anchors`` (data coordinates) that do not overlap.

    Greedy: each label tries the places of ``_OFFSETS`` in turn and keeps the first whose box
    misses every label placed before and every marker drawn (``markers``, data coordinates:
    a label over a neighbour's marker hides the point it is read against); failing that the
    first that misses the labels; failing that the first (labels never vanish). A label longer
    than two characters (``texts``) is that much wider, and its places left of the marker move
    left by as much so it still ends before the marker.
    """
    to_points = 72.0 / ax.figure.dpi

    def on_paper(point: tuple[float, float]) -> tuple[float, float]:
        px, py = ax.transData.transform(point)
        return px * to_points, py * to_points

    half = _MARKER_PT / 2
    dots = [(x - half, y - half, _MARKER_PT, _MARKER_PT) for x, y in map(on_paper, markers)]
    placed: list[_Box] = []
    chosen: list[tuple[int, int]] = []
    base_width, height = _LABEL_BOX
    for index, anchor in enumerate(anchors):
        extra = _CHAR_PT * max(0, len(texts[index]) - 2) if texts else 0.0
        width = base_width + extra
        px, py = on_paper(anchor)
        places = [(dx - round(extra) if dx < 0 else dx, dy) for dx, dy in _OFFSETS]
        boxes = [(px + dx, py + dy, width, height) for dx, dy in places]
        clear_of_labels = [i for i, box in enumerate(boxes) if not any(_overlap(box, o) for o in placed)]
        clear = [i for i in clear_of_labels if not any(_overlap(boxes[i], o) for o in dots)]
        pick = (clear or clear_of_labels or [0])[0]
        placed.append(boxes[pick])
        chosen.append(places[pick])
    return chosen


def _overlap(a: _Box, b: _Box) -> bool:
    """Whether two boxes share more than an edge."""
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (memory, throughput) points no other point beats on both axes (less or
    equal memory and more throughput, or less memory and equal throughput), by memory."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    for i in order:
        if not front or points[i][1] > points[front[-1]][1]:
            front.append(i)
    return front


_FIT_COLOUR = "#4C78A8"  # one profile: layouts that fit
_OVER_COLOUR = "#C62828"  # one profile: layouts that do not fit, and the GPU's memory
# several profiles: a colour and a marker each, fixed per profile so that one profile looks
# the same in every sweep whatever the others are and however they rank
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")
#: the shipped profiles, a colour each (one family close in hue: H100s blues, A100s greens)
SHIPPED_PROFILE_COLOURS: dict[str, str] = {
    "dgx-h100": "#1F77B4",
    "aws-p5": "#393B79",
    "dgx-h200": "#17BECF",
    "hgx-h800": "#AEC7E8",
    "dgx-a100": "#2CA02C",
    "dgx-a100-40gb": "#637939",
    "dgx-2-v100": "#7F7F7F",
    "dgx-b200": "#FF7F0E",
    "dgx-b300": "#D62728",
    "gb200-nvl72": "#8C564B",
    "gb300-nvl72": "#843C39",
    "amd-mi300x": "#9467BD",
    "amd-mi325x": "#C5B0D5",
    "amd-mi355x": "#6B6ECF",
    "alps-gh200": "#BCBD22",
}
#: colours for profiles not shipped (a YAML of one's own), picked by a hash of the name
_OTHER_COLOURS = ("#E377C2", "#8C6D31", "#7B4173", "#D6616B", "#5254A3", "#8CA252", "#BD9E39", "#17A589")
_ZOOM_SPAN = 1 / 3  # the y axis starts at 0 unless the data spans less than this of its maximum
_DASH = (4.0, 2.0)  # on, off (points) of a capacity line that several profiles share
_NOT_ZERO = "axis does not start at 0"


def y_limits(values: Sequence[float]) -> tuple[float, float, bool]:
    """The y range of the plot and whether it leaves 0 out.

    From 0 (heights compare honestly) with headroom above the highest point, unless the values
    span less than a third of their maximum: then 942 and 976 tokens/s would be one band at the
    top, so the axis zooms to the data with padding (at least 2% of the maximum on each side:
    near-equal values are not blown apart) and the plot says it does not start at 0. One value
    alone, or all equal, keeps 0: there is no spread to show."""
    if not values or max(values) <= 0:
        return 0.0, 1.0, False
    low, high = min(values), max(values)
    if low == high or high - low > _ZOOM_SPAN * high:
        return 0.0, 1.05 * high, False
    pad = max(0.2 * (high - low), 0.02 * high)
    return max(0.0, low - pad), high + pad, True


def profile_styles(profiles: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(colour, marker) of each hardware profile, fixed by its name: a shipped profile has its
    own colour (:data:`SHIPPED_PROFILE_COLOURS`), another takes one by a hash of its name, the
    next free one when a profile of this sweep already has it; the marker follows the colour.
    A profile keeps its look from sweep to sweep, whichever profiles it is drawn with and
    whatever the order of their best layouts."""
    styles: dict[str, tuple[str, str]] = {}
    palette = (*SHIPPED_PROFILE_COLOURS.values(), *_OTHER_COLOURS)
    for name in profiles:
        if name in SHIPPED_PROFILE_COLOURS:
            styles[name] = _styled(palette.index(SHIPPED_PROFILE_COLOURS[name]), palette)
    taken = {colour for colour, _ in styles.values()}
    for name in sorted(set(profiles) - set(styles)):
        start = len(SHIPPED_PROFILE_COLOURS) + zlib.crc32(name.encode()) % len(_OTHER_COLOURS)
        order = [*range(start, len(palette)), *range(len(SHIPPED_PROFILE_COLOURS), start), *range(len(SHIPPED_PROFILE_COLOURS))]
        free = [i for i in order if palette[i] not in taken]
        styles[name] = _styled(free[0] if free else start, palette)
        taken.add(styles[name][0])
    return {name: styles[name] for name in profiles}


def _styled(index: int, palette: Sequence[str]) -> tuple[str, str]:
    return palette[index], _MARKERS[index % len(_MARKERS)]


def _dashes(index: int, count: int) -> Any:
    """The line style of the ``index``-th of ``count`` capacity lines drawn at one memory size:
    their dashes take turns, so each profile's colour shows along the shared line."""
    if count == 1:
        return "--"
    on, off = _DASH
    period = count * (on + off)
    return ((period - index * (on + off)) % period, (on, period - on))


def dollar_digits(values: Sequence[float]) -> int:
    """Decimals that tell ``values`` apart: cents, or three significant digits below 10 cents
    (an 8B model's $0.0705 and $0.0738 are both "$0.07" in cents)."""
    small = min((abs(v) for v in values if v), default=1.0)
    return usd_decimals(small) if small < 0.1 else 2


class _Dollars(Formatter):
    """Tick labels in dollars with as many decimals as the tick step needs (at least cents)."""

    digits = 2

    def set_locs(self, locs: list[float]) -> None:
        super().set_locs(locs)
        step = abs(locs[1] - locs[0]) if len(locs) > 1 else 0.0
        self.digits = 2  # the fewest decimals that write the step exactly: 0.0025 takes 4
        while step and self.digits < 6 and abs(round(step, self.digits) - step) > 1e-6 * step:
            self.digits += 1

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"${x:,.{self.digits}f}"


def _break_mark(ax: Axes) -> None:
    """Two short slashes across the foot of the y axis: it does not start at 0."""
    for dy in (-0.008, 0.008):
        ax.plot([-0.012, 0.012], [dy - 0.01, dy + 0.01], transform=ax.transAxes, color="black",
                linewidth=0.8, clip_on=False, zorder=5)  # fmt: skip


@dataclass(frozen=True)
class _Reading:
    """Where the plot puts a simulated layout: peak memory per GPU (GiB) across, tokens/s per
    GPU up, or with ``prices`` dollars per million tokens (None: a layout without a price)."""

    prices: Prices | None

    @property
    def priced(self) -> bool:
        return self.prices is not None

    def y(self, row: SweepRow) -> float | None:
        if self.prices is not None:
            return usd_per_million_tokens(_summary(row), self.prices)
        return float(_summary(row)["tokens_per_s_per_gpu"])

    @staticmethod
    def x(row: SweepRow) -> float:
        return float(_summary(row)["peak_memory_bytes"]["max"]) / GiB

    def xy(self, group: Sequence[SweepRow]) -> tuple[list[float], list[float]]:
        return [self.x(r) for r in group], [cast(float, self.y(r)) for r in group]


def _summary(row: SweepRow) -> dict[str, Any]:
    assert row.summary is not None  # only simulated rows are drawn
    return row.summary


def _hardware(row: SweepRow) -> str:
    return str(_summary(row)["hardware"])


def _gpus(row: SweepRow) -> int:
    return int(_summary(row)["gpus"])


def _capacity(row: SweepRow) -> float:
    return float(_summary(row)["capacity_bytes"]) / GiB


#: a Pareto front to draw: memory, y, colour, legend label
_Front = tuple[list[float], list[float], str, str]


def _sharing(profiles: Sequence[str], ran: Sequence[SweepRow]) -> dict[float, list[str]]:
    """Each GPU memory size of the simulated layouts ``ran``, with the ``profiles`` that have
    that much (in the order of ``profiles``)."""
    sharing: dict[float, list[str]] = {}  # memory size -> the profiles with that much
    for profile in profiles:
        for size in sorted({_capacity(r) for r in ran if _hardware(r) == profile}):
            sharing.setdefault(size, []).append(profile)
    return sharing


def draw_sweep(rows: Sequence[SweepRow], title: str = "", prices: Prices | None = None) -> Figure:
    """Tokens/s per GPU against peak memory per GPU for every simulated layout; with ``prices``,
    dollars per million tokens (the sweep's ranking then) against memory. Several hardware
    profiles get a colour and marker each, with their own capacity line and front."""
    read = _Reading(prices)
    priced = read.priced
    ran = [r for r in rows if r.summary is not None]
    drawn = [r for r in ran if read.y(r) is not None]  # a layout without a price has no cost to draw
    fig = Figure(figsize=(8.0, 6.4), layout="constrained")
    ax = fig.subplots()
    profiles = list(dict.fromkeys(_hardware(r) for r in ran))  # in the order of their best layout
    styles = profile_styles(profiles) if len(profiles) > 1 else {}  # empty: one profile
    front_label = "cheapest for its memory" if priced else "fastest for its memory"
    any_over, fronts = _draw_layouts(ax, read, drawn, styles, front_label)
    sharing = _sharing(profiles, ran)
    handles, labels = _draw_capacities(ax, sharing, styles)
    for front_x, front_y, colour, label in fronts:
        ax.plot(front_x, front_y, drawstyle="steps-post", color=colour, linewidth=1.0, alpha=0.6, zorder=2,
                label=label)  # fmt: skip
    best = [r for r in ran if r.fits][:_LABELLED]  # the table's first (those that fit lead it)
    best = [r for r in best if read.y(r) is not None]
    rank_of = {id(row): i for i, row in enumerate(rows, start=1)}  # the table's rank
    _draw_best_key(fig, read, best, rank_of)
    # x from zero, with headroom: autoscaling pads the data's own range, which leaves the
    # rightmost markers on the frame once the axes are stretched down to zero; y by y_limits
    xs, ys = read.xy(drawn)
    ax.set_xlim(0, 1.05 * max(xs + list(sharing)) if ran else 1.0)
    low, high, zoomed = y_limits(ys)
    ax.set_ylim(low, high)
    if zoomed:
        _break_mark(ax)
    _number_best(fig, ax, read, best, [rank_of[id(r)] for r in best], drawn)
    ax.set_xlabel("peak memory per GPU (GiB)")
    notes = (["lower is better"] if priced else []) + ([_NOT_ZERO] if zoomed else [])
    ylabel = "$ per 1M tokens" if priced else "tokens/s per GPU"
    ax.set_ylabel(f"{ylabel} ({'; '.join(notes)})" if notes else ylabel)
    if priced:
        ax.yaxis.set_major_formatter(_Dollars())
    ax.grid(color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)
    headline = _headline(rows, ran)
    fig.suptitle(f"{title}\n{headline}" if title else headline, fontsize=10)
    if styles:
        # a colour per profile; hollow and the step line read the same in every colour
        if any_over:
            handles.append(Line2D([], [], color="#555555", marker="o", markerfacecolor="none", linestyle="none"))
            labels.append("hollow: does not fit")
        if fronts:
            handles.append(Line2D([], [], color="#555555", linewidth=1.0, alpha=0.6))
            labels.append(f"{front_label} (per profile)")
        ax.legend(handles, labels, handler_map={tuple: HandlerTuple(ndivide=1)}, fontsize=8, loc="best")
    elif ran:
        ax.legend(fontsize=8, loc="best" if priced else "lower right")
    return fig


def _draw_layouts(
    ax: Axes, read: _Reading, drawn: Sequence[SweepRow], styles: dict[str, tuple[str, str]], front_label: str
) -> tuple[bool, list[_Front]]:
    """Each profile's layouts (``styles``: its colour and marker; empty: one profile, whose
    layouts over several cluster sizes get a marker per size), filled where they fit and hollow
    where they do not, and its Pareto front, to draw after the capacity lines. Returns whether
    any layout does not fit, and the fronts."""
    per_profile: list[str | None] = list(styles) or [None]  # None: one for all
    # one profile over several cluster sizes: a marker per size (with several profiles the
    # markers tell the profiles apart, and the key under the plot names the sizes)
    sizes = sorted({_gpus(r) for r in drawn}) if not styles else []
    size_marker = {g: _SIZE_MARKERS[i % len(_SIZE_MARKERS)] for i, g in enumerate(sizes)} if len(sizes) > 1 else {}
    any_over = False
    fronts: list[_Front] = []
    for name in per_profile:
        mine = [r for r in drawn if name is None or _hardware(r) == name]
        colour, marker = (_FIT_COLOUR, "o") if name is None else styles[name]
        counts: list[int | None] = list(size_marker) or [None]
        for count in counts:
            group = [r for r in mine if count is None or _gpus(r) == count]
            fits = [r for r in group if r.fits]
            over = [r for r in group if not r.fits]
            shape = size_marker[count] if count is not None else marker
            what = f"{count:,} GPUs" if count is not None else None
            if fits:
                ax.scatter(*read.xy(fits), s=36, color=colour, marker=shape, edgecolor="black", linewidth=0.5,
                           label=name or (f"{what}: fit" if what else "fits in memory"), zorder=3)  # fmt: skip
            if over:
                any_over = True
                ax.scatter(*read.xy(over), s=36, marker=shape, facecolor="none",
                           edgecolor=_OVER_COLOUR if name is None else colour, linewidth=1.0,
                           label=(f"{what}: does not fit" if what else "does not fit") if name is None
                           else f"{name}: does not fit", zorder=3)  # fmt: skip
        fits = [r for r in mine if r.fits]
        if len(fits) > 1:
            mem, ys = read.xy(fits)
            # less memory and a higher speed, or less memory and a lower cost
            front = pareto_front(list(zip(mem, [-y if read.priced else y for y in ys], strict=True)))
            if len(front) > 1:
                fronts.append(([mem[i] for i in front], [ys[i] for i in front], colour,
                               front_label if name is None else f"{name}: {front_label}"))  # fmt: skip
    return any_over, fronts


def _draw_capacities(
    ax: Axes, sharing: dict[float, list[str]], styles: dict[str, tuple[str, str]]
) -> tuple[list[Any], list[str]]:
    """One line per GPU memory size (a sweep over hardware may compare 80 and 141 GiB GPUs),
    dashed in turns where profiles share it; with several profiles (``styles``), the legend's
    entries for them: each profile's marker on a dashed line of its colour."""
    handles: list[Any] = []
    labels: list[str] = []
    for size, names in sharing.items():
        for index, profile in enumerate(names):
            colour, marker = styles[profile] if styles else (_OVER_COLOUR, "o")
            # the profile's usable capacity as the tables print it (79.65 GiB on an H100, CUDA's
            # device total), not rounded to the datasheet's 80
            shown = format_bytes(size * GiB)
            label = f"{profile}: GPU memory ({shown})" if styles else f"GPU memory ({shown})"
            ax.axvline(size, color=colour, linestyle=_dashes(index, len(names)), linewidth=1.0, label=label)
            if styles:
                # the key shows the profile's marker on a dashed line of its colour, whatever
                # turn its dashes take on a line it shares
                dash = Line2D([], [], color=colour, linestyle="--", linewidth=1.0)
                dot = Line2D([], [], color=colour, marker=marker, markeredgecolor="black",
                             markeredgewidth=0.5, linestyle="none")  # fmt: skip
                handles.append((dash, dot))
                labels.append(f"{profile} ({shown} GPU memory)")
    return handles, labels


def _draw_best_key(fig: Figure, read: _Reading, best: Sequence[SweepRow], rank_of: dict[int, int]) -> None:
    """The key under the plot: the best layouts that fit, with their ranks and settings (and
    cost), and room made for it below the axes, as tall as its lines."""
    if not best:
        return
    width = max(len(r.candidate.label) for r in best)
    digits = dollar_digits([cast(float, read.y(r)) for r in best])
    lines = [
        f"#{rank_of[id(r)]}  {r.candidate.label:<{width}}"
        + (f"  ${read.y(r):,.{digits}f} per 1M tokens" if read.priced else "")
        for r in best
    ]
    heading = "cheapest that fit:" if read.priced else "best that fit:"
    key: Text = fig.text(0.01, 0.005, "\n".join([heading, *lines]), fontsize=8, va="bottom", ha="left",
                         family="monospace")  # fmt: skip
    # layout="constrained" makes the engine a ConstrainedLayoutEngine, which takes rect
    engine = cast(ConstrainedLayoutEngine, fig.get_layout_engine())
    fig.draw_without_rendering()
    share = key.get_window_extent().height / fig.bbox.height + 0.02
    engine.set(rect=(0, share, 1, 1 - share))


def _number_best(
    fig: Figure, ax: Axes, read: _Reading, best: Sequence[SweepRow], ranks: Sequence[int], drawn: Sequence[SweepRow]
) -> None:
    """The best layouts' table ranks beside their points, one label per point that coincides
    on paper, placed clear of each other and of the markers."""
    anchors = [(read.x(r), cast(float, read.y(r))) for r in best]
    fig.draw_without_rendering()  # settle the constrained layout: label distances are on paper
    groups = coincident_groups(ax, anchors)
    spots = [anchors[group[0]] for group in groups]
    texts = [rank_label([ranks[i] for i in group]) for group in groups]
    offsets = label_offsets(ax, spots, texts, markers=list(zip(*read.xy(drawn), strict=True)))
    for text, spot, offset in zip(texts, spots, offsets, strict=True):
        ax.annotate(text, spot, xytext=offset, textcoords="offset points",
                    fontsize=8, fontweight="bold")  # fmt: skip


def _headline(rows: Sequence[SweepRow], ran: Sequence[SweepRow]) -> str:
    """'12 layouts simulated, 8 fit, 1 skipped (cannot run), 3 left out (over memory)'."""
    over_memory = sum(1 for r in rows if r.skipped and r.skipped.startswith(f"{MEMORY_FIELD}:"))
    skipped = sum(1 for r in rows if r.summary is None) - over_memory
    return f"{len(ran)} layouts simulated, {sum(1 for r in ran if r.fits)} fit" + (
        f", {skipped} skipped (cannot run)" if skipped else ""
    ) + (f", {over_memory} left out (over memory)" if over_memory else "")


def write_sweep(
    out_dir: str | os.PathLike[str],
    rows: Sequence[SweepRow],
    json_text: str,
    title: str = "",
    prices: Prices | None = None,
    tokens: float | None = None,
) -> dict[str, Path]:
    """Write sweep.csv, sweep.json (``json_text``, the ``--json`` document) and sweep.png
    into ``out_dir`` atomically; returns file name -> final path."""
    frame = sweep_frame(rows, prices, tokens)
    return write_report_files(out_dir, "sweep", frame, json_text, draw_sweep(rows, title, prices))
