"""YAML parsing through libyaml when PyYAML was built with it.

The shipped validation cases are ~15 files of a few thousand lines, read by every validate run
and by many tests; libyaml's parser is about ten times faster than the pure-Python one and
builds the same documents (both resolve tags as YAML 1.1 safe_load does)."""

from __future__ import annotations

from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with the C loader when available; raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
