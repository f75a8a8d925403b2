"""Importers: a scenario from a launch config a user already has (``simcluster import KIND FILE``).

``IMPORTERS`` maps each kind to the module that reads it; each module exposes
``import_file(path, options) -> Imported``. An importer maps the config's settings to the
scenario's existing fields and never adds physics: every setting it does not take is listed
with its reason (``Imported.skipped``), and a value it cannot map is a one-line error.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from simcluster.errors import UserError, did_you_mean
from simcluster.importers.options import ImportOptions
from simcluster.importers.result import Imported

#: kind -> module with import_file(path, options); the order `simcluster import --help` shows
IMPORTERS: dict[str, str] = {
    "megatron": "simcluster.importers.megatron",
    "torchtitan": "simcluster.importers.torchtitan",
    "deepspeed": "simcluster.importers.deepspeed",
}

#: kind -> what FILE must be, for the fix of a FILE that is not one
READS: dict[str, str] = {
    "megatron": "a Megatron launch script (.sh) or arguments file",
    "torchtitan": "a torchtitan TOML job config (.toml)",
    "deepspeed": "a DeepSpeed JSON config (.json)",
}

#: file suffix -> the kind that reads such files, for a file given to another kind
KIND_OF_SUFFIX: dict[str, str] = {
    ".json": "deepspeed", ".toml": "torchtitan", ".sh": "megatron", ".slurm": "megatron", ".bash": "megatron",
}  # fmt: skip

__all__ = ["IMPORTERS", "ImportOptions", "Imported", "import_config"]


def import_config(kind: str, path: str | Path, options: ImportOptions) -> Imported:
    """The scenario the launch config at ``path`` of ``kind`` describes (not yet validated)."""
    if kind not in IMPORTERS:
        raise UserError(
            "KIND",
            f"'{kind}' is not a launch config kind{did_you_mean(kind, list(IMPORTERS))}; known: {', '.join(IMPORTERS)}",
        )
    file = Path(path)
    if not file.is_file():
        # as a missing scenario or CASES file is told: what is wrong with it, and what to give
        wrong = f"file '{path}' not found" if not file.exists() else (
            f"'{path}' is a folder" if file.is_dir() else f"'{path}' is not a regular file")  # fmt: skip
        raise UserError("FILE", f"{wrong}; give the path of {READS[kind]}")
    module = importlib.import_module(IMPORTERS[kind])
    try:
        result: Imported = module.import_file(file, options)
    except UserError as exc:
        other = KIND_OF_SUFFIX.get(file.suffix.lower())
        if exc.field != "FILE" or other in (None, kind):
            raise
        # a DeepSpeed JSON given to `import torchtitan`: the parse error, and which kind reads it
        raise UserError("FILE", f"{exc.message}; a {file.suffix} file is read by: simcluster import {other}") from None
    # the file's name, and the case a script's --var picks, name the scenario
    picked = "-".join(options.variables.values())
    result.scenario = {"name": f"{file.stem}-{picked}" if picked else file.stem, **result.scenario}
    return result
