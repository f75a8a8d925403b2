"""How long a training run of a given token budget takes at a simulated step, and what it costs.

``--tokens 15T`` turns a step into the question a layout is chosen for: a run of T tokens takes
ceil(T / tokens per step) steps (a run stops on a whole step), each of the simulated step time, on
the scenario's GPUs: wall-clock time = steps x step time, GPU-hours = wall-clock hours x GPUs, and
with ``--price`` dollars = GPU-hours x price. It is the steady step alone: no warm-up, evaluation,
checkpoint saves, restarts after failures or data-loader stalls, which a real run adds.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from simcluster.cost import Prices
from simcluster.errors import UserError

FIELD = "--tokens"

#: decimal suffixes, as token budgets are written (Llama 3: 15T; Chinchilla: 1.4T; B and G alike)
_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)

#: what a budget line leaves out, said where the figure is printed
ASSUMPTION = "the simulated step alone: no evaluation, checkpoints or restarts"


def parse_tokens(text: str | None) -> float | None:
    """A token count as ``15T``, ``300B``, ``2.5e12`` or ``1,000,000`` (None when not given)."""
    if text is None:
        return None
    match = _COUNT.match(text.replace(",", "").replace("_", ""))
    value = float(match.group(1)) * _SUFFIXES[match.group(2).lower()] if match else math.nan
    if not math.isfinite(value) or value < 1:
        raise UserError(FIELD, f"'{text}' is not a token count; write e.g. 15T, 300B or 2e12 (K, M, B, T: thousand to trillion)")
    return value


@dataclass(frozen=True)
class Budget:
    """A run of ``tokens`` at one simulated step: its steps, wall-clock seconds, GPU-hours and,
    when priced, dollars."""

    tokens: float
    steps: int
    wall_s: float
    gpu_hours: float
    usd: float | None = None

    @property
    def days(self) -> float:
        return self.wall_s / 86400.0

    def record(self) -> dict[str, Any]:
        """The JSON form, days included."""
        return {**asdict(self), "days": self.days}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Budget:
        """The budget :meth:`record` wrote."""
        return cls(**{f.name: record[f.name] for f in fields(cls)})


def tokens_per_step(summary: dict[str, Any]) -> int:
    """Tokens one step of a run processes (global batch x sequence length: an integer, however
    the summary's rate was divided)."""
    tokens: int = round(summary["tokens_per_s"] * summary["step_time_s"])
    return tokens


def training_budget(summary: dict[str, Any], tokens: float, prices: Prices | None = None) -> Budget:
    """The run of ``tokens`` at ``summary``'s step (a run summary of ``simulate``)."""
    steps = math.ceil(tokens / tokens_per_step(summary))
    wall = steps * summary["step_time_s"]
    gpu_hours = wall / 3600.0 * summary["gpus"]
    price = prices.of(summary["hardware"]) if prices else None
    return Budget(tokens, steps, wall, gpu_hours, None if price is None else gpu_hours * price)


def format_count(value: float, digits: int = 4) -> str:
    """A token count the way it was likely written: 15T, 300B, 2.5M, 1,234 (to ``digits``
    significant digits)."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if value >= scale:
            return f"{value / scale:.{digits}g}{suffix}"
    return f"{value:,.0f}"


def tokens_argument(tokens: int) -> str:
    """``tokens`` as ``--tokens`` takes it: the shortest suffixed form that reads back exactly
    (16.384B), else the whole number."""
    for digits in range(4, 10):
        short = format_count(tokens, digits)
        if parse_tokens(short) == tokens:
            return short
    return str(tokens)


def format_duration(seconds: float) -> str:
    """Wall-clock time in the unit a plan is made in: days from two days up, else hours, minutes."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:,.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.1f} minutes"


def _short(value: float, unit: str = "") -> str:
    """Three significant figures with a k or M suffix: 1.01M, 45.2k, 312 (``unit`` before it, "$")."""
    for suffix, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{unit}{value / scale:.3g}{suffix}"
    return f"{unit}{value:.3g}"


def format_gpu_hours(hours: float) -> str:
    """GPU-hours: 1.01M, 45.2k, 312."""
    return _short(hours)


def format_usd_total(usd: float) -> str:
    """A run's cost: $2.54M, $45.2k, $312."""
    return _short(usd, "$")


def _cost_suffix(budget: Budget) -> str:
    """', $2.54M' where the run is priced, else nothing."""
    return f", {format_usd_total(budget.usd)}" if budget.usd is not None else ""


def budget_cell(budget: Budget) -> str:
    """A table cell: '41.3 days', with ', $2.54M' where priced."""
    return format_duration(budget.wall_s) + _cost_suffix(budget)


def budget_text(budget: Budget, gpus: int) -> str:
    """One line: '15T tokens: 41.3 days on 1,024 GPUs (3,662,110 steps), 1.01M GPU-hours, $2.54M'."""
    return (
        f"{format_count(budget.tokens)} tokens: {format_duration(budget.wall_s)} on {gpus:,} GPUs "
        f"({budget.steps:,} steps), {format_gpu_hours(budget.gpu_hours)} GPU-hours{_cost_suffix(budget)}"
    )
