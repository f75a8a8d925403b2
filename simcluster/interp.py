"""Piecewise-linear interpolation of measured tables, clamped at both ends."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence


def interp(table: Sequence[tuple[float, float]], x: float, log_x: bool = False) -> float:
    """y at ``x`` from ``table`` (sorted by x): linear in x, or in log(x) with ``log_x``;
    the first / last y beyond the measured range."""
    def key(v: float) -> float:
        return math.log(max(v, 1e-30)) if log_x else v

    xs = [key(p[0]) for p in table]
    kx = key(x)
    if kx <= xs[0]:
        return table[0][1]
    if kx >= xs[-1]:
        return table[-1][1]
    i = bisect.bisect_right(xs, kx)
    w = (kx - xs[i - 1]) / (xs[i] - xs[i - 1])
    return table[i - 1][1] + w * (table[i][1] - table[i - 1][1])
