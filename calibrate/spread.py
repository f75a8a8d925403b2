"""How far GEMM throughput differs between the GPUs of a calibration run (``gpu.speed_spread``).

The reference GEMM (the default grid's largest shape, ``RunConfig.reference``) in the reference
dtype (bf16 where timed) is timed once more by every rank at once, after a barrier, and the rates gathered. The spread is the population standard deviation of those
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


def time_together(rows: list[Row], world: int, device: Any, timer: Any, budget_s: float) -> Row | None:
    """Every rank's rate of the reference GEMM, timed by all ranks at once (a collective: all
    ranks call it), or None. The sweep's own rows are not used: nothing keeps the ranks in step
    through a sweep (rank 0 alone rewrites the partial file and draws the progress bar between
    steps), so each rank timed its row at another moment, beside other work, and the spread
    the simulator charges to every step (the slowest GPU's) measured that drift as well. A
    barrier first, then the same GEMM on every rank, as a training step runs them."""
    ref = reference_row(rows)
    if ref is None or world < 2:
        return None
    import torch.distributed as dist

    from calibrate.gemm import measure_gemm
    from calibrate.shapes import GemmShape

    dist.barrier()
    row = measure_gemm(GemmShape(ref["m"], ref["n"], ref["k"]), ref["dtype"], device, timer, budget_s)
    tflops = row["tflops"]
    assert isinstance(tflops, float)  # measure_gemm's rate
    rates: list[Any] = [None] * world
    dist.all_gather_object(rates, tflops)
    return {
        "m": ref["m"], "n": ref["n"], "k": ref["k"], "dtype": ref["dtype"],
        "tflops_per_rank": [float(r) for r in rates],
    }  # fmt: skip


def spread(rates: list[float]) -> float:
    """Population standard deviation over the mean (0 for fewer than two rates)."""
    if len(rates) < 2:
        return 0.0
    return statistics.pstdev(rates) / statistics.fmean(rates)
