"""``calibrate --dtypes``: the GEMM precisions a run times, and the shape cube's dtype."""

from __future__ import annotations

import pytest
import yaml

from calibrate.precisions import cube_dtype, parse_dtypes

torch = pytest.importorskip("torch")
from calibrate.cli import main  # noqa: E402


def test_dtypes_parse_in_order_once_each_and_the_cube_takes_bf16_if_timed():
    assert parse_dtypes("fp32, bf16,fp32") == ["fp32", "bf16"]
    assert cube_dtype(["fp32", "bf16"]) == "bf16" and cube_dtype(["fp32"]) == "fp32"


@pytest.mark.parametrize(("text", "says"), [("fp8", "unknown precision 'fp8'"), (",", "no precision given")])
def test_a_bad_dtypes_is_a_one_line_error_before_measuring(tmp_path, capsys, text, says):
    assert main(["--dtypes", text, "--quick", "--device", "cpu", "--out", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: --dtypes:") and says in err
    assert not (tmp_path / "p.yaml").exists()


def test_an_fp32_run_times_fp32_only_and_its_cube_in_fp32(tmp_path):
    """A CPU without native bf16 runs --dtypes fp32: no bf16 GEMM is timed, and the shape cube
    the profile carries is the fp32 one (calibrate/profile_writer._shape_cube)."""
    out = tmp_path / "p.yaml"
    assert main(["--dtypes", "fp32", "--quick", "--device", "cpu", "--out", str(out)]) == 0
    profile = yaml.safe_load(out.read_text())
    eff = profile["efficiency"]
    assert profile["sources"]["efficiency.gemm"].startswith("measured fp32 GEMMs")
    assert set(eff["gemm_shapes"]["tflops"]) == {"fp32"}
    assert eff["gemm_shapes"]["grid"] == [32, 64, 128]  # calibrate/shapes.py _CUBE_QUICK


def test_a_precision_far_slower_than_the_soaks_is_named_with_the_flag_that_skips_it():
    """soak.slow_dtype_note: at 20x the fp32 time (an AVX2 core's emulated bf16), the bf16
    grid's least time (5 calls a measurement at the probe's rate: soak.MIN_CALLS_PER_GEMM) is
    said with --dtypes fp32; a precision within 3x of the soak's, or a short grid, says nothing."""
    from calibrate.shapes import GemmShape
    from calibrate.soak import MIN_CALLS_PER_GEMM, slow_dtype_note

    shapes = [GemmShape(2048, 2048, 2048)] * 3  # 3 x 17.2 GFLOP
    note = slow_dtype_note("bf16", 1.5e9, "fp32", 30e9, shapes)
    seconds = MIN_CALLS_PER_GEMM * 3 * 2 * 2048**3 / 1.5e9  # 172 s
    assert note is not None and "20x slower than fp32" in note and "--dtypes fp32" in note
    assert f"at least {int(seconds // 60)}:{round(seconds % 60):02d}" in note
    assert slow_dtype_note("bf16", 12e9, "fp32", 30e9, shapes) is None  # 2.5x: native
    assert slow_dtype_note("bf16", 1.5e9, "fp32", 30e9, shapes[:0] + [GemmShape(64, 64, 64)]) is None


def test_the_probe_times_real_gemms_on_this_cpu():
    from calibrate.soak import probe_rate

    assert all(probe_rate(d, torch.device("cpu")) > 0 for d in ("fp32", "bf16"))
