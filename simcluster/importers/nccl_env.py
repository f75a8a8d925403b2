"""NCCL's channel variables a launch script sets: ``cluster.nccl_min_ctas`` and its kin."""

from __future__ import annotations

from typing import Any

from simcluster.importers.result import Imported
from simcluster.nccl_ctas import MAX_CHANNELS

#: variable -> the cluster field that states it (simcluster/nccl_ctas.py: NCCL's rules)
NCCL_CHANNEL_VARIABLES = {
    "NCCL_MIN_CTAS": "nccl_min_ctas",
    "NCCL_MAX_CTAS": "nccl_max_ctas",
    "NCCL_MIN_NCHANNELS": "nccl_min_nchannels",
    "NCCL_MAX_NCHANNELS": "nccl_max_nchannels",
}


def nccl_channel_variables(variables: dict[str, str], cluster: dict[str, Any], out: Imported) -> None:
    """Each of :data:`NCCL_CHANNEL_VARIABLES` the script sets to a count NCCL accepts becomes its
    field, with a note; another value is noted and left out."""
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
