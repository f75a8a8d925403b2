"""Physical floors of the rates and ceilings of the latencies a hardware profile (or a scenario's
override of one) may give: values past these are typos (a unit off by 10^9, a stray exponent),
never a machine.

A positive bandwidth of 1e-30 GB/s passed the schema's ``> 0`` and priced a step at 10^28
seconds; a latency of 10^30 us likewise. Each bound sits below the slowest hardware of its kind
(and below what ``calibrate --device cpu`` measures on a CPU standing in for a GPU), with the
reason in its message; the loader names the field (``cluster.nic_gbps``,
``cluster.profile.node.nic_gbps``, or the profile file's ``node.nic_gbps``).
"""

from __future__ import annotations

from pydantic import AfterValidator

#: Gbit/s of one NIC: 10 Mbit/s, 10BASE-T Ethernet (IEEE 802.3i, 1990); no cluster fabric was slower
MIN_NIC_GBPS = 0.01
#: GB/s per direction of a GPU's scale-up or host link: 0.1, below one PCIe 1.0 lane (2.5 GT/s
#: with 8b/10b coding: 0.25 GB/s), the slowest link a GPU has been attached by
MIN_LINK_GBPS = 0.1
#: GB/s of a node's host memory (and TB/s 1e-4 of a GPU's): 0.1 GB/s, below one channel of
#: PC100 SDRAM (100 MHz x 8 bytes = 0.8 GB/s, 1998), slower than any memory a GPU or CPU streams
MIN_MEMORY_GBPS = 0.1
#: TFLOP/s of a GPU's peak at any precision: 1 MFLOP/s, below one scalar CPU core (a 1 GHz
#: core: 1-2 GFLOP/s FP32), let alone a GPU (G80, GeForce 8800 GTX: 128 cores x 2 FLOP x
#: 1.35 GHz = 346 GFLOP/s), and below a CPU's emulated FP8 GEMM, which a CPU calibration
#: measures as its fp8 peak (torch._scaled_mm on a Sapphire Rapids core without FP8 units:
#: 0.07 GFLOP/s at 256^3, 2026-12-05)
MIN_PEAK_TFLOPS = 1e-6
#: share of a peak a benchmark reaches (HBM, NVLink, NIC, NVLS, attention): a millionth; even a
#: CPU calibrated on a GPU profile's base reaches more of the GPU's peak (calibrate --device cpu
#: --base dgx-h100: attention at 5e-4), and the shipped profiles' lowest is 0.23
MIN_SHARE = 1e-6
#: share of its bandwidth a degraded NIC keeps (simulation.stragglers): 1e-4, which leaves a
#: 400 Gbit/s NIC 40 Mbit/s, near 10BASE-T's floor of a NIC's rate
MIN_DEGRADED = 1e-4
#: microseconds of one latency or per-kernel gap: 1 s; light in fibre crosses half the Earth
#: (20,000 km at 2e8 m/s) in 0.1 s, and fabrics and drivers take microseconds
MAX_LATENCY_US = 1e6


def at_least(floor: float, unit: str, why: str) -> AfterValidator:
    """A pydantic validator refusing a value below ``floor`` with the bound and its reason (the
    field is named by the profile's or the scenario's loader)."""

    def check(value: float | None) -> float | None:
        if value is not None and value < floor:
            raise ValueError(f"{value:g} {unit} is below {floor:g} {unit}, {why}; a typo? raise it")
        return value

    return AfterValidator(check)


def at_most(ceiling: float, unit: str, why: str) -> AfterValidator:
    """A pydantic validator refusing a value above ``ceiling`` with the bound and its reason."""

    def check(value: float | None) -> float | None:
        if value is not None and value > ceiling:
            raise ValueError(f"{value:g} {unit} is above {ceiling:g} {unit}, {why}; a typo? lower it")
        return value

    return AfterValidator(check)


NIC = at_least(MIN_NIC_GBPS, "Gbit/s", "10BASE-T Ethernet's, slower than any cluster NIC")
LINK = at_least(MIN_LINK_GBPS, "GB/s", "below one PCIe 1.0 lane (0.25 GB/s), the slowest link a GPU has had")
HOST_MEMORY = at_least(MIN_MEMORY_GBPS, "GB/s", "below one channel of PC100 SDRAM (0.8 GB/s, 1998)")
HBM = at_least(MIN_MEMORY_GBPS / 1000, "TB/s", "below one channel of PC100 SDRAM (0.8 GB/s, 1998)")
PEAK = at_least(MIN_PEAK_TFLOPS, "TFLOP/s", "below a CPU core's emulated FP8 (0.07 GFLOP/s), let alone a GPU")
SHARE = at_least(MIN_SHARE, "of peak", "less than even a CPU reaches of a GPU's (5e-4 calibrated on an H100 base)")
DEGRADED = at_least(MIN_DEGRADED, "of its bandwidth", "which leaves a 400 Gbit/s NIC 40 Mbit/s, near 10BASE-T's")
LATENCY = at_most(MAX_LATENCY_US, "us", "a second, which no fabric hop or kernel launch takes (light crosses half the Earth in 0.1 s)")
