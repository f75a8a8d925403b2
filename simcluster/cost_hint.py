"""A raw scenario's rough simulation cost, to order and weigh a batch of simulations.

The engine's events grow as the microbatches of a step times the layers: each simulated stage
runs its layers for every microbatch, and the stages together hold every layer once. So
``global_batch / (dp x micro_batch) x layers``, read from the raw mapping without validating
it: ``validate`` runs its longest cases first, ``sweep`` and ``validate`` scale their time-left
estimates by it (progress.py). Where those commands read a long step off shorter ones
(``steady_state.py``), the microbatches they simulate are counted instead of the step's.
"""

from __future__ import annotations

from typing import Any

from simcluster.errors import UserError

#: microbatch groups (of pp) that steady_state.py typically simulates for a long step: steps of
#: 1, 2, 3 and 4 groups (the Llama 3.1 405B row on 256 GB200s, pp 16, settles on 16-64 of 384)
STEADY_GROUPS = 10


def cost_hint(scenario: Any, extrapolate: bool = True) -> float:
    """Rough event count of a raw scenario mapping: microbatches per step x layers;
    ``extrapolate``: of a step read off shorter ones where steady_state.py would, roughly
    (whether it pays is only known once the shorter steps run).

    Anything it cannot read (a preset name for the model, a value of the wrong type that
    validation will report later) counts as 1: the hint only orders and weighs work.
    """

    def section(key: str) -> dict[str, Any]:
        value = scenario.get(key) if isinstance(scenario, dict) else None
        return value if isinstance(value, dict) else {}

    def number(d: dict[str, Any], key: str) -> float:
        value = d.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
        return 1.0

    par, tr = section("parallel"), section("training")
    gpus, pp, tp, cp = (number(section("cluster"), "gpus"), number(par, "pp"),
                        number(par, "tp"), number(par, "cp"))  # fmt: skip
    dp = number(par, "dp") if "dp" in par else max(gpus / (pp * tp * cp), 1.0)
    m = number(tr, "global_batch") / max(dp * number(tr, "micro_batch"), 1.0)
    # imported here, not with the module: steady_state loads the engine's context
    from simcluster.steady_state import MIN_MICROBATCHES, halves_the_work

    # steady_state.first_counts' rule, on the raw mapping (the group taken as pp)
    if extrapolate and m >= MIN_MICROBATCHES and halves_the_work(m, pp) and number(tr, "pipeline_flushes") == 1:
        if not _holds_every_microbatch(par.get("schedule")):
            m = min(STEADY_GROUPS * pp, m / 2)
    return m * number(section("model"), "layers")


def _holds_every_microbatch(name: Any) -> bool:
    """Whether the raw schedule name is one steady_state.py simulates whole (GPipe's)."""
    from simcluster.schedules import get_schedule
    from simcluster.spellings import schedule_spelled

    if not isinstance(name, str):
        return False  # the default, 1F1B, or a value validation will report
    try:
        return get_schedule(schedule_spelled(name)).holds_every_microbatch
    except UserError:
        return False
