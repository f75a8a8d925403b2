"""What a start-up check reads: the validated scenario and the facts the layout checks derived."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simcluster.model import ModelSpec
from simcluster.scenario import Scenario


@dataclass(frozen=True)
class LayoutFacts:
    """What a framework rule reads beside the scenario: the model, dp and the expert TP degree."""

    model: ModelSpec
    dp: int
    etp: int


#: one check: raises UserError naming the field, the framework's own check and a fix
LayoutRule = Callable[[Scenario, LayoutFacts], None]
