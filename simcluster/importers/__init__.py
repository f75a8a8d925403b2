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
        raise UserError("FILE", f"'{path}' is not a file")
    module = importlib.import_module(IMPORTERS[kind])
    result: Imported = module.import_file(file, options)
    # the file's name, and the case a script's --var picks, name the scenario
    picked = "-".join(options.variables.values())
    result.scenario = {"name": f"{file.stem}-{picked}" if picked else file.stem, **result.scenario}
    return result
