"""A bandwidth, peak or benchmark share below its physical floor, or a latency above a second,
is a one-line error naming the field (simcluster/rate_bounds.py): 1e-30 GB/s once priced a step
at 10^28 s. Each floor sits below the slowest real hardware of its kind, and a value at the bound
still loads."""

from __future__ import annotations

import pytest

from simcluster.hardware import load_profile
from simcluster.rate_bounds import (
    MAX_LATENCY_US,
    MIN_LINK_GBPS,
    MIN_MEMORY_GBPS,
    MIN_NIC_GBPS,
    MIN_PEAK_TFLOPS,
    MIN_SHARE,
)
from tests.test_scenario_errors import assert_one_line_error

BASE = "llama3-8b-8xh100"


def test_floors_are_below_the_slowest_real_parts():
    assert MIN_NIC_GBPS <= 10e6 / 1e9  # 10BASE-T Ethernet: 10 Mbit/s
    assert MIN_LINK_GBPS < 2.5 * 8 / 10 / 8  # one PCIe 1.0 lane: 2.5 GT/s, 8b/10b -> 0.25 GB/s
    assert MIN_MEMORY_GBPS < 100e6 * 8 / 1e9  # one PC100 SDRAM channel: 0.8 GB/s
    assert MIN_PEAK_TFLOPS < 128 * 2 * 1.35e9 / 1e12  # GeForce 8800 GTX FP32: 0.346 TFLOP/s
    assert MIN_SHARE < 5e-4  # a CPU calibration's attention on an H100 base
    assert MAX_LATENCY_US > 20_000e3 / 2e8 * 1e6  # light in fibre over half the Earth: 0.1 s


@pytest.mark.parametrize(
    "setting, field, bound",
    [("cluster.nic_gbps=1e-30", "cluster.nic_gbps", "10BASE-T"),
     ("cluster.nvlink_GBps=1e-30", "cluster.nvlink_GBps", "PCIe 1.0 lane"),
     ("cluster.hbm_tbps=1e-30", "cluster.hbm_tbps", "PC100"),
     ("cluster.nic_latency_us=1e30", "cluster.nic_latency_us", "a second"),
     ("cluster.nvlink_latency_us=1e30", "cluster.nvlink_latency_us", "a second"),
     ("cluster.profile.node.host_link_GBps=1e-30", "cluster.profile.node.host_link_GBps", "PCIe 1.0 lane"),
     ("cluster.profile.node.host_memory_GBps=1e-30", "cluster.profile.node.host_memory_GBps", "PC100"),
     ("cluster.profile.gpu.peak_tflops.bf16=1e-30", "cluster.profile.gpu.peak_tflops.bf16", "CPU core"),
     ("cluster.profile.efficiency.nic=1e-30", "cluster.profile.efficiency.nic", "of peak"),
     ("cluster.profile.efficiency.attention_fwd=1e-30", "cluster.profile.efficiency.attention_fwd", "of peak"),
     ("cluster.profile.efficiency.kernel_launch_us=1e30", "cluster.profile.efficiency.kernel_launch_us", "a second"),
     ("cluster.profile.efficiency.host_op_us=1e30", "cluster.profile.efficiency.host_op_us", "a second"),
     ("cluster.profile.fabric.switch_latency_us=1e30", "cluster.profile.fabric.switch_latency_us", "a second"),
     ("simulation.stragglers=[{node: 0, nic: 1e-30}]", "simulation.stragglers.0.nic", "of its bandwidth")],
)  # fmt: skip
def test_absurd_rates_and_latencies_are_one_line_errors(cli, setting, field, bound):
    res = cli("memory", BASE, "--set", setting)
    assert_one_line_error(res, f"error: {field}:", bound, "a typo?")


def test_a_profile_file_names_its_own_field(cli, tmp_path):
    import yaml

    from simcluster.data import data_dir

    data = yaml.safe_load((data_dir("hardware") / "dgx-h100.yaml").read_text())
    data["node"]["nic_gbps"] = 1e-30
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(data))
    res = cli("memory", BASE, "--hardware", str(path))
    assert_one_line_error(res, "node.nic_gbps", "10BASE-T")


def test_values_at_the_bounds_load():
    prof = load_profile(
        "dgx-h100",
        {"nic_gbps": MIN_NIC_GBPS, "nvlink_GBps": MIN_LINK_GBPS, "hbm_tbps": MIN_MEMORY_GBPS / 1000,
         "nic_latency_us": MAX_LATENCY_US},
        patch={"gpu": {"peak_tflops": {"bf16": MIN_PEAK_TFLOPS}}, "efficiency": {"nic": MIN_SHARE}},
    )  # fmt: skip
    assert prof.node.nic_gbps == MIN_NIC_GBPS and prof.efficiency.nic == MIN_SHARE
