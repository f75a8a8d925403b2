"""What ``simcluster compare`` puts side by side: time per step, or GPU time per million tokens.

A step's parts (seconds of its busiest stage's GPU by category) compare directly only between
steps that do the same work on as many GPUs. When the scenarios' steps process different token
counts (another global batch or sequence length) or run on different GPU counts, a part that
shrank may only belong to a smaller step. Every part is then given as GPU time per million
tokens, seconds x GPUs / tokens per step x 1e6: the parts of one scenario add up to
1e6 / (tokens/s per GPU), the inverse of the headline figure, so the largest change between
two scenarios is the part that moved their throughput most. With equal work the two measures
rank the changes alike, and per step is what a profile of the step shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simcluster.budget import tokens_per_step
from simcluster.engine.breakdown import LABELS, RESIDUE, busiest, negligible
from simcluster.units import format_bytes, format_time

Summaries = list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Basis:
    """Per step (every scenario's step does the same work on as many GPUs) or per token."""

    per_token: bool

    @classmethod
    def of(cls, summaries: Summaries) -> Basis:
        """Per token as soon as two scenarios differ in tokens per step or in GPUs."""
        return cls(len({(tokens_per_step(s), s["gpus"]) for _, s in summaries}) > 1)

    @property
    def name(self) -> str:
        """The basis in compare.json."""
        return "gpu_s_per_million_tokens" if self.per_token else "s_per_step"

    @property
    def unit(self) -> str:
        """What a time in this basis is, after the number: '(+1.2 s per step)'."""
        return "of GPU time per 1M tokens" if self.per_token else "per step"

    def factor(self, s: dict[str, Any]) -> float:
        """Seconds of ``s``'s step -> this basis."""
        return s["gpus"] * 1e6 / tokens_per_step(s) if self.per_token else 1.0

    def total(self, s: dict[str, Any]) -> float:
        """``s``'s whole step in this basis (what its parts are shares of)."""
        seconds: float = s["step_time_s"] * self.factor(s)
        return seconds

    def parts(self, s: dict[str, Any]) -> dict[str, float]:
        """``s``'s busiest stage by category in this basis; rounding residue is 0."""
        step, factor = s["step_time_s"], self.factor(s)
        return {k: 0.0 if negligible(v, step) else v * factor for k, v in busiest(s).items()}


def misfit(s: dict[str, Any]) -> str:
    """'does not fit (190.48 GiB of 80.00 GiB)' for a scenario over its GPU memory, else ''."""
    if s["fits_in_memory"]:
        return ""
    return f"does not fit ({format_bytes(s['peak_memory_bytes']['max'])} of {format_bytes(s['capacity_bytes'])})"


def signed_time(seconds: float) -> str:
    """'+1.234 s' / '-94.98 ms', signed as the CLI's percentages are (``:+``, ASCII)."""
    return f"{'+' if seconds >= 0 else '-'}{format_time(abs(seconds))}"


def _work(s: dict[str, Any], base: dict[str, Any]) -> str:
    """How ``s``'s step differs in work from ``base``'s: tokens, GPUs, both, or ''."""
    differ = []
    if tokens_per_step(s) != tokens_per_step(base):
        differ.append(f"its step is {tokens_per_step(s):,} tokens against {tokens_per_step(base):,}")
    if s["gpus"] != base["gpus"]:
        differ.append(f"{'it runs on' if not differ else 'on'} {s['gpus']} GPUs against {base['gpus']}")
    return " ".join(differ)


def verdict(summaries: Summaries, basis: Basis) -> str:
    """How each scenario compares with the first: throughput, memory, the part that moved most."""
    base_label, base = summaries[0]
    lines = [f"{base_label} (the baseline) {misfit(base)}"] if misfit(base) else []
    before = basis.parts(base)
    for label, s in summaries[1:]:
        ratio = s["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"] - 1
        over = f", but {misfit(s)}" if misfit(s) else ""
        after = basis.parts(s)
        deltas = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in LABELS}
        key = max(deltas, key=lambda k: abs(deltas[k]))
        if abs(deltas[key]) <= RESIDUE * max(basis.total(s), basis.total(base)):
            per = "per token" if basis.per_token else "of the step"
            lines.append(
                f"{label}: no difference from {base_label}: the same tokens/s per GPU and the same "
                f"time in every part {per}{over}"
            )
            continue
        work = _work(s, base)
        where = f"{work}, so per token " if work else ("per token, " if basis.per_token else "")
        lines.append(
            f"{label}: {100 * ratio:+.1f}% tokens/s per GPU against {base_label}{over}; {where}the "
            f"largest change is {LABELS[key]} ({signed_time(deltas[key])} {basis.unit})"
        )
    return "\n".join(lines)
