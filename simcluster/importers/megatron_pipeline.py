"""Megatron's pipeline-schedule flags beyond the stage split.

``--microbatch-group-size-per-virtual-pipeline-stage N``: the interleaved schedule runs N
microbatches through each model chunk in a row (pp when unset; ``parallel.microbatch_group``).
``--defer-embedding-wgrad-compute``: the last stage keeps each microbatch's LM-head input and
output gradient and runs the head's weight-gradient GEMMs in the flush, for the first
``--wgrad-deferral-limit`` microbatches (0, its default: all of them;
``parallel.defer_head_wgrad``, ``head_wgrad_deferral_limit``); Megatron's arguments.py turns the
deferral off without a pipeline, where it would change nothing.
"""

from __future__ import annotations

from typing import Any

from simcluster.importers.flags import Flags
from simcluster.importers.result import Imported

_GROUP = "microbatch-group-size-per-virtual-pipeline-stage"


def schedule_flags(flags: Flags, parallel: dict[str, Any], out: Imported) -> None:
    """``parallel.microbatch_group`` and the LM head's wgrad deferral from their flags."""
    group = flags.integer(_GROUP)
    if group is not None:
        if parallel.get("schedule") == "interleaved":
            parallel["microbatch_group"] = group
        else:
            out.notes.append(f"--{_GROUP} {group}: read by the interleaved schedule only, not run here")
    limit = flags.integer("wgrad-deferral-limit")
    if not flags.has("defer-embedding-wgrad-compute"):
        if limit is not None:
            out.notes.append(f"--wgrad-deferral-limit {limit}: without --defer-embedding-wgrad-compute, no effect")
        return
    if parallel.get("pp", 1) == 1:
        out.notes.append("--defer-embedding-wgrad-compute without a pipeline: off, as Megatron turns it off")
        return
    parallel["defer_head_wgrad"] = True
    if limit:
        parallel["head_wgrad_deferral_limit"] = limit
