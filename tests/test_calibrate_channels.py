"""The CTA sweep of ``calibrate`` (``efficiency.channel_busbw``): an all-reduce on NCCL
communicators held to 1, 2, 4, 8 CTAs. Its measurement needs NCCL (gloo has no CTAs), so on these
machines the tests check what is testable without a GPU: when the step runs, how its rows become
the profile's curve, and that a CPU profile keeps no curve."""

from __future__ import annotations

import pytest
import yaml

from calibrate.busbw import collective_record
from calibrate.channels import CHANNELS, channel_curve, unsupported
from calibrate.profile_writer import Machine, Measurements, build_profile
from simcluster.hardware import profile_from_dict
from simcluster.nccl_ctas import cap_GBps

MiB = 2**20
# jiajun-c/AI-infra-LearningNote comm/CCL/NCCL/config/README.md (commit cb02d22): a 128 MB
# all-reduce on 8 H200 at maxCTAs = minCTAs = 1, 2, 4, 8
H200_MS = {1: 6.262, 2: 3.169, 4: 1.759, 8: 1.003}


def _rows(times_ms: dict[int, float]) -> list[dict]:
    return [
        {"channels": n, **collective_record("all_reduce", "intra", 128 * MiB, t / 1e3, 8, 8, 1)}
        for n, t in times_ms.items()
    ]


def test_only_nccl_with_a_node_of_ranks_runs_the_sweep(monkeypatch):
    for var in ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"):
        monkeypatch.delenv(var, raising=False)
    assert "NCCL only" in unsupported("gloo", 8)
    assert "one rank per node" in unsupported("nccl", 1)
    assert unsupported("nccl", 8) is None
    # envConfigOverride: the variable would replace each communicator's own limits
    monkeypatch.setenv("NCCL_MAX_CTAS", "32")
    assert "NCCL_MAX_CTAS" in unsupported("nccl", 8)
    assert CHANNELS == (1, 2, 4, 8)


def test_the_published_sweep_reads_back_as_its_bus_bandwidths():
    # nccl-tests all-reduce busBw = algbw x 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)
    curve = channel_curve(_rows(H200_MS))
    expected = [round(128 * MiB / (t / 1e3) * 2 * 7 / 8 / 1e9, 2) for t in H200_MS.values()]
    assert curve == [[n, b] for n, b in zip(H200_MS, expected, strict=True)]
    # the note's own busBw column, which used 128 MB = 2**27 B: 37.51 / 74.11 / 133.54 / 234.15
    assert [b for _, b in curve] == pytest.approx([37.51, 74.11, 133.54, 234.15], abs=0.05)  # times to 1 us


def test_a_noisy_point_never_makes_the_curve_fall():
    curve = channel_curve(_rows({1: 6.0, 2: 3.2, 4: 3.3, 8: 1.0}))
    assert [b for _, b in curve] == sorted(b for _, b in curve)


def test_a_gpu_profile_takes_the_measured_curve_and_the_simulator_caps_by_it():
    data = build_profile(Measurements(channels=_rows(H200_MS)), {"backend": "nccl"}, "dgx-h200", None)
    assert "held to 1, 2, 4, 8 CTAs" in data["sources"]["efficiency.channel_busbw"]
    assert len(data["measured"]["channels"]) == 4
    prof = profile_from_dict(yaml.safe_load(yaml.safe_dump(data)))
    assert cap_GBps(prof.efficiency.channel_busbw, 1) == pytest.approx(37.51, abs=0.02)


def test_a_described_cpu_keeps_no_curve_from_the_profile_it_starts_from():
    # without --base the run describes its own machine, starting from a GPU profile's fields
    gemm = [{"m": 512, "n": 512, "k": 512, "dtype": "fp32", "time_s": 1e-3, "tflops": 0.268}]
    data = build_profile(Measurements(gemm=gemm), {"backend": "gloo"}, None, Machine("Test CPU", 2**34, 2))
    assert "channel_busbw" not in data["efficiency"]
    assert "efficiency.channel_busbw" not in data.get("sources", {})


def test_a_described_gpu_keeps_only_its_own_curve():
    gpu = Machine("Test GPU", 80 * 2**30, 8, sm_count=108)
    gemm = [{"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "time_s": 1e-3, "tflops": 137.4}]
    data = build_profile(Measurements(gemm=gemm), {"backend": "nccl"}, None, gpu)
    assert "channel_busbw" not in data["efficiency"]  # not H100's, which the description starts from
    data = build_profile(Measurements(gemm=gemm, channels=_rows(H200_MS)), {"backend": "nccl"}, None, gpu)
    assert data["efficiency"]["channel_busbw"][0][0] == 1
