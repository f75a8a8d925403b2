"""sail-sg's Zero Bubble fork's start-up refusals: its ``validate_args`` additions (in
``megatron/arguments.py`` in the paper's release, ``megatron/core/zbpp_utils.py``
``validate_arguments`` later); only those both releases hold are here.

The fork lets ``--allow-padding-num-layers`` round the layers up to a multiple of pp (its
example scripts pass it), so a stage holds ceil(layers / pp) layers in its checks."""

from __future__ import annotations

import math

from simcluster.divisors import divisors, one_of
from simcluster.errors import UserError
from simcluster.frameworks.startup import megatron
from simcluster.frameworks.startup.facts import LayoutFacts, LayoutRule
from simcluster.scenario import Scenario

#: the schedules the fork runs through ``--enable-zero-bubble`` (its V schedules set it too)
ZERO_BUBBLE = ("zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-auto", "zbv", "v-half", "v-min", "v-auto")
#: its V schedules (``--zero-bubble-v-schedule``): two model chunks a stage
V_SHAPED = ("zbv", "v-half", "v-min", "v-auto")


def _per_stage(scenario: Scenario, facts: LayoutFacts) -> int:
    return math.ceil(facts.model.layers / scenario.parallel.pp)


def _pipeline(scenario: Scenario, facts: LayoutFacts) -> None:
    """"zero bubble must be enabled with pipeline parallelism" (both releases)."""
    par = scenario.parallel
    if par.pp == 1 and par.schedule in ZERO_BUBBLE:
        raise UserError(
            "parallel.schedule",
            f"sail-sg's fork runs its zero-bubble schedules ('{par.schedule}') only under a pipeline "
            "(validate_args: \"zero bubble must be enabled with pipeline parallelism\"); use pp 2 or "
            "more, or schedule 1f1b",
        )


def _v_layers(scenario: Scenario, facts: LayoutFacts) -> None:
    """Its V schedules split each stage's layers into two chunks: "zero bubble v schedule
    requires number of layers per pipeline stage to be even" (both releases)."""
    par = scenario.parallel
    if par.pp == 1 or par.schedule not in V_SHAPED or _per_stage(scenario, facts) % 2 == 0:
        return
    layers = facts.model.layers
    fits = divisors(facts.dp * par.pp, lambda p: 1 < p < layers and math.ceil(layers / p) % 2 == 0)
    other = f"pp {one_of(fits)}, or " if fits else ""
    raise UserError(
        "parallel.schedule",
        f"sail-sg's V schedules put an even number of layers on each stage (validate_args: \"number of "
        f"layers per pipeline stage to be even\", layers padded to a multiple of pp); {layers} layers over "
        f"pp={par.pp} are {_per_stage(scenario, facts)} a stage; use {other}schedule zb-1p",
    )


def _interleaving(scenario: Scenario, facts: LayoutFacts) -> None:
    """Its interleaving is ``--num-layers-per-virtual-pipeline-stage``, which must divide a
    stage's layers ("number of layers per pipeline stage must be divisible number of layers per
    virtual pipeline stage", both releases)."""
    par = scenario.parallel
    per_stage = _per_stage(scenario, facts)
    if par.schedule != "interleaved" or par.vpp <= 1 or per_stage % par.vpp == 0:
        return
    raise UserError(
        "parallel.vpp",
        f"sail-sg's fork interleaves whole layers per virtual stage, so vpp divides a stage's "
        f"{per_stage} layers (ceil({facts.model.layers}/pp={par.pp}); validate_args: \"number of layers "
        f"per pipeline stage must be divisible\"); use vpp {one_of(divisors(per_stage, lambda v: v > 1))}",
    )


def _post_validation(scenario: Scenario, facts: LayoutFacts) -> None:
    """Its optimizer post-validation runs only under a zero-bubble schedule (validate_args turns
    ``--enable-optimizer-post-validation`` off otherwise) and only in fp16 (``assert args.fp16,
    "zero bubble post validation"``), both releases."""
    par, tr = scenario.parallel, scenario.training
    if not tr.optimizer_post_validation:
        return
    if par.schedule not in ZERO_BUBBLE:
        raise UserError(
            "training.optimizer_post_validation",
            f"sail-sg's fork post-validates the optimizer step only under its zero-bubble schedules "
            f"(validate_args turns it off under '{par.schedule}'); set optimizer_post_validation: false, "
            "or schedule zb-1p, zb-2p or zbv",
        )
    if tr.precision != "fp16":
        raise UserError(
            "training.optimizer_post_validation",
            f"sail-sg's fork post-validates the optimizer step only in fp16 (validate_args: assert "
            f"args.fp16, \"zero bubble post validation\"; precision is {tr.precision}); set "
            "training.precision: fp16, or optimizer_post_validation: false",
        )


def _distributed_optimizer(scenario: Scenario, facts: LayoutFacts) -> None:
    """Its zero-bubble schedules run the distributed optimizer without Megatron's DP overlaps:
    the later release asserts "not supported yet because we didn't verify the correctness"
    (overlap_grad_reduce) and "the original code somehow doesn't work" (overlap_param_gather);
    the paper's release refuses the distributed optimizer under them outright."""
    par, ov = scenario.parallel, scenario.overlap
    if par.zero == 0 or par.schedule not in ZERO_BUBBLE or facts.dp == 1:
        return
    if ov.dp_grad_reduce or ov.param_gather:
        raise UserError(
            "overlap.dp_grad_reduce" if ov.dp_grad_reduce else "overlap.param_gather",
            f"sail-sg's fork runs its zero-bubble schedules with the distributed optimizer (zero={par.zero}) "
            "only without Megatron's DP overlaps (validate_args: \"not supported yet because we didn't "
            "verify the correctness\"); set overlap.dp_grad_reduce and overlap.param_gather false",
        )


#: the fork's checks, in the order its validate_args meets them, then Megatron-LM's MoE refusals
#: it keeps: expert parallelism beside TP only with sequence parallelism (the paper's release in
#: validate_args, "When using expert parallelism and tensor parallelism, sequence parallelism
#: must be used"; the later one in Megatron-Core's ModelParallelConfig) and never in fp16 (both
#: releases' validate_args: "Expert parallelism is not supported with fp16 training")
CHECKS: tuple[LayoutRule, ...] = (
    _pipeline, _v_layers, _interleaving, _post_validation, _distributed_optimizer, *megatron.LM_MOE_CHECKS,
)  # fmt: skip
