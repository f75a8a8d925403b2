"""Shipped data folders (hardware/, scenarios/, validation/).

In a source checkout they are the repository's top-level folders; in an installed wheel they are
packaged as ``simcluster/data/<name>/`` (see pyproject's package-dir mapping).
"""

from __future__ import annotations

from pathlib import Path


def data_dir(name: str) -> Path:
    """The folder of shipped ``name`` data files, installed or in the checkout."""
    installed = Path(__file__).resolve().parent / name
    if installed.is_dir() and any(installed.glob("*.yaml")):
        return installed
    return Path(__file__).resolve().parent.parent.parent / name
