"""What a framework's code refuses at start-up that simcluster's engine would run.

A scenario naming a framework runs that framework's code, so a combination it asserts against
(its arguments' or configs' checks) is an error here too, one line naming the framework's check
and a fix. One module per framework family holds its checks; the registry ``STARTUP_CHECKS``
maps a framework name (None: no framework, simcluster's loop on Megatron-LM's flags) to them,
each given the validated scenario, the model, the data-parallel degree and the resolved
expert-TP degree. They run in ``build_layout`` after simcluster's own layout checks (so the
degrees are known to be whole), and so in the fit hints and the sweep, which skip a change the
framework would refuse.
"""

from __future__ import annotations

from simcluster.frameworks.startup import (
    automodel,
    deepspeed,
    megatron,
    nanotron,
    torchtitan,
    zero_bubble,
)
from simcluster.frameworks.startup.facts import LayoutFacts, LayoutRule
from simcluster.model import ModelSpec
from simcluster.scenario import Scenario

#: framework name (None: no framework) -> the start-up refusals of its code
STARTUP_CHECKS: dict[str | None, tuple[LayoutRule, ...]] = {
    None: megatron.LM_CHECKS,
    "megatron-core": megatron.MEGATRON_CORE_CHECKS,
    "nemo": megatron.CORE_CHECKS,
    "megatron-bridge": megatron.CORE_CHECKS,
    "torchtitan": torchtitan.CHECKS,
    "automodel": automodel.CHECKS,
    "deepspeed": deepspeed.CHECKS,
    "nanotron": nanotron.CHECKS,
    "zero-bubble": zero_bubble.CHECKS,
}


def check_framework_startup(scenario: Scenario, model: ModelSpec, dp: int, etp: int) -> None:
    """Run the named framework's checks (``STARTUP_CHECKS``) on a layout simcluster's checks passed."""
    facts = LayoutFacts(model=model, dp=dp, etp=etp)
    for rule in STARTUP_CHECKS.get(scenario.framework, ()):
        rule(scenario, facts)
