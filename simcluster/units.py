"""Parsing and formatting of sizes, bandwidths and times at the edges (CLI, YAML, plots).

Inside the code: seconds, bytes, bytes/s. GB = 1e9 bytes (as nccl-tests), GiB = 2**30.
"""

from __future__ import annotations

import re

from simcluster.errors import UserError

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1e3,
    "kb": 1e3,
    "m": 1e6,
    "mb": 1e6,
    "g": 1e9,
    "gb": 1e9,
    "t": 1e12,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")

GiB = 2**30
GB = 1e9


def parse_size(text: str | int | float, field: str = "size") -> int:
    """Parse '1GiB', '512M', '8', '1e9' into a whole number of bytes."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise UserError(field, f"size must be non-negative, got {text}")
        return int(text)
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UserError(field, f"cannot parse size '{text}'; write e.g. 8, 64KiB, 1MiB, 1GiB, 2GB")
    number, unit = match.groups()
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise UserError(
            field, f"unknown unit '{unit}' in '{text}'; use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"
        )
    return int(round(float(number) * factor))


def format_bytes(n: float) -> str:
    """Human form with binary prefixes: 1.50 GiB."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{int(n)} B"


def format_time(t: float) -> str:
    """Human form of seconds: 12.3 us, 4.56 ms, 1.234 s."""
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    if t < 1.0:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.3f} s"
