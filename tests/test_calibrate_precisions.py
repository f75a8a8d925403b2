"""``calibrate --dtypes``: the GEMM precisions a run times, and the shape cube's dtype."""

from __future__ import annotations

import pytest
import yaml

from calibrate.precisions import cube_dtype, default_dtypes, parse_dtypes

torch = pytest.importorskip("torch")
from calibrate.cli import main  # noqa: E402


def test_dtypes_parse_in_order_once_each_and_the_cube_takes_bf16_if_timed():
    assert parse_dtypes("fp32, bf16,fp32") == ["fp32", "bf16"]
    # the scenario's spellings of training.precision (simcluster/spellings.py), without case
    assert parse_dtypes("BF16,float32,Half,bfloat16") == ["bf16", "fp32", "fp16"]
    assert default_dtypes("cuda", fp8=True) == ["bf16", "fp16", "fp32", "fp8"]
    assert default_dtypes("cuda") == ["bf16", "fp16", "fp32"] and default_dtypes("cpu", fp8=True) == ["bf16", "fp32"]
    assert cube_dtype(["fp32", "bf16"]) == "bf16" and cube_dtype(["fp32"]) == "fp32"
    # the cube describes efficiency.gemm's curve, which fp8's is not: no cube from fp8 alone
    assert cube_dtype(["fp8", "fp32"]) == "fp32" and cube_dtype(["fp8"]) is None


@pytest.mark.parametrize(("text", "says"), [("int8", "unknown precision 'int8'"), (",", "no precision given")])
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


def test_an_fp8_run_times_scaled_mm_gemms_and_the_simulator_runs_fp8_at_their_rates(tmp_path):
    """--dtypes fp32,fp8 on gloo's CPU: FP8 GEMMs timed for real through torch._scaled_mm
    (E4M3, per-tensor scales, bf16 out) give efficiency.gemm_fp8 beside the fp32
    efficiency.gemm, and an fp8 scenario's GEMMs run at the timed rates: the efficiency at a
    timed FLOP count is the median rate timed there over the fp8 peak (the best timed)."""
    import statistics

    from simcluster.compute import KernelModel
    from simcluster.hardware import load_profile

    out = tmp_path / "p.yaml"
    assert main(["--dtypes", "fp32,fp8", "--quick", "--device", "cpu", "--out", str(out)]) == 0
    profile = yaml.safe_load(out.read_text())
    rows = [r for r in profile["measured"]["gemm"] if r["dtype"] == "fp8"]
    assert rows and {r["dtype"] for r in profile["measured"]["gemm"]} == {"fp32", "fp8"}
    assert profile["sources"]["efficiency.gemm"].startswith("measured fp32 GEMMs")
    assert profile["sources"]["efficiency.gemm_fp8"].startswith("measured fp8 GEMMs")
    peak = profile["gpu"]["peak_tflops"]["fp8"]
    assert peak == max(r["tflops"] for r in rows)
    km = KernelModel(load_profile(str(out)), "fp8")
    assert km.gemm_dtype == "fp8"
    flops = 2.0 * rows[-1]["m"] * rows[-1]["n"] * rows[-1]["k"]
    timed = statistics.median(r["tflops"] for r in rows if 2.0 * r["m"] * r["n"] * r["k"] == flops)
    assert km.gemm_efficiency(flops) == pytest.approx(timed / peak, rel=1e-9)
    # the MoE grid's grouped expert GEMMs in FP8 too: the per-expert loop of _scaled_mm calls
    # (TransformerEngine's GroupedLinear), each expert's rows padded to 16 (its Fp8Padding),
    # and an fp8 layer's experts take the fp8 rows' ratio, not the fp32 ones'
    moe = profile["measured"]["moe"]
    fp8_rows = [r for r in moe["grouped_gemm"] if r["dtype"] == "fp8"]
    assert fp8_rows and {r["impl"] for r in fp8_rows} == {"loop"}
    assert all(r["max_tokens"] % 16 == 0 and r["time_s"] > 0 and r["singles_s"] > 0 for r in fp8_rows)
    assert any("grouped_mm not timed in fp8" in n for n in moe["notes"])
    assert "in fp8 a loop of torch._scaled_mm" in profile["sources"]["measured.moe"]
    row = fp8_rows[0]
    same = [r for r in fp8_rows if (r["experts"], r["n"], r["k"], r["tokens_per_expert"]) ==
            (row["experts"], row["n"], row["k"], row["tokens_per_expert"])]  # fmt: skip
    ratio = km.moe.grouped_ratio("loop", row["tokens_per_expert"], row["experts"], row["n"], row["k"], "fp8")
    assert ratio == pytest.approx(statistics.median(r["ratio"] for r in same), rel=1e-9)


def test_fp8_gemm_operands_are_tn_and_padded_to_16():
    """cuBLASLt's FP8 GEMM layout (A row-major, B column-major) for every role, each dimension
    rounded up to 16 as TransformerEngine pads it; the result is bf16."""
    import torch

    from calibrate.gemm import operands
    from calibrate.shapes import GemmShape

    for role in ("", "fwd", "dgrad", "wgrad"):
        a, b, out = operands(GemmShape(20, 33, 48, role), "fp8", torch.device("cpu"))
        assert a.shape == (32, 48) and a.is_contiguous() and b.shape == (48, 48) and b.t().is_contiguous()
        assert a.dtype == b.dtype == torch.float8_e4m3fn and out.dtype == torch.bfloat16 and out.shape == (32, 48)


def test_fp8_takes_the_e4m3_format_of_the_gpus_units():
    """MI300 (gfx942, CDNA 3) does FP8 in E4M3FNUZ only (ROCm HIP reference, "FP8 Numbers":
    gfx940/gfx941/gfx942 FNUZ yes, OCP no); MI350 (gfx950), Hopper and Ada in OCP's E4M3FN.
    A _scaled_mm on FNUZ operands runs (here on the CPU), so an MI300 is timed, not refused."""
    import torch

    from calibrate.gemm import e4m3_for, fp8_format

    assert e4m3_for("gfx942:sramecc+:xnack-") == e4m3_for("gfx942") == torch.float8_e4m3fnuz
    assert e4m3_for("gfx950") == e4m3_for("gfx90a") == e4m3_for(None) == torch.float8_e4m3fn
    assert fp8_format(torch.device("cpu")) == torch.float8_e4m3fn
    a = torch.randn(32, 16).to(torch.float8_e4m3fnuz)
    b = torch.randn(16, 16).to(torch.float8_e4m3fnuz).t()
    one = torch.ones(())
    try:
        out = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except RuntimeError as err:
        # the CPU build hands _scaled_mm to oneDNN on CPUs with AVX512-FP16/AMX (Sapphire
        # Rapids), whose tensor view takes OCP E4M3 only; a GPU's FNUZ path is ROCm's
        if "itensor_view_from_dense" not in str(err):
            raise
        pytest.skip(f"this CPU's oneDNN _scaled_mm takes no FNUZ operands: {err}")
    assert out.shape == (32, 16) and out.dtype == torch.bfloat16


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
