"""nccl-tests bandwidth formulas (NVIDIA/nccl-tests doc/PERFORMANCE.md, src/*.cu GetBw)."""

from __future__ import annotations

import pytest

from calibrate.busbw import OPS, algbw, bus_factor, busbw, collective_record
from simcluster.errors import UserError

# Published DGX H100 single-node all_reduce sample, n = 8 (NVIDIA/dgxc-benchmarking
# nccl/README.md via shared/validation/published.yaml): (bytes, time us, algbw, busbw GB/s).
DGX_H100_ALL_REDUCE = [
    (33554432, 199.3, 168.39, 294.69),
    (268435456, 1112.5, 241.29, 422.25),
    (1073741824, 4029.4, 266.48, 466.33),
    (17179869184, 62648, 274.23, 479.9),
]


@pytest.mark.parametrize(("size", "time_us", "alg", "bus"), DGX_H100_ALL_REDUCE)
def test_all_reduce_reproduces_published_dgx_h100_rows(size, time_us, alg, bus):
    # The log prints 2 decimals and rounds the time, so agree to the printed precision.
    assert algbw(size, time_us * 1e-6) / 1e9 == pytest.approx(alg, rel=2e-4)
    assert busbw("all_reduce", size, time_us * 1e-6, 8) / 1e9 == pytest.approx(bus, rel=2e-4)


def test_one_gib_all_reduce_record():
    row = collective_record("all_reduce", "intra", 2**30, 4029.4e-6, 8, 8, 1)
    assert row["algbw_GBps"] == pytest.approx(266.48, abs=0.01)
    assert row["busbw_GBps"] == pytest.approx(466.33, abs=0.01)


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 8, 14 / 8),
        ("all_reduce", 2, 1.0),
        ("all_gather", 8, 7 / 8),
        ("reduce_scatter", 16, 15 / 16),
        ("all_to_all", 4, 3 / 4),
        ("broadcast", 8, 1.0),
        ("send_recv", 2, 1.0),
    ],
)
def test_bus_factors(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_every_op_has_a_factor_and_unknown_op_is_a_user_error():
    assert set(OPS) == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "broadcast",
        "send_recv",
    }
    with pytest.raises(UserError, match="unknown collective 'allreduce'"):
        bus_factor("allreduce", 8)
    with pytest.raises(UserError, match="time must be positive"):
        algbw(1024, 0.0)
