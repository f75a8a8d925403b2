"""torchtitan's start-up refusals (its ParallelDims, parallelize and config validation), with
those of the torch.distributed.pipelining schedules it runs."""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.frameworks.startup.facts import LayoutFacts, LayoutRule
from simcluster.scenario import Scenario


def _tensor_parallel(scenario: Scenario, facts: LayoutFacts) -> None:
    """torchtitan's tensor parallelism has no form without sequence parallelism: ``apply_tp``
    ("Apply tensor + sequence parallelism to every transformer block") puts SequenceParallel on
    every norm, so the preset turns it on with tp and an explicit false is refused."""
    par = scenario.parallel
    if par.tp > 1 and not par.sequence_parallel:
        raise UserError(
            "parallel.sequence_parallel",
            "torchtitan's tensor parallelism is always sequence-parallel (its TP plan puts "
            "SequenceParallel on every norm); set parallel.sequence_parallel: true, or tp 1",
        )


def _ddp(scenario: Scenario, facts: LayoutFacts) -> None:
    """torchtitan's zero 0 is DDP over ``data_parallel_replicate_degree``, applied only as 1-D data
    parallelism (``parallelize_llama``: "DDP has not supported > 1D parallelism"); its expert
    parallelism is carved from the FSDP shard ranks, which DDP has none of."""
    par = scenario.parallel
    others = [f"{name}={degree}" for name, degree in (("tp", par.tp), ("pp", par.pp), ("ep", par.ep)) if degree > 1]
    if par.zero == 0 and facts.dp > 1 and others:
        raise UserError(
            "parallel.zero",
            f"torchtitan's zero 0 is DDP, which it runs only as 1-D data parallelism (parallelize.py: "
            f"\"DDP has not supported > 1D parallelism\"), not beside {', '.join(others)}; use zero 3 "
            "(FSDP2, or HSDP with parallel.zero_shard)",
        )


def _async_tp(scenario: Scenario, facts: LayoutFacts) -> None:
    """torchtitan's async TP is an Inductor pass on the compiled blocks
    (``maybe_enable_async_tp``: "Async TP requires 'model' in --compile.components and
    --compile.enable"; every release since its ``enable_async_tensor_parallel``)."""
    if scenario.parallel.tp > 1 and scenario.overlap.tp_comm and scenario.training.elementwise == "eager":
        raise UserError(
            "overlap.tp_comm",
            "torchtitan's async TP needs the blocks compiled (\"Async TP requires 'model' in "
            "--compile.components\"); set training.elementwise: compiled-blocks or fused, or "
            "overlap.tp_comm: false",
        )


def _experts(scenario: Scenario, facts: LayoutFacts) -> None:
    """torchtitan splits routed experts over TP fully or not at all (``ParallelDims._validate``:
    "Currently we only support ETP=TP or ETP=1"); with etp 1 its EP mesh takes all of cp x tp and
    part of the FSDP shard ranks, so ep is a multiple of cp * tp."""
    par = scenario.parallel
    if par.ep == 1:
        return
    if facts.etp not in (1, par.tp):
        raise UserError(
            "parallel.etp",
            f"torchtitan runs expert TP at 1 or tp={par.tp} only (\"Currently we only support "
            f"ETP=TP or ETP=1\"), got etp={facts.etp}; use etp 1 or {par.tp}",
        )
    if facts.etp == 1 and par.ep % (par.cp * par.tp):
        raise UserError(
            "parallel.ep",
            f"torchtitan's expert parallelism at etp 1 spans the cp*tp={par.cp * par.tp} ranks and "
            f"part of the FSDP shard (ParallelDims asserts ep % (cp*tp) == 0), got ep={par.ep}; use "
            f"an ep that is a multiple of {par.cp * par.tp}, or etp {par.tp}",
        )


def _tied_pipeline(scenario: Scenario, facts: LayoutFacts) -> None:
    """torchtitan does not tie the embedding to the LM head across pipeline stages ("Weight tying
    is not supported with Pipeline Parallel")."""
    if facts.model.tied_embeddings and scenario.parallel.pp > 1:
        raise UserError(
            "parallel.pp",
            "torchtitan does not run tied embeddings under a pipeline (\"Weight tying is not "
            "supported with Pipeline Parallel\"); use pp 1, or model.tied_embeddings: false",
        )


def _sequence(scenario: Scenario, facts: LayoutFacts) -> None:
    """torchtitan splits the sequence over tp and into 2 * cp load-balanced chunks and asserts the
    whole product (``ParallelDims.seq_len_divisor``, tp * 2 * cp, pytorch/torchtitan#1312, June
    2025), even where Megatron's finer rule would pass."""
    par, seq = scenario.parallel, scenario.training.seq_len
    divisor = par.tp * 2 * par.cp
    if seq % divisor:
        below = seq - seq % divisor
        raise UserError(
            "training.seq_len",
            f"torchtitan needs seq_len divisible by tp*2*cp = {divisor} (ParallelDims.seq_len_divisor), "
            f"got {seq}; use seq_len {below or divisor} or {below + divisor}",
        )


#: PyTorch's schedules that refuse compiled stage modules
#: (``_check_torch_compile_compatibility``, pytorch/pytorch#162511; before it they failed at run
#: time, pytorch/pytorch#161904)
_NO_COMPILED_STAGES = ("interleaved-zb", "zbv-fixed", "dualpipev")


def _compiled_stages(scenario: Scenario, facts: LayoutFacts) -> None:
    """torchtitan compiles each block (``apply_compile``) before building the pipeline schedule,
    and PyTorch's zero-bubble and V schedules refuse stage modules holding an OptimizedModule."""
    par = scenario.parallel
    if par.pp > 1 and par.schedule in _NO_COMPILED_STAGES and scenario.training.elementwise != "eager":
        raise UserError(
            "parallel.schedule",
            f"PyTorch's '{par.schedule}' schedule refuses stage modules compiled by torch.compile "
            f"(training.elementwise {scenario.training.elementwise} is torchtitan's compile); set "
            "training.elementwise: eager, or schedule 1f1b or interleaved",
        )


#: torchtitan's checks, in the order a user meets them
CHECKS: tuple[LayoutRule, ...] = (
    _tensor_parallel, _ddp, _async_tp, _experts, _tied_pipeline, _sequence, _compiled_stages,
)  # fmt: skip
