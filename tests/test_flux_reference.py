"""The hgx-h800 profile against an independent microbenchmark: ByteDance Flux's performance
report (bytedance/flux ``docs/performance_report.md``), torch + NCCL on one 8x H800 node, tp 8,
M = 4096 tokens, GPT-3 175B shapes (K = 12288, N = 49152):

| op | per-GPU GEMM | torch GEMM | torch NCCL |
|---|---|---|---|
| AllGather + GEMM | 4096 x 6144 x 12288 | 0.846 ms | 0.583 ms (gather 4096 x 12288 bf16) |
| GEMM + ReduceScatter | 4096 x 12288 x 6144 | 0.818 ms | 0.590 ms (scatter 4096 x 12288 bf16) |

The A800 rows of the same table (2.438 / 2.453 ms) check the dgx-a100 GEMM curve: an A800 is an
A100 SXM with its NVLink cut, the same GA100 SMs and clocks. (Its NCCL rows are not checked: no
A800 profile is shipped and its NVLink efficiency differs from the A100's.)

The profiles' numbers come from elsewhere (GEMMs: XLA's sm_90 table capped at the sustained
755 TFLOP/s; NVLink: DeepSeek-V3's 160 of 200 GB/s), so agreement here is a check, not a fit.
"""

from __future__ import annotations

import pytest

from simcluster.compute import KernelModel
from simcluster.hardware import load_profile
from simcluster.network import collective_time
from simcluster.topology import build_cluster

TOKENS, HIDDEN, FFN, TP = 4096, 12288, 49152, 8
GATHERED_BYTES = TOKENS * HIDDEN * 2  # bf16, the nccl-tests size column of either collective


@pytest.fixture(scope="module")
def h800():
    return load_profile("hgx-h800")


@pytest.mark.parametrize(
    "m, n, k, measured_s",
    [(TOKENS, FFN // TP, HIDDEN, 0.846e-3), (TOKENS, HIDDEN, FFN // TP, 0.818e-3)],
)
def test_gemm_times_match_flux_torch_column(h800, m, n, k, measured_s):
    modelled = KernelModel(h800, "bf16").gemm(m, n, k)
    assert modelled == pytest.approx(measured_s, rel=0.05)


@pytest.mark.parametrize(
    "m, n, k, measured_s",
    [(TOKENS, FFN // TP, HIDDEN, 2.438e-3), (TOKENS, HIDDEN, FFN // TP, 2.453e-3)],
)
def test_a800_gemm_times_match_the_a100_curve(m, n, k, measured_s):
    modelled = KernelModel(load_profile("dgx-a100"), "bf16").gemm(m, n, k)
    assert modelled == pytest.approx(measured_s, rel=0.05)


@pytest.mark.parametrize("op, measured_s", [("all_gather", 0.583e-3), ("reduce_scatter", 0.590e-3)])
def test_nccl_times_match_flux_torch_column(h800, op, measured_s):
    cluster = build_cluster(h800, 8, None)
    modelled = collective_time(op, GATHERED_BYTES, cluster, list(range(8)))
    assert modelled == pytest.approx(measured_s, rel=0.03)
