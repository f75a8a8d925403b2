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
