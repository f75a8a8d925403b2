"""nccl-tests bandwidth definitions: algorithm bandwidth and bus bandwidth.

Source: NVIDIA/nccl-tests doc/PERFORMANCE.md and src/*.cu ``GetBw`` functions.
``algbw = S / t`` where S is the size nccl-tests prints in its ``size`` column; ``busbw`` scales
algbw by a factor that makes it comparable to the hardware link bandwidth:

=============== ================================ =====================
op              S (the ``size`` column)          busbw factor
=============== ================================ =====================
all_reduce      buffer per rank                  2(n-1)/n
all_gather      gathered (output) buffer         (n-1)/n
reduce_scatter  input buffer (n × output)        (n-1)/n
all_to_all      send buffer per rank             (n-1)/n
broadcast       buffer                           1
send_recv       buffer sent by each rank         1
=============== ================================ =====================

GB = 1e9 bytes, as nccl-tests.
"""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.network.ops import BUSBW_FACTOR, OPS

# One table of the nccl-tests busbw factors for the whole project (doc/PERFORMANCE.md).
BUS_FACTORS = BUSBW_FACTOR


def bus_factor(op: str, nranks: int) -> float:
    """The nccl-tests busbw/algbw ratio for ``op`` over ``nranks`` ranks."""
    if op not in BUS_FACTORS:
        raise UserError("op", f"unknown collective '{op}'; use one of {', '.join(OPS)}")
    if nranks < 1:
        raise UserError("gpus", f"rank count must be >= 1, got {nranks}")
    return BUS_FACTORS[op](nranks)


def algbw(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth in bytes/s: size over time."""
    if time_s <= 0:
        raise UserError("time_s", f"time must be positive, got {time_s}")
    return size_bytes / time_s


def busbw(op: str, size_bytes: float, time_s: float, nranks: int) -> float:
    """Bus bandwidth in bytes/s, by the nccl-tests formula for ``op``."""
    return algbw(size_bytes, time_s) * bus_factor(op, nranks)


def collective_record(
    op: str,
    scope: str,
    size_bytes: int,
    time_s: float,
    gpus: int,
    gpus_per_node: int,
    nodes: int,
) -> dict[str, object]:
    """One ``measured.collectives`` row (docs/architecture.md layout), GB/s = 1e9 B/s."""
    return {
        "op": op,
        "scope": scope,
        "gpus": gpus,
        "gpus_per_node": gpus_per_node,
        "nodes": nodes,
        "bytes": int(size_bytes),
        "time_s": float(time_s),
        "algbw_GBps": algbw(size_bytes, time_s) / 1e9,
        "busbw_GBps": busbw(op, size_bytes, time_s, gpus) / 1e9,
    }
