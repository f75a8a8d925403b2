"""Measured collective tables (calibrated profiles) -> target time for an op alone.

Rows live in ``profile.measured["collectives"]`` as documented in docs/architecture.md:
``{op, scope, gpus, gpus_per_node, nodes, bytes, time_s, algbw_GBps, busbw_GBps}``.

A table is measured at one *geometry* (nodes x GPUs per node), usually whole nodes, while the
simulator's groups often have another: the DP group of a TP-8 layout has one GPU per node and
gets one NIC, not eight. So a table is not used as a time directly. At its own geometry it
gives the ratio measured / modelled time, which carries what the model lacks (protocol and
software costs, a NIC's efficiency by message size) over to the group's geometry, where the
model supplies the topology:

    target = model(group, size) x measured(geometry, size) / model(geometry, size).

At the measured geometry this is the measurement itself. Along the size axis the time is
affine in size between neighbouring rows (a latency and a bandwidth term through each pair);
outside the measured sizes the ratio at the nearest one holds. Between measured node counts
(inter-node groups) or GPU counts (single-node groups) the ratio is interpolated in
log(count) and held beyond the ends. Reduce-scatter and all-gather fall back to all-reduce
rows when they have none of their own: a ring all-reduce is a reduce-scatter then an
all-gather of the same chunks.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from simcluster.errors import UserError
from simcluster.network.ops import busbw_factor

# ops whose efficiency ratio is borrowed from all_reduce rows when they have none of their own
_HALF_OF_ALL_REDUCE = ("reduce_scatter", "all_gather")


@dataclass(frozen=True)
class Geometry:
    """How a group sits on the cluster: ``nodes`` nodes with ``per_node`` GPUs each."""

    nodes: int
    per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.per_node


def row_geometry(row: dict[str, Any]) -> Geometry:
    """The geometry a measured row was taken at (``nodes`` defaults to one)."""
    gpus = int(row.get("gpus") or 0)
    nodes = max(1, int(row.get("nodes") or 1))
    return Geometry(nodes, int(row.get("gpus_per_node") or 0) or max(1, -(-gpus // nodes)))


def _rows(measured: dict[str, Any], op: str, scope: str) -> list[dict[str, Any]]:
    """Rows of ``op`` usable for a group of this scope: a row taken on one node serves
    single-node groups, a row taken across nodes serves multi-node groups ("world" rows are
    either, by their node count)."""
    return [
        r
        for r in measured.get("collectives") or []
        if r.get("op") == op
        and r.get("scope") in (scope, "world")
        and (int(r.get("nodes") or 1) == 1) == (scope == "intra")
    ]


def _busbw(row: dict[str, Any], op: str) -> float:
    try:
        if row.get("busbw_GBps") is not None:
            return float(row["busbw_GBps"]) * 1e9
        n = int(row["gpus"])
        return float(row["bytes"]) / float(row["time_s"]) * busbw_factor(op, n)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        raise UserError(
            "measured.collectives", f"row {row} needs bytes, gpus and time_s or busbw_GBps"
        ) from None


def table_time(rows: list[dict[str, Any]], op: str, nbytes: float, n: int) -> float:
    """Time the rows of one geometry (``n`` ranks) give for ``op`` of ``nbytes``, within the
    measured sizes: time affine in size between neighbouring rows, a latency plus a bandwidth
    term fitted through each pair (the alpha-beta cost of a collective). Bandwidth
    interpolated between a latency-bound row and a bandwidth-bound one would put the sizes
    just above the first at a small fraction of its time."""
    table = sorted({float(r["bytes"]): r for r in rows}.items())
    sizes = [s for s, _ in table]
    factor = busbw_factor(op, n)

    def time_of(i: int) -> float:
        return sizes[i] / (_busbw(table[i][1], op) / factor)

    lo, hi, _ = _bracket(sizes, nbytes)
    if lo == hi:  # beyond the rows: that row's bandwidth
        return time_of(lo) * nbytes / sizes[lo]
    share = (nbytes - sizes[lo]) / (sizes[hi] - sizes[lo])
    return time_of(lo) + share * (time_of(hi) - time_of(lo))


def _size_range(rows: list[dict[str, Any]]) -> tuple[float, float]:
    sizes = [float(r["bytes"]) for r in rows]
    return min(sizes), max(sizes)


def _bracket(axis: Sequence[float], x: float) -> tuple[int, int, float]:
    """Indices of the two sorted axis values around ``x`` and the log-weight of the second
    (the nearest end, weight 0, outside the axis)."""
    if x <= axis[0]:
        return 0, 0, 0.0
    if x >= axis[-1]:
        return len(axis) - 1, len(axis) - 1, 0.0
    j = bisect.bisect_left(axis, x)
    if axis[j] == x:
        return j, j, 0.0
    w = (math.log(x) - math.log(axis[j - 1])) / (math.log(axis[j]) - math.log(axis[j - 1]))
    return j - 1, j, w


ModelTime = Callable[[str, Geometry, float], float]


def measured_ratio(
    measured: dict[str, Any], op: str, scope: str, group: Geometry, nbytes: float,
    model_time: ModelTime,
) -> float | None:  # fmt: skip
    """Measured / modelled time for ``op`` of ``nbytes`` on a group of this geometry, or None
    without usable rows. ``model_time(op, geometry, size)`` is the uncalibrated model's time on
    a reference group of that geometry.

    Outside a geometry's measured sizes its ratio at the nearest measured size holds. A ratio
    below 1 (measured faster than the model, as NCCL's NVLS-tree on two whole nodes was before
    it was modelled) is kept only at its own geometry: it comes from an algorithm the model
    lacks, which other layouts of the group may not be able to use."""
    if nbytes <= 0 or group.gpus < 2:
        return None
    table_op = op
    rows = _rows(measured, op, scope)
    if not rows and op in _HALF_OF_ALL_REDUCE:
        table_op, rows = "all_reduce", _rows(measured, "all_reduce", scope)
    if not rows:
        return None
    by_geometry: dict[Geometry, list[dict[str, Any]]] = {}
    for row in rows:
        by_geometry.setdefault(row_geometry(row), []).append(row)

    def count(g: Geometry) -> int:
        return g.nodes if scope == "inter" else g.gpus

    # one geometry per count: the one whose GPUs per node are closest to the group's
    chosen: dict[int, Geometry] = {}
    for g in sorted(by_geometry, key=lambda g: (abs(g.per_node - group.per_node), -g.per_node)):
        chosen.setdefault(count(g), g)
    axis = sorted(chosen)
    lo, hi, w = _bracket(axis, count(group))

    def ratio(g: Geometry) -> float:
        lo_size, hi_size = _size_range(by_geometry[g])
        size = min(max(nbytes, lo_size), hi_size)
        r = table_time(by_geometry[g], table_op, size, g.gpus) / model_time(table_op, g, size)
        return r if g == group else max(r, 1.0)

    r = ratio(chosen[axis[lo]])
    if hi != lo:
        r = (1 - w) * r + w * ratio(chosen[axis[hi]])
    return r
