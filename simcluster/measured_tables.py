"""A profile's ``measured:`` tables checked at load: every row the simulator reads is a mapping
with the fields it reads, each a finite number above zero.

The tables are free-form in the profile's schema (calibrate/ writes them; a user may write or
edit one by hand), and each is read deep inside a simulation: ``measured.collectives`` by
network/calibrated.py, ``measured.gemm`` by compute.py and gemm_roles.py, ``measured.memory``
by memory_rate.py, ``measured.attention`` by attention_kernels.py. Unchecked, a negative GEMM
time made every GEMM take a negative fraction of peak (a 77,000-second step, no error), a zero
time or a row without ``k`` a traceback, a negative nccl-tests time a negative ratio, a
misspelt ``op`` a row silently unused. ``measured.moe`` has its own schema (moe_kernels.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from simcluster.errors import UserError, did_you_mean
from simcluster.measured import positive_number
from simcluster.measured import shown as _shown
from simcluster.network.ops import OPS

#: the ``scope`` of a collectives row (calibrate/busbw.py): one node, across nodes, or both
SCOPES = ("intra", "inter", "world")

#: per table, (fields each row needs, fields a row may leave out or null) as positive numbers
_NUMBERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "collectives": (
        ("gpus", "bytes"),
        ("nodes", "gpus_per_node", "time_s", "busbw_GBps", "algbw_GBps"),
    ),
    "gemm": (("m", "n", "k", "time_s"), ()),
    "memory": (("bytes_per_s",), ("bytes",)),
    "attention": (("batch", "heads", "seq", "head_dim"), ("fwd_s", "bwd_s")),
}
_FIX = (
    "fix the row or re-run calibrate (docs/architecture.md, 'measured:', lists each table's fields)"
)


def check_measured_tables(measured: dict[str, Any]) -> None:
    """A one-line :class:`UserError` naming ``measured.TABLE[i].FIELD`` for the first row the
    simulator could not read or would read as a time or size of zero or below."""
    for table, (needed, optional) in _NUMBERS.items():
        rows = measured.get(table)
        if rows is None:
            continue
        if not isinstance(rows, list):
            raise UserError(
                f"measured.{table}", f"must be a list of rows, got {_shown(rows)}; {_FIX}"
            )
        for i, row in enumerate(rows):
            where = f"measured.{table}[{i}]"
            if not isinstance(row, dict):
                raise UserError(
                    where, f"must be a mapping of {', '.join(needed)}, got {_shown(row)}; {_FIX}"
                )
            _check_numbers(row, where, needed, optional)
            if table == "collectives":
                _check_collective(row, where)
            elif table == "gemm" and not isinstance(row.get("dtype"), str):
                raise UserError(
                    f"{where}.dtype",
                    f"needs the GEMM's dtype (bf16, fp8, ...), got {_shown(row.get('dtype'))}",
                )


def _check_numbers(
    row: dict[str, Any], where: str, needed: Iterable[str], optional: Iterable[str]
) -> None:
    for key in needed:
        if key not in row:
            raise UserError(f"{where}.{key}", f"missing (a number above 0); {_FIX}")
    for key in (*needed, *optional):
        value = row.get(key)
        if value is None and key not in needed:
            continue
        positive_number(value, f"{where}.{key}", _FIX)


def _check_collective(row: dict[str, Any], where: str) -> None:
    op, scope = row.get("op"), row.get("scope")
    if op not in OPS:
        raise UserError(
            f"{where}.op",
            f"unknown collective {_shown(op)}{did_you_mean(str(op), OPS)}; one of {', '.join(OPS)}",
        )
    if scope not in SCOPES:
        raise UserError(
            f"{where}.scope", f"must be one of {', '.join(SCOPES)}, got {_shown(scope)}"
        )
    if row.get("time_s") is None and row.get("busbw_GBps") is None:
        raise UserError(
            where, f"needs time_s or busbw_GBps (the nccl-tests time or bus bandwidth); {_FIX}"
        )
