"""What a token costs: a GPU-hour price against a simulated throughput.

``--price 2.5`` prices every GPU at $2.50 an hour; ``--price dgx-h100=2.5,dgx-a100=1.2`` prices
each hardware profile (by its name) on its own, for sweeps and comparisons across clusters you
might buy or rent. Dollars per million tokens = price x GPUs / 3600 / (tokens/s) x 1e6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from simcluster.errors import UserError

FIELD = "--price"


@dataclass(frozen=True)
class Prices:
    """Dollars per GPU-hour: one for every profile, or one per profile name."""

    default: float | None = None
    by_hardware: dict[str, float] = field(default_factory=dict)

    def of(self, hardware: str) -> float | None:
        """The price of one GPU-hour of ``hardware`` (None when not priced)."""
        return self.by_hardware.get(hardware, self.default)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(FIELD, f"'{text}' is not a price; give dollars per GPU-hour, e.g. 2.5") from None
    if not math.isfinite(value) or value <= 0:
        raise UserError(FIELD, f"{text} must be a positive number of dollars per GPU-hour")
    return value


def parse_prices(text: str | None) -> Prices | None:
    """``"2.5"`` or ``"dgx-h100=2.5,dgx-a100=1.2"`` (None when not given)."""
    if text is None:
        return None
    if "=" not in text:
        return Prices(default=_number(text.strip()))
    by: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UserError(FIELD, f"'{item}' must look like profile=price, e.g. dgx-h100=2.5")
        by[name.strip()] = _number(value.strip())
    return Prices(by_hardware=by)


def format_usd(summary: dict[str, Any], prices: Prices | None, digits: int = 2) -> str:
    """Dollars per million tokens as a table cell ("—" when unpriced)."""
    value = usd_per_million_tokens(summary, prices)
    return "—" if value is None else f"${value:,.{digits}f}"


def usd_per_million_tokens(summary: dict[str, Any], prices: Prices | None) -> float | None:
    """Dollars per million tokens of a run summary at its hardware's price (None if unpriced)."""
    price = prices.of(summary["hardware"]) if prices else None
    if price is None or summary["tokens_per_s"] <= 0:
        return None
    return price * summary["gpus"] / 3600.0 / summary["tokens_per_s"] * 1e6
