"""Calibrated compute/communication interference: a measured GEMM rate under in-flight
all-reduces becomes ``efficiency.collective_sms``, the SMs the simulator's rule takes from compute.

The rule (``simcluster/engine/interference.py``): compute next to an in-flight collective runs at
(sm_count - collective_sms) / sm_count of its speed. The shipped H100 value, 24 SMs, is NCCL's
CTA count next to a GEMM in NVIDIA developer forum thread 337991; a GEMM measured at
108/132 = 0.818 of its standalone speed must read back as those 24 SMs.
"""

from __future__ import annotations

import pytest
import yaml

from calibrate.profile_writer import Machine, Measurements, build_profile, collective_sms
from simcluster.engine.interference import SmShare
from simcluster.hardware import profile_from_dict

H100_SMS = 132  # NVIDIA H100 SXM5 datasheet


def _row(rate: float) -> dict:
    alone = 1e-3
    return {
        "op": "all_reduce", "bytes": 1 << 28, "gpus": 8, "m": 8192, "n": 8192, "k": 8192,
        "dtype": "bf16", "gemm_alone_s": alone, "gemm_overlapped_s": alone / rate,
        "collective_s": 2e-3, "collectives_in_flight": 3, "rate": rate,
    }  # fmt: skip


def test_the_forum_threads_rate_reads_back_as_its_24_ctas():
    assert collective_sms(108 / 132, H100_SMS) == 24


@pytest.mark.parametrize("rate, sms", [(1.0, 0), (1.07, 0), (0.5, 66), (0.0, 131), (-0.2, 131)])
def test_rates_outside_the_rule_are_clamped(rate, sms):
    # noise can time the overlapped GEMM faster than alone (no interference, not negative SMs);
    # a stalled GEMM still leaves compute one SM (the rule's rate stays above zero)
    assert collective_sms(rate, H100_SMS) == sms


def test_a_gpu_profile_takes_the_measured_sms_and_says_so():
    data = build_profile(Measurements(interference=_row(0.9)), {"backend": "nccl"}, "dgx-h100", None)
    assert data["efficiency"]["collective_sms"] == 13  # round(132 * 0.1)
    assert "0.900" in data["sources"]["efficiency.collective_sms"]
    assert data["measured"]["interference"]["rate"] == 0.9
    prof = profile_from_dict(yaml.safe_load(yaml.safe_dump(data)))
    share = SmShare(env=None, sm_count=prof.gpu.sm_count, collective_sms=prof.efficiency.collective_sms)
    assert share.slow_rate == pytest.approx((132 - 13) / 132)


def test_a_cpu_has_no_sms_to_lend_whatever_it_measured():
    gemm = [{"m": 512, "n": 512, "k": 512, "dtype": "fp32", "time_s": 1e-3, "tflops": 0.268}]
    m = Measurements(gemm=gemm, interference=_row(0.7))
    data = build_profile(m, {"backend": "gloo"}, None, Machine("Test CPU", 2**34, 2))
    assert data["efficiency"]["collective_sms"] == 0
    assert data["measured"]["interference"]["rate"] == 0.7  # kept as a record of the machine
