"""torchtitan's low-precision linears as ``training.precision`` (``simcluster import torchtitan``).

torchtitan swaps ``nn.Linear`` for torchao's low-precision linears through model converters
named in ``[model] converters``, each configured in its own table. Releases spelled them two
ways, both read here:

- ``float8`` with ``[float8]`` (torchao ``Float8Linear``; before converters existed, ``[float8]
  enable_float8_linear``) and ``mx`` with ``[mx]`` (torchao ``MXLinear``, MXFP8 on Blackwell);
- ``quantize.linear.float8`` / ``quantize.linear.mx`` with ``[quantize.linear.float8]`` /
  ``[quantize.linear.mx]`` (torchtitan's rename of those tables: ``"float8":
  "quantize.linear.float8"``, ``"mx": "quantize.linear.mx"``), and ``quantize.grouped_mm.float8``
  / ``quantize.grouped_mm.mx`` for a MoE's expert GEMMs (``fqns = ["experts"]``).

Float8 with its ``tensorwise`` recipe is FP8 with current scaling (``fp8_recipe current``;
``enable_fsdp_float8_all_gather``: ``fp8_param_gather``); MXFP8 (``mxfp8_cublas``, its default,
or ``mxfp8_cublas_rceil``: 1x32 blocks with E8M0 scales on Blackwell's MX tensor cores) is FP8
with per-block scales (``fp8_recipe block``). Refused, one line each: both kinds at once, expert
GEMMs quantised without the linears (``training.precision`` quantises every linear), other
recipes (rowwise, emulated, MXFP4). Before this module a ``quantize.*`` or ``mx`` converter
imported as BF16 without a word.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from simcluster.errors import UserError

#: a linear converter's names -> its kind
_LINEAR = {"float8": "float8", "quantize.linear.float8": "float8", "mx": "mx", "quantize.linear.mx": "mx"}
#: a MoE expert converter's names -> its kind
_GROUPED = {"quantize.grouped_mm.float8": "float8", "quantize.grouped_mm.mx": "mx"}
#: each kind's recipe_name -> training.fp8_recipe, and its default recipe
RECIPES = {
    "float8": ({"tensorwise": "current"}, "tensorwise"),
    "mx": ({"mxfp8_cublas": "block", "mxfp8_cublas_rceil": "block"}, "mxfp8_cublas"),
}
#: the legacy tables' names (the quantize.* ones are dotted)
TABLES = ("float8", "mx")
#: the keys read from a kind's table
READ_KEYS = {"recipe_name", "enable_fsdp_float8_all_gather", "enable_float8_linear", "fqns"}


def converters(doc: dict[str, Any]) -> list[str]:
    """``[model] converters``: a list, or a comma-separated string as the shipped 405B TOML
    writes it (``converters = "float8"``; config_manager's string_list splits it)."""
    model = doc.get("model")
    value = model.get("converters") if isinstance(model, dict) else None
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(v) for v in value or []]


def tables(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every converter table in ``doc`` as (dotted name, table): ``float8``, ``mx`` and the
    ``quantize.*`` ones."""
    for name in TABLES:
        if isinstance(doc.get(name), dict):
            yield name, doc[name]
    quantize = doc.get("quantize")
    if not isinstance(quantize, dict):
        return
    for group, kinds in quantize.items():
        for kind, table in (kinds.items() if isinstance(kinds, dict) else ()):
            if isinstance(table, dict):
                yield f"quantize.{group}.{kind}", table


def linear_kind(doc: dict[str, Any]) -> str | None:
    """The kind of low-precision linears the job trains with (``float8`` or ``mx``), if any."""
    names = converters(doc)
    kinds = {_LINEAR[n] for n in names if n in _LINEAR}
    legacy = doc.get("float8")
    if isinstance(legacy, dict) and legacy.get("enable_float8_linear") is True:
        kinds.add("float8")  # releases before model.converters
    if len(kinds) > 1:
        raise UserError("model.converters", "lists both float8 and mx linears; keep one of them")
    grouped = {_GROUPED[n] for n in names if n in _GROUPED}
    if grouped - kinds:
        raise UserError(
            "model.converters",
            f"quantizes the experts' grouped GEMMs ({', '.join(sorted(grouped))}) without the same "
            "linear converter: training.precision quantizes every linear; add it or drop the experts' one",
        )
    return next(iter(kinds), None)


def is_on(doc: dict[str, Any], dotted: str) -> bool:
    """Whether the converter whose table is ``dotted`` is switched on (a linear kind's table in
    either spelling when that kind is)."""
    if dotted in _LINEAR:
        return linear_kind(doc) == _LINEAR[dotted]
    return dotted in converters(doc)


def unknown(doc: dict[str, Any]) -> list[str]:
    """The converters this importer does not know (listed as not imported)."""
    return [n for n in converters(doc) if n not in _LINEAR and n not in _GROUPED]


def apply(doc: dict[str, Any], training: dict[str, Any]) -> None:
    """Set ``training.precision`` (and its recipe) for the job's low-precision linears."""
    kind = linear_kind(doc)
    if kind is None:
        return
    table = _table(doc, kind)
    recipes, default = RECIPES[kind]
    recipe = table.get("recipe_name") or default
    if recipe not in recipes:
        raise UserError(f"{_dotted(doc, kind)}.recipe_name", f"'{recipe}' cannot be imported; known: {', '.join(recipes)}")
    training["precision"], training["fp8_recipe"] = "fp8", recipes[recipe]
    if kind == "float8" and table.get("enable_fsdp_float8_all_gather"):
        training["fp8_param_gather"] = True


def _table(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    """The linear converter's table: the legacy ``[float8]`` / ``[mx]`` or its ``quantize``
    spelling, whichever the job writes (empty: every key at its default)."""
    found = dict(tables(doc))
    return found.get(kind) or found.get(f"quantize.linear.{kind}") or {}


def _dotted(doc: dict[str, Any], kind: str) -> str:
    return kind if isinstance(doc.get(kind), dict) else f"quantize.linear.{kind}"
