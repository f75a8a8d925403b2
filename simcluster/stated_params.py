"""``model.params``: the parameter count a paper or model card states, checked against the shape.

Tables list a model by its size ("18.4B", ``params_B: 18.4``) next to its layers and hidden
size. Stated in a scenario, the count is read on the raw scenario (a number, a string with a
K/M/B/T suffix, or ``params_b`` in billions) and checked once the model is built: the shape
must come within :data:`TOLERANCE` of it, counting all parameters or, for a mixture of
experts, the active ones. A shape that is further off is a one-line error naming both counts,
since the step time of a model other than the one meant is no prediction at all.
"""

from __future__ import annotations

import re
from typing import Any

from simcluster.errors import UserError

#: how far the described shape may be from the stated count: papers round (Narayanan et al.'s
#: 1.7B is 1.65B as shaped) and count embeddings or not
TOLERANCE = 0.10
_FIELD = "model.params"
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
#: other names, with the unit each implies (x 1 for a plain count)
_NAMES = {"params": 1.0, "num_params": 1.0, "n_params": 1.0, "parameters": 1.0, "params_b": 1e9,
          "parameters_b": 1e9, "size_b": 1e9}  # fmt: skip


def _count(value: Any, unit: float, key: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value) * unit
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmbgt]?)\s*", value.lower())
        if match and float(match.group(1)) > 0:
            return float(match.group(1)) * _SCALE[match.group(2)] * (unit if not match.group(2) else 1.0)
    raise UserError(f"model.{key}", f"must be a parameter count such as 70e9 or '70B', got {value!r}")


def expand_stated_params(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with a stated parameter count under any of its names as ``model.params``."""
    model = data.get("model")
    if not isinstance(model, dict):
        return data
    given = [k for k in model if isinstance(k, str) and k.lower() in _NAMES]
    if not given:
        return data
    if len(given) > 1:
        raise UserError(f"model.{given[1]}", f"states the size again (also '{given[0]}'); keep one")
    model = dict(model)
    key = given[0]
    count = _count(model.pop(key), _NAMES[key.lower()], key)
    if count < 1e6:  # 'params: 70' means 70B to its writer, 70 parameters to the schema
        raise UserError(f"model.{key}", f"{count:g} parameters is no language model; write '{count:g}B' or params_b: {count:g}")
    model["params"] = count
    return {**data, "model": model}


def check_stated_params(stated: float, total: float, active: float) -> None:
    """Raise a one-line error when neither ``total`` nor ``active`` is within the tolerance."""
    if any(abs(n - stated) <= TOLERANCE * stated for n in (total, active)):
        return
    counts = f"{total / 1e9:.3g}B" + (f" ({active / 1e9:.3g}B active)" if active != total else "")
    raise UserError(
        _FIELD,
        f"states {stated / 1e9:.3g}B parameters, but the model described has {counts}; check layers, "
        "hidden, ffn, vocab and the experts, or drop model.params",
    )
