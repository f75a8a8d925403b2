"""Device-memory bandwidth from a calibrated profile's ``measured.memory`` rows.

Each memory-bound kernel is taken at its largest measured size, and the best of those is the
rate: a smaller size can stay in a cache (a 4M-element fp32 add moves 48 MB, inside an H100's
50 MB L2 or a server CPU's L3) and run faster than memory. STREAM's rule asks for arrays of
several times the last-level cache; only the largest sizes approach it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from simcluster.errors import UserError

SOURCE = "the best memory-bound kernel bandwidth at each kernel's largest size"


def _number(row: Mapping[str, Any], key: str, default: float | None = None) -> float:
    try:
        value = row[key] if default is None else row.get(key, default)
        return float(value)
    except (KeyError, TypeError, ValueError):
        raise UserError(
            "measured.memory", f"row {dict(row)} needs a number {key} (and kernel, bytes)"
        ) from None


def streaming_rate(rows: Iterable[Mapping[str, Any]]) -> float:
    """Bytes/s of device memory from ``{kernel, bytes, bytes_per_s}`` rows (0.0 without rows;
    a row without ``bytes`` counts as its kernel's smallest)."""
    largest: dict[str, tuple[float, float]] = {}
    for r in rows:
        if not isinstance(r, Mapping):
            raise UserError("measured.memory", f"row {r!r} is not a mapping of kernel, bytes, bytes_per_s")
        kernel, size, rate = str(r.get("kernel", "")), _number(r, "bytes", 0.0), _number(r, "bytes_per_s")
        if kernel not in largest or size > largest[kernel][0]:
            largest[kernel] = (size, rate)
    return max((rate for _, rate in largest.values()), default=0.0)
