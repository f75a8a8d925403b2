"""Whether pipeline sends overlap the next op: Megatron runs them that way only with virtual stages.

Megatron-LM's ``validate_args`` (megatron/training/arguments.py) sets
``virtual_pipeline_model_parallel_size = None`` and ``overlap_p2p_comm = False`` whenever no
virtual pipeline stages are configured ("non-interleaved schedule does not support overlapping
p2p communication"), whatever ``--overlap-p2p-communication`` said; its
``forward_backward_pipelining_without_interleaving`` then waits on every
``send_forward_recv_backward`` / ``send_backward_recv_forward`` (``_communicate`` with
``wait_on_reqs``) before the stage runs its next op. ``overlap.pp_comm``'s default (true,
Megatron's flag default) therefore holds for the interleaved schedule only: a 1F1B run of
Megatron-Core, NeMo or Megatron-Bridge, or of a scenario that names no framework (simcluster's
generic pipeline is Megatron's), blocks on its transfers unless the scenario says otherwise.
"""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.scenario import Scenario

#: frameworks whose 1F1B is Megatron-Core's forward_backward_pipelining_without_interleaving
#: (None: a scenario without a framework runs the generic, Megatron-like pipeline)
MEGATRON_1F1B = (None, "megatron-core", "nemo", "megatron-bridge")


def with_pipeline_p2p_overlap(scenario: Scenario) -> Scenario:
    """``scenario`` with ``overlap.pp_comm`` off where Megatron turns it off (1F1B without
    virtual stages) and the scenario did not write it; a written ``true`` there is refused for
    a named Megatron framework, which cannot run it."""
    par = scenario.parallel
    if par.pp == 1 or par.schedule != "1f1b" or not scenario.overlap.pp_comm:
        return scenario
    if scenario.framework not in MEGATRON_1F1B:
        return scenario
    if "overlap.pp_comm" in scenario.written:
        if scenario.framework is None:
            return scenario  # a generic pipeline that overlaps its sends: the user's model
        raise UserError(
            "overlap.pp_comm",
            f"{scenario.framework} overlaps pipeline sends only in the interleaved schedule "
            "(Megatron's validate_args turns overlap_p2p_comm off without virtual stages); "
            "drop overlap.pp_comm or set parallel.vpp > 1",
        )
    return scenario.model_copy(update={"overlap": scenario.overlap.model_copy(update={"pp_comm": False})})
