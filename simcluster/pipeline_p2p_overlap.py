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

PyTorch's ``torch.distributed.pipelining`` ``Schedule1F1B`` (frameworks pytorch-ddp, torchtitan,
automodel) has no such flag and blocks where the stage turns: in ``_step_microbatches`` a
forward's send is fused with the next backward's receive (``fwd_send_bwd_recv``) and a
backward's with the next forward's receive, each batch waited on before the op runs; in the
warm-up (forwards) and cool-down (backwards) a send is fired after its op and waited on only
after the next op of the same kind has computed ("Clear previous chunk's forward sends"), and
the last one before the gradients are reduced. Its GPipe and multi-stage schedules wait on
their sends only at the end of a phase or step, which ``pp_comm: true`` models.
"""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.frameworks import PYTORCH_PIPELINING
from simcluster.frameworks.stacks import runs_megatron_core
from simcluster.scenario import Scenario
from simcluster.schedules import PipeOp


def with_pipeline_p2p_overlap(scenario: Scenario) -> Scenario:
    """``scenario`` with ``overlap.pp_comm`` off where Megatron turns it off (1F1B without
    virtual stages) and the scenario did not write it; a written ``true`` there is refused for
    a named Megatron framework, which cannot run it."""
    par = scenario.parallel
    if par.pp == 1 or par.schedule != "1f1b" or not scenario.overlap.pp_comm:
        return scenario
    if not runs_megatron_core(scenario.framework) and scenario.framework not in PYTORCH_PIPELINING:
        return scenario
    if "overlap.pp_comm" in scenario.written:
        if scenario.framework is None:
            return scenario  # a generic pipeline that overlaps its sends: the user's model
        if scenario.framework in PYTORCH_PIPELINING:
            raise UserError(
                "overlap.pp_comm",
                f"{scenario.framework}'s 1F1B (torch.distributed.pipelining Schedule1F1B) waits "
                "on each send where the stage turns between forwards and backwards; drop "
                "overlap.pp_comm, or use parallel.schedule: afab or interleaved, whose sends overlap",
            )
        raise UserError(
            "overlap.pp_comm",
            f"{scenario.framework} overlaps pipeline sends only in the interleaved schedule "
            "(Megatron's validate_args turns overlap_p2p_comm off without virtual stages); "
            "drop overlap.pp_comm or set parallel.vpp > 1",
        )
    return scenario.model_copy(update={"overlap": scenario.overlap.model_copy(update={"pp_comm": False})})


def waits_at_turns(scenario: Scenario) -> bool:
    """Whether a stage that does not overlap its sends waits on them only where it turns
    (torch's ``Schedule1F1B``) rather than after every op (Megatron's 1F1B)."""
    return scenario.framework in PYTORCH_PIPELINING and scenario.parallel.schedule == "1f1b"


def send_blocks(op: PipeOp, following: PipeOp | None) -> bool:
    """Under torch's ``Schedule1F1B``: ``op``'s send is waited on before ``following`` runs
    (the stage turns, or the step ends); otherwise it stays in flight until ``following`` has
    computed."""
    return following is None or (following.kind == "F") != (op.kind == "F")
