"""Which numbers of a hardware profile carry no ``sources:`` entry, and the note that says so.

Every number of a profile should say where it came from (a datasheet, a benchmark, a
calibration run): a user's copy of a shipped profile with an edited figure and no source still
simulates, but the run says which fields it took on trust. A source covers the field it names
and everything under it (``efficiency.gemm_shapes`` covers the whole table). The shipped
profiles and those ``calibrate/`` writes have a source for every number (tests/
test_hardware_profiles.py, tests/test_calibrate_run.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: the sections of a profile that hold numbers (name, description and sources are text)
SECTIONS = ("gpu", "node", "fabric", "efficiency", "measured")

#: how many field names the note lists before "and N more"
SHOWN = 3


def numeric_paths(node: Any, prefix: str) -> Iterator[str]:
    """Dotted paths of the numbers under ``node``; a list (a curve, a table) is one number."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from numeric_paths(value, f"{prefix}.{key}")
    elif isinstance(node, (int, float, list)) and not isinstance(node, bool):
        yield prefix


def unsourced(raw: Mapping[str, Any]) -> list[str]:
    """The numeric fields of the profile ``raw`` (as written, before defaults) that no
    ``sources:`` key names, itself or a section above it, in file order."""
    sources = raw.get("sources")
    keys = [str(k) for k in sources] if isinstance(sources, Mapping) else []
    return [
        path
        for section in SECTIONS
        for path in numeric_paths(raw.get(section) or {}, section)
        if not any(path == key or path.startswith(key + ".") for key in keys)
    ]


def unsourced_note(name: str, paths: list[str] | tuple[str, ...]) -> str | None:
    """One line naming the first few unsourced fields of profile ``name``; None when none."""
    if not paths:
        return None
    shown = ", ".join(paths[:SHOWN])
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return (
        f"hardware profile {name} has no source for {shown}{more}; add a sources: entry for each "
        "(docs/hardware.md)"
    )


def quick_run_note(name: str, provenance: Mapping[str, Any]) -> str | None:
    """One line when profile ``name`` was written by ``calibrate --quick`` (its provenance says
    so): the run's small grids and 20 ms timings check that calibration works on a machine;
    every GEMM past the grid's largest (512^3) takes that one's rate, so a large model's
    step comes out far too slow. None for any other profile."""
    if not provenance.get("quick"):
        return None
    return (
        f"hardware profile {name} was measured by calibrate --quick, a check that calibration "
        "runs, not a calibration: its GEMMs stop at 512^3 and larger ones take that rate; "
        "measure without --quick for predictions"
    )
