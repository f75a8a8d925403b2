"""Every colour means one thing: within a picture and across timeline, breakdown and memory.

The timeline colours events by kind (F/B/W, collective kind), breakdown.png and compare.png
colour the step by category (GEMMs, attention, exposed communication by group), memory.png
colours bytes by what they hold. A colour used by two of these for different things (exposed
tp drawn in the all-reduce red, GEMMs in the forward blue) makes a reader match the wrong
legend; a lighter shade of forward for a later virtual chunk reads as recompute.
"""

from __future__ import annotations

import matplotlib.colors as mcolors
from matplotlib.collections import PolyCollection
from output_timeline import make_1f1b

from simcluster.output.breakdown_plot import COLORS, Bar, draw_bars
from simcluster.output.gantt import draw_gantt
from simcluster.output.style import KIND_STYLES, MEMORY_STYLES

# (timeline kind, breakdown category): the same thing in both pictures, so one colour
SAME_MEANING = {("recompute", "recompute"), ("optimizer", "optimizer"), ("host", "host"), ("copy", "comm_host")}


def _hex(color) -> str:
    return mcolors.to_hex(color).lower()


def _meanings() -> dict[str, set[str]]:
    """colour -> what it stands for, over every picture."""
    same = {b: t for t, b in SAME_MEANING}
    out: dict[str, set[str]] = {}
    for kind, style in KIND_STYLES.items():
        out.setdefault(_hex(style.color), set()).add(f"event {kind}")
    for category, color in COLORS.items():
        name = f"event {same[category]}" if category in same else f"breakdown {category}"
        out.setdefault(_hex(color), set()).add(name)
    for category, style in MEMORY_STYLES.items():
        out.setdefault(_hex(style.color), set()).add(f"memory {category}")
    return out


def test_each_colour_means_one_thing_across_timeline_breakdown_and_memory():
    shared = {color: names for color, names in _meanings().items() if len(names) > 1}
    assert shared == {}


def test_things_that_are_one_share_their_colour():
    for kind, category in SAME_MEANING:
        assert _hex(KIND_STYLES[kind].color) == _hex(COLORS[category])


def _facecolors(fig) -> list[str]:
    out = []
    for ax in fig.axes:
        for coll in ax.collections:
            if isinstance(coll, PolyCollection):
                out += [_hex(c) for c in coll.get_facecolors() if c[3] > 0]
    return out


def _with_chunks(t, chunk_of_odd_microbatches: int = 1):
    events = t.events.copy()
    compute = events["stream"] == "compute"
    events.loc[events["microbatch"] % 2 == 1, "chunk"] = chunk_of_odd_microbatches
    assert (events.loc[compute, "chunk"] > 0).any()
    return events


def test_a_later_virtual_chunk_keeps_its_kinds_colour_and_is_marked_at_any_width():
    from simcluster.output.gantt import CHUNK_CAP_COLOR

    t = make_1f1b(p=2, m=4, layers=4, tp_comm=0.05)  # per-layer pieces: narrow blocks too
    fig, layout = draw_gantt(_with_chunks(t), t.rank_labels, "chunks", "", t.summary["step_time_s"])
    colours = set(_facecolors(fig)) - {_hex(CHUNK_CAP_COLOR)}
    kinds = {_hex(s.color) for s in KIND_STYLES.values()}
    # every block is in a kind's own colour: no lighter shade that would be another kind's
    assert colours <= kinds, colours - kinds
    assert _hex(CHUNK_CAP_COLOR) not in kinds
    hatched = [c for ax in fig.axes for c in ax.collections if c.get_hatch()]
    assert hatched, "wide chunk-1 blocks carry the hatch of their chunk"
    # and every chunk-1 block, however narrow, its cap
    caps = [c for ax in fig.axes for c in ax.collections
            if isinstance(c, PolyCollection) and [_hex(f) for f in c.get_facecolors()[:1]] == [_hex(CHUNK_CAP_COLOR)]]  # fmt: skip
    compute = layout.blocks[layout.blocks["stream"] == "compute"]
    assert sum(len(c.get_paths()) for c in caps) == int((compute["chunk"] > 0).sum()) > 0
    labels = [text.get_text() for legend in fig.legends for text in legend.get_texts()]
    assert any(label.startswith("virtual chunk 1") for label in labels), labels
    assert not any("lighter" in label for label in labels)


def test_timeline_legend_has_one_entry_per_colour_and_no_grey_that_is_a_kind():
    t = make_1f1b(p=2, m=4, tp_comm=0.05, layers=2)
    fig, _ = draw_gantt(_with_chunks(t, 2), t.rank_labels, "legend", "", t.summary["step_time_s"])
    (legend,) = fig.legends
    seen: dict[tuple[str, str], str] = {}
    for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
        face = handle.get_facecolor() if hasattr(handle, "get_facecolor") else None
        if face is None:
            continue
        key = (_hex(face), (handle.get_hatch() or "") if hasattr(handle, "get_hatch") else "")
        if key == ("#ffffff", ""):  # idle is white, and only idle is white and unhatched
            assert text.get_text().startswith("idle"), text.get_text()
        assert key not in seen, (text.get_text(), seen.get(key))
        seen[key] = text.get_text()
    kinds = {_hex(s.color): s.label for s in KIND_STYLES.values()}
    for (face, _), label in seen.items():
        if face in kinds:
            assert kinds[face] == label  # a kind's colour is named as that kind


def test_breakdown_bars_use_no_timeline_kind_colour_but_the_same_meaning_ones():
    parts = {key: 1.0 for key in COLORS}
    fig = draw_bars([Bar("stage 0", parts, float(len(parts)))], "all categories")
    drawn = {_hex(p.get_facecolor()) for ax in fig.axes for p in ax.patches}
    allowed = {_hex(KIND_STYLES[k].color) for k, _ in SAME_MEANING}
    kinds = {_hex(s.color) for s in KIND_STYLES.values()}
    assert (drawn & kinds) <= allowed, drawn & kinds - allowed
    legend_faces = [_hex(h.get_facecolor()) for legend in fig.legends for h in legend.legend_handles]
    assert len(legend_faces) == len(set(legend_faces)) == len(COLORS)
