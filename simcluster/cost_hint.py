"""A raw scenario's rough simulation cost, to order and weigh a batch of simulations.

The engine's events grow as the microbatches of a step times the layers: each simulated stage
runs its layers for every microbatch, and the stages together hold every layer once. So
``global_batch / (dp x micro_batch) x layers``, read from the raw mapping without validating
it: ``validate`` runs its longest cases first, ``sweep`` and ``validate`` scale their time-left
estimates by it (progress.py).
"""

from __future__ import annotations

from typing import Any


def cost_hint(scenario: Any) -> float:
    """Rough event count of a raw scenario mapping: microbatches per step x layers.

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
    return m * number(section("model"), "layers")
