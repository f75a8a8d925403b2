"""Relative file paths inside a scenario are read from the folder of the file that names them.

``model.hf_config: llama/config.json`` or ``cluster.hardware: my-cluster.yaml`` in a scenario
or cases file means that file next to it, as a user expects, whatever folder simcluster runs
from. A path found only from the working directory still works (the older reading); names
that are not paths (a preset, a shipped profile) are left alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: (section, field) holding a file path
PATH_FIELDS = (("model", "hf_config"), ("cluster", "hardware"))


def _is_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.endswith((".yaml", ".yml", ".json"))


def anchor_paths(data: Any, base: Path) -> Any:
    """``data`` (a raw scenario) with relative paths that exist under ``base`` made absolute."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if isinstance(out.get("model"), str):  # the shorthand `model: llama/config.json`
        out["model"] = anchor_path(out["model"], base)
    for section, key in PATH_FIELDS:
        values = out.get(section)
        if isinstance(values, dict) and isinstance(values.get(key), str):
            out[section] = {**values, key: anchor_path(values[key], base)}
    return out


def anchor_path(text: str, base: Path) -> str:
    """``text`` made ``base / text`` when it is a relative path to a file there; else as given."""
    path = Path(text)
    if not _is_path(text) or path.is_absolute():
        return text
    beside = base / path
    return str(beside) if beside.exists() else text
