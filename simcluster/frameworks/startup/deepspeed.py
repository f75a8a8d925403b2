"""DeepSpeed's start-up refusals of expert parallelism (its engine and utils/groups.py)."""

from __future__ import annotations

from simcluster.divisors import divisors, one_of
from simcluster.errors import UserError
from simcluster.frameworks.startup.facts import LayoutFacts, LayoutRule
from simcluster.scenario import Scenario


def _experts(scenario: Scenario, facts: LayoutFacts) -> None:
    """DeepSpeed-MoE's expert groups are slices of each data-parallel group
    (``utils/groups.py``: ``_ensure_divisibility(dp_world_size, expert_parallel_size_)``), and its
    engine refuses its MoE layers under ZeRO-3 (``_configure_zero_optimizer``: "MoE not supported
    with Stage 3"). ep 1 is not refused: a mixture of experts written as dense modules (Hugging
    Face's Mixtral under ZeRO-3) has no DeepSpeed-MoE layer."""
    par = scenario.parallel
    if par.ep == 1:
        return
    if par.zero == 3:
        raise UserError(
            "parallel.zero",
            f"DeepSpeed refuses its MoE layers (ep={par.ep}) under ZeRO-3 (engine.py: \"MoE not "
            "supported with Stage 3\"); use zero 2 or lower, or ep 1",
        )
    if facts.dp % par.ep:
        fixes = one_of(divisors(facts.dp, lambda d: facts.model.experts % d == 0))
        raise UserError(
            "parallel.ep",
            f"DeepSpeed-MoE draws its expert groups from the data-parallel ranks: ep={par.ep} must "
            f"divide dp={facts.dp} (utils/groups.py); use ep {fixes}",
        )


#: DeepSpeed's checks
CHECKS: tuple[LayoutRule, ...] = (_experts,)
