"""What a token costs: a GPU-hour price against a simulated throughput.

``--price 2.5`` prices every GPU at $2.50 an hour; ``--price dgx-h100=2.5,dgx-a100=1.2`` prices
each hardware profile (by its name) on its own, for sweeps and comparisons across clusters you
might buy or rent. Dollars per million tokens = price x GPUs / 3600 / (tokens/s) x 1e6.
:func:`check_priced` holds a per-profile list against the profiles a comparison runs on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from simcluster.errors import UserError, did_you_mean

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


def check_priced(prices: Prices | None, used: dict[str, str]) -> None:
    """Refuse a per-profile ``--price`` that would silently leave costs out.

    ``used`` maps each hardware profile the scenarios run on to the first scenario that runs on
    it. A priced name that is neither a shipped profile nor one in use is a typo (its price
    would apply to nothing); a profile in use without a price (and no price for all) would
    show no cost, and a comparison by cost with a blank column is not what was asked for.
    A priced profile that no scenario uses is fine: one price list serves many commands.
    """
    if prices is None or prices.default is not None:
        return
    from simcluster.hardware import shipped_profiles

    known = sorted(set(shipped_profiles()) | set(used))
    for name in prices.by_hardware:
        if name not in known:
            raise UserError(
                FIELD,
                f"'{name}' is not a hardware profile{did_you_mean(name, known)}; price the "
                f"profiles the scenarios run on: {', '.join(sorted(used))}",
            )
    for name, scenario in used.items():
        if name not in prices.by_hardware:
            listed = ",".join(f"{k}={v:g}" for k, v in prices.by_hardware.items())
            raise UserError(
                FIELD,
                f"no price for hardware '{name}' (scenario '{scenario}' runs on it); add it, e.g. "
                f"--price {listed},{name}=2.0, or give one price for every GPU, e.g. --price 2.5",
            )


def format_usd(summary: dict[str, Any], prices: Prices | None) -> str:
    """Dollars per million tokens as a table cell ("—" when unpriced), to three significant
    digits at least: cents alone showed $0.06 for rows the ranking tells apart."""
    return usd_text(usd_per_million_tokens(summary, prices))


def usd_text(value: float | None) -> str:
    """Dollars as a table cell ("—" for None), to three significant digits at least."""
    return "—" if value is None else f"${value:,.{usd_decimals(value)}f}"


def usd_decimals(value: float) -> int:
    """Decimals that write ``value`` dollars to three significant digits, never fewer than cents."""
    return max(2, 2 - math.floor(math.log10(abs(value)))) if value else 2


def usd_per_million_tokens(summary: dict[str, Any], prices: Prices | None) -> float | None:
    """Dollars per million tokens of a run summary at its hardware's price (None if unpriced)."""
    price = prices.of(summary["hardware"]) if prices else None
    if price is None or summary["tokens_per_s"] <= 0:
        return None
    usd: float = price * summary["gpus"] / 3600.0 / summary["tokens_per_s"] * 1e6
    return usd
