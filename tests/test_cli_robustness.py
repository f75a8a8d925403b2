"""Robustness sweep of the CLIs (simcluster and python -m calibrate): each bad input found by
fuzzing is one line on stderr naming the field and the fix, exit code 2, no traceback."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tests.conftest import CliResult, make_scenario
from tests.test_scenario_errors import assert_one_line_error, write

FIX = Path(__file__).parent / "fixtures"
NOT_UTF8 = b"name: \xff\xfe bad\nmodel: {}\n"


@pytest.fixture
def calibrate():
    """Run ``python -m calibrate`` in-process; returns CliResult(code, out, err)."""
    from calibrate.cli import main

    def run(*argv: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse
                code = int(exc.code or 0)
        return CliResult(code, out.getvalue(), err.getvalue())

    return run


def not_utf8(tmp_path, name="bad.yaml"):
    path = tmp_path / name
    path.write_bytes(NOT_UTF8)
    return str(path)


# --- files that are not UTF-8 text, directories -----------------------------------------------
def test_scenario_not_utf8(cli, tmp_path):
    assert_one_line_error(cli("memory", not_utf8(tmp_path)), "scenario", "not UTF-8", "0xff")


def test_scenario_is_a_directory(cli, tmp_path):
    (tmp_path / "d.yaml").mkdir()
    assert_one_line_error(cli("memory", str(tmp_path / "d.yaml")), "scenario", "is a directory")


def test_hardware_profile_not_utf8(cli, tmp_path):
    path = not_utf8(tmp_path)
    assert_one_line_error(
        cli("memory", "llama3-8b-8xh100", "--hardware", path), "--hardware", "not UTF-8"
    )
    data = make_scenario(cluster={"hardware": path})
    assert_one_line_error(cli("memory", write(tmp_path, data)), "cluster.hardware", "not UTF-8")


def test_hardware_profile_is_a_directory(cli, tmp_path):
    assert_one_line_error(
        cli("memory", "llama3-8b-8xh100", "--hardware", str(tmp_path)), "--hardware", "directory"
    )


def test_hf_config_not_utf8(cli, tmp_path):
    data = make_scenario()
    data["model"] = {"hf_config": not_utf8(tmp_path, "config.json")}
    assert_one_line_error(cli("memory", write(tmp_path, data)), "model.hf_config", "not UTF-8")


def test_cases_file_not_utf8_or_directory(cli, tmp_path):
    assert_one_line_error(cli("validate", not_utf8(tmp_path)), "CASES", "not UTF-8")
    assert_one_line_error(cli("validate", str(tmp_path)), "CASES", "is a directory")


# --- python -m calibrate ----------------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_calibrate_timeout_not_finite(calibrate, tmp_path, value):
    res = calibrate("--out", str(tmp_path / "p.yaml"), "--timeout", value)
    assert_one_line_error(res, "--timeout", "positive number of seconds")


@pytest.mark.parametrize(
    "text, needle",
    [("model: {preset: x\n", "not valid YAML"), ("- a\n", "must be a YAML mapping"),
     ("schema_version: 1\nname: x\n", "missing field 'gpu'")],
)  # fmt: skip
def test_calibrate_base_malformed(calibrate, tmp_path, text, needle):
    base = tmp_path / "base.yaml"
    base.write_text(text)
    out = str(tmp_path / "p.yaml")
    # before any measuring starts
    assert_one_line_error(calibrate("--out", out, "--base", str(base)), "--base", needle)
    res = calibrate("import-nccl-tests", str(FIX / "nccl_reduce_scatter.json"), "--out", out,
                    "--base", str(base))  # fmt: skip
    assert_one_line_error(res, "--base", needle)


def test_calibrate_base_not_utf8(calibrate, tmp_path):
    res = calibrate("--out", str(tmp_path / "p.yaml"), "--base", not_utf8(tmp_path))
    assert_one_line_error(res, "--base", "not UTF-8")


def test_import_out_is_a_directory_or_unwritable(calibrate, tmp_path):
    log = str(FIX / "nccl_reduce_scatter.json")
    assert_one_line_error(calibrate("import-nccl-tests", log, "--out", str(tmp_path)), "--out")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = calibrate("import-nccl-tests", log, "--out", str(blocker / "p.yaml"))
    assert_one_line_error(res, "--out", "cannot write")


def test_import_log_not_utf8(calibrate, tmp_path):
    res = calibrate("import-nccl-tests", not_utf8(tmp_path, "x.txt"), "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(res, "LOG", "not UTF-8")


@pytest.mark.parametrize(
    "doc, needle",
    [({"results": [{"size": "x", "out_of_place": {"time": 1, "bus_bw": 1}}]}, "results[0].size"),
     ({"results": [{"size": 1e400, "out_of_place": {"time": 1, "bus_bw": 1}}]}, "results[0].size"),
     ({"results": [{"size": -8, "out_of_place": {"time": 1, "bus_bw": 1}}]}, "results[0].size"),
     ({"results": [], "config": {"devices": [1]}}, "config.devices[0]"),
     ({"results": [], "config": {"devices": "gpu0"}}, "config.devices")],
)  # fmt: skip
def test_import_json_report_malformed(calibrate, tmp_path, doc, needle):
    path = tmp_path / "all_reduce_perf.json"
    path.write_text(json.dumps(doc).replace("Infinity", "1e400"))
    res = calibrate("import-nccl-tests", str(path), "--gpus", "2", "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(res, needle)


def test_import_json_report_args_not_a_list(calibrate, tmp_path):
    path = tmp_path / "r.json"
    doc = {"args": 5, "config": "x", "results": [{"size": 8, "out_of_place": {"time": 1, "bus_bw": 1}}]}
    path.write_text(json.dumps(doc))
    res = calibrate("import-nccl-tests", str(path), "--op", "all_reduce", "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(res, "Rank", "--gpus")


@pytest.mark.parametrize("column, bad", [("time", "nan"), ("size", "-1048576")])
def test_import_text_log_non_numbers(calibrate, tmp_path, column, bad):
    lines = (FIX / "nccl_all_reduce_dgx_h100_current.txt").read_text().splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.strip().startswith("33554432"))
    tokens = lines[row].split()
    tokens[0 if column == "size" else 5] = bad
    lines[row] = "  ".join(tokens)
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text("\n".join(lines) + "\n")
    res = calibrate("import-nccl-tests", str(path), "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(res, f":{row + 1}:", f"{column} '{bad}' is not a number")


@pytest.mark.parametrize(
    "events, needle",
    [([1, 2], "traceEvents[0]"),
     ([{"ph": "X", "cat": "kernel", "name": "gemm", "ts": "a", "dur": 1}], "traceEvents[0].ts"),
     ([{"ph": "X", "cat": "kernel", "name": "gemm", "dur": 1}], "traceEvents[0].ts")],
)  # fmt: skip
def test_compare_trace_malformed_events(calibrate, tmp_path, events, needle):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert_one_line_error(calibrate("compare-trace", str(path), "llama3-8b-8xh100"), needle)


def test_compare_trace_not_utf8(calibrate, tmp_path):
    res = calibrate("compare-trace", not_utf8(tmp_path, "t.json"), "llama3-8b-8xh100")
    assert_one_line_error(res, "KINETO_TRACE", "not UTF-8")


