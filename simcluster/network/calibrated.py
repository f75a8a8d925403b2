"""Measured collective tables (calibrated profiles) -> target time for an op alone.

Rows live in ``profile.measured["collectives"]`` as documented in docs/architecture.md:
``{op, scope, gpus, gpus_per_node, nodes, bytes, time_s, algbw_GBps, busbw_GBps}``. busbw is
interpolated linearly in log(size) between rows (nccl-tests busbw is normalised for the rank
count, so a row measured on n ranks predicts other n through the busbw factor). Below the
smallest size the smallest row's time is kept (latency floor); above the largest, its busbw.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

from simcluster.errors import UserError
from simcluster.network.ops import busbw_factor


def _rows(measured: dict[str, Any], op: str, scope: str, n: int) -> list[dict[str, Any]]:
    rows = [r for r in measured.get("collectives") or [] if r.get("op") == op]
    same = [r for r in rows if r.get("scope") == scope]
    if not same:
        # "world" rows stand for intra when measured on one node, for inter otherwise.
        same = [
            r
            for r in rows
            if r.get("scope") == "world" and (int(r.get("nodes", 1)) == 1) == (scope == "intra")
        ]
    exact = [r for r in same if int(r.get("gpus", 0)) == n]
    return exact or same


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


def measured_time(
    measured: dict[str, Any], op: str, scope: str, nbytes: float, n: int
) -> float | None:
    """Time (s) the measured table predicts for ``op`` of ``nbytes`` on ``n`` ranks, or None."""
    rows = _rows(measured, op, scope, n)
    if not rows or nbytes <= 0 or n < 2:
        return None
    table = sorted({float(r["bytes"]): r for r in rows}.items())
    sizes = [s for s, _ in table]
    factor = busbw_factor(op, n)
    if nbytes <= sizes[0]:
        row = table[0][1]
        t_row = float(row["time_s"]) if row.get("time_s") else sizes[0] / (_busbw(row, op) / factor)
        return max(t_row, nbytes / (_busbw(row, op) / factor))
    if nbytes >= sizes[-1]:
        return nbytes / (_busbw(table[-1][1], op) / factor)
    i = bisect.bisect_right(sizes, nbytes)
    (s0, r0), (s1, r1) = table[i - 1], table[i]
    w = (math.log(nbytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
    busbw = (1 - w) * _busbw(r0, op) + w * _busbw(r1, op)
    return nbytes / (busbw / factor)
