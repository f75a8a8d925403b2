"""NeMo AutoModel's start-up refusals (its pipelining split, ``components/distributed/pipelining``)."""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.frameworks.startup.facts import LayoutFacts, LayoutRule
from simcluster.scenario import Scenario


def _stages(scenario: Scenario, facts: LayoutFacts) -> None:
    """AutoModel splits only the transformer layers into pipeline stages (the embedding rides
    on the first, the norm and LM head on the last), and ``generate_hf_model_fqn_per_model_part``
    raises "Number of stages (...) cannot exceed number of layers (...)"; simcluster's own check
    counts the embedding and head as stages of their own, as Megatron's layouts may."""
    par = scenario.parallel
    stages, layers = par.pp * par.vpp, facts.model.layers
    if par.pp > 1 and stages > layers:
        raise UserError(
            "parallel.vpp" if par.vpp > 1 else "parallel.pp",
            f"NeMo AutoModel puts at least one transformer layer on each of its pp*vpp = {stages} stages "
            f"(functional.py: \"Number of stages ({stages}) cannot exceed number of layers ({layers})\"); "
            f"use pp*vpp <= {layers}",
        )


#: AutoModel's checks
CHECKS: tuple[LayoutRule, ...] = (_stages,)
