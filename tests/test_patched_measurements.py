"""A scenario that changes a profile's field carries the profile's measurements to the change.

A measurement (nccl-tests table, timed GEMM, HBM stream rate, published attention curve) was
taken on the stock machine. When a scenario asks "what if the NICs were half as fast"
(``cluster.nic_gbps``, or any field through ``cluster.profile``), the measurement must move with
the change as the model does, not cancel it. Before HardwareProfile.as_measured, a collective
table's measured/modelled ratio was taken against the *patched* model, so at the table's own
geometry the patched field dropped out: half the NIC bandwidth left a 2-node all-reduce on
aws-p5 exactly as fast as before. Found by tools/metamorphic.py (faster NVLink made a ZeRO-3
step 9% slower on aws-p5).

Sources of the tables: the aws-p5 profile's measured.collectives (crazyguitar/aws-gpu-
communication-benchmark, nccl-tests all_reduce_perf on ml.p5.48xlarge; see tests/test_aws_p5.py).
"""

import pytest

from simcluster.compute import KernelModel
from simcluster.hardware import load_profile, profile_from_dict
from simcluster.network import collective_time
from simcluster.topology import build_cluster


def _time(profile, op: str, nbytes: float, gpus: int) -> float:
    cluster = build_cluster(profile, gpus, profile.node.gpus_per_node)
    return collective_time(op, nbytes, cluster, list(range(gpus)))


def _without_tables(overrides=None):
    raw = load_profile("aws-p5").model_dump()
    raw["measured"] = {}
    return profile_from_dict(raw, overrides)


@pytest.mark.parametrize("gpus, nbytes", [(16, 8 * 2**30), (64, 2**30), (128, 64 * 2**20)])
def test_half_the_nic_bandwidth_slows_a_measured_all_reduce_as_the_model_does(gpus, nbytes):
    stock = _time(load_profile("aws-p5"), "all_reduce", nbytes, gpus)
    halved = _time(load_profile("aws-p5", {"nic_gbps": 200}), "all_reduce", nbytes, gpus)
    # at a measured geometry: target = table x model(patched) / model(stock)
    model_ratio = _time(_without_tables({"nic_gbps": 200}), "all_reduce", nbytes, gpus) / _time(
        _without_tables(), "all_reduce", nbytes, gpus
    )
    assert halved / stock == pytest.approx(model_ratio, rel=1e-9)
    assert halved / stock > 1.3  # it was exactly 1.0: the table absorbed the change


def test_an_unpatched_profile_is_its_own_reference():
    p = load_profile("aws-p5")
    assert p.as_measured is p
    patched = load_profile("aws-p5", {"nic_gbps": 200})
    assert patched.as_measured.node.nic_gbps == 400 and patched.node.nic_gbps == 200


def test_a_patch_that_brings_its_own_measurements_describes_the_patched_machine():
    p = load_profile("aws-p5", patch={"node": {"nic_gbps": 200}, "measured": {"collectives": []}})
    assert p.as_measured is p


def _calibrated_h100(patch=None):
    raw = load_profile("dgx-h100").model_dump()
    raw["measured"] = {
        # 8192^3 at 720 TFLOP/s (the order of SemiAnalysis's H100 do_bench figure), 2.9 TB/s copy
        "gemm": [{"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "time_s": 2 * 8192**3 / 720e12}],
        "memory": [{"bytes_per_s": 2.9e12}],
    }
    return profile_from_dict(raw, patch=patch)


def test_a_timed_gemm_scales_with_a_patched_peak():
    peaks = load_profile("dgx-h100").gpu.peak_tflops
    stock = KernelModel(_calibrated_h100(), "bf16")
    faster = KernelModel(_calibrated_h100({"gpu": {"peak_tflops": {k: 2 * v for k, v in peaks.items()}}}), "bf16")
    launch = stock.launch_s
    t0 = stock.gemm(8192, 8192, 8192) - launch
    assert t0 == pytest.approx(2 * 8192**3 / 720e12 * stock.slowdown, rel=1e-9)
    assert faster.gemm(8192, 8192, 8192) - launch == pytest.approx(t0 / 2, rel=1e-9)
    # an untimed shape read off the measured curve (a fraction of the stock peak) too
    assert faster.gemm(4096, 8192, 8192) - launch == pytest.approx((stock.gemm(4096, 8192, 8192) - launch) / 2, rel=1e-9)


def test_a_measured_stream_rate_scales_with_a_patched_hbm():
    stock = KernelModel(_calibrated_h100(), "bf16")
    faster = KernelModel(_calibrated_h100({"gpu": {"hbm_tbps": 3.35 * 1.5}}), "bf16")
    assert stock.hbm_bytes_per_s == 2.9e12
    assert faster.hbm_bytes_per_s == pytest.approx(2.9e12 * 1.5, rel=1e-12)


def test_published_attention_curves_scale_with_a_patched_peak():
    peaks = load_profile("dgx-h100").gpu.peak_tflops
    stock = KernelModel(load_profile("dgx-h100"), "bf16", "fa3")
    faster = KernelModel(load_profile("dgx-h100", patch={"gpu": {"peak_tflops": {"bf16": peaks["bf16"] * 1.5}}}), "bf16", "fa3")
    args = (1, 8192, 8192, 32, 128, 128, True, False)
    launch = stock.launch_s
    assert faster.attention(*args) - launch == pytest.approx((stock.attention(*args) - launch) / 1.5, rel=1e-9)


def test_a_profile_completed_by_its_patch_is_its_own_reference():
    raw = load_profile("dgx-h100").model_dump()
    del raw["node"]["nic_gbps"]  # incomplete alone: the scenario's patch supplies it
    p = profile_from_dict(raw, patch={"node": {"nic_gbps": 400}})
    assert p.as_measured is p and p.node.nic_gbps == 400
