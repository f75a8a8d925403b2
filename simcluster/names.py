"""Names compared the way people write them: without case, spaces, hyphens or underscores.

'Llama-2-70B', 'llama2_70b' and 'LLaMA 2 70B' are one preset; 'Megatron Core' and
'megatron_core' one framework. Dots stay: 'llama3.1-8b' is not 'llama31-8b'.
"""

from __future__ import annotations

from collections.abc import Iterable


def loose_key(name: str) -> str:
    """``name`` lower-cased without spaces, hyphens or underscores."""
    return "".join(ch for ch in name.strip().lower() if ch not in "-_ ")


def loose_lookup(name: str, names: Iterable[str]) -> str | None:
    """The entry of ``names`` equal to ``name`` up to :func:`loose_key`, or None."""
    key = loose_key(name)
    return next((n for n in names if loose_key(n) == key), None)


def run_heading(scenario: str, model: str | None) -> str:
    """What a run's titles call it: the scenario, and the model simulated when the scenario's
    name does not already say it (``llama3-70b-64xh100 (model llama3.1-405b)`` after
    ``--set model=llama3.1-405b``; plain ``llama3-8b-8xh100`` for its own llama3-8b)."""
    # "custom": a shape given field by field, which has no name to add
    if not model or model == "custom" or loose_key(model).replace(".", "") in loose_key(scenario).replace(".", ""):
        return scenario
    return f"{scenario} (model {model})"
