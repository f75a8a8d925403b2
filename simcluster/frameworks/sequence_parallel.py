"""The frameworks' rules on sequence parallelism, in one place: where a framework's tensor
parallelism has no form without it (torchtitan), where its mixture of experts needs it beside TP
(Megatron), and where a schedule runs only without it (Megatron-DeepSpeed's ZB-H1)."""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.model import ModelSpec
from simcluster.scenario import Scenario
from simcluster.schedules.zb_h1_ds import EXACT_NAME as ZBH1_DS_EXACT
from simcluster.schedules.zb_h1_ds import NAME as ZBH1_DS

#: the frameworks built on Megatron-Core's ModelParallelConfig; the first two launch through
#: Megatron-LM's own arguments (simcluster's loop runs Megatron-LM's flags)
_MEGATRON_CORE_MOE = (None, "megatron-core", "nemo", "megatron-bridge")
_MEGATRON_LM_ARGS = (None, "megatron-core")
#: the frameworks whose TP has no form without sequence parallelism: torchtitan's apply_tp
#: puts SequenceParallel on every norm
_TP_ALWAYS_SP = ("torchtitan",)


def check_tp_sequence_parallel(scenario: Scenario, model: ModelSpec) -> None:
    """Tensor parallelism without sequence parallelism where the framework has it: not in
    torchtitan, whose TP plan is always sequence-parallel; and Megatron runs a mixture of experts
    beside TP only with SP, as the MoE layer routes a sequence shard (each TP rank would route the
    whole sequence, and the expert-TP gather repeat every token tp times): Megatron-Core's
    ``ModelParallelConfig.__post_init__`` raises for ep > 1 with tp > 1, and Megatron-LM's
    ``validate_args`` asserts it for any MoE model with tp > 1."""
    par = scenario.parallel
    if par.tp == 1 or par.sequence_parallel:
        return
    if scenario.framework in _TP_ALWAYS_SP:
        raise UserError(
            "parallel.sequence_parallel",
            f"{scenario.framework}'s tensor parallelism is always sequence-parallel (its TP plan "
            "puts SequenceParallel on every norm); set parallel.sequence_parallel: true, or tp 1",
        )
    if not model.is_moe:
        return
    # ep 1 is a fix only where Megatron-LM's own check does not run
    fix = "set parallel.sequence_parallel: true" + ("" if scenario.framework in _MEGATRON_LM_ARGS else ", or ep 1")
    if par.ep > 1 and scenario.framework in _MEGATRON_CORE_MOE:
        raise UserError(
            "parallel.sequence_parallel",
            f"Megatron-Core runs ep={par.ep} beside tp={par.tp} only with sequence parallelism "
            f"(ModelParallelConfig raises without it); {fix}, or tp 1",
        )
    if scenario.framework in _MEGATRON_LM_ARGS:
        raise UserError(
            "parallel.sequence_parallel",
            f"Megatron-LM runs a mixture of experts beside tp={par.tp} only with sequence "
            f"parallelism (validate_args asserts it); {fix}, or tp 1",
        )


def runs_with_sequence_parallel(framework: str | None, schedule: str) -> bool:
    """Whether ``framework`` runs ``schedule`` with sequence parallelism: not Megatron-DeepSpeed's
    ZB-H1, which its arguments.py asserts against (``--enable-zbh1-pipeline``: "Sequence
    Parallel not tested")."""
    return not (framework == "deepspeed" and schedule in (ZBH1_DS, ZBH1_DS_EXACT))


def check_framework_sequence_parallel(framework: str | None, schedule: str, sequence_parallel: bool) -> None:
    """Refuse a schedule with sequence parallelism where the framework runs it without
    (:func:`runs_with_sequence_parallel`)."""
    if sequence_parallel and not runs_with_sequence_parallel(framework, schedule):
        raise UserError(
            "parallel.sequence_parallel",
            f"Megatron-DeepSpeed runs its ZB-H1 ('{schedule}') without sequence parallelism "
            "(arguments.py asserts it); set parallel.sequence_parallel: false, or schedule 1f1b",
        )
