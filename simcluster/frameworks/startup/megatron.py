"""Megatron's start-up refusals: Megatron-Core's TransformerConfig and ModelParallelConfig (which
NeMo and Megatron-Bridge build on) and Megatron-LM's validate_args."""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.frameworks.startup.facts import LayoutFacts, LayoutRule
from simcluster.full_iteration import captures_iteration
from simcluster.layout_checks import etp_default_note
from simcluster.scenario import Scenario


def _experts_beside_tp(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core runs expert parallelism beside TP only with sequence parallelism, as its MoE
    layer routes a sequence shard (each TP rank would route the whole sequence, and the expert-TP
    gather repeat every token tp times): ``ModelParallelConfig.__post_init__`` raises "When using
    expert parallelism and tensor parallelism, sequence parallelism must be used"."""
    par = scenario.parallel
    if facts.model.is_moe and par.ep > 1 and par.tp > 1 and not par.sequence_parallel:
        raise UserError(
            "parallel.sequence_parallel",
            f"Megatron-Core runs ep={par.ep} beside tp={par.tp} only with sequence parallelism "
            "(ModelParallelConfig raises without it); set parallel.sequence_parallel: true, or ep 1, or tp 1",
        )


def _lm_moe_beside_tp(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-LM asserts sequence parallelism for any mixture of experts beside TP, at any ep
    (``validate_args``' MoE spec check), before Megatron-Core's config is built; NeMo and
    Megatron-Bridge build their configs without it, where only the ep > 1 rule applies."""
    par = scenario.parallel
    if facts.model.is_moe and par.tp > 1 and not par.sequence_parallel:
        raise UserError(
            "parallel.sequence_parallel",
            f"Megatron-LM runs a mixture of experts beside tp={par.tp} only with sequence "
            "parallelism (validate_args asserts it); set parallel.sequence_parallel: true, or tp 1",
        )


def _cpu_offloading(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core's activation offload (``--cpu-offloading``, ``training.activation_offload_layers``)
    runs alone: ``TransformerConfig.__post_init__`` raises under a pipeline ("no support for
    Pipeline parallelism with CPU offloading"), with recomputation ("CPU offloading does not work
    when activation recomputation is enabled") and with partial CUDA graphs ("CUDA graphs not
    supported with CPU offloading"; the full-iteration graph takes it)."""
    tr = scenario.training
    if tr.activation_offload_layers == 0:
        return
    if scenario.parallel.pp > 1:
        raise UserError(
            "training.activation_offload_layers",
            f"Megatron-Core's CPU offloading does not run under a pipeline (pp={scenario.parallel.pp}; "
            "TransformerConfig: \"no support for Pipeline parallelism with CPU offloading\"); use pp 1, "
            "or activation_offload_layers 0",
        )
    if tr.recompute != "none":
        raise UserError(
            "training.activation_offload_layers",
            f"Megatron-Core's CPU offloading does not run with recompute {tr.recompute} (TransformerConfig: "
            "\"CPU offloading does not work when activation recomputation is enabled\"); use recompute "
            "none, or activation_offload_layers 0",
        )
    if tr.cuda_graphs and not captures_iteration(tr.cuda_graphs):
        raise UserError(
            "training.activation_offload_layers",
            "Megatron-Core's CPU offloading does not run with partial CUDA graphs (TransformerConfig: "
            "\"CUDA graphs not supported with CPU offloading\"); use cuda_graphs [], or "
            "activation_offload_layers 0",
        )


def _fine_grained_offloading(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core's fine-grained activation offloading (``training.offload_modules``) refuses
    TransformerEngine's whole-layer one ("fine_grained_activation_offloading cannot be enabled
    with cpu_offloading") and the output projection's input without the attention's ("the input
    of attn_proj is the output of core_attn, which is needed in core_attn.backward()")."""
    modules = scenario.training.offload_modules
    if not modules:
        return
    if scenario.training.activation_offload_layers:
        raise UserError(
            "training.offload_modules",
            "Megatron-Core's fine-grained activation offloading cannot run with its CPU offloading "
            "(TransformerConfig: \"fine_grained_activation_offloading cannot be enabled with cpu_offloading\"); "
            "set activation_offload_layers 0, or offload_modules []",
        )
    if "attn_proj" in modules and "core_attn" not in modules:
        raise UserError(
            "training.offload_modules",
            "attn_proj's input is core_attn's output, which core_attn's backward needs (Megatron-Core "
            "asserts both); add core_attn, or drop attn_proj",
        )


def _cuda_graphs(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron's partial CUDA graphs replay each layer's captured forward, which a full
    recomputation would rerun outside the graph (``validate_args``: "recompute_granularity must
    not be full when CUDA Graphs are enabled"; current ``TransformerConfig``: full recompute only
    with full-iteration graphs, which capture the rerun too)."""
    tr = scenario.training
    if tr.cuda_graphs and tr.recompute == "full" and not captures_iteration(tr.cuda_graphs):
        raise UserError(
            "training.cuda_graphs",
            "Megatron does not capture layers in CUDA graphs under full recomputation "
            "(\"recompute_granularity must not be full when CUDA Graphs are enabled\"); use "
            "cuda_graphs [], or recompute selective or none",
        )


def _expert_bias(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core splits biased experts over expert TP only at etp 1 (``TransformerConfig``:
    "Bias in Moe is only supported when ETP==1"); its default etp is tp."""
    if facts.model.is_moe and facts.model.has_bias("mlp") and facts.etp > 1:
        default = etp_default_note(scenario.parallel)
        raise UserError(
            "parallel.etp",
            f"Megatron-Core runs experts with biases only at etp 1 (TransformerConfig: \"Bias in Moe is "
            f"only supported when ETP==1\"), got etp={facts.etp}{default}; set parallel.etp: 1",
        )


def _lm_fp16_experts(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-LM's ``validate_args``: "Expert parallelism is not supported with fp16 training"."""
    if scenario.parallel.ep > 1 and scenario.training.precision == "fp16":
        raise UserError(
            "training.precision",
            f"Megatron-LM does not run expert parallelism (ep={scenario.parallel.ep}) in fp16 "
            "(validate_args: \"Expert parallelism is not supported with fp16 training\"); use bf16, "
            "or ep 1",
        )


def _ep_overlap_dtype(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core's overlapped expert all-to-alls run with a 16-bit model only
    (``TransformerConfig``: "overlap_moe_expert_parallel_comm is only supported with bf16 or fp16
    model"; FP8 training keeps a bf16 model)."""
    if scenario.overlap.ep_comm and scenario.training.precision == "fp32":
        raise UserError(
            "overlap.ep_comm",
            "Megatron-Core overlaps the expert all-to-alls only with a bf16 or fp16 model "
            "(TransformerConfig asserts it); use precision bf16, or overlap.ep_comm: false",
        )


def _defer_head_wgrad(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core defers the LM head's weight gradient into the fp32 main gradient its fused
    GEMM accumulates into (``ModelParallelConfig``: "Cannot defer embedding wgrad compute when
    gradient accumulation fusion is not used")."""
    if scenario.parallel.defer_head_wgrad and not scenario.training.grad_accum_fusion:
        raise UserError(
            "parallel.defer_head_wgrad",
            "Megatron-Core defers the LM head's weight gradient only with gradient accumulation "
            "fusion (ModelParallelConfig raises without it); set training.grad_accum_fusion: true, "
            "or defer_head_wgrad: false",
        )


def _fp8_recompute(scenario: Scenario, facts: LayoutFacts) -> None:
    """FP8 delayed scaling keeps amax histories a recomputed norm or expert activation would
    update twice (``TransformerConfig``: "Delayed scaling does not support moe_act and layernorm
    recompute for fp8"; TransformerEngine before 2.6 refused them under every recipe)."""
    tr = scenario.training
    rerun = sorted(tr.recomputed & {"layernorm", "moe_act"})
    if rerun and tr.precision == "fp8" and tr.fp8_recipe == "delayed":
        raise UserError(
            "training.recompute_modules",
            f"Megatron-Core does not recompute {' or '.join(rerun)} under FP8 delayed scaling "
            "(TransformerConfig: \"Delayed scaling does not support moe_act and layernorm recompute\"); "
            "set training.fp8_recipe: current, or drop them",
        )


def _graph_scopes(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core's partial CUDA graph scopes (``TransformerConfig.__post_init__``): the mlp
    scope captures dense MLPs ("mlp cuda graph is only supported for dense layers"), the MoE
    preprocess is captured with its router ("moe_preprocess cuda graph is only supported with
    moe_router cuda graph"), and the expert all-to-all overlap splits the MLP's forward and
    backward apart ("CUDA graph scope on moe and mlp is not supported with
    overlap_moe_expert_parallel_comm")."""
    graphs, model = scenario.training.cuda_graphs, facts.model
    if "mlp" in graphs and model.is_moe and all(model.is_moe_layer(i) for i in range(model.layers)):
        raise UserError(
            "training.cuda_graphs",
            "Megatron-Core's mlp graph captures dense MLPs and every layer of this model is a mixture "
            "of experts (\"mlp cuda graph is only supported for dense layers\"); use moe_router, or drop mlp",
        )
    if "moe_preprocess" in graphs and "moe_router" not in graphs:
        raise UserError(
            "training.cuda_graphs",
            "Megatron-Core captures moe_preprocess only with moe_router (\"moe_preprocess cuda graph is "
            "only supported with moe_router cuda graph\"); add moe_router, or drop moe_preprocess",
        )
    if "mlp" in graphs and scenario.overlap.ep_comm:
        raise UserError(
            "training.cuda_graphs",
            "Megatron-Core does not capture the mlp scope under the expert all-to-all overlap "
            "(\"CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm\"); "
            "drop mlp, or set overlap.ep_comm: false",
        )


def _lm_param_gather(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-LM's ``validate_args`` overlaps the parameter all-gather only beside the
    overlapped gradient reduction ("Must use --overlap-param-gather with --overlap-grad-reduce")
    and with the distributed optimizer or FSDP ("--overlap-param-gather only supported with
    distributed optimizer"). The preset pairs them (``frameworks.megatron._param_gather``), so
    these fire on what the scenario wrote."""
    overlap = scenario.overlap
    if overlap.param_gather and scenario.parallel.zero == 0:
        raise UserError(
            "overlap.param_gather",
            "Megatron-LM overlaps a parameter all-gather only with the distributed optimizer or FSDP "
            "(validate_args asserts it), and zero 0 gathers nothing; set parallel.zero: 1, or "
            "overlap.param_gather: false",
        )
    if overlap.param_gather and not overlap.dp_grad_reduce and scenario.parallel.zero in (1, 2):
        raise UserError(
            "overlap.param_gather",
            "Megatron-LM overlaps the parameter all-gather only with the gradient reduction "
            "overlapped (validate_args: \"Must use --overlap-param-gather with --overlap-grad-reduce\"); "
            "set overlap.dp_grad_reduce: true, or overlap.param_gather: false",
        )


def _lm_fp8_params(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-LM keeps FP8 weights only with a sharded optimizer state or FSDP to gather them
    (``validate_args``: "--fp8-param-gather only supported with distributed optimizer"). A
    LoRA run's FP8 weights are frozen, never stepped nor gathered: NeMo builds them in FP8
    (``fp8_params``, te.fp8_model_init) beside a plain fused Adam over the adapters."""
    if scenario.training.fp8_param_gather and scenario.parallel.zero == 0 and scenario.lora.rank == 0:
        raise UserError(
            "training.fp8_param_gather",
            "Megatron-LM keeps FP8 weights only with the distributed optimizer or FSDP (validate_args: "
            "\"--fp8-param-gather only supported with distributed optimizer\"); set parallel.zero: 1, "
            "or fp8_param_gather: false",
        )


#: checks from Megatron-Core's TransformerConfig and ModelParallelConfig, which NeMo and
#: Megatron-Bridge build on
CORE_CHECKS: tuple[LayoutRule, ...] = (
    _experts_beside_tp, _cpu_offloading, _fine_grained_offloading, _cuda_graphs, _graph_scopes,
    _expert_bias, _ep_overlap_dtype, _defer_head_wgrad, _fp8_recompute,
)  # fmt: skip
#: the MoE refusals a fork of Megatron-LM keeps from it (sail-sg's Zero Bubble fork, both
#: releases: its validate_args, and Megatron-Core's ModelParallelConfig the later one kept)
LM_MOE_CHECKS: tuple[LayoutRule, ...] = (_experts_beside_tp, _lm_fp16_experts)
#: with Megatron-LM's own validate_args (no framework: simcluster's loop runs its flags)
LM_CHECKS: tuple[LayoutRule, ...] = (_lm_moe_beside_tp, *CORE_CHECKS, _lm_fp16_experts, _lm_fp8_params)
#: megatron-core's: its preset pairs param_gather with the gradient overlap (param_gather defaults
#: on in simcluster's schema, and framework-less cases spell out other frameworks' DP overlaps)
MEGATRON_CORE_CHECKS: tuple[LayoutRule, ...] = (*LM_CHECKS, _lm_param_gather)
