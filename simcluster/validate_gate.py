"""Accuracy gates of ``simcluster validate --max-mape/--max-error``: a CI job on a user's own
cases (say, runs measured on their calibrated cluster) fails when the simulator drifts.

A gate that is not met is a finding about the simulator, not a bad input: exit status 1, one
line per broken gate on stderr, after the report has been printed and written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from simcluster.errors import UserError
from simcluster.validate import CaseResult
from simcluster.validate_report import beyond, summarize


def percent(flag: str, text: str) -> float:
    """A gate's threshold: a positive, finite percentage (``5``, ``7.5`` or ``7.5%``)."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise UserError(flag, f"must be a percentage such as 10 or 7.5, got {text!r}") from None
    if not (0 < value < math.inf):
        raise UserError(flag, f"must be a positive percentage, got {text!r}")
    return value


def broken_gates(
    results: Sequence[CaseResult], max_mape: float | None, max_error: float | None
) -> list[str]:
    """One line per gate the results break (empty: every gate holds). With a gate set, a case
    that could not be simulated breaks it too: its error is unknown."""
    if max_mape is None and max_error is None:
        return []
    lines = []
    failed = [r.case.name for r in results if r.predicted is None]
    if failed:
        lines.append(f"{len(failed)} case(s) could not be simulated: {', '.join(failed[:5])}")
    mape = summarize(results)["mape_pct"]
    if max_mape is not None and mape is not None and mape > max_mape:
        lines.append(f"MAPE {mape:.2f}% is above --max-mape {max_mape:g}%")
    if max_error is not None:
        worse = beyond(results, max_error)
        if worse:
            names = ", ".join(f"{r.case.name} ({r.error_pct:+.1f}%)" for r in worse[:5])
            more = f" and {len(worse) - 5} more" if len(worse) > 5 else ""
            lines.append(f"{len(worse)} case(s) beyond --max-error {max_error:g}%: {names}{more}")
    return lines
