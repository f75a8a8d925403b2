"""simcluster: a discrete-event simulator of distributed LLM training on GPU clusters."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:  # the engine is imported on first use: `import simcluster` stays light
    from simcluster.context import Context
    from simcluster.engine.result import SimResult
    from simcluster.scenario import Scenario


def simulate(
    scenario: Scenario | Context, hardware: str | None = None, all_ranks: bool | None = None
) -> SimResult:
    """Simulate one training step of a scenario (a :class:`simcluster.scenario.Scenario`)."""
    from simcluster.engine import simulate as _simulate

    return _simulate(scenario, hardware=hardware, all_ranks=all_ranks)
