"""write_all: every file lands in --out together, or nothing does."""

from __future__ import annotations

import json

import pytest
from output_timeline import make_1f1b

from simcluster.errors import UserError
from simcluster.output.atomic import MANIFEST
from simcluster.output.events import parquet_available, read_events_csv
from simcluster.output.writer import write_all

EXPECTED = {"timeline.png", "trace.json", "events.csv", "memory.png", "summary.json"}


@pytest.fixture(scope="module")
def timeline():
    return make_1f1b(p=4, m=8)


def _write(timeline, out, **kw):
    return write_all(
        out,
        timeline.events,
        timeline.memory,
        timeline.capacity_bytes,
        timeline.summary,
        timeline.rank_labels,
        "1F1B test",
        **kw,
    )


def _leftovers(parent):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_writes_every_file(tmp_path, timeline):
    out = tmp_path / "run" / "out"  # missing parents are created
    written = _write(timeline, out, svg=True)
    expected = EXPECTED | {"timeline.svg"} | ({"events.parquet"} if parquet_available() else set())
    assert set(written) == expected
    assert {p.name for p in out.iterdir()} == expected | {MANIFEST}
    assert json.loads((out / MANIFEST).read_text()) == {"run": sorted(expected)}
    assert json.loads((out / "summary.json").read_text()) == timeline.summary
    assert json.loads((out / "trace.json").read_text())["traceEvents"]
    assert len(read_events_csv(out / "events.csv")) == len(timeline.events)
    assert _leftovers(out.parent) == []  # no staging directory left behind


def test_rewrite_keeps_other_files_and_replaces_ours(tmp_path, timeline):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "summary.json").write_text("stale")
    _write(timeline, out)
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "summary.json").read_text()) == timeline.summary


def test_a_reused_out_loses_the_files_the_last_run_wrote_and_this_one_did_not(tmp_path, timeline):
    """A run with --svg, then one without: timeline.svg would stay beside the new timeline.png
    and look current. The manifest names what the last run wrote; only those go (the user's
    own files, even one named like ours, stay)."""
    out = tmp_path / "out"
    _write(timeline, out, svg=True)
    assert (out / "timeline.svg").is_file()
    (out / "notes.txt").write_text("mine")
    _write(timeline, out, gzip_trace=True)
    names = {p.name for p in out.iterdir()}
    assert "timeline.svg" not in names and "trace.json" not in names
    assert {"trace.json.gz", "timeline.png", "notes.txt"} <= names
    assert "timeline.svg" not in json.loads((out / MANIFEST).read_text())["run"]
    # a timeline.svg the manifest does not list (the user's, or an older version's) stays
    (out / "timeline.svg").write_text("<svg/>")
    _write(timeline, out)
    assert (out / "timeline.svg").read_text() == "<svg/>" and (out / "notes.txt").read_text() == "mine"


def test_a_damaged_manifest_removes_nothing(tmp_path, timeline):
    out = tmp_path / "out"
    _write(timeline, out, svg=True)
    (out / MANIFEST).write_text('{"run": ["../escape.txt", ".hidden", "timeline.svg"')  # cut short
    _write(timeline, out)
    assert (out / "timeline.svg").is_file()
    (out / MANIFEST).write_text(json.dumps({"run": ["../x", "/etc/passwd", ".hidden", 3]}))
    (tmp_path / "x").write_text("outside")
    _write(timeline, out)
    assert (tmp_path / "x").read_text() == "outside"


def test_out_under_a_regular_file_is_a_user_error(tmp_path, timeline):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(UserError) as err:
        _write(timeline, blocker / "out")
    assert err.value.field == "--out"
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_out_that_is_a_file_is_a_user_error(tmp_path, timeline):
    blocker = tmp_path / "out"
    blocker.write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        _write(timeline, blocker)
    assert blocker.read_text() == "x"


def test_failure_at_commit_leaves_nothing_half_written(tmp_path, timeline):
    # A directory where trace.json should go makes one rename impossible: the writer must
    # notice before moving anything, so no output of this run appears at all.
    out = tmp_path / "out"
    (out / "trace.json").mkdir(parents=True)
    with pytest.raises(UserError) as err:
        _write(timeline, out)
    assert err.value.field == "--out"
    assert sorted(p.name for p in out.iterdir()) == ["trace.json"]
    assert _leftovers(tmp_path) == []


def test_bad_summary_fails_before_touching_out(tmp_path, timeline):
    out = tmp_path / "out"
    with pytest.raises(UserError) as err:
        write_all(
            out,
            timeline.events,
            timeline.memory,
            timeline.capacity_bytes,
            {"step_time_s": float("nan")},
        )
    assert err.value.field == "summary"
    assert not out.exists()


def test_the_same_run_writes_the_same_bytes_whatever_its_wall_time(tmp_path, timeline):
    """summary.json and trace.json carried sim_wall_s, the seconds the simulation took on this
    machine: two runs of one scenario wrote different files. The files leave it out."""
    files = []
    for index, wall in enumerate((0.37, 0.39)):
        summary = {**timeline.summary, "sim_wall_s": wall}
        out = write_all(tmp_path / str(index), timeline.events, timeline.memory, timeline.capacity_bytes,
                        summary, timeline.rank_labels, "1F1B test")  # fmt: skip
        files.append({name: path.read_bytes() for name, path in out.items()})
    assert files[0].keys() == files[1].keys() and "trace.json" in files[0]
    for name in files[0]:
        assert files[0][name] == files[1][name], name
    assert "sim_wall_s" not in json.loads(files[0]["summary.json"])
    assert "sim_wall_s" not in json.loads(files[0]["trace.json"])["otherData"]


def test_gzip_trace_is_the_json_trace_in_one_gzip_member(tmp_path, timeline):
    """ui.perfetto.dev reads a gzip file as the trace inside it, one member (google/perfetto
    #584, #847; multi-member gzip is not read, #872): trace.json.gz must decompress to exactly
    the bytes trace.json holds, in one member, and the same run must write the same bytes
    (no file name or time in the header, RFC 1952 MTIME 0)."""
    import gzip
    import zlib

    plain = _write(timeline, tmp_path / "plain")["trace.json"].read_bytes()
    packed = [_write(timeline, tmp_path / str(i), gzip_trace=True) for i in range(2)]
    assert "trace.json" not in packed[0]
    data = [p["trace.json.gz"].read_bytes() for p in packed]
    assert data[0] == data[1]
    assert data[0][:2] == b"\x1f\x8b" and data[0][4:8] == b"\0\0\0\0"  # gzip magic, MTIME 0
    assert gzip.decompress(data[0]) == plain
    member = zlib.decompressobj(wbits=31)
    assert member.decompress(data[0]) == plain and member.unused_data == b""  # one member
    assert len(data[0]) < len(plain) / 5


def test_one_trace_form_replaces_the_other(tmp_path, timeline):
    """An earlier run's trace.json must not stay beside this run's trace.json.gz (or the other
    way round): the directory would show two runs' traces."""
    out = tmp_path / "out"
    _write(timeline, out)
    _write(timeline, out, gzip_trace=True)
    assert (out / "trace.json.gz").is_file() and not (out / "trace.json").exists()
    _write(timeline, out)
    assert (out / "trace.json").is_file() and not (out / "trace.json.gz").exists()


def test_trace_size_note_from_a_million_events(tmp_path):
    from simcluster.output.trace_size import NOTE_EVENTS, trace_size_note

    path = tmp_path / "trace.json"
    path.write_bytes(b"x" * 2048)
    assert trace_size_note(path, NOTE_EVENTS - 1) is None
    note = trace_size_note(path, NOTE_EVENTS)
    assert f"{NOTE_EVENTS:,} events (2.00 KiB)" in note and "trace_processor --httpd" in note
    assert "--gzip-trace" in note
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(b"x")
    assert "--gzip-trace" not in trace_size_note(gz, NOTE_EVENTS)


def test_all_ranks_note_from_256_gpus():
    from simcluster.output.trace_size import NOTE_GPUS, all_ranks_note

    assert all_ranks_note(NOTE_GPUS - 1) is None
    assert all_ranks_note(2048).startswith("simulating all 2,048 GPUs one by one")


def test_progress_names_each_part_under_way_and_counts_it_done(tmp_path, timeline):
    # DeepSeek-V3 on 2,048 GPUs wrote its 171k events for 20 s with nothing on screen after the
    # simulation's own progress; run now shows these steps (a bar after 1 s, piped lines after 10)
    from simcluster.output.writer import WRITE_STEPS

    calls = []
    _write(timeline, tmp_path / "out", progress=lambda name="", cost=1.0, count=1: calls.append((name, count)))
    named = [name for name, count in calls if count == 0]
    assert named == ["timeline.png", "memory.png and breakdown.png", "trace.json", "events.csv and .parquet",
                     "the files, atomically"]  # fmt: skip
    assert sum(count for _, count in calls) == WRITE_STEPS == len(named)
