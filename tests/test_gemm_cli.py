"""``simcluster gemm``: the kernel model's GEMM times, shape by shape, beside their parts.

Anchors: XLA's sm_90 table (tensorflow/tensorflow third_party/xla/xla/service/gpu/model/
matmul_interpolator_data.h, bf16, b = 1) times 4096x4096x1024 at 677.4 TFLOP/s and
1024x4096x4096 at 738.5 in bursts; the Hopper profiles take every GEMM at 0.95 of its burst
rate (an 8x H200 node sustains 755 TFLOP/s, stas00/ml-engineering).
"""

from __future__ import annotations

import json

import pytest
import yaml

from simcluster.compute import KernelModel
from simcluster.errors import UserError
from simcluster.hardware import load_profile
from tests.test_scenario_errors import assert_one_line_error


def _rows(cli, *argv):
    res = cli("gemm", *argv, "--json")
    assert res.code == 0, res.err
    return json.loads(res.out)


def test_the_rows_are_the_kernel_models_times(cli):
    rows = _rows(cli, "16384,4096,1024", "8192,8192,8192", "--hardware", "dgx-h100")
    km = KernelModel(load_profile("dgx-h100"), "bf16")
    for r in rows:
        assert r["time_s"] == km.gemm(r["m"], r["n"], r["k"])
        assert r["tflops"] == pytest.approx(r["flops"] / r["time_s"] / 1e12)
        assert r["dtype"] == "bf16" and not r["timed"]


def test_the_table_says_how_its_columns_make_the_time(cli):
    """The line under the table is the formula the rows satisfy: time = 2MNK / (peak x
    min(curve x shape, cap)) + the launch gap (dgx-h100: efficiency.kernel_launch_us 4.0), so a
    user can redo a row; the datasheet peak is H100 SXM's dense BF16 989.4 TFLOP/s."""
    res = cli("gemm", "16384,4096,1024", "1024,4096,16384", "--hardware", "dgx-h100")
    assert res.code == 0, res.err
    assert "time = 2MNK / (peak x min(size curve x shape, cap)) + the 4.0 us launch gap" in " ".join(res.out.split())
    for r in _rows(cli, "16384,4096,1024", "1024,4096,16384", "--hardware", "dgx-h100"):
        eff = min(r["curve"] * r["shape_factor"], r["cap"])
        assert r["time_s"] == pytest.approx(2 * r["m"] * r["n"] * r["k"] / (989.4e12 * eff) + 4.0e-6, rel=1e-9)
        assert r["of_peak"] == pytest.approx(r["flops"] / r["time_s"] / 989.4e12, rel=1e-9)


def test_a_short_k_shows_its_shape_factor_and_runs_below_a_long_one(cli):
    short, long_k = _rows(cli, "4096,4096,1024", "1024,4096,4096")
    assert short["flops"] == long_k["flops"] and short["curve"] == long_k["curve"]
    assert short["shape_factor"] < 0.95 < 1.0 < long_k["shape_factor"]
    # the kernel alone (launch gap off) against XLA's burst rates at the sustained share: within
    # 6% (the curve's 3.44e10 point is the mean of two of the level's shapes, not its median)
    launch = 4e-6
    for row, burst in ((short, 677.4), (long_k, 738.5)):
        device = row["flops"] / (row["time_s"] - launch) / 1e12
        assert device == pytest.approx(0.95 * burst, rel=0.06)


def test_a_timed_shape_is_marked_and_runs_at_its_time(cli, tmp_path):
    profile = load_profile("dgx-h100").model_dump(mode="json")
    profile["measured"] = {"gemm": [{"dtype": "bf16", "m": 4096, "n": 4096, "k": 1024, "time_s": 80e-6}]}
    path = tmp_path / "timed.yaml"
    path.write_text(yaml.safe_dump(profile))
    (row,) = _rows(cli, "4096,4096,1024", "--hardware", str(path))
    assert row["timed"] and row["time_s"] == pytest.approx(80e-6 + 4e-6)
    table = cli("gemm", "4096,4096,1024", "--hardware", str(path))
    assert "note" in table.out and "timed (calibrated)" in table.out


def test_the_note_column_shows_only_when_a_row_has_one(cli):
    """Datasheet shapes carry no note: the column would be an empty one widening the table."""
    res = cli("gemm", "16384,4096,1024", "--hardware", "dgx-h100")
    assert res.code == 0, res.err
    header = next(line for line in res.out.splitlines() if "M x N x K" in line)
    assert "cap" in header and "note" not in header


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (("4096,4096",), "shapes"),
        (("4096,0,1024",), "shapes"),
        (("4096,4096,1024", "--precision", "fp8", "--hardware", "dgx-a100"), "--precision"),
        (("4096,4096,1024", "--precision", "int4"), "--precision"),
        (("4096,4096,1024", "--count", "0"), "--count"),
        (("4096,4096,1024", "--hardware", "dgx-h900"), "--hardware"),
    ],
)
def test_bad_arguments_are_one_line_errors(cli, argv, field):
    assert_one_line_error(cli("gemm", *argv), field)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("-4096,4096,4096",), "M must be a positive integer, got -4096"),
        (("-4096x4096x1024",), "M must be a positive integer, got -4096"),
        (("4096,-1,4096",), "N must be a positive integer, got -1"),
        (("4096,4096,0",), "K must be a positive integer, got 0"),
        (("4096,4096,1024", "-5,1,1"), "M must be a positive integer, got -5"),
        (("--json", "-1,2,3"), "M must be a positive integer, got -1"),
        # three bare numbers are one shape, so a minus sign in any of them names its field
        (("-4096", "4096", "4096"), "M must be a positive integer, got -4096"),
        (("4096", "-1", "4096"), "N must be a positive integer, got -1"),
    ],
)
def test_a_negative_shape_is_a_one_line_error_naming_its_field(cli, argv, needle):
    # before, argparse took '-4096,4096,4096' for an unknown option: "the following arguments
    # are required: M,N,K", or "unrecognized arguments" after a good shape
    assert_one_line_error(cli("gemm", *argv), "shapes", needle)


def test_three_bare_numbers_are_one_shape(cli):
    (row,) = _rows(cli, "4096", "2048", "1024")
    assert (row["m"], row["n"], row["k"]) == (4096, 2048, 1024)


def test_shapes_are_read_as_the_table_prints_them():
    # the table heads its column "M x N x K"; that spelling is an input as well as M,N,K
    from simcluster.units import parse_gemm_shape

    assert parse_gemm_shape("4096x2048x1024", "shapes") == (4096, 2048, 1024)
    assert parse_gemm_shape("8192 x 1024 x 512", "shapes") == (8192, 1024, 512)
    assert parse_gemm_shape("16384,4096,1024", "shapes") == (16384, 4096, 1024)
    with pytest.raises(UserError, match="is not M,N,K"):
        parse_gemm_shape("4096x4096", "shapes")


def test_the_help_usage_is_short_names(capsys):
    """The usage line names values as run's does (H for a profile), not argparse's HARDWARE,
    PRECISION and COUNT."""
    from simcluster.cli import main

    with pytest.raises(SystemExit):
        main(["gemm", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "[--hardware H] [--precision P] [--count N]" in text
