"""``simcluster compare``: scenarios and variants side by side.

Reference for the verdict: ZB-H1 keeps 1F1B's memory and shrinks its bubble from
(p-1)(F+B+W) to (p-1)(F+B-W) (Qi et al. 2023, Zero Bubble Pipeline Parallelism, Sec. 3), so
against 1F1B the part of the step that changes most is the idle (bubble) time.
"""

from __future__ import annotations

import json

import pytest
import yaml
from engine_helpers import pipeline_scenario, run

from simcluster.commands.compare import shared_overrides, short_labels, split_variant


@pytest.fixture
def pipe_file(tmp_path):
    path = tmp_path / "pipe.yaml"
    path.write_text(yaml.safe_dump(pipeline_scenario(4, 8, "1f1b")))
    return str(path)


def test_variants_are_split_and_labelled_by_their_overrides():
    assert split_variant("a.yaml@parallel.tp=2@training.micro_batch=2") == (
        "a.yaml", ["parallel.tp=2", "training.micro_batch=2"]
    )
    assert short_labels(["s", "s@parallel.tp=2", "t@parallel.tp=2"]) == ["s", "parallel.tp=2", "t@parallel.tp=2"]
    # overrides every variant shares are left out of the labels
    assert short_labels(["s@a=1@b=2", "s@a=1@b=3", "s@a=1"]) == ["b=2", "b=3", "s"]
    assert shared_overrides(["s@a=1@b=2", "s@a=1@b=3", "s@a=1"]) == ["a=1"]
    assert shared_overrides(["s@a=1", "t@a=1"]) == []


def test_each_column_is_the_run_of_its_scenario(cli, pipe_file):
    r = cli("compare", pipe_file, f"{pipe_file}@parallel.schedule=zb-h1", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    plain, zb = doc["scenarios"]
    assert zb["label"] == "parallel.schedule=zb-h1"
    expected = run(pipeline_scenario(4, 8, "zb-h1")).summary
    assert zb["step_time_s"] == expected["step_time_s"]
    assert zb["breakdown_s"] == expected["time_breakdown_s"]["per_stage"][expected["time_breakdown_s"]["stage"]]
    for rec in (plain, zb):
        assert sum(rec["breakdown_s"].values()) == pytest.approx(rec["step_time_s"], rel=1e-9)
    assert zb["tokens_per_s_per_gpu"] > plain["tokens_per_s_per_gpu"]


def test_table_names_the_part_that_moved_most(cli, pipe_file):
    r = cli("compare", pipe_file, f"{pipe_file}@parallel.schedule=zb-h1")
    assert r.code == 0, r.err
    assert "largest change is idle (bubble, waits)" in " ".join(r.out.split())


def test_out_writes_the_three_files(cli, pipe_file, tmp_path):
    out = tmp_path / "cmp"
    r = cli("compare", pipe_file, f"{pipe_file}@training.micro_batch=2", "--out", str(out))
    assert r.code == 0, r.err
    rows = (out / "compare.csv").read_text().splitlines()
    assert len(rows) == 3 and "gemm_s" in rows[0] and "idle_s" in rows[0]
    assert json.loads((out / "compare.json").read_text())["scenarios"][1]["label"] == "training.micro_batch=2"
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, needle",
    [
        ((), "at least two"),
        (("@parallel.tp=2",), "no scenario before"),
        (("{f}@parallel.tp=3",), "parallel"),
        (("{f}@parallel.nonsense=1",), "parallel.nonsense"),
    ],
)
def test_bad_input_is_one_line_with_status_2(cli, pipe_file, args, needle):
    r = cli("compare", pipe_file, *(a.format(f=pipe_file) for a in args))
    assert r.code == 2
    assert needle in r.err and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1
