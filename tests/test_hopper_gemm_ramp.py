"""Small Hopper BF16 GEMMs against XLA's measured sm_90 table.

tensorflow/tensorflow ``third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h``
(sm_90, bf16xbf16->bf16, batch 1) times GEMMs from 256^3 to 4096^3 on an H100. The Hopper
profiles' curve below 8.6e9 FLOP is that table's median per size, so a GEMM of a measured shape
comes out within the spread of the shapes of its size (aspect ratio and K move a size's rates by
up to ~30%), not at the 2-7x faster rates the curve assumed before.
"""

from __future__ import annotations

import pytest

from simcluster.compute import KernelModel
from simcluster.hardware import load_profile

# (m, n, k, measured TFLOP/s) straight from the table, batch 1
XLA_SM90 = [
    (256, 256, 256, 6.45),
    (512, 512, 512, 40.7),
    (1024, 1024, 1024, 236.3),
    (1024, 2048, 1024, 373.3),
    (2048, 2048, 1024, 493.9),
    (512, 2048, 2048, 342.4),
]


@pytest.mark.parametrize("profile", ["dgx-h100", "aws-p5", "hgx-h800", "dgx-h200"])
@pytest.mark.parametrize(("m", "n", "k", "tflops"), XLA_SM90)
def test_small_gemms_run_at_the_measured_rate(profile, m, n, k, tflops):
    km = KernelModel(load_profile(profile), "bf16")
    device_s = km.gemm(m, n, k) - km.launch_s  # the table times the kernel alone
    assert 2 * m * n * k / device_s / 1e12 == pytest.approx(tflops, rel=0.15)


def test_no_gemm_kernel_is_faster_than_the_smallest_measured_one():
    # 256^3 took 5.2 us; a smaller GEMM is still one kernel of about that length
    km = KernelModel(load_profile("dgx-h100"), "bf16")
    assert km.gemm(64, 64, 64) - km.launch_s >= 2.5e-6


def test_a_gemm_between_two_curve_points_is_not_faster_than_the_smaller_one():
    # XLA's sm_90 table: 256^3 (3.4e7 FLOP) takes about as long as the curve's 1e6-FLOP floor
    # (~5 us each). A 160^3 GEMM (8.2e6 FLOP) between them is not faster than the floor;
    # efficiency interpolated linearly in log(FLOP) alone had put it at 0.4 of it
    km = KernelModel(load_profile("dgx-h100"), "bf16")
    floor = 1e6 / km.gemm_efficiency(1e6)
    mid = 8.2e6 / km.gemm_efficiency(8.2e6)  # both over the same peak
    assert mid >= floor


@pytest.mark.parametrize("profile", ["dgx-h100", "dgx-a100", "dgx-b200", "gb200-nvl72", "amd-mi300x", "amd-mi325x", "alps-gh200"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_gemm_time_does_not_fall_as_the_flops_grow(profile, precision):
    # along the size curve (no shape factor, no quantisation) a bigger GEMM never finishes
    # sooner than the curve's point below it, within the 0.3% by which a few measured points
    # are themselves out of order
    km = KernelModel(load_profile(profile), precision)
    flops, last = 1e6, 0.0
    while flops < 1e13:
        t = flops / km.gemm_efficiency(flops)
        assert t >= last * 0.997, (profile, precision, flops)
        last, flops = t, flops * 1.07
