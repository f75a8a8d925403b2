"""How fast compute runs while a collective is in flight (``efficiency.collective_sms``).

The simulator slows a rank's compute while a data-parallel, context- or expert-parallel
collective is in flight (``simcluster/engine/interference.py``): NCCL's CTAs hold SMs the GEMM
then lacks. This step measures that rate on the machine itself. Every rank of the world group,
together:

1. times the reference GEMM alone (as the GEMM table does);
2. times one all-reduce of ``nbytes`` alone (issued asynchronously, then waited, as the
   frameworks issue their gradient reductions);
3. issues enough asynchronous all-reduces back to back to outlast the GEMM window, then times
   the same number of GEMMs on the compute stream while they run, then waits for them.

``rate`` = GEMM time alone / GEMM time overlapped (1 = no interference). On a GPU the two run
on different streams (NCCL's internal stream and the current one) and the timer is CUDA events
on the compute stream; on a CPU gloo's worker threads compete with the matmul's threads, the
same question asked of a different machine. Every rank runs the same number of calls (agreed on
the slowest estimate), so the collectives always have all their members.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from calibrate.dist import agree_max
from calibrate.gemm import DTYPES, iterations_for
from calibrate.shapes import GemmShape
from calibrate.timers import Timer, synchronize

Row = dict[str, Any]

#: the overlapped collectives must outlast the GEMM window by this factor: the GEMMs are timed
#: only while some all-reduce is still queued or running
COVER = 1.5


def default_bytes(device: str, quick: bool) -> int:
    """All-reduce size: large enough for NCCL to run all its channels (256 MiB on a GPU, as a
    gradient bucket of a large model); a few MiB on a CPU, where gloo is slow."""
    if quick:
        return 1 << 20
    return 1 << 28 if device == "cuda" else 1 << 23


def measure_interference(
    shape: GemmShape,
    dtype: str,
    nbytes: int,
    device: torch.device,
    timer: Timer,
    budget_s: float,
) -> Row:
    """One ``measured.interference`` row; every rank of the world must call this together."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(shape.m, shape.k, generator=gen).to(device=device, dtype=DTYPES[dtype])
    b = torch.randn(shape.k, shape.n, generator=gen).to(device=device, dtype=DTYPES[dtype])
    out = torch.empty(shape.m, shape.n, device=device, dtype=DTYPES[dtype])
    world = dist.get_world_size()
    nelem = max(world, nbytes // 4 // world * world)
    buf = torch.zeros(nelem, device=device)  # sums stay finite however many are in flight

    def gemm() -> None:
        torch.matmul(a, b, out=out)

    def reduce_once() -> None:
        dist.all_reduce(buf, async_op=True).wait()

    gemm_iters = iterations_for(agree_max(timer(gemm, iters=1, warmup=1), device), budget_s, lo=5)
    alone = timer(gemm, iters=gemm_iters, warmup=1)
    dist.barrier()
    coll_once = agree_max(timer(reduce_once, iters=1, warmup=1), device)
    coll_iters = iterations_for(coll_once, budget_s, lo=2, hi=20)
    dist.barrier()
    coll = timer(reduce_once, iters=coll_iters, warmup=0)
    # enough reductions in flight to cover the GEMM window with margin, the same count everywhere
    window = agree_max(alone * gemm_iters, device)
    launched = max(1, math.ceil(COVER * window / max(agree_max(coll, device), 1e-9)))
    dist.barrier()
    synchronize(device.type)
    works = [dist.all_reduce(buf, async_op=True) for _ in range(launched)]
    overlapped = timer(gemm, iters=gemm_iters, warmup=0, drain=False)  # collectives keep running
    for w in works:
        w.wait()
    synchronize(device.type)
    return {
        "op": "all_reduce",
        "bytes": nelem * 4,
        "gpus": world,
        "m": shape.m,
        "n": shape.n,
        "k": shape.k,
        "dtype": dtype,
        "gemm_alone_s": alone,
        "gemm_overlapped_s": overlapped,
        "collective_s": coll,
        "collectives_in_flight": launched,
        "rate": alone / overlapped,
    }
