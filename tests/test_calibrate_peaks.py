"""The peak a calibrated profile divides by: the datasheet's for a GPU a shipped profile
describes, the best GEMM timed for a device none does.

MFU is model FLOP/s over the theoretical peak (Chowdhery et al. 2022, PaLM, appendix B), the
figure papers and NVIDIA's performance tables report. A run on an H100 times its best BF16 GEMM
at ~0.8 of the 989.4 TFLOP/s datasheet (dense SXM5; 797.5 TFLOP/s for 8192^3, the sources of
hardware/dgx-h100.yaml), so a profile that took that best rate as its peak would report every
MFU 1.25 times too high.
"""

from __future__ import annotations

import pytest
import yaml

from calibrate.profile_writer import Machine, Measurements, build_profile
from simcluster import simulate
from simcluster.hardware import profile_from_dict
from simcluster.scenario import scenario_from_dict

H100 = "NVIDIA H100 80GB HBM3"  # torch.cuda.get_device_name on a DGX H100
# NVIDIA H100 SXM5 datasheet, dense (hardware/dgx-h100.yaml)
SHEET = {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}


def _gemm(dtype: str, size: int, tflops: float) -> dict:
    flops = 2.0 * size**3
    return {"m": size, "n": size, "k": size, "dtype": dtype, "time_s": flops / tflops / 1e12, "tflops": tflops}


def _profile(name: str, sms: int | None) -> dict:
    rows = [_gemm("bf16", 4096, 600.0), _gemm("bf16", 8192, 700.0), _gemm("fp32", 8192, 50.0)]
    machine = Machine(name, 80 * 2**30, 8, sms)
    return build_profile(Measurements(gemm=rows), {"backend": "nccl"}, None, machine)


def test_a_shipped_gpu_keeps_its_datasheet_peak_and_measured_fractions_of_it():
    data = _profile(H100, 132)
    assert data["gpu"]["peak_tflops"] == SHEET
    assert max(e for _, e in data["efficiency"]["gemm"]) == pytest.approx(700.0 / 989.4)
    assert "the datasheet's, from dgx-h100" in data["sources"]["gpu.peak_tflops"]
    # the precisions not timed keep the datasheet's peak: an FP8 run is simulated at FP8's
    # (compute.KernelModel.gemm_dtype falls back to bf16 without one), a TF32 one at TF32's
    assert "fp16, fp8, tf32: the datasheet's, from dgx-h100 (not timed)" in data["sources"]["gpu.peak_tflops"]


def test_a_device_no_profile_describes_keeps_its_best_timed_rate():
    data = _profile("AMD EPYC 7B13", None)
    assert data["gpu"]["peak_tflops"] == {"bf16": 700.0, "fp32": 50.0}
    assert max(e for _, e in data["efficiency"]["gemm"]) == pytest.approx(1.0)


def test_mfu_on_a_calibrated_h100_is_a_fraction_of_the_datasheet_peak(tmp_path):
    """Same measurements, same step time; only the MFU's denominator is the datasheet's."""
    path = tmp_path / "h100.yaml"
    path.write_text(yaml.safe_dump(_profile(H100, 132)))
    scenario = scenario_from_dict(
        {
            "model": {"layers": 2, "hidden": 1024, "heads": 8, "vocab": 4096},
            "cluster": {"hardware": str(path), "gpus": 8},
            "training": {"seq_len": 1024, "global_batch": 8, "precision": "bf16"},
        }
    )
    s = simulate(scenario).summary
    assert s["mfu"] == pytest.approx(s["model_flops_per_step"] / (s["step_time_s"] * 8 * 989.4e12))


def test_a_base_whose_peak_a_new_run_beats_is_lifted_not_a_failed_run(tmp_path):
    """Recalibrating on --base of an earlier CPU profile (its peak that run's best GEMM): GEMMs
    timed 1.3 times faster lift the peak to them; the curve, a fraction of the peak in (0, 1],
    could not hold them, and the run used to end in a schema error after measuring."""
    base = tmp_path / "cpu.yaml"
    base.write_text(yaml.safe_dump(_profile("AMD EPYC 7B13", None)))
    faster = [_gemm("bf16", 4096, 780.0), _gemm("bf16", 8192, 910.0), _gemm("fp32", 8192, 45.0)]
    data = build_profile(Measurements(gemm=faster), {"backend": "gloo"}, str(base), None)
    assert data["gpu"]["peak_tflops"] == {"bf16": 910.0, "fp32": 50.0}  # fp32 stays: not beaten
    assert max(e for _, e in data["efficiency"]["gemm"]) == pytest.approx(1.0)
    assert "lifted to the best GEMM timed where it was faster: bf16 700 -> 910" in data["sources"]["gpu.peak_tflops"]


def test_a_calibrated_profile_records_the_measured_gpu_generation_and_host_cpu():
    """NCCL's protocol caps follow the GPU generation and the host CPU (network/nccl_caps.py):
    a profile written from the measured machine carries what rank 0 read, not the fallback
    base's DGX H100 figures (9.0, Intel); what was not read is left out, with its source."""
    rows = [_gemm("bf16", 4096, 600.0)]
    measured = Machine(H100, 80 * 2**30, 8, 132, compute_capability=9.0, host_cpu="amd")
    data = build_profile(Measurements(gemm=rows), {"backend": "nccl"}, None, measured)
    assert (data["gpu"]["compute_capability"], data["node"]["host_cpu"]) == (9.0, "amd")
    assert "calibrate" in data["sources"]["node.host_cpu"]
    cpu = build_profile(Measurements(gemm=rows), {"backend": "gloo"}, None, Machine("AMD EPYC 7B13", None, 2))
    assert "compute_capability" not in cpu["gpu"] and "host_cpu" not in cpu["node"]
    assert "node.host_cpu" not in cpu["sources"] and "gpu.compute_capability" not in cpu["sources"]
    assert profile_from_dict(cpu).gpu.compute_capability is None
