"""memory.png: what it draws has the summary's peak and the 1F1B activation stash."""

from __future__ import annotations

import numpy as np
import pytest
from output_timeline import make_1f1b

from simcluster.errors import UserError
from simcluster.output.memory_plot import memory_plot_data, plot_memory

GiB = 2**30
STATIC = 25 * GiB  # params 4 + grads 4 + optimizer 16 + other 1 GiB in the helper
ACT = 2 * GiB  # activations of one microbatch on one stage


@pytest.fixture(scope="module")
def timeline():
    return make_1f1b(p=4, m=8)


def test_plotted_peak_equals_summary_peak(tmp_path, timeline):
    data = plot_memory(timeline.memory, timeline.capacity_bytes, tmp_path / "memory.png")
    assert (tmp_path / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert data.peak_bytes == timeline.summary["peak_memory_bytes"]


def test_stage_peaks_follow_the_1f1b_stash(timeline):
    # 1F1B keeps at most p - s microbatches of activations on stage s (Narayanan et al.
    # SC'21, §2.2), so the stacked peaks are STATIC + (p - s) * ACT.
    data = memory_plot_data(timeline.memory, timeline.capacity_bytes)
    assert [s.peak_bytes for s in data.stages] == [STATIC + k * ACT for k in (4, 3, 2, 1)]
    assert data.peak_stage == 0


def test_step_function_extends_to_the_window_end(timeline):
    end = timeline.summary["step_time_s"]
    data = memory_plot_data(timeline.memory, timeline.capacity_bytes, end_s=end)
    for stage in data.stages:
        assert stage.times_s[-1] == end
        assert np.all(np.diff(stage.times_s) >= 0)
        assert stage.top[-1] == STATIC  # all activations freed after the last backward
        stacked = sum(stage.layers.values())
        assert np.array_equal(stacked, stage.top)


def test_total_must_match_the_categories(timeline):
    bad = timeline.memory.copy()
    bad.loc[0, "total"] += GiB
    with pytest.raises(UserError) as err:
        memory_plot_data(bad, timeline.capacity_bytes)
    assert err.value.field == "memory.total"


def test_capacity_must_be_positive(timeline):
    with pytest.raises(UserError) as err:
        memory_plot_data(timeline.memory, 0)
    assert err.value.field == "capacity_bytes"


def test_six_stages_leave_blank_panels_and_keep_peaks(tmp_path):
    # 6 stages on a 4-wide grid: two blank cells; stash peaks p - s = 6..1 microbatches.
    t = make_1f1b(p=6, m=8)
    data = plot_memory(t.memory, t.capacity_bytes, tmp_path / "memory.svg", title="p6")
    assert [s.peak_bytes for s in data.stages] == [STATIC + k * ACT for k in range(6, 0, -1)]
    assert data.peak_bytes == t.summary["peak_memory_bytes"]


def test_the_peak_label_stays_in_its_panel_on_a_ground_of_its_own():
    """A late peak's label ran out of its panel, and a peak just under the capacity put its
    label across the dashed capacity line: the label now sits left of a late peak, on white."""
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Annotation

    from simcluster.output.memory_plot import draw_memory
    from simcluster.units import GiB

    rows = [(0, t, 10 * GiB, 0.0, 0.0, a * GiB, 0.0) for t, a in ((0.0, 1.0), (1.0, 30.0), (9.6, 68.0), (9.9, 5.0))]
    frame = pd.DataFrame(rows, columns=["stage", "time_s", "params", "grads", "optimizer", "activations", "other"])
    frame["total"] = frame[["params", "grads", "optimizer", "activations", "other"]].sum(axis=1)
    fig = draw_memory(memory_plot_data(frame, 80 * GiB, end_s=10.0), "late peak")
    renderer = FigureCanvasAgg(fig).get_renderer()
    ax = fig.axes[0]
    (label,) = [t for t in ax.texts if isinstance(t, Annotation) and t.get_text().startswith("peak")]
    assert label.get_bbox_patch() is not None  # on a white ground, over the capacity line
    assert label.get_zorder() > max(line.get_zorder() for line in ax.lines)
    box, panel = label.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert panel.x0 <= box.x0 and box.x1 <= panel.x1, (box, panel)


def test_the_capacity_line_shows_across_a_peak_that_does_not_fit():
    """Llama 3 70B on 8 H100 at tp 1 peaks at 1.33 TiB: the 80 GiB capacity line ran through
    the parameters' dark blue band under it and could not be seen. It is drawn over the bands,
    in red on a white casing: red and white pixels lie on its rows inside the filled area."""
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from simcluster.output.memory_plot import draw_memory
    from simcluster.units import GiB

    rows = [(0, t, 130 * GiB, 260 * GiB, 790 * GiB, a * GiB, GiB) for t, a in ((0.0, 0.0), (2.0, 170.0), (7.0, 0.0))]
    frame = pd.DataFrame(rows, columns=["stage", "time_s", "params", "grads", "optimizer", "activations", "other"])
    frame["total"] = frame[["params", "grads", "optimizer", "activations", "other"]].sum(axis=1)
    fig = draw_memory(memory_plot_data(frame, 80 * GiB, end_s=7.0), "does not fit")
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ax = fig.axes[0]
    pixels = np.asarray(canvas.buffer_rgba())
    height = pixels.shape[0]
    left, right = (ax.transData.transform((x, 80))[0] for x in (0.5, 6.5))
    y = height - ax.transData.transform((0.5, 80))[1]  # Agg rows count from the top
    rows = pixels[int(round(y)) - 2 : int(round(y)) + 3, int(left) : int(right), :3].reshape(-1, 3).astype(int)
    red = (rows[:, 0] > 170) & (rows[:, 1] < 90) & (rows[:, 2] < 90)
    white = (rows > 230).all(axis=1)  # the casing: the band itself is dark blue there
    assert red.sum() > 0.2 * (right - left) and white.sum() > 0.2 * (right - left), (red.sum(), white.sum())


def test_a_long_title_breaks_to_fit_the_figure():
    """A run's title, "NAME (model M) — LAYOUT on HW (N GPUs)", is wider than the memory plot's
    7 inches for long names: it breaks at its dash, then at spaces, and never runs off the page."""
    from matplotlib.figure import Figure

    from simcluster.output.style import fitting_title

    long = "qwen3-30b-gb200-card (model qwen3-30b-a3b) — dp8 tp1 pp1 ep8 zero1 1f1b on gb200-nvl72 (8 GPUs)"
    fig = Figure(figsize=(7.0, 3.0))
    title = fitting_title(fig, f"{long}\npeak 128.21 GiB on stage 0 of 185.00 GiB")
    assert title.get_text().splitlines()[:2] == [
        "qwen3-30b-gb200-card (model qwen3-30b-a3b)", "dp8 tp1 pp1 ep8 zero1 1f1b on gb200-nvl72 (8 GPUs)"
    ]
    assert title.get_window_extent().width <= fig.bbox.width
    # narrower still: each line wrapped at spaces until it fits
    narrow = Figure(figsize=(3.0, 3.0))
    title = fitting_title(narrow, long)
    assert len(title.get_text().splitlines()) > 2 and title.get_window_extent().width <= narrow.bbox.width
    # a title that fits is left as written
    assert fitting_title(Figure(figsize=(7.0, 3.0)), "tiny — dp8").get_text() == "tiny — dp8"
