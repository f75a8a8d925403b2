"""Registry of pipeline schedules by name."""

from __future__ import annotations

from typing import TypeVar

from simcluster.errors import UserError, did_you_mean
from simcluster.schedules.base import FIELD_SCHEDULE, Schedule

SCHEDULES: dict[str, Schedule] = {}

T = TypeVar("T")


def register(cls: type[T]) -> type[T]:
    """Class decorator: instantiate and register a schedule under its ``name``."""
    instance = cls()
    name = instance.name  # type: ignore[attr-defined]
    if name in SCHEDULES:
        raise ValueError(f"schedule {name!r} registered twice")
    SCHEDULES[name] = instance  # type: ignore[assignment]
    return cls


def get_schedule(name: str) -> Schedule:
    """The schedule registered as ``name``; UserError naming the choices otherwise."""
    try:
        return SCHEDULES[name]
    except KeyError:
        choices = ", ".join(sorted(SCHEDULES))
        raise UserError(
            FIELD_SCHEDULE,
            f"unknown schedule '{name}'{did_you_mean(name, SCHEDULES)}; choose one of {choices}",
        ) from None
