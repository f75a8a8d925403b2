"""What a framework's code refuses at start-up that simcluster's engine would run.

A scenario naming a framework runs that framework's code, so a combination it asserts against
(its arguments' or configs' checks) is an error here too, one line naming the framework's check
and a fix. The rules are a registry, ``STARTUP_CHECKS``: framework name (None: no framework,
simcluster's loop on Megatron-LM's flags) -> its checks, each given the validated scenario, the
model, the data-parallel degree and the resolved expert-TP degree. They run in ``build_layout``
after simcluster's own layout checks (so the degrees are known to be whole), and so in the fit
hints and the sweep, which skip a change the framework would refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simcluster.divisors import divisors, one_of
from simcluster.errors import UserError
from simcluster.model import ModelSpec
from simcluster.scenario import Scenario


@dataclass(frozen=True)
class LayoutFacts:
    """What a framework rule reads beside the scenario: the model, dp and the expert TP degree."""

    model: ModelSpec
    dp: int
    etp: int


LayoutRule = Callable[[Scenario, LayoutFacts], None]


def _torchtitan_ddp(scenario: Scenario, facts: LayoutFacts) -> None:
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


def _torchtitan_async_tp(scenario: Scenario, facts: LayoutFacts) -> None:
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


def _torchtitan_experts(scenario: Scenario, facts: LayoutFacts) -> None:
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


def _torchtitan_tied_pipeline(scenario: Scenario, facts: LayoutFacts) -> None:
    """torchtitan does not tie the embedding to the LM head across pipeline stages ("Weight tying
    is not supported with Pipeline Parallel")."""
    if facts.model.tied_embeddings and scenario.parallel.pp > 1:
        raise UserError(
            "parallel.pp",
            "torchtitan does not run tied embeddings under a pipeline (\"Weight tying is not "
            "supported with Pipeline Parallel\"); use pp 1, or model.tied_embeddings: false",
        )


def _torchtitan_sequence(scenario: Scenario, facts: LayoutFacts) -> None:
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


def _torchtitan_compiled_stages(scenario: Scenario, facts: LayoutFacts) -> None:
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


def _deepspeed_experts(scenario: Scenario, facts: LayoutFacts) -> None:
    """DeepSpeed-MoE's expert groups are slices of each data-parallel group
    (``utils/groups.py``: ``_ensure_divisibility(dp_world_size, expert_parallel_size_)``), and its
    engine refuses its MoE layers under ZeRO-3 (``_configure_zero_optimizer``: "MoE not supported
    with Stage 3"). ep 1 is not refused: a mixture of experts written as dense modules (Hugging
    Face's Mixtral under ZeRO-3) has no DeepSpeed-MoE layer."""
    par = scenario.parallel
    if par.ep == 1:
        return
    if par.zero == 3:
        raise UserError(
            "parallel.zero",
            f"DeepSpeed refuses its MoE layers (ep={par.ep}) under ZeRO-3 (engine.py: \"MoE not "
            "supported with Stage 3\"); use zero 2 or lower, or ep 1",
        )
    if facts.dp % par.ep:
        fixes = one_of(divisors(facts.dp, lambda d: facts.model.experts % d == 0))
        raise UserError(
            "parallel.ep",
            f"DeepSpeed-MoE draws its expert groups from the data-parallel ranks: ep={par.ep} must "
            f"divide dp={facts.dp} (utils/groups.py); use ep {fixes}",
        )


def _megatron_cpu_offloading(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core's activation offload (``--cpu-offloading``, ``training.activation_offload_layers``)
    runs alone: ``TransformerConfig.__post_init__`` raises under a pipeline ("no support for
    Pipeline parallelism with CPU offloading"), with recomputation ("CPU offloading does not work
    when activation recomputation is enabled") and with partial CUDA graphs ("CUDA graphs not
    supported with CPU offloading")."""
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
    if tr.cuda_graphs:
        raise UserError(
            "training.activation_offload_layers",
            "Megatron-Core's CPU offloading does not run with partial CUDA graphs (TransformerConfig: "
            "\"CUDA graphs not supported with CPU offloading\"); use cuda_graphs [], or "
            "activation_offload_layers 0",
        )


def _megatron_cuda_graphs(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron's partial CUDA graphs replay each layer's captured forward, which a full
    recomputation would rerun outside the graph (``validate_args``: "recompute_granularity must
    not be full when CUDA Graphs are enabled"; current ``TransformerConfig``: full recompute only
    with full-iteration graphs)."""
    tr = scenario.training
    if tr.cuda_graphs and tr.recompute == "full":
        raise UserError(
            "training.cuda_graphs",
            "Megatron does not capture layers in CUDA graphs under full recomputation "
            "(\"recompute_granularity must not be full when CUDA Graphs are enabled\"); use "
            "cuda_graphs [], or recompute selective or none",
        )


def _megatron_expert_bias(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core splits biased experts over expert TP only at etp 1 (``TransformerConfig``:
    "Bias in Moe is only supported when ETP==1"); its default etp is tp."""
    if facts.model.is_moe and facts.model.has_bias("mlp") and facts.etp > 1:
        default = " (etp defaults to tp, as Megatron-Core's expert_tensor_parallel_size)" if scenario.parallel.etp is None else ""
        raise UserError(
            "parallel.etp",
            f"Megatron-Core runs experts with biases only at etp 1 (TransformerConfig: \"Bias in Moe is "
            f"only supported when ETP==1\"), got etp={facts.etp}{default}; set parallel.etp: 1",
        )


def _megatron_lm_fp16_experts(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-LM's ``validate_args``: "Expert parallelism is not supported with fp16 training"."""
    if scenario.parallel.ep > 1 and scenario.training.precision == "fp16":
        raise UserError(
            "training.precision",
            f"Megatron-LM does not run expert parallelism (ep={scenario.parallel.ep}) in fp16 "
            "(validate_args: \"Expert parallelism is not supported with fp16 training\"); use bf16, "
            "or ep 1",
        )


def _megatron_ep_overlap_dtype(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-Core's overlapped expert all-to-alls run with a 16-bit model only
    (``TransformerConfig``: "overlap_moe_expert_parallel_comm is only supported with bf16 or fp16
    model"; FP8 training keeps a bf16 model)."""
    if scenario.overlap.ep_comm and scenario.training.precision == "fp32":
        raise UserError(
            "overlap.ep_comm",
            "Megatron-Core overlaps the expert all-to-alls only with a bf16 or fp16 model "
            "(TransformerConfig asserts it); use precision bf16, or overlap.ep_comm: false",
        )


def _megatron_defer_head_wgrad(scenario: Scenario, facts: LayoutFacts) -> None:
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


def _megatron_fp8_recompute(scenario: Scenario, facts: LayoutFacts) -> None:
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


def _megatron_graph_scopes(scenario: Scenario, facts: LayoutFacts) -> None:
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


def _megatron_lm_param_gather(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-LM's ``validate_args`` overlaps the parameter all-gather only beside the
    overlapped gradient reduction ("Must use --overlap-param-gather with --overlap-grad-reduce")
    and with the distributed optimizer or FSDP ("--overlap-param-gather only supported with
    distributed optimizer"). The preset pairs them (``megatron._param_gather``), so these fire on
    what the scenario wrote."""
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


def _megatron_lm_fp8_params(scenario: Scenario, facts: LayoutFacts) -> None:
    """Megatron-LM keeps FP8 weights only with a sharded optimizer state or FSDP to gather them
    (``validate_args``: "--fp8-param-gather only supported with distributed optimizer")."""
    if scenario.training.fp8_param_gather and scenario.parallel.zero == 0:
        raise UserError(
            "training.fp8_param_gather",
            "Megatron-LM keeps FP8 weights only with the distributed optimizer or FSDP (validate_args: "
            "\"--fp8-param-gather only supported with distributed optimizer\"); set parallel.zero: 1, "
            "or fp8_param_gather: false",
        )


#: checks from Megatron-Core's TransformerConfig, which NeMo and Megatron-Bridge build on
_MEGATRON_CORE = (
    _megatron_cpu_offloading, _megatron_cuda_graphs, _megatron_graph_scopes, _megatron_expert_bias,
    _megatron_ep_overlap_dtype, _megatron_defer_head_wgrad, _megatron_fp8_recompute,
)  # fmt: skip
#: with Megatron-LM's own validate_args (no framework: simcluster's loop runs its flags)
_MEGATRON_LM = (*_MEGATRON_CORE, _megatron_lm_fp16_experts, _megatron_lm_fp8_params)

#: framework name (None: no framework) -> the start-up refusals of its code
STARTUP_CHECKS: dict[str | None, tuple[LayoutRule, ...]] = {
    None: _MEGATRON_LM,
    # param_gather defaults on in simcluster's schema, and framework-less cases spell out other
    # frameworks' DP overlaps: the pairing is Megatron-LM's, checked where it is named
    "megatron-core": (*_MEGATRON_LM, _megatron_lm_param_gather),
    "nemo": _MEGATRON_CORE,
    "megatron-bridge": _MEGATRON_CORE,
    "torchtitan": (
        _torchtitan_ddp, _torchtitan_async_tp, _torchtitan_experts, _torchtitan_tied_pipeline,
        _torchtitan_sequence, _torchtitan_compiled_stages,
    ),  # fmt: skip
    "deepspeed": (_deepspeed_experts,),
}


def check_framework_startup(scenario: Scenario, model: ModelSpec, dp: int, etp: int) -> None:
    """Run the named framework's checks (``STARTUP_CHECKS``) on a layout simcluster's checks passed."""
    facts = LayoutFacts(model=model, dp=dp, etp=etp)
    for rule in STARTUP_CHECKS.get(scenario.framework, ()):
        rule(scenario, facts)
