"""The SCENARIO arguments of ``simcluster compare``: ``NAME@key=value@key=value`` variants.

A variant is a shipped name or YAML path with overrides of its own, written as ``--set``
values are (YAML scalars), after ``@``. Its errors name the argument and the ``@`` syntax, not
``--set``, which the user may not have typed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from simcluster.errors import UserError
from simcluster.key_aliases import canonical_path
from simcluster.scenario import parse_set

SYNTAX = "NAME@key=value"


def split_variant(text: str) -> tuple[str, list[str]]:
    """``NAME@a=1@b=2`` -> (``NAME``, [``a=1``, ``b=2``])."""
    name, *overrides = text.split("@")
    if not name:
        raise UserError("SCENARIO", f"'{text}' has no scenario before '@'; write {SYNTAX}")
    return name, overrides


def variant_overrides(text: str) -> list[tuple[str, Any]]:
    """The overrides of one SCENARIO argument, parsed as ``--set`` values; an empty or
    keyless override, or a key given twice (under any of its names), is a one-line error."""
    name, own = split_variant(text)
    example = f"e.g. {name}@parallel.tp=2"
    seen: dict[str, str] = {}
    for item in own:
        key = item.partition("=")[0].strip()
        if not item.strip():
            raise UserError("SCENARIO", f"'{text}' has an empty override after '@'; write {SYNTAX}, {example}")
        if "=" not in item or not key:
            raise UserError("SCENARIO", f"'{text}': '{item}' is not key=value; write {SYNTAX}, {example}")
        if any(not part.strip() for part in key.split(".")):
            raise UserError("SCENARIO", f"'{text}': the key '{key}' has an empty part; write {SYNTAX}, {example}")
        path = canonical_path(key)
        if path in seen:
            # the last would win silently and the label would show both values
            raise UserError("SCENARIO", f"'{text}' sets {path} twice ('{seen[path]}' and '{item}'); keep one")
        seen[path] = item
    return parse_set(own)


@contextmanager
def naming(text: str) -> Iterator[None]:
    """Add which SCENARIO argument a UserError raised in the block is about (one of several
    variants of one name would otherwise be indistinguishable)."""
    try:
        yield
    except UserError as exc:
        raise UserError(exc.field, f"{exc.message} (in SCENARIO {text})") from None


def shared_overrides(texts: list[str]) -> list[str]:
    """The ``@key=value`` overrides that every scenario has, when all are variants of one."""
    variants = [split_variant(text) for text in texts]
    if any(name != variants[0][0] for name, _ in variants):
        return []
    return [o for o in variants[0][1] if all(o in own for _, own in variants)]


def short_labels(texts: list[str]) -> list[str]:
    """Column labels: a variant of the first scenario is named by its overrides alone, and when
    every scenario is a variant of one, the overrides they all share are left out (a variant
    with nothing of its own is named by the scenario)."""
    first, _ = split_variant(texts[0])
    variants = [split_variant(text) for text in texts]
    shared = set(shared_overrides(texts))
    out = []
    for text, (name, own) in zip(texts, variants, strict=True):
        kept = [o for o in own if o not in shared]
        if name != first or not own:
            out.append(text)
        else:
            out.append(" ".join(kept) if kept else name)
    return out
