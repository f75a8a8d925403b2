"""Number fields that refuse YAML booleans: the one check every input model inherits.

Pydantic's lax mode reads ``True`` as ``1`` for an ``int`` or ``float`` field, and YAML reads
``true``, ``yes`` and ``on`` as ``True``: ``parallel: {tp: yes}`` would run as tp 1 without a
word. Quoted numbers (``"8"``) and whole floats (``8.0``) stay accepted as pydantic reads them;
only a boolean where the field expects a number is refused. The scenario sections
(``scenario/base.py``), the hardware profile and its attention curves derive from
:class:`NumbersNotBooleans`, so every number field of theirs, nested in lists, tuples and
mappings too, gets the check without naming it.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

#: the error type :func:`NumbersNotBooleans._no_booleans` raises (its message is the whole text)
BOOLEAN_NUMBER = "boolean_number"

_UNIONS = (Union, types.UnionType)


def _arms(annotation: Any) -> tuple[Any, ...]:
    """The types a value may take: a union's arms, each stripped of ``Annotated`` metadata."""
    arms = get_args(annotation) if get_origin(annotation) in _UNIONS else (annotation,)
    return tuple(get_args(a)[0] if get_origin(a) is Annotated else a for a in arms)


def _number_kind(arms: tuple[Any, ...]) -> str | None:
    """'an integer' or 'a number' when ``arms`` take numbers but not booleans, else None."""
    if any(a is bool or a is Any for a in arms):
        return None
    if any(get_origin(a) is Literal and any(isinstance(v, bool) for v in get_args(a)) for a in arms):
        return None
    if int in arms:
        return "an integer"
    return "a number" if float in arms else None


def boolean_in_number(annotation: Any, value: Any, where: str = "") -> tuple[str, str, bool] | None:
    """The first boolean in ``value`` where ``annotation`` expects a number: (the kind of number
    expected, its position inside the value: '' for the value itself, '[2]', '.fp8', the
    boolean), or None."""
    arms = _arms(annotation)
    if isinstance(value, bool):
        kind = _number_kind(arms)
        return (kind, where, value) if kind else None
    for arm in arms:  # a container value is checked against the container arms of the type
        origin, args = get_origin(arm), get_args(arm)
        if origin is list and isinstance(value, list) and args:
            items = [(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
        elif origin is tuple and isinstance(value, (list, tuple)) and args:
            # a tuple of the wrong length is pydantic's to report: zip checks what both have
            kinds = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
            items = [(k, item, f"{where}[{i}]") for i, (k, item) in enumerate(zip(kinds, value, strict=False))]
        elif origin is dict and isinstance(value, dict) and len(args) == 2:
            items = [(args[1], item, f"{where}.{key}") for key, item in value.items()]
        else:
            continue
        for kind, item, position in items:
            found = boolean_in_number(kind, item, position)
            if found:
                return found
    return None


def yaml_word(value: bool) -> str:
    """How YAML writes a boolean, with the other spellings that read as it."""
    return "true (YAML's true/yes/on)" if value else "false (YAML's false/no/off)"


class NumbersNotBooleans(BaseModel):
    """A model whose number fields (``int``, ``float``, and lists, tuples or mappings of them)
    refuse booleans with a one-line error naming the kind of number expected."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, (bool, list, tuple, dict)) or info.field_name is None:
            return value  # the common case, a scalar number or a string, costs one test
        found = boolean_in_number(cls.model_fields[info.field_name].annotation, value)
        if found is None:
            return value
        kind, where, boolean = found
        at = f" at {where.removeprefix('.')}" if where else ""
        raise PydanticCustomError(
            BOOLEAN_NUMBER, f"expected {kind}{at}, got {yaml_word(boolean)}; write a number"
        )
