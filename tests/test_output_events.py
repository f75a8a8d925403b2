"""The events table: schema checks and a CSV / Parquet round trip that keeps busy times."""

from __future__ import annotations

import pandas as pd
import pytest
from output_timeline import UNIT_S, make_1f1b

from simcluster.errors import UserError
from simcluster.output.events import (
    EVENT_COLUMNS,
    busy_time,
    parquet_available,
    read_events_csv,
    validate_events,
    write_events_csv,
    write_events_parquet,
)


@pytest.fixture(scope="module")
def timeline():
    return make_1f1b(p=4, m=8, tp=2, dp=1)


def test_helper_is_a_genuine_1f1b_step():
    # Narayanan et al. SC'21: with free p2p, a 1F1B step is (m + p - 1)(F + B) and stage s
    # stashes min(p - s, m) microbatches; here p=4, m=8, F=1, B=2 -> 33 units, stash 4,3,2,1.
    t = make_1f1b(p=4, m=8, f=1.0, b=2.0, p2p=0.0, dp_comm=0.0)
    assert t.summary["step_time_s"] == pytest.approx(33 * UNIT_S)
    static = 25 * 2**30
    peaks = t.memory.groupby("stage")["total"].max()
    assert list(peaks) == [static + k * 2 * 2**30 for k in (4, 3, 2, 1)]
    compute = t.events[t.events["stream"] == "compute"]
    assert (compute["kind"] == "forward").sum() == 4 * 8
    assert (compute["kind"] == "backward").sum() == 4 * 8


def test_csv_round_trip_keeps_busy_time_per_stream(tmp_path, timeline):
    path = tmp_path / "events.csv"
    write_events_csv(timeline.events, path)
    back = read_events_csv(path)
    assert list(back.columns[: len(EVENT_COLUMNS)]) == list(EVENT_COLUMNS)
    assert len(back) == len(timeline.events)
    # Busy seconds per (rank, stream) equal the helper's own accounting when it laid out events.
    assert busy_time(back).to_dict() == pytest.approx(timeline.busy_s, rel=0, abs=1e-15)
    assert set(back.loc[back["stream"] == "compute", "group"]) == {""}  # empty stays empty
    pd.testing.assert_frame_equal(back, validate_events(timeline.events))


@pytest.mark.skipif(not parquet_available(), reason="pyarrow not installed")
def test_parquet_round_trip(tmp_path, timeline):
    path = tmp_path / "events.parquet"
    assert write_events_parquet(timeline.events, path)
    back = pd.read_parquet(path)
    pd.testing.assert_frame_equal(back, validate_events(timeline.events))


def _two_events(**change):
    rows = [
        dict(
            rank=0,
            stage=0,
            stream="compute",
            kind="forward",
            group="",
            name="F0",
            microbatch=0,
            chunk=0,
            layer=-1,
            start_s=0.0,
            end_s=1.0,
            bytes=0.0,
        ),
        dict(
            rank=0,
            stage=0,
            stream="compute",
            kind="backward",
            group="",
            name="B0",
            microbatch=0,
            chunk=0,
            layer=-1,
            start_s=1.0,
            end_s=3.0,
            bytes=0.0,
        ),
    ]
    rows[1].update(change)
    return pd.DataFrame(rows)


def test_touching_events_are_valid():
    assert len(validate_events(_two_events())) == 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "fwd"}, "events.kind"),
        ({"stream": "nvlink"}, "events.stream"),
        ({"group": "xp"}, "events.group"),
        ({"start_s": 0.5}, "events"),  # overlaps F0 on the same stream
        ({"end_s": 0.9}, "events.end_s"),  # ends before it starts
        ({"start_s": float("nan")}, "events.start_s"),
    ],
)
def test_bad_events_name_the_field(change, field):
    with pytest.raises(UserError) as err:
        validate_events(_two_events(**change))
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_missing_column_is_named():
    with pytest.raises(UserError, match="bytes"):
        validate_events(_two_events().drop(columns=["bytes"]))


def test_same_time_on_other_stream_is_not_an_overlap():
    assert len(validate_events(_two_events(stream="comm_tp", start_s=0.5))) == 2
