"""Keys written one level off, read where they belong.

A case copied from a paper's table or written from the issue's four sections often puts a key
one level off: ``tp: 8`` at the top, ``micro_batch: 1`` under ``parallel``, ``framework:
megatron-core`` under ``training``. Where the key (or one of its other names) belongs to exactly
one section, its meaning is not in doubt, so it is read there rather than refused. A key that
two sections know (``optimizer_offload``: training's fraction, overlap's switch) stays where it
was written, for validation to refuse with the sections it could mean. Moving a key onto one
already given is an error unless both say the same.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from simcluster.errors import UserError
from simcluster.key_aliases import canonical_key
from simcluster.scenario.document import _SECTIONS, Scenario

#: top-level settings read at the top when written inside a section (a section's 'name' or
#: 'description' is its own or a mistake, so those two are not moved)
TOP_SCALARS = ("framework", "framework_release")


def _knows(section: str, key: str) -> bool:
    model: type[BaseModel] = _SECTIONS[section]
    return canonical_key(section, key) in model.model_fields


def home_of(key: str, written_in: str | None) -> tuple[str, ...] | None:
    """Where ``key``, written in section ``written_in`` (None: at the top), belongs when that is
    not where it was written: ``(section, key)`` in the schema's names, ``(key,)`` for a
    top-level key, or None when it is where it belongs, unknown, or known to several sections."""
    if written_in is not None and (written_in not in _SECTIONS or _knows(written_in, key)):
        return None
    if written_in is None and key in Scenario.model_fields and key not in ("dp",):
        return None  # a section or top-level key at the top ('dp' is also parallel's degree)
    if written_in is not None and key in TOP_SCALARS:
        return (key,)
    homes = [name for name in _SECTIONS if name != written_in and _knows(name, key)]
    if len(homes) != 1:
        return None
    return (homes[0], canonical_key(homes[0], key))


def relocate(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every key written one level off moved where it belongs.

    Raises :class:`UserError` naming both places when the moved key is also given there with
    another value.
    """
    out = {name: (dict(v) if isinstance(v, dict) else v) for name, v in data.items()}
    for name, value in list(data.items()):
        if not isinstance(name, str):
            continue
        if name in _SECTIONS and isinstance(value, dict):
            for key, inner in value.items():
                home = home_of(key, name) if isinstance(key, str) else None
                if home is not None:
                    del out[name][key]
                    _put(out, home, inner, f"{name}.{key}")
        elif not isinstance(value, dict):  # home_of leaves sections and top-level keys be
            home = home_of(name, None)
            if home is not None:
                del out[name]
                _put(out, home, value, name)
    return out


def _put(out: dict[str, Any], home: tuple[str, ...], value: Any, written: str) -> None:
    if len(home) == 1:
        node = out
    else:
        node = out.setdefault(home[0], {})
        if not isinstance(node, dict):
            raise UserError(
                written, f"belongs in {home[0]}, which is not a section here; move it there"
            )
    key = home[-1]
    if key in node and node[key] != value:
        raise UserError(
            written, f"means {'.'.join(home)}, which is also given ({node[key]!r}); keep one"
        )
    node[key] = value
