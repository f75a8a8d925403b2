"""YAML parsing through libyaml when PyYAML was built with it, and user files' syntax errors.

The shipped validation cases are ~15 files of a few thousand lines, read by every validate run
and by many tests; libyaml's parser is about ten times faster than the pure-Python one and
builds the same documents (both resolve tags as YAML 1.1 safe_load does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simcluster.errors import UserError, read_text

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with the C loader when available; raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader


def load_user_file(path: str | Path, field: str, what: str) -> Any:
    """Parse a user-given YAML file (a scenario, profile or cases file). Unreadable bytes and
    syntax errors are one-line :class:`UserError` s naming ``field``; a syntax error says where
    (line and column, 1-based, as editors count) and what the parser expected."""
    text = read_text(path, field, what)
    try:
        return safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise UserError(
            field, f"{what} {path}{where}: not valid YAML ({problem}); fix the syntax"
        ) from None
