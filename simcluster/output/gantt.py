"""The timeline Gantt chart: one row per (simulated GPU, stream) that has events.

Blocks are colored by event kind (later virtual pipeline chunks keep the colour, carry a dark
cap along their top edge and, where wide enough, the hatch of their chunk), forward/backward blocks carry their microbatch number when
wide enough, idle time stays white (so the pipeline bubble is visible), and dashed lines mark
step boundaries. The figure grows with the number of rows (rows get thinner past
``DENSE_ROWS``); past ``DETAILED_RANKS`` simulated GPUs (an all-ranks run) the others keep only
their compute row. When events cover several steps, the chart zooms to the last one.

Dense timelines stay readable without hiding idle time: events of one lane closer than a pixel
are drawn as one block, and per-layer events of one microbatch form one labelled
per-microbatch block (the label sits on its longest piece; visible gaps stay white).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.legend_handler import HandlerBase
from matplotlib.patches import Patch, Rectangle
from matplotlib.transforms import Transform

from simcluster.errors import UserError
from simcluster.output.atomic import atomic_write_bytes
from simcluster.output.events import STREAMS, span, validate_events
from simcluster.output.style import (
    KIND_STYLES,
    chunk_hatch,
    figure_bytes,
    fitting_legend,
    format_of,
    text_color,
    time_scale,
)
from simcluster.units import format_time

DENSE_ROWS = 16
#: with more simulated GPUs than this, only some keep their communication rows (see gantt_rows)
DETAILED_RANKS = 8
LABELED_KINDS = frozenset({"forward", "backward_input", "backward_weight", "backward", "recompute"})
FIG_WIDTH_IN = 14.0
DPI = 100
_BAR = 0.8  # bar height as a fraction of the row pitch
_EDGED_MIN_PX = 4.0  # blocks narrower than this are drawn without their white rule
#: a later virtual chunk's hatch is drawn on blocks at least this wide: on a narrower one it
#: shows as no pattern, only a darker shade that reads as another colour; the chunk's cap (a
#: dark band along the block's top edge) marks it at any width
_HATCHED_MIN_PX = 6.0
CHUNK_CAP_COLOR = "#222222"
_CAP = 0.14  # the cap's thickness as a fraction of the full bar (at most 30% of a lowered one)
#: the lowest bar of a block joined over sub-pixel gaps, however little of it is busy
MIN_BUSY_HEIGHT = 0.2
LOWERED_LEGEND_BELOW = 0.9  # the legend explains lowered bars once a block is this idle
#: the note on the legend entry of a kind whose every block is narrower than a pixel
SUB_PIXEL_NOTE = " (under 1 px: zoom in)"
MAX_LEGEND_COLUMNS = 7  # the legend's columns when they fit the figure's width (fewer if not)
_AXES_WIDTH_FRACTION = 0.8  # rough share of the figure width the time axis gets


@dataclass(frozen=True)
class GanttRow:
    """One drawn row: a stream of one simulated GPU."""

    rank: int
    stream: str
    label: str


@dataclass(frozen=True)
class LabelSpot:
    """A microbatch number as drawn: ``x_s`` in seconds (the centre of the visible part of the
    piece it sits on), its row, its text, and whether it sits on a white tag (the pieces being
    too thin for it, it is placed over the whole group instead)."""

    x_s: float
    row: int
    text: str
    kind: str
    tagged: bool


@dataclass(frozen=True)
class GanttLayout:
    """What the chart shows: rows top to bottom, the time window, the drawn blocks (events
    joined where the gap is under a pixel), the per-microbatch blocks that carry the labels,
    the microbatch numbers drawn, and the image size in pixels."""

    rows: tuple[GanttRow, ...]
    window_s: tuple[float, float]
    blocks: pd.DataFrame
    microbatch_blocks: pd.DataFrame
    label_spots: tuple[LabelSpot, ...]
    width_px: int
    height_px: int

    @property
    def labels(self) -> int:
        """The number of microbatch numbers drawn."""
        return len(self.label_spots)


def detailed_ranks(events: pd.DataFrame, rank_labels: Mapping[int, str]) -> set[int]:
    """The GPUs whose every stream is drawn when more than :data:`DETAILED_RANKS` are simulated
    (an all-ranks run): the first GPU of each pipeline stage and every GPU whose label marks it
    (a straggler). The others keep only their compute row, which is where a slow or waiting
    GPU shows, so a 64-GPU chart stays one screen per eight rows rather than five."""
    ranks = sorted({int(r) for r in events["rank"]})
    if len(ranks) <= DETAILED_RANKS:
        return set(ranks)
    first = events.groupby("stage", sort=True)["rank"].min()
    marked = {r for r in ranks if "straggler" in rank_labels.get(r, "")}
    return {int(r) for r in first} | marked


def gantt_rows(events: pd.DataFrame, rank_labels: Mapping[int, str]) -> list[GanttRow]:
    """Rows for every (rank, stream) with events: by rank, then in :data:`STREAMS` order; with
    many GPUs, only the compute row of those not in :func:`detailed_ranks`."""
    order = {s: i for i, s in enumerate(STREAMS)}
    detailed = detailed_ranks(events, rank_labels)
    pairs = events[["rank", "stream"]].drop_duplicates()
    lanes = sorted(
        {
            (int(r), s)
            for r, s in zip(pairs["rank"], pairs["stream"], strict=True)
            if int(r) in detailed or s == "compute"
        },
        key=lambda lane: (lane[0], order[lane[1]]),
    )
    rows, previous = [], None
    for rank, stream in lanes:
        # Name the GPU once, on its first row; its other rows only name the stream.
        name = rank_labels.get(rank, f"rank {rank}") if rank != previous else ""
        rows.append(GanttRow(rank, stream, f"{name}  {stream}".strip()))
        previous = rank
    return rows


def step_window(
    events: pd.DataFrame, step_time_s: float | None, window: tuple[float, float] | None = None
) -> tuple[float, float]:
    """The time window drawn: ``window`` if given; the last step when the events cover more
    than one step; else everything."""
    first, last = span(events)
    if window is not None:
        if not window[1] > window[0]:
            raise UserError("--window", f"window end must be after its start, got {window}")
        end = max(last, first + (step_time_s or 0.0))
        if window[0] >= end:
            raise UserError(
                "--window",
                f"starts at {window[0]:g} s, after the simulated step ends ({end:.4g} s); "
                f"give a START below {end:.4g}",
            )
        # past the step there is nothing to draw: no later step was simulated
        return float(window[0]), min(float(window[1]), end)
    if step_time_s and last - first > 1.05 * step_time_s:
        return last - step_time_s, last
    return first, max(last, first + (step_time_s or 0.0), first + 1e-12)


def merge_blocks(events: pd.DataFrame, min_gap_s: float, collapse_layers: bool) -> pd.DataFrame:
    """Join consecutive events of one lane with the same (kind, microbatch, chunk).

    They join when the gap between them is at most ``min_gap_s`` (invisible at the drawn
    resolution) or, with ``collapse_layers``, when both are per-layer events (layer >= 0).
    The result keeps, per block, the extent of its longest member (``widest_start_s``,
    ``widest_end_s``): the place for a label that does not sit on a gap; and the time its
    members take (``busy_s``), which sub-pixel gaps can make far less than its extent.
    """
    frame = events.sort_values(["rank", "stream", "start_s"], kind="stable").reset_index(drop=True)
    keys = ["rank", "stream", "kind", "microbatch", "chunk"]
    if frame.empty:
        return pd.DataFrame(
            columns=[*keys, "layer", "start_s", "end_s", "widest_start_s", "widest_end_s", "events", "busy_s"]
        )
    if "widest_start_s" not in frame:
        frame["widest_start_s"], frame["widest_end_s"] = frame["start_s"], frame["end_s"]
        frame["events"] = 1
        frame["busy_s"] = frame["end_s"] - frame["start_s"]
    same = np.ones(len(frame), dtype=bool)
    for key in keys:
        values = frame[key].to_numpy()
        same[1:] &= values[1:] == values[:-1]
    same[0] = False
    gap = frame["start_s"].to_numpy()[1:] - frame["end_s"].to_numpy()[:-1]
    close = np.concatenate([[False], gap <= min_gap_s])
    if collapse_layers:
        layered = frame["layer"].to_numpy() >= 0
        close |= np.concatenate([[False], layered[1:] & layered[:-1]])
    frame["block"] = np.cumsum(~(same & close))
    widest = frame.loc[
        (frame["widest_end_s"] - frame["widest_start_s"]).groupby(frame["block"]).idxmax()
    ]
    grouped = frame.groupby("block", sort=True)
    merged = grouped[[*keys, "layer"]].first()
    merged["start_s"] = grouped["start_s"].min()
    merged["end_s"] = grouped["end_s"].max()
    merged["widest_start_s"] = widest.set_index("block")["widest_start_s"]
    merged["widest_end_s"] = widest.set_index("block")["widest_end_s"]
    merged["events"] = grouped["events"].sum()
    merged["busy_s"] = grouped["busy_s"].sum()
    return merged.reset_index(drop=True)


def _label_groups(blocks: pd.DataFrame, min_gap_s: float) -> pd.DataFrame:
    """One block per (lane, kind, microbatch, chunk) run for the microbatch numbers.

    Selective or per-layer full recomputation reruns a sliver before each layer's backward,
    and a MoE dispatcher's host sync (``moe.host_sync``) leaves a host-wait sliver in each
    layer's forward: the layers are joined across those slivers (a group broken at every layer
    would be too thin for its number anywhere; Mixtral's forwards went unnumbered), the
    slivers among themselves as before."""
    sliver = blocks["kind"].isin(("recompute", "host"))
    joined = merge_blocks(blocks[~sliver], min_gap_s, collapse_layers=True)
    slivers = merge_blocks(blocks, min_gap_s, collapse_layers=True)
    return pd.concat([joined, slivers[slivers["kind"] == "recompute"]], ignore_index=True)


def _fill(kind: str) -> str:
    """A block's colour: its kind's, whatever its virtual chunk (chunks are hatched instead: a
    lighter shade of forward would read as recompute, of backward input as backward weight)."""
    return KIND_STYLES[kind].color


def _hatch_color(fill: str) -> str:
    """Hatch lines that show on ``fill``: white on dark colours, dark grey on light ones."""
    return "#333333" if text_color(fill) == "black" else "white"


def _row_pitch_in(n_rows: int) -> float:
    return 0.34 if n_rows <= DENSE_ROWS else 0.24


def _busy_share(blocks: pd.DataFrame) -> np.ndarray:
    """The share of each block's extent its events take (1 for an instant)."""
    length = (blocks["end_s"] - blocks["start_s"]).to_numpy(dtype=float)
    busy = blocks["busy_s"].to_numpy(dtype=float)
    share: np.ndarray = np.divide(busy, length, out=np.ones(len(blocks)), where=length > 0)
    return share


def _busy_height(busy_share: float) -> float:
    """A block's bar height, as a share of the full bar: its busy share rounded up to a tenth,
    at least :data:`MIN_BUSY_HEIGHT` (so a lane of brief events stays visible)."""
    return max(MIN_BUSY_HEIGHT, min(1.0, math.ceil(busy_share * 10 - 1e-9) / 10))


def _rules(blocks: pd.DataFrame, px_per_s: float) -> list[str]:
    """Each block's outline: "white" for a block wide enough to keep its color inside a white
    rule; "own" (a hairline of its color) for a narrower one with a clear pixel on each side,
    which snapped to the pixel grid would vanish; "none" inside a run of narrow blocks."""
    start, end = blocks["start_s"].to_numpy(), blocks["end_s"].to_numpy()
    lane = blocks["rank"].astype(str).to_numpy() + "/" + blocks["stream"].astype(str).to_numpy()
    same_before = np.concatenate([[False], lane[1:] == lane[:-1]])
    same_after = np.concatenate([lane[:-1] == lane[1:], [False]])
    pixel = 1.0 / px_per_s
    clear_before = ~same_before | (start - np.concatenate([[-np.inf], end[:-1]]) >= pixel)
    clear_after = ~same_after | (np.concatenate([start[1:], [np.inf]]) - end >= pixel)
    wide = (end - start) * px_per_s >= _EDGED_MIN_PX
    return ["white" if w else "own" if b and a else "none" for w, b, a in zip(wide, clear_before, clear_after, strict=True)]


def _rgba(colors: list[str]) -> np.ndarray:
    """``colors`` as the RGBA rows matplotlib would make of them, each distinct one converted
    once: given names, a collection converts every item (~3 us each, 770,000 blocks in a
    405B step's timeline); given the rows, it copies them. The same values, the same image."""
    rgba = {c: to_rgba(c) for c in dict.fromkeys(colors)}
    return np.array([rgba[c] for c in colors], dtype=float).reshape(len(colors), 4)


def _bars(ax: Axes, ranges: list[tuple[float, float]], yrange: tuple[float, float], **style: object) -> PolyCollection:
    """``ax.broken_barh(ranges, yrange, **style)`` without its per-range work: the same
    rectangles, vertex for vertex ((x0, y0), (x0, y1), (x1, y1), (x1, y0) with x1 = x0 + width,
    y1 = y0 + height), built as one array. broken_barh converts each range's units through
    the axis (two calls a range: 1.3 s of DeepSeek-V3's 185k events) and adds the collection to
    the data limits the chart sets itself (xlim, ylim in draw_gantt)."""
    xr = np.asarray(ranges, dtype=float).reshape(-1, 2)
    x0, x1 = xr[:, 0], xr[:, 0] + xr[:, 1]
    y0, height = yrange
    y1 = y0 + height
    verts = np.empty((len(xr), 4, 2))
    verts[:, 0, 0] = verts[:, 1, 0] = x0
    verts[:, 2, 0] = verts[:, 3, 0] = x1
    verts[:, 0, 1] = verts[:, 3, 1] = y0
    verts[:, 1, 1] = verts[:, 2, 1] = y1
    collection = PolyCollection(verts, **style)  # type: ignore[arg-type]  # an (N, 4, 2) array, as broken_barh passes
    ax.add_collection(collection, autolim=False)
    return collection


def _draw_blocks(ax: Axes, blocks: pd.DataFrame, row_of: dict, factor: float, px_per_s: float) -> None:
    blocks = blocks.sort_values(["rank", "stream", "start_s"], kind="stable")
    # plain lists: iterating pandas' Arrow-backed string columns costs ~1 us an item
    streams = blocks["stream"].tolist()
    fills = [_fill(k) for k in blocks["kind"].tolist()]
    # chunks are marked on the compute rows, where the schedule places them; on a
    # communication row a cap on every sliver would only be noise
    hatches = [chunk_hatch(int(c)) if st == "compute" else "" for c, st in zip(blocks["chunk"].tolist(), streams, strict=True)]
    rows = [row_of[lane] for lane in zip(blocks["rank"].tolist(), streams, strict=True)]
    length = (blocks["end_s"] - blocks["start_s"]).to_numpy()
    heights = [_busy_height(b) for b in _busy_share(blocks)]
    x, w = blocks["start_s"].to_numpy() * factor, length * factor
    spans: dict[tuple[int, str, float], list[tuple[tuple[float, float], str]]] = {}
    hatched: dict[tuple[int, float, str, str], list[tuple[float, float]]] = {}
    caps: dict[tuple[int, float], list[tuple[float, float]]] = {}
    for row, fill, hatch, x0, width, rule, height in zip(
        rows, fills, hatches, x, w, _rules(blocks, px_per_s), heights, strict=True
    ):
        spans.setdefault((row, rule, height), []).append(((x0, width), fill))
        if hatch:
            caps.setdefault((row, height), []).append((x0, width))
        if hatch and width * px_per_s / factor >= _HATCHED_MIN_PX:
            hatched.setdefault((row, height, hatch, _hatch_color(fill)), []).append((x0, width))
    # One call per row, outline and bar height keeps thousands of blocks cheap to draw. A white
    # rule sets neighbouring blocks apart, but only on blocks wide enough to keep their color: a
    # run of per-layer pieces a pixel wide each (a backward split by selective recomputation,
    # TP collectives) would otherwise be drawn mostly in white rules, a pale wash of its color.
    # A block joined over sub-pixel gaps is as tall as the share of it its events take: 90 us
    # all-to-alls 3 ms apart on a 5 ms pixel make one block as long as the step, 3% busy, and
    # drawn full height it would read as always busy. Its color stays the kind's.
    for (row, rule, height), items in sorted(spans.items(), key=lambda kv: kv[0]):
        ranges, colors = [r for r, _ in items], _rgba([c for _, c in items])
        bottom = row + _BAR / 2  # the y axis runs down: bars stand on their row's baseline
        _bars(
            ax,
            ranges,
            (bottom - _BAR * height, _BAR * height),
            facecolors=colors,
            edgecolors="white" if rule == "white" else colors,
            linewidth={"white": 0.3, "own": 0.75, "none": 0.0}[rule],
        )
    # later virtual chunks: a dark cap along the top edge (any width), and the hatch of their
    # chunk over the kind's colour where it shows as a pattern
    for (row, height), ranges in sorted(caps.items(), key=lambda kv: kv[0]):
        top = row + _BAR / 2 - _BAR * height
        _bars(ax, ranges, (top, _BAR * min(_CAP, 0.3 * height)), facecolors=CHUNK_CAP_COLOR, linewidth=0.0)
    for (row, height, hatch, color), ranges in sorted(hatched.items(), key=lambda kv: kv[0]):
        bottom = row + _BAR / 2
        _bars(
            ax,
            ranges,
            (bottom - _BAR * height, _BAR * height),
            facecolors="none",
            edgecolors=color,
            linewidth=0.0,
            hatch=hatch,
        )


def visible_pieces(blocks: pd.DataFrame) -> pd.DataFrame:
    """The drawn blocks, each its own widest piece: a label goes on what is visible. The blocks
    are joined from events already cut at the window's edges (:func:`draw_gantt`), so a block
    crossing a --window edge has its number at the centre of its visible part, and a block
    joined from per-layer events has it on the block drawn, not on its longest event (1/8 of
    the way along a 4-layer forward)."""
    pieces = blocks.copy()
    pieces["widest_start_s"], pieces["widest_end_s"] = pieces["start_s"], pieces["end_s"]
    return pieces


def label_spots(groups: pd.DataFrame, row_of: dict, px_per_s: float, font_pt: float) -> list[LabelSpot]:
    """Microbatch numbers, one per microbatch group: at the centre of its widest piece when
    that has room, else on a tag at the centre of the group when the group has."""
    char_px = 0.62 * font_pt * DPI / 72
    # only the blocks with room for a one-digit number at least, picked with whole columns:
    # reading every group row by row (Arrow strings and all) took as long as drawing the
    # labels of a 185k-event timeline, which are few or none at that density
    microbatch = groups["microbatch"].to_numpy()
    room = (groups["end_s"] - groups["start_s"]).to_numpy(dtype=float) * px_per_s
    candidates = groups["kind"].isin(LABELED_KINDS).to_numpy() & (microbatch >= 0) & (room >= char_px + 3)
    spots = []
    for g in groups[candidates].itertuples(index=False):
        text = str(g.microbatch)
        need_px = len(text) * char_px + 3
        row = row_of[(g.rank, g.stream)]
        if (g.widest_end_s - g.widest_start_s) * px_per_s >= need_px:
            spots.append(LabelSpot((g.widest_start_s + g.widest_end_s) / 2, row, text, str(g.kind), False))
        elif (g.end_s - g.start_s) * px_per_s >= need_px + 4:
            # Pieces too thin for the number: put it on a small white tag over the block.
            spots.append(LabelSpot((g.start_s + g.end_s) / 2, row, text, str(g.kind), True))
    return spots


def _draw_labels(ax: Axes, spots: list[LabelSpot], factor: float, font_pt: float) -> None:
    for spot in spots:
        tag = {"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
        ax.text(
            spot.x_s * factor,
            spot.row,
            spot.text,
            ha="center",
            va="center",
            fontsize=font_pt,
            color="black" if spot.tagged else text_color(_fill(spot.kind)),
            clip_on=True,
            bbox=tag if spot.tagged else None,
        )


class LoweredBar:
    """Legend key of a block drawn lower than its row: the busy share of a joined block."""


class _LoweredBarHandler(HandlerBase):
    """Draws :class:`LoweredBar` as an outlined box filled from its foot to 40% of its height."""

    def create_artists(
        self, legend: Legend, orig_handle: object, xdescent: float, ydescent: float,
        width: float, height: float, fontsize: float, trans: Transform,
    ) -> list[Artist]:  # fmt: skip
        box = Rectangle((-xdescent, -ydescent), width, height, facecolor="white", edgecolor="#999999",
                        linewidth=0.8, transform=trans)  # fmt: skip
        busy = Rectangle((-xdescent, -ydescent), width, 0.4 * height, facecolor="#8F8F8F",
                         edgecolor="none", transform=trans)  # fmt: skip
        return [box, busy]


@dataclass(frozen=True)
class ChunkKey:
    """Legend key of a later virtual chunk: its hatch under the chunk cap."""

    hatch: str


class _ChunkKeyHandler(HandlerBase):
    """Draws :class:`ChunkKey` as an outlined white box with the chunk's hatch and the cap."""

    def create_artists(
        self, legend: Legend, orig_handle: object, xdescent: float, ydescent: float,
        width: float, height: float, fontsize: float, trans: Transform,
    ) -> list[Artist]:  # fmt: skip
        box = Rectangle((-xdescent, -ydescent), width, height, facecolor="white", edgecolor="#555555",
                        hatch=_hatch_of(orig_handle), linewidth=0.8, transform=trans)  # fmt: skip
        cap = Rectangle((-xdescent, -ydescent + (1 - _CAP) * height), width, _CAP * height,
                        facecolor=CHUNK_CAP_COLOR, edgecolor="none", transform=trans)  # fmt: skip
        return [box, cap]


def _hatch_of(handle: object) -> str | None:
    """The hatch of a legend handle: a :class:`ChunkKey`'s; none for another handle."""
    return handle.hatch if isinstance(handle, ChunkKey) else None


def chunk_legend(chunks: set[int]) -> list[tuple[str, str]]:
    """(hatch, label) legend entries for the later virtual chunks drawn (``chunks`` > 0), one a
    pattern, naming every chunk drawn with it."""
    by_hatch: dict[str, list[int]] = {}
    for chunk in sorted(c for c in chunks if c > 0):
        by_hatch.setdefault(chunk_hatch(chunk), []).append(chunk)
    entries = []
    for index, (hatch, members) in enumerate(by_hatch.items()):
        word = "chunk" if len(members) == 1 else "chunks"
        label = f"virtual {word} {', '.join(map(str, members))}"
        if index == 0:
            label += " (dark top edge; chunk 0 has none)"
        entries.append((hatch, label))
    return entries


def sub_pixel_kinds(blocks: pd.DataFrame, px_per_s: float, origin_s: float = 0.0) -> set[str]:
    """The kinds none of whose blocks fills half a pixel anywhere (each is narrower than a pixel
    and no more than half of it lies in any one pixel column) and none of whose blocks is drawn
    with a hairline of its own (see :func:`_rules`). Snapped to the pixel grid such a block
    shows as a 1 px line or not at all, by where it falls: selective recomputation's 1 ms
    slivers between a 6.4 s step's backward pieces (0.19 px each) showed about one in five, as
    pale lines the eye reads as gaps, while the legend offered "recompute" as a colour to look
    for. A run of pieces each just under a pixel (a backward between those slivers at a finer
    scale) fills most of its pixels and stays a plain entry. The pixel grid is counted from
    ``origin_s``, the window's start (the axes' own offset moves it by a fraction of a pixel)."""
    if blocks.empty:
        return set()
    ordered = blocks.sort_values(["rank", "stream", "start_s"], kind="stable")
    x0 = (ordered["start_s"].to_numpy(dtype=float) - origin_s) * px_per_s
    x1 = (ordered["end_s"].to_numpy(dtype=float) - origin_s) * px_per_s
    # the larger of the parts in the first and the last pixel column the block touches
    most = np.maximum(np.minimum(x1, np.floor(x0) + 1) - x0, x1 - np.maximum(x0, np.floor(x1)))
    shows = (x1 - x0 >= 1.0) | (most >= 0.5) | (np.array(_rules(ordered, px_per_s)) == "own")
    kinds = ordered["kind"].to_numpy()
    return set(kinds.tolist()) - set(kinds[shows].tolist())


def legend_entries(
    kinds: set[str], chunks: set[int], lowered: bool, sub_pixel: frozenset[str] | set[str] = frozenset()
) -> list[tuple[str, str, str]]:
    """The timeline's legend as (facecolor, hatch, label): the kinds drawn (each colour one kind;
    a kind in ``sub_pixel``, drawn only narrower than a pixel, says so: zoomed in with --window
    it shows), the hatches of the virtual chunks drawn, the lowered-bar key and idle. The
    lowered-bar key's facecolor is ``"lowered"``."""
    entries = [
        (s.color, "", s.label + (SUB_PIXEL_NOTE if k in sub_pixel else "")) for k, s in KIND_STYLES.items() if k in kinds
    ]
    entries += [("white", hatch, label) for hatch, label in chunk_legend(chunks)]
    if lowered:
        entries.append(("lowered", "", "lower = busy part of the time (zoom in)"))
    entries.append(("white", "", "idle (bubble)"))
    return entries


def _legend(
    fig: Figure, kinds: set[str], chunks: set[int], lowered: bool, sub_pixel: frozenset[str] | set[str] = frozenset()
) -> None:
    entries = legend_entries(kinds, chunks, lowered, sub_pixel)
    handles: list[object] = []
    for face, hatch, label in entries:
        if face == "lowered":
            handles.append(LoweredBar())
            continue
        if hatch:
            handles.append(ChunkKey(hatch))
            continue
        handles.append(Patch(facecolor=face, edgecolor="#999999" if face == "white" else face, label=label))
    labels = [label for _, _, label in entries]
    # As many columns as fit the figure's width: with a pipeline's p2p, MoE's all-to-all, host
    # waits, virtual chunks and the lowered-bar key (DeepSeek-V3's 15 entries) seven columns ran
    # past both edges of the 14-inch figure and the outer entries were cut off.
    fitting_legend(
        fig, handles, labels, MAX_LEGEND_COLUMNS,
        handler_map={LoweredBar: _LoweredBarHandler(), ChunkKey: _ChunkKeyHandler()},
        loc="outside lower center", fontsize=8, frameon=False,
    )  # fmt: skip


def draw_gantt(
    events: pd.DataFrame,
    rank_labels: Mapping[int, str] | None = None,
    title: str = "",
    subtitle: str = "",
    step_time_s: float | None = None,
    window: tuple[float, float] | None = None,
) -> tuple[Figure, GanttLayout]:
    """Draw the chart on a new figure; returns it with what was drawn."""
    frame = validate_events(events)
    if frame.empty:
        raise UserError("events", "no events to draw; the simulation produced an empty timeline")
    rows = gantt_rows(frame, dict(rank_labels or {}))
    t0, t1 = step_window(frame, step_time_s, window)
    drawn = frame["rank"].isin(detailed_ranks(frame, dict(rank_labels or {}))) | (frame["stream"] == "compute")
    # the events inside the window: an event that only touches it (one ending where a --window
    # starts) has nothing in it to draw, and its kind would be named in the legend all the same
    instant = frame["end_s"] == frame["start_s"]
    inside = (frame["end_s"] > t0) & (frame["start_s"] < t1)
    visible = frame[drawn & (inside | (instant & (frame["start_s"] >= t0) & (frame["start_s"] <= t1)))]
    # cut at the window's edges before the blocks are joined: uncut, a block crossing a
    # --window edge was drawn whole, into the margin past the edge (the labels were already
    # placed on the visible part), and a joined block's busy share, its bar's height, counts
    # only the time inside the window
    visible = visible.assign(start_s=visible["start_s"].clip(t0, t1), end_s=visible["end_s"].clip(t0, t1))
    pitch = _row_pitch_in(len(rows))
    height_in = max(3.0, 1.5 + 0.5 + pitch * len(rows))
    px_per_s = FIG_WIDTH_IN * _AXES_WIDTH_FRACTION * DPI / (t1 - t0)
    blocks = merge_blocks(visible, min_gap_s=1.0 / px_per_s, collapse_layers=False)
    groups = _label_groups(visible_pieces(blocks), 1.0 / px_per_s)

    fig = Figure(figsize=(FIG_WIDTH_IN, height_in), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    row_of = {(r.rank, r.stream): i for i, r in enumerate(rows)}
    font_pt = min(8.0, pitch * 72 * _BAR * 0.62)
    scale = time_scale(t1 - t0)
    _draw_blocks(ax, blocks, row_of, scale.factor, px_per_s)
    spots = label_spots(groups, row_of, px_per_s, font_pt)
    _draw_labels(ax, spots, scale.factor, font_pt)
    for i in range(1, len(rows)):
        if rows[i].rank != rows[i - 1].rank:  # separate GPUs with a thin rule
            ax.axhline(i - 0.5, color="#BBBBBB", linewidth=0.6)
    _mark_steps(ax, frame, step_time_s, t0, t1, scale.factor)
    margin = 0.01 * (t1 - t0)
    ax.set_xlim((t0 - margin) * scale.factor, (t1 + margin) * scale.factor)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(
        range(len(rows)), [r.label for r in rows], fontsize=max(6.0, min(8.0, font_pt + 1))
    )
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(f"time ({scale.unit})", fontsize=9)
    ax.grid(axis="x", color="#EEEEEE", linewidth=0.6)
    ax.set_axisbelow(True)
    ranks = frame["rank"].nunique()
    note = (
        f"{ranks} GPUs: communication rows for the first GPU of each stage and any straggler"
        if any(r.stream != "compute" for r in rows) and len({r.rank for r in rows if r.stream != "compute"}) < ranks
        else ""
    )
    # a zoomed chart says so: its subtitle's step time and shares are the whole step's
    zoom = f"window {t0:.4g}–{t1:.4g} s of the step (--window; the trace has every event)" if window is not None else ""
    heading = "\n".join(part for part in (title, subtitle, zoom, note) if part)
    if heading:
        ax.set_title(heading, fontsize=10)
    chunks = {int(c) for c in blocks.loc[blocks["stream"] == "compute", "chunk"]}
    lowered = bool((_busy_share(blocks) < LOWERED_LEGEND_BELOW).any())
    _legend(fig, set(blocks["kind"]), chunks, lowered, sub_pixel_kinds(blocks, px_per_s, t0))
    layout = GanttLayout(
        tuple(rows),
        (t0, t1),
        blocks,
        groups,
        tuple(spots),
        int(FIG_WIDTH_IN * DPI),
        int(round(height_in * DPI)),
    )
    return fig, layout


def _mark_steps(
    ax: Axes, frame: pd.DataFrame, step_time_s: float | None, t0: float, t1: float, factor: float
) -> None:
    """Dashed lines at the ends of steps, counted from the first event."""
    if not step_time_s or step_time_s <= 0:
        return
    first, last = span(frame)
    k_first = int(np.ceil((t0 - first) / step_time_s - 1e-9))
    k_last = int(np.floor((t1 - first) / step_time_s + 1e-9))
    # only the ends of the steps the events cover: a window past them marks no unsimulated step
    k_last = min(k_last, max(1, int(np.ceil((last - first) / step_time_s - 0.05))))
    for k in range(max(k_first, 1), k_last + 1):
        x = (first + k * step_time_s) * factor
        ax.axvline(x, color="#C62828", linestyle="--", linewidth=1.0, zorder=3)
        ax.annotate(
            f"end of step {k}",
            (x, 1),
            xycoords=("data", "axes fraction"),
            xytext=(0, 2),
            textcoords="offset points",
            ha="right",
            va="bottom",
            fontsize=7,
            color="#C62828",
        )


def plot_gantt(
    events: pd.DataFrame,
    path: str | os.PathLike[str],
    rank_labels: Mapping[int, str] | None = None,
    title: str = "",
    subtitle: str = "",
    step_time_s: float | None = None,
    window: tuple[float, float] | None = None,
) -> GanttLayout:
    """Write the Gantt chart to ``path`` (.png/.svg/.pdf, atomically)."""
    fmt = format_of(path)
    fig, layout = draw_gantt(events, rank_labels, title, subtitle, step_time_s, window)
    atomic_write_bytes(path, figure_bytes(fig, fmt, dpi=DPI))
    return layout


def describe_step(summary: Mapping[str, object], title: str = "") -> str:
    """The subtitle line from a run summary: layout (unless ``title`` already names it), step
    time and, when the summary has its breakdown, the busiest stage's three largest parts."""
    parts = []
    layout = str(summary.get("layout") or "")
    if layout and layout not in title:
        parts.append(layout)
    step = summary.get("step_time_s")
    if isinstance(step, (int, float)) and step > 0:
        period = " (steady state, steps overlap)" if summary.get("optimizer_post_validation") else ""
        parts.append(f"step {format_time(float(step))}{period}")
        if "time_breakdown_s" in summary:
            from simcluster.engine.breakdown import busiest_shares

            top = busiest_shares(dict(summary))[:3]
            parts.append(", ".join(f"{label} {100 * f:.0f}%" for label, f in top))
    return " · ".join(parts)
