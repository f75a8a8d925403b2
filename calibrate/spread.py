"""How far GEMM throughput differs between the GPUs of a calibration run (``gpu.speed_spread``).

Every rank times the same GEMMs at once; the largest one of the reference dtype (bf16 where
timed) is gathered from all ranks. The spread is the population standard deviation of those
rates over their mean, the sigma the simulator's slowest-GPU factor uses
(``simcluster/variability.py``). With few ranks it is a rough estimate; a single process has none.
"""

from __future__ import annotations

import statistics
from typing import Any

Row = dict[str, Any]


def reference_row(rows: list[Row]) -> Row | None:
    """The largest GEMM of the reference dtype (bf16 if timed, else the first dtype timed)."""
    if not rows:
        return None
    dtypes = [r["dtype"] for r in rows]
    ref = "bf16" if "bf16" in dtypes else dtypes[0]
    return max((r for r in rows if r["dtype"] == ref), key=lambda r: r["m"] * r["n"] * r["k"])


def gather_rates(rows: list[Row], world: int) -> Row | None:
    """Every rank's rate of the reference GEMM (a collective: all ranks call it), or None."""
    ref = reference_row(rows)
    if ref is None or world < 2:
        return None
    import torch.distributed as dist

    rates: list[Any] = [None] * world
    dist.all_gather_object(rates, float(ref["tflops"]))
    return {
        "m": ref["m"], "n": ref["n"], "k": ref["k"], "dtype": ref["dtype"],
        "tflops_per_rank": [float(r) for r in rates],
    }  # fmt: skip


def spread(rates: list[float]) -> float:
    """Population standard deviation over the mean (0 for fewer than two rates)."""
    if len(rates) < 2:
        return 0.0
    return statistics.pstdev(rates) / statistics.fmean(rates)
