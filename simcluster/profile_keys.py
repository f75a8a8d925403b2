"""A hardware-profile key the schema does not know: what to write instead.

A profile is a user's file as often as a shipped one (a calibrated profile, a copy of
``dgx-h100.yaml`` edited for their cluster, one written by an older simcluster), so a key the
schema refuses gets the nearest field of its section as a hint, and a key an older release
wrote gets what replaced it, not pydantic's bare 'Extra inputs are not permitted'.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel

from simcluster.errors import did_you_mean

#: profile keys older releases read, and what took their place (from the commit that removed each)
RETIRED: dict[str, str] = {
    # 4dc80a1: TransformerEngine's userbuffers settings became a per-run scenario choice
    "efficiency.tp_overlap_sms": (
        "replaced by the scenario's overlap.tp_comm_cfg (TransformerEngine's userbuffers SMs per "
        "overlap, `simcluster list userbuffers`); delete the line from the profile"
    ),
}


def unknown_key_message(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """What to say of the key at ``loc`` that ``model`` (the profile schema) refused as extra."""
    dotted = ".".join(str(p) for p in loc)
    if dotted in RETIRED:
        return f"field '{dotted}' is no longer read: {RETIRED[dotted]}"
    known = _fields_at(model, loc[:-1])
    hint = did_you_mean(str(loc[-1]), known) if known else ""
    return f"field '{dotted}' is unknown{hint}; fix the spelling or delete it (docs/hardware.md lists every field)"


def _fields_at(model: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """The field names of the section ``path`` leads to, or [] where it is not a model."""
    current: type[BaseModel] | None = model
    for part in path:
        info = current.model_fields.get(str(part)) if current else None
        current = _model_of(info.annotation) if info else None
    return list(current.model_fields) if current else []


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (itself, or inside an Optional)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if found := _model_of(arg):
                return found
    return None


def unknown_source(model: type[BaseModel], sources: dict[str, Any]) -> tuple[str, str] | None:
    """The first ``sources:`` key that names no field of the profile schema, and what to say
    of it; None when each names one. A misspelt key (``gpu.hbm_tbpz``) leaves the number it
    was written for without a source and cites one for nothing. The path is followed as far
    as the schema has sections: ``gpu.peak_tflops.bf16`` and ``measured.collectives`` name
    fields, since below a field the schema does not name keys (a precision, a table)."""
    for key in sources:
        parts = str(key).split(".")
        current: type[BaseModel] | None = model
        for depth, part in enumerate(parts):
            if current is None:
                break
            if part not in current.model_fields:
                known = [".".join([*parts[:depth], f]) for f in current.model_fields]
                hint = did_you_mean(".".join(parts[: depth + 1]), known)
                return str(key), (
                    f"names no field of the profile{hint}; a source goes under the dotted path of "
                    "the number it is for (docs/hardware.md lists every field)"
                )
            current = _model_of(current.model_fields[part].annotation)
    return None
