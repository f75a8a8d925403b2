"""The Gantt chart: a valid PNG that grows with rows, deterministic, readable when dense."""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pytest
from output_timeline import UNIT_S, make_1f1b

from simcluster.errors import UserError
from simcluster.output.gantt import draw_gantt, gantt_rows, merge_blocks, plot_gantt, step_window

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # PNG spec (RFC 2083) §3.1


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, which the PNG spec puts first."""
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _plot(tmp_path, name, t, **kw):
    path = tmp_path / name
    layout = plot_gantt(
        t.events, path, t.rank_labels, t.summary["scenario"], "", t.summary["step_time_s"], **kw
    )
    return path.read_bytes(), layout


def test_png_is_valid_and_grows_with_rows(tmp_path):
    small = make_1f1b(p=4, dp_comm=0.0, p2p=0.0)  # compute + zero-length p2p rows: 8 rows
    # past 8 GPUs only the first GPU of each of the 4 stages keeps its communication rows
    mid = make_1f1b(p=4, tp=2, dp=2, dp_comm=0.0)  # 4 x (compute, comm_pp) + 12 compute = 20
    big = make_1f1b(p=4, tp=2, dp=2, layers=2, tp_comm=0.05)  # 4 x 4 streams + 12 compute = 28
    sizes = []
    for name, t, rows in (("s.png", small, 8), ("m.png", mid, 20), ("b.png", big, 28)):
        data, layout = _plot(tmp_path, name, t)
        assert len(layout.rows) == rows
        width, height = png_size(data)
        assert (width, height) == (layout.width_px, layout.height_px)
        sizes.append(height)
    assert sizes[0] < sizes[1] < sizes[2]


def test_rows_follow_rank_then_stream_order():
    t = make_1f1b(p=2, m=2, tp=1, dp=1, layers=2, tp_comm=0.1)
    rows = gantt_rows(t.events, t.rank_labels)
    assert [(r.rank, r.stream) for r in rows] == [
        (0, "compute"),
        (0, "comm_tp"),
        (0, "comm_dp"),
        (0, "comm_pp"),
        (1, "compute"),
        (1, "comm_tp"),
        (1, "comm_dp"),
        (1, "comm_pp"),
    ]
    assert rows[0].label.startswith("stage 0 / tp 0 / dp 0")
    assert rows[1].label == "comm_tp"  # the GPU is named once


def test_many_gpus_keep_every_compute_row_and_the_marked_gpus_streams():
    t = make_1f1b(p=4, tp=2, dp=2, layers=2, tp_comm=0.05)  # 16 GPUs, 4 streams each
    labels = dict(t.rank_labels)
    labels[5] = labels[5] + ", straggler x1.2"
    rows = gantt_rows(t.events, labels)
    assert {r.rank for r in rows if r.stream == "compute"} == set(range(16))
    first_of_stage = set(t.events.groupby("stage")["rank"].min())
    assert {r.rank for r in rows if r.stream != "compute"} == first_of_stage | {5}
    assert len(rows) == 16 + 3 * (len(first_of_stage | {5}))


def test_microbatch_numbers_on_every_f_and_b_block(tmp_path):
    # p=4, m=8: 4 stages x 8 microbatches x (F, B) = 64 blocks, each >= 1 unit wide (~30 px).
    _, layout = _plot(tmp_path, "g.png", make_1f1b(p=4, m=8))
    assert layout.labels == 64


def test_per_layer_events_collapse_into_microbatch_blocks(tmp_path):
    t = make_1f1b(p=4, m=8, layers=4, tp_comm=0.05, dp_comm=0.0)
    _, layout = _plot(tmp_path, "g.png", t)
    compute = layout.microbatch_blocks[layout.microbatch_blocks["stream"] == "compute"]
    labelled = compute[compute["kind"].isin(["forward", "backward"])]
    assert len(labelled) == 4 * 8 * 2  # one block per (stage, microbatch, F|B), not per layer
    assert set(labelled["events"]) == {4}  # each made of its 4 layer events
    assert layout.labels == 64
    # The drawn blocks keep the visible waits for the TP all-reduce: no per-layer merge there.
    drawn = layout.blocks[layout.blocks["stream"] == "compute"]
    assert len(drawn) > len(compute)


def test_sub_pixel_gaps_merge_visible_gaps_stay():
    t = make_1f1b(p=2, m=2, layers=4, tp_comm=0.05, dp_comm=0.0)
    events = t.events[t.events["stream"] == "compute"]
    tiny = merge_blocks(events, min_gap_s=0.06 * UNIT_S, collapse_layers=False)
    kept = merge_blocks(events, min_gap_s=0.01 * UNIT_S, collapse_layers=False)
    assert len(tiny) == 2 * 2 * 2  # gaps of 0.05 units under the threshold: per-microbatch
    assert len(kept) == len(events)  # gaps wider than a pixel stay visible


def test_zooms_to_last_step_when_events_cover_two():
    t = make_1f1b(p=2, m=2)
    step = t.summary["step_time_s"]
    second = t.events.copy()
    second["start_s"] += step
    second["end_s"] += step
    both = pd.concat([t.events, second], ignore_index=True)
    assert step_window(both, step) == pytest.approx((step, 2 * step))
    assert step_window(t.events, step) == pytest.approx((0.0, step))


def test_a_window_past_the_simulated_step_is_refused_or_cut_at_its_end():
    # one step simulated: a window after it has nothing to draw (an error naming the step's end),
    # one reaching past it stops at the step's end instead of marking steps never simulated
    from simcluster.errors import UserError

    t = make_1f1b(p=2, m=2)
    step = t.summary["step_time_s"]
    with pytest.raises(UserError, match=r"--window: starts at .* after the simulated step ends"):
        step_window(t.events, step, (step * 10, step * 20))
    assert step_window(t.events, step, (step / 2, step * 20)) == pytest.approx((step / 2, step))


def test_a_window_reaching_past_the_step_marks_only_the_simulated_steps_end(tmp_path):
    t = make_1f1b(p=2, m=2)
    step = t.summary["step_time_s"]
    fig, _ = draw_gantt(t.events, {}, "t", "", step, (0.0, 0.9 * step))
    assert _step_marks(fig) == []
    fig, _ = draw_gantt(t.events, {}, "t", "", step, (0.5 * step, 30 * step))
    assert _step_marks(fig) == ["end of step 1"]


def test_a_windowed_chart_says_which_seconds_it_shows():
    """--window draws part of the step under the whole step's subtitle (step time, shares): the
    heading names the window, and a chart of the whole step names none."""
    t = make_1f1b(p=2, m=2)
    step = t.summary["step_time_s"]
    fig, _ = draw_gantt(t.events, {}, "t", "step", step, (0.25 * step, 0.5 * step))
    assert f"window {0.25 * step:.4g}–{0.5 * step:.4g} s of the step" in fig.axes[0].get_title()
    fig, _ = draw_gantt(t.events, {}, "t", "step", step)
    assert "window" not in fig.axes[0].get_title()


def _step_marks(fig) -> list[str]:
    return [a.get_text() for ax in fig.axes for a in ax.texts if a.get_text().startswith("end of step")]


def test_rendering_is_deterministic(tmp_path):
    t = make_1f1b(p=4, m=4)
    for suffix in ("png", "svg"):
        a, _ = _plot(tmp_path, f"a.{suffix}", t)
        b, _ = _plot(tmp_path, f"b.{suffix}", t)
        assert a == b
    svg = (tmp_path / "a.svg").read_text()
    assert "<dc:date>" not in svg


def test_unknown_image_suffix_is_a_user_error(tmp_path):
    t = make_1f1b(p=2, m=2)
    with pytest.raises(UserError, match=r"\.png, \.svg or \.pdf"):
        plot_gantt(t.events, tmp_path / "timeline.gif", t.rank_labels)


def _drawn_rgb(fig) -> np.ndarray:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[:, :, :3] / 255.0


def test_a_backward_split_into_pixel_wide_pieces_keeps_its_color():
    """Selective recomputation puts a recompute sliver before each layer's backward, so at a
    step's scale a backward is a run of ~1 px pieces; a white rule round each piece washed the
    run out to a pale tint (llama3-70b-64xh100's timeline, 2026-11-29). The run must read as
    the backward's color, and carry its microbatch's number; a block wide enough for its rule
    keeps its color too."""
    from matplotlib.colors import to_rgb

    from simcluster.output.gantt import draw_gantt
    from simcluster.output.style import KIND_STYLES

    rows = [{"kind": "forward", "layer": -1, "start_s": 0.0, "end_s": 1.0}]
    t, sliver, piece = 1.0, 1e-4, 9e-4  # 100 layers of 1 ms after a 1 s forward: ~1 px each
    for layer in range(100):
        rows.append({"kind": "recompute", "layer": layer, "start_s": t, "end_s": t + sliver})
        rows.append({"kind": "backward", "layer": layer, "start_s": t + sliver, "end_s": t + sliver + piece})
        t += sliver + piece
    events = pd.DataFrame(
        [{"rank": 0, "stage": 0, "stream": "compute", "group": "", "name": r["kind"], "microbatch": 0,
          "chunk": 0, "bytes": 0.0, **r} for r in rows]  # fmt: skip
    )
    fig, layout = draw_gantt(events)
    image, ax = _drawn_rgb(fig), fig.axes[0]
    factor = 1e3  # the window is ~1.1 s: the axis is in ms

    def mean_color(t0_s: float, t1_s: float) -> np.ndarray:
        (x0, y0), (x1, y1) = ax.transData.transform([(t0_s * factor, -0.3), (t1_s * factor, 0.3)])
        top, bottom = sorted((image.shape[0] - y0, image.shape[0] - y1))  # display y runs up
        return image[int(top) : int(bottom), int(x0) : int(x1)].reshape(-1, 3).mean(axis=0)

    assert len(layout.blocks) == 201  # nothing merges: the slivers sit between the pieces
    assert layout.labels == 2  # the forward's number, and the backward's across its slivers
    assert np.abs(mean_color(1.01, 1.09) - to_rgb(KIND_STYLES["backward"].color)).max() < 0.1
    assert np.abs(mean_color(0.1, 0.9) - to_rgb(KIND_STYLES["forward"].color)).max() < 0.02


def test_a_forward_broken_by_host_syncs_keeps_its_number():
    """A dropless MoE dispatcher syncs with the host once per layer's forward (moe.host_sync):
    a host-wait sliver between the layers broke the forward into per-layer groups too thin for
    their number, so mixtral-8x7b-32xh100's forwards went unnumbered. Joined across the
    slivers, as the backward is across recomputation's, each forward gets one number."""
    from simcluster.output.gantt import draw_gantt

    rows, t = [], 0.0
    for mb in range(2):
        for layer in range(40):  # 40 layers of 5 ms with a 0.1 ms host wait each: ~1 px pieces
            rows.append({"kind": "forward", "microbatch": mb, "layer": layer, "start_s": t, "end_s": t + 0.005})
            rows.append({"kind": "host", "microbatch": mb, "layer": layer, "start_s": t + 0.005, "end_s": t + 0.0051})
            t += 0.0051
    events = pd.DataFrame(
        [{"rank": 0, "stage": 0, "stream": "compute", "group": "", "name": r["kind"], "chunk": 0, "bytes": 0.0, **r}
         for r in rows]  # fmt: skip
    )
    _, layout = draw_gantt(events)
    assert layout.labels == 2  # one number per microbatch's forward


def test_a_run_joined_over_sub_pixel_gaps_is_drawn_as_tall_as_it_is_busy():
    """Events finer than a pixel join into one block across sub-pixel gaps; drawn at full height
    such a block claims its whole extent. Mixtral's 90 us all-to-alls 3 ms apart on a 5 ms
    pixel read as a lane always busy (mixtral-8x7b-32xh100's timeline, 2026-11-29): the block
    is as tall as its busy share (rounded up to a tenth, at least a fifth); a busy block keeps
    the full bar."""
    from simcluster.output.gantt import _BAR, MIN_BUSY_HEIGHT, draw_gantt

    # 10 s on ~1,100 px: 9 ms a pixel, so the gaps below are sub-pixel
    rows = [{"stream": "compute", "kind": "forward", "group": "", "start_s": 0.0, "end_s": 10.0}]
    busy_third = [(t * 3e-3, t * 3e-3 + 1e-3) for t in range(300)]  # 1 ms in every 3: a third
    brief = [(1.0 + t * 3e-3, 1.0 + t * 3e-3 + 9e-5) for t in range(300)]  # 90 us in every 3 ms
    rows += [{"stream": "comm_tp", "kind": "all_gather", "group": "tp", "start_s": a, "end_s": b} for a, b in busy_third]
    rows += [{"stream": "comm_ep", "kind": "all_to_all", "group": "ep", "start_s": a, "end_s": b} for a, b in brief]
    events = pd.DataFrame(
        [{"rank": 0, "stage": 0, "name": r["kind"], "microbatch": 0, "chunk": 0, "layer": 0, "bytes": 0.0, **r}
         for r in rows]  # fmt: skip
    )
    fig, layout = draw_gantt(events)
    joined = layout.blocks.set_index("stream")
    assert joined.loc["comm_tp", "events"] == 300 and joined.loc["comm_ep", "events"] == 300  # one block each
    heights = {}  # drawn bar height by lane, from the polygons themselves
    row_of = {r.stream: i for i, r in enumerate(layout.rows)}
    for collection in fig.axes[0].collections:
        for path in collection.get_paths():
            y = path.vertices[:, 1]
            heights[round(float(y.max() + y.min()) / 2)] = float(y.max() - y.min())
    assert heights[row_of["compute"]] == pytest.approx(_BAR)
    assert heights[row_of["comm_tp"]] == pytest.approx(_BAR * 0.4)  # 1/3 busy -> 0.4 of the bar
    assert heights[row_of["comm_ep"]] == pytest.approx(_BAR * MIN_BUSY_HEIGHT)  # 3% busy


def test_an_isolated_event_finer_than_a_pixel_still_shows():
    """A p2p send of 0.4 ms in a 2.7 s step is a sixth of a pixel: snapped to the pixel grid
    without an outline most such sends vanished (the ZB-H1 picture's comm_pp rows, 2026-11-29;
    4 of these 20 showed); drawn with a hairline of their own color every one shows."""
    from matplotlib.colors import to_rgb

    from simcluster.output.gantt import draw_gantt
    from simcluster.output.style import KIND_STYLES, time_scale

    sends = [0.1 + k * 0.123 for k in range(20)]  # at every offset within a pixel
    rows = [{"stream": "compute", "kind": "forward", "group": "", "start_s": 0.0, "end_s": 2.7, "bytes": 0.0}]
    rows += [{"stream": "comm_pp", "kind": "send", "group": "pp", "start_s": t, "end_s": t + 4e-4, "bytes": 1e6} for t in sends]
    events = pd.DataFrame(
        [{"rank": 0, "stage": 0, "name": r["kind"], "microbatch": 0, "chunk": 0, "layer": -1, **r} for r in rows]
    )
    fig, layout = draw_gantt(events)
    image, ax = _drawn_rgb(fig), fig.axes[0]
    row = next(i for i, r in enumerate(layout.rows) if r.stream == "comm_pp")
    factor = time_scale(layout.window_s[1] - layout.window_s[0]).factor  # seconds -> axis unit
    send = np.array(to_rgb(KIND_STYLES["send"].color))
    for t in sends:
        ((x, y),) = ax.transData.transform([((t + 2e-4) * factor, row)])
        top = int(image.shape[0] - y)  # display y runs up, image rows down
        column = image[top - 3 : top + 3, int(x) - 1 : int(x) + 2].reshape(-1, 3)
        assert np.abs(column - send).sum(axis=1).min() < 0.3, t  # a pixel near the send's color


def test_a_long_legend_keeps_to_the_figures_width():
    """DeepSeek-V3's DualPipe timeline drew 15 legend entries (F, B, W, B+W, recompute,
    optimizer, host waits, all-gather, reduce-scatter, all-to-all, p2p send and recv, virtual
    chunk 1, the lowered-bar key, idle) in seven columns, wider than the 14-inch figure, so the
    first and last columns were cut at its edges. The legend takes as many columns as fit, and
    keeps every entry."""
    from matplotlib.figure import Figure

    from simcluster.output.gantt import (
        DPI,
        FIG_WIDTH_IN,
        MAX_LEGEND_COLUMNS,
        _legend,
        legend_entries,
    )

    kinds = {"forward", "backward_input", "backward_weight", "backward", "recompute", "optimizer", "host",
             "all_gather", "reduce_scatter", "all_to_all", "send", "recv"}  # fmt: skip
    entries = legend_entries(kinds, {0, 1}, lowered=True)
    assert len(entries) == 15
    fig = Figure(figsize=(FIG_WIDTH_IN, 8.0), dpi=DPI, layout="constrained")
    fig.add_subplot()
    _legend(fig, kinds, {0, 1}, lowered=True)
    (legend,) = fig.legends
    assert legend.get_window_extent().width <= fig.bbox.width
    assert [t.get_text() for t in legend.get_texts()] == [label for _, _, label in entries]
    # the seven columns it had would not have fit (the failure this guards against)
    wide = fig.legend(handles=legend.legend_handles, labels=[t.get_text() for t in legend.get_texts()],
                      ncols=MAX_LEGEND_COLUMNS, fontsize=8, frameon=False, loc="outside lower center")  # fmt: skip
    assert wide.get_window_extent().width > fig.bbox.width


def test_the_legend_names_only_kinds_inside_the_window():
    """A --window that starts where the last forward ends has no forward in it: before, the
    forward touching its start was kept (end >= start of the window), so the legend named
    'forward (F)' over a chart of backwards. Events that only touch the window are left out;
    those inside it, and their kinds, stay."""
    from simcluster.output.gantt import SUB_PIXEL_NOTE
    from simcluster.output.style import KIND_STYLES

    t = make_1f1b(p=2, m=2)
    step = t.summary["step_time_s"]
    forwards = t.events[t.events["kind"] == "forward"]
    start = float(forwards["end_s"].max())
    fig, layout = draw_gantt(t.events, {}, "t", "", step, (start, step))
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert KIND_STYLES["forward"].label not in legend and "forward" not in set(layout.blocks["kind"])
    assert KIND_STYLES["backward"].label in legend
    inside = t.events[(t.events["end_s"] > start) & (t.events["start_s"] < step)]
    assert set(layout.blocks["kind"]) == set(inside["kind"])
    fig, layout = draw_gantt(t.events, {}, "t", "", step, (start - 1e-9, step))  # a sliver of it: named
    # as what is drawn of it: the last forward cut at the window's start, 1 ns, under a pixel
    assert KIND_STYLES["forward"].label + SUB_PIXEL_NOTE in [text.get_text() for text in fig.legends[0].get_texts()]


def test_a_kind_drawn_only_under_a_pixel_says_so_in_the_legend():
    """llama3-8b-8xh100 (selective recomputation, a 6.4 s step) draws its 256 recompute
    slivers of 1.06 ms at 0.19 px each between the backward's pieces: snapped to the pixel grid
    about one in five shows, as a pale line, yet the legend offered "recompute" as a colour to
    find (2026-12-01). A kind whose every block is under a pixel, and not drawn with a hairline
    of its own, is named with a note to zoom in; a kind with a block a pixel wide or more (the
    13 ms optimizer step, 2.3 px) or an isolated sliver drawn with its hairline keeps its plain
    label."""
    from simcluster.output.gantt import SUB_PIXEL_NOTE
    from simcluster.output.style import KIND_STYLES

    rows = [{"stream": "compute", "kind": "forward", "layer": -1, "start_s": 0.0, "end_s": 1.0}]
    t, sliver, piece = 1.0, 1e-4, 9e-4  # 100 layers of 1 ms on ~1 px each: slivers of 0.1 px
    for layer in range(100):
        rows.append({"stream": "compute", "kind": "recompute", "layer": layer, "start_s": t, "end_s": t + sliver})
        rows.append({"stream": "compute", "kind": "backward", "layer": layer, "start_s": t + sliver,
                     "end_s": t + sliver + piece})  # fmt: skip
        t += sliver + piece
    rows.append({"stream": "compute", "kind": "optimizer", "layer": -1, "start_s": t, "end_s": t + 3e-3})  # ~3 px
    rows.append({"stream": "comm_pp", "kind": "send", "layer": -1, "start_s": 0.5, "end_s": 0.5 + 1e-4})  # alone
    events = pd.DataFrame(
        [{"rank": 0, "stage": 0, "group": "", "name": r["kind"], "microbatch": 0, "chunk": 0, "bytes": 0.0, **r}
         for r in rows]  # fmt: skip
    )
    fig, layout = draw_gantt(events)
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert "recompute" in set(layout.blocks["kind"])  # drawn, but thinner than a pixel
    assert KIND_STYLES["recompute"].label + SUB_PIXEL_NOTE in legend
    for kind in ("forward", "backward", "optimizer", "send"):
        assert KIND_STYLES[kind].label in legend, kind


def test_a_number_sits_once_at_the_centre_of_the_visible_part_of_its_block():
    """Stage 0 of a 2-stage, 2-microbatch 1F1B step of 4-layer F (1 ms) and B (2 ms): F0 runs
    0-1 ms, F1 1-2 ms, B0 4.2-6.2 ms (output_timeline's layout). A --window of 0.5-4.5 ms
    cuts F0 and B0: their numbers sat at the middle of the whole block (B0's at 5.2 ms, past
    the window's end) or on its first layer event (1/8 of the way along). Each visible block
    carries its number once, at the centre of its part inside the window."""
    t = make_1f1b(p=2, m=2, layers=4)
    events = t.events[t.events["rank"] == 0]
    _, layout = draw_gantt(events, t.rank_labels, step_time_s=t.summary["step_time_s"], window=(5e-4, 4.5e-3))
    spots = sorted((s.text, s.kind, s.x_s) for s in layout.label_spots)
    expected = [("0", "backward", (4.2e-3 + 4.5e-3) / 2), ("0", "forward", (5e-4 + 1e-3) / 2), ("1", "forward", 1.5e-3)]
    assert [s[:2] for s in spots] == [e[:2] for e in expected]
    assert [s[2] for s in spots] == pytest.approx([e[2] for e in expected])
    # uncut, a 4-layer forward's number sits at its middle, not on its first layer's
    _, whole = draw_gantt(events, t.rank_labels, step_time_s=t.summary["step_time_s"])
    assert sorted(s.x_s for s in whole.label_spots if s.kind == "forward") == pytest.approx([5e-4, 1.5e-3])


def test_bars_crossing_the_window_edges_are_cut_at_them():
    """The 1F1B step above, stage 0, window 0.6-4.5 ms: F0 (0-1 ms, layers of 0.25 ms) and B0
    (4.2-6.2 ms, layers of 0.5 ms) cross its edges in their layers 0.5-0.75 ms and 4.2-4.7 ms.
    Their numbers sat on the visible part, but those layers were drawn whole, into the margin
    past both edges. Every rectangle the axes hold now lies inside the window, and F0 and B0
    end at its edges."""
    from simcluster.output.style import time_scale

    t = make_1f1b(p=2, m=2, layers=4)
    events = t.events[t.events["rank"] == 0]
    t0, t1 = 6e-4, 4.5e-3
    fig, layout = draw_gantt(events, t.rank_labels, step_time_s=t.summary["step_time_s"], window=(t0, t1))
    factor = time_scale(t1 - t0).factor  # seconds -> the axis unit (ms here)
    xs = np.concatenate([p.vertices[:, 0] for c in fig.axes[0].collections for p in c.get_paths()]) / factor
    assert xs.min() == pytest.approx(t0) and xs.max() == pytest.approx(t1)  # F0 from t0, B0 to t1
    compute = layout.blocks[layout.blocks["stream"] == "compute"]
    assert compute["start_s"].min() == pytest.approx(t0) and compute["end_s"].max() == pytest.approx(t1)
