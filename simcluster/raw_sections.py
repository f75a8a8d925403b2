"""Reading one key out of a raw (not yet validated) scenario section.

The expansions that run before validation (``cluster.nodes``, ``parallel.fsdp``,
``training.global_batch_tokens``) each take a key another way of stating a setting and put the
schema's key in its place; :func:`take` is their common first step, :func:`whole` their test
of a count.
"""

from __future__ import annotations

from typing import Any


def whole(value: Any) -> int | None:
    """``value`` when it is a whole number above 0 (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def take(data: dict[str, Any], section: str, key: str) -> tuple[dict[str, Any], Any] | None:
    """A copy of ``data[section]`` without ``key``, and ``key``'s value; None when the section
    is not a mapping or has no such key (the schema reports a malformed section itself)."""
    values = data.get(section)
    if not isinstance(values, dict) or key not in values:
        return None
    rest = dict(values)
    return rest, rest.pop(key)
