"""Megatron-LM's activation-offload flags as scenario fields (``simcluster import megatron``)."""

from __future__ import annotations

from typing import Any, get_args

from simcluster.errors import UserError
from simcluster.importers.flags import Flags
from simcluster.importers.result import Imported
from simcluster.scenario.training import OffloadModule


def activation_offload(flags: Flags, training: dict[str, Any], out: Imported) -> None:
    """The activation offloads (Megatron-LM ``arguments.py``, fields of ``TransformerConfig``):
    ``--cpu-offloading-num-layers N`` (N > 0 turns ``cpu_offloading`` on in ``validate_args``;
    an older ``--cpu-offloading`` switch with it) as ``training.activation_offload_layers``, its
    activations only (``cpu_offloading_weights`` now defaults to False and TransformerEngine
    ignores weight offload); ``--fine-grained-activation-offloading --offload-modules ...`` as
    ``training.offload_modules`` (Megatron asserts the list is not empty),
    ``--fine-grained-offloading-max-inflight-offloads`` as ``training.offload_max_inflight`` and
    ``--min-offloaded-tensor-size`` as ``training.offload_min_elements``."""
    switch = flags.has("cpu-offloading")
    layers = flags.integer("cpu-offloading-num-layers")
    if layers:
        training["activation_offload_layers"] = layers
    elif switch:
        out.notes.append("--cpu-offloading without --cpu-offloading-num-layers: no layer offloaded")
    fine = flags.has("fine-grained-activation-offloading")
    modules = flags.words("offload-modules")
    cap = flags.integer("fine-grained-offloading-max-inflight-offloads")
    floor = flags.integer("min-offloaded-tensor-size")
    if not fine:
        given = [
            f"--{name}"
            for name, value in (
                ("offload-modules", modules or None),
                ("fine-grained-offloading-max-inflight-offloads", cap),
                ("min-offloaded-tensor-size", floor),
            )
            if value is not None
        ]
        if given:
            out.notes.append(
                f"{', '.join(given)} without --fine-grained-activation-offloading: nothing offloaded"
            )
        return
    if not modules:
        raise UserError(
            "--offload-modules", "Megatron requires it with --fine-grained-activation-offloading"
        )
    known = get_args(OffloadModule)
    bad = [m for m in modules if m not in known]
    if bad:
        raise UserError(
            "--offload-modules", f"'{bad[0]}' cannot be imported; known: {', '.join(known)}"
        )
    training["offload_modules"] = modules
    if cap is not None:
        training["offload_max_inflight"] = cap
    if floor is not None:
        training["offload_min_elements"] = floor
