"""Device-memory bandwidth from a calibrated profile's ``measured.memory`` rows.

Each memory-bound kernel is taken at its largest measured size, and the best of those is the
rate: a smaller size can stay in a cache (a 4M-element fp32 add moves 48 MB, inside an H100's
50 MB L2 or a server CPU's L3) and run faster than memory. STREAM's rule asks for arrays of
several times the last-level cache; only the largest sizes approach it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SOURCE = "the best memory-bound kernel bandwidth at each kernel's largest size"


def streaming_rate(rows: Iterable[Mapping[str, Any]]) -> float:
    """Bytes/s of device memory from ``{kernel, bytes, bytes_per_s}`` rows (0.0 without rows)."""
    largest: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        kernel = str(r.get("kernel", ""))
        if kernel not in largest or float(r["bytes"]) > float(largest[kernel]["bytes"]):
            largest[kernel] = r
    return max((float(r["bytes_per_s"]) for r in largest.values()), default=0.0)
