"""Parsing and formatting of sizes, bandwidths and times at the edges (CLI, YAML, plots).

Inside the code: seconds, bytes, bytes/s. GB = 1e9 bytes (as nccl-tests), GiB = 2**30.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

from simcluster.errors import UserError
from simcluster.limits import MAX_COLLECTIVE_BYTES

# Exact integers (not floats), so '1.1KB' is 1100 bytes, not 1100.0000000000002
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}

_SIZE_RE = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")

GiB = 2**30
GB = 1e9


def parse_size(text: str | int | float, field: str = "size") -> int:
    """Parse '1GiB', '512M', '8', '1e9' into a positive whole number of bytes (at most
    :data:`~simcluster.limits.MAX_COLLECTIVE_BYTES`); 0, fractions of a byte ('1.5') and
    infinities are one-line errors."""
    if isinstance(text, bool):
        raise UserError(field, f"got {text!r}; give a size in bytes, e.g. 8, 64KiB, 1MiB, 1GiB")
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UserError(field, f"cannot parse size '{text}'; write e.g. 8, 64KiB, 1MiB, 1GiB, 2GB")
    number, unit = match.groups()
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise UserError(
            field, f"unknown unit '{unit}' in '{text}'; use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"
        )
    value = Decimal(number)  # exactly as written; a float would blur the whole-byte test
    if value <= 0:
        raise UserError(field, f"'{text}' is not a positive size; give at least 1 byte, e.g. 8 or 1MiB")
    # exponents far outside 1 B..1 PiB are settled before exact arithmetic on million-digit
    # numbers (1e9999999, 1e-9999999)
    exponent = value.adjusted()
    nbytes = Fraction(value) * factor if -20 <= exponent <= 20 else None
    if exponent > 20 or (nbytes is not None and nbytes > MAX_COLLECTIVE_BYTES):
        raise UserError(
            field, f"'{text}' is more than {MAX_COLLECTIVE_BYTES / 2**50:g} PiB, far beyond any GPU's "
            "memory; give a size such as 1GiB",
        )
    if nbytes is None or nbytes.denominator != 1:
        whole = max(round(nbytes or 1), 1)
        raise UserError(field, f"'{text}' is not a whole number of bytes; sizes are whole bytes, e.g. {whole}")
    return int(nbytes)


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


def parse_gemm_shape(text: str, field: str) -> tuple[int, int, int]:
    """``'M,N,K'`` (C[M, N] = A[M, K] @ B[K, N]) -> three positive integers; ``MxNxK`` too, as
    the gemm table prints shapes."""
    item = text.strip()
    parts = item.split(",") if "," in item else re.split(r"\s*[x×]\s*", item.lower())
    try:
        m, n, k = (int(p) for p in parts)
    except ValueError:
        raise UserError(field, f"'{item}' is not M,N,K (three integers); write e.g. 4096,4096,1024") from None
    for name, value in (("M", m), ("N", n), ("K", k)):
        if value <= 0:
            raise UserError(field, f"'{item}': {name} must be a positive integer, got {value}")
    return m, n, k
