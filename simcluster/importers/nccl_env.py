"""NCCL's channel settings of a launch script: its variables (``cluster.nccl_min_ctas`` and its
kin) and Megatron's per-communicator YAML (``cluster.nccl_communicators``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simcluster.errors import UserError
from simcluster.importers.flags import Flags
from simcluster.importers.result import Imported
from simcluster.nccl_ctas import COMMUNICATORS, MAX_CHANNELS

#: variable -> the cluster field that states it (simcluster/nccl_ctas.py: NCCL's rules)
NCCL_CHANNEL_VARIABLES = {
    "NCCL_MIN_CTAS": "nccl_min_ctas",
    "NCCL_MAX_CTAS": "nccl_max_ctas",
    "NCCL_MIN_NCHANNELS": "nccl_min_nchannels",
    "NCCL_MAX_NCHANNELS": "nccl_max_nchannels",
}


def nccl_channel_variables(variables: dict[str, str], cluster: dict[str, Any], out: Imported) -> None:
    """Each of :data:`NCCL_CHANNEL_VARIABLES` the script sets to a count NCCL accepts becomes its
    field, with a note; another value is noted and left out. ``NCCL_NVLS_ENABLE=0`` (NCCL's
    switch for NVLink SHARP, on by default where the NVSwitches can reduce) is ``cluster.nvls:
    false``; a 1 asks for nothing the profile does not already say."""
    if variables.get("NCCL_NVLS_ENABLE", "").strip() == "0":
        cluster["nvls"] = False
        out.notes.append("NCCL_NVLS_ENABLE=0: cluster.nvls false (no NVLS or NVLS_TREE algorithm)")
    for name, field in NCCL_CHANNEL_VARIABLES.items():
        raw = variables.get(name)
        if raw is None:
            continue
        text = raw.strip()
        if text.isdigit() and 1 <= int(text) <= MAX_CHANNELS:
            cluster[field] = int(text)
            out.notes.append(f"{name}={text}: cluster.{field} (every communicator's channels)")
        else:
            out.notes.append(f"{name}={text!r} left out: not a channel count from 1 to {MAX_CHANNELS}")


CONFIG_FLAG = "nccl-communicator-config-path"


def communicator_file(flags: Flags, script: Path, cluster: dict[str, Any], out: Imported) -> None:
    """``--nccl-communicator-config-path F`` when F is on this machine (as given, or beside the
    script): its groups' ``min_ctas`` / ``max_ctas`` become ``cluster.nccl_communicators``
    (Megatron-Core's ``get_nccl_options`` reads the same keys). A file not found leaves the flag
    to the skipped list, with how to write its groups."""
    given = flags.values.get(CONFIG_FLAG)
    if not given or len(given) != 1 or not given[0]:
        return
    path = next((p for p in (Path(given[0]), script.parent / given[0]) if p.is_file()), None)
    if path is None:
        return
    flags.has(CONFIG_FLAG)  # read: no longer left
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"--{CONFIG_FLAG}", f"{path} is not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"--{CONFIG_FLAG}", f"{path} is not a mapping of communicator names")
    found, dropped = _communicators(data, path)
    cluster["nccl_communicators"] = found
    note = f"--{CONFIG_FLAG} {path.name}: {len(found)} communicators' CTA limits as cluster.nccl_communicators"
    if dropped:
        note += f" ({', '.join(sorted(dropped))} not modelled)"
    out.notes.append(note)


def _communicators(data: dict[Any, Any], path: Path) -> tuple[dict[str, dict[str, int]], set[str]]:
    """The file's {group: {min_ctas, max_ctas}} (values checked), and what it gives that the
    simulator does not model: option keys, and names no Megatron-Core group reads (Megatron's
    ``get_nccl_options`` looks up its own names only, so a stray one does nothing there either)."""
    found: dict[str, dict[str, int]] = {}
    dropped: set[str] = set()
    for name, options in data.items():
        if name not in COMMUNICATORS or not isinstance(options, dict):
            dropped.add(f"group {name}")
            continue
        limits = {k: v for k, v in options.items() if k in ("min_ctas", "max_ctas")}
        bad = [k for k, v in limits.items() if type(v) is not int or not 1 <= v <= MAX_CHANNELS]
        if bad:
            raise UserError(f"--{CONFIG_FLAG}", f"{path}: {name}.{bad[0]} must be a whole number 1..{MAX_CHANNELS}")
        dropped |= set(map(str, options)) - {"min_ctas", "max_ctas"}
        if limits:
            found[str(name)] = limits
    return found, dropped
