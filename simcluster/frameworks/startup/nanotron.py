"""nanotron's start-up refusals (its pipeline engines)."""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.frameworks.startup.facts import LayoutFacts, LayoutRule
from simcluster.scenario import Scenario


def _one_f_one_b_microbatches(scenario: Scenario, facts: LayoutFacts) -> None:
    """nanotron's 1F1B engine needs at least pp - 1 microbatches in a step
    (``OneForwardOneBackwardPipelineEngine.train_batch_iter``: "Number of microbatches ... must be
    at least PP_SIZE-1", the trainer passing ``batch_accumulation_per_replica``; in every release
    since its first engine); its all-forward-all-backward engine has no such bound."""
    par, tr = scenario.parallel, scenario.training
    per_step = facts.dp * tr.micro_batch
    if par.pp == 1 or par.schedule != "1f1b" or tr.global_batch % per_step:
        return  # an uneven batch is check_batch's to refuse
    microbatches = tr.global_batch // per_step
    if microbatches < par.pp - 1:
        raise UserError(
            "training.global_batch",
            f"nanotron's 1F1B engine needs at least pp-1 = {par.pp - 1} microbatches per step, got "
            f"{microbatches} (engine.py: \"must be at least PP_SIZE-1\"); use global_batch "
            f"{(par.pp - 1) * per_step} or more, a smaller training.micro_batch, or schedule afab",
        )


#: nanotron's checks
CHECKS: tuple[LayoutRule, ...] = (_one_f_one_b_microbatches,)
