"""What a framework's code refuses at start-up is refused here too (``frameworks/startup/``,
and PyTorch's Schedule1F1B in ``schedules/one_f_one_b.py``): one line naming the field, the
framework's own check and a fix, and the fix passes. Each case cites the assertion it mirrors:

- torchtitan ``parallelize_llama`` ("DDP has not supported > 1D parallelism"),
  ``maybe_enable_async_tp`` ("Async TP requires 'model' in --compile.components"),
  ``ParallelDims._validate`` ("Currently we only support ETP=TP or ETP=1"; ep % (cp*tp) at etp 1),
  ``ParallelDims.seq_len_divisor`` (tp * 2 * cp, pytorch/torchtitan#1312), its model validation
  ("Weight tying is not supported with Pipeline Parallel");
- torch.distributed.pipelining: ``Schedule1F1B`` (m >= pp, pytorch/pytorch#144702),
  ``_check_torch_compile_compatibility`` (pytorch/pytorch#162511);
- DeepSpeed ``engine._configure_zero_optimizer`` ("MoE not supported with Stage 3") and
  ``utils/groups.py`` (expert groups divide the data-parallel group);
- nanotron ``OneForwardOneBackwardPipelineEngine.train_batch_iter`` ("Number of microbatches
  ... must be at least PP_SIZE-1");
- sail-sg's Zero Bubble fork ``validate_args`` (both its releases: "zero bubble must be enabled
  with pipeline parallelism"; its V schedules' even layers a stage; whole layers per virtual
  stage; ``assert args.fp16, "zero bubble post validation"``, post-validation only under its
  zero-bubble schedules; the distributed optimizer without Megatron's DP overlaps; expert
  parallelism beside TP only with sequence parallelism, never in fp16);
- NeMo AutoModel's pipelining ``generate_hf_model_fqn_per_model_part`` ("Number of stages ...
  cannot exceed number of layers");
- Megatron-Core ``TransformerConfig.__post_init__`` (CPU offloading without a pipeline,
  recomputation or CUDA graphs; "Bias in Moe is only supported when ETP==1"; expert all-to-all
  overlap with a 16-bit model and without the mlp graph; the mlp graph on dense layers,
  moe_preprocess with moe_router; no layernorm / moe_act recompute under FP8 delayed scaling;
  the flex dispatcher without padding to capacity), ``ModelParallelConfig`` (the deferred
  embedding wgrad with gradient accumulation fusion) and Megatron-LM ``validate_args`` (CUDA graphs without full
  recomputation; "Expert parallelism is not supported with fp16 training"; --fp8-param-gather and
  --overlap-param-gather with the distributed optimizer; --overlap-param-gather with
  --overlap-grad-reduce).
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.scenario import load_scenario

DENSE, MOE, BRIDGE_MOE = "llama3-8b-8xh100", "mixtral-8x7b-32xh100", "qwen3-30b-a3b-16xh100"
TITAN = [("framework", "torchtitan"), ("parallel.zero", 3)]
ZB, ZB_FORK = "gpt-28b-zb2p-32xa100", [("framework", "zero-bubble")]
PIPE = [("cluster.gpus", 16), ("parallel.pp", 2), ("training.global_batch", 16), ("training.recompute", "none")]

# (shipped scenario, overrides, refused field, words of the framework's check, the fix's overrides)
REFUSED = {
    "torchtitan DDP beside TP": (
        DENSE, [("framework", "torchtitan"), ("parallel.zero", 0), ("parallel.tp", 2)],
        "parallel.zero", "DDP has not supported > 1D parallelism", [("parallel.zero", 3)],
    ),
    "torchtitan DDP beside PP": (
        DENSE, [("framework", "torchtitan"), ("parallel.zero", 0), *PIPE],
        "parallel.zero", "not beside pp=2", [("parallel.zero", 3)],
    ),
    "torchtitan async TP uncompiled": (
        DENSE, [*TITAN, ("parallel.tp", 8), ("overlap.tp_comm", True)],
        "overlap.tp_comm", "Async TP requires 'model' in --compile.components",
        [("training.elementwise", "compiled-blocks")],
    ),
    "torchtitan expert TP between 1 and tp": (
        MOE, [*TITAN, ("parallel.tp", 4), ("parallel.ep", 4), ("parallel.etp", 2)],
        "parallel.etp", "Currently we only support ETP=TP or ETP=1", [("parallel.etp", 1)],
    ),
    "torchtitan ep below cp*tp at etp 1": (
        MOE, [*TITAN, ("parallel.tp", 4), ("parallel.ep", 2), ("parallel.etp", 1)],
        "parallel.ep", "ep % (cp*tp) == 0", [("parallel.ep", 4)],
    ),
    "torchtitan tied embeddings under a pipeline": (
        DENSE, [*TITAN, ("model", "llama3.2-1b"), *PIPE],
        "parallel.pp", "Weight tying is not supported with Pipeline Parallel", [("parallel.pp", 1)],
    ),
    "torchtitan seq_len off tp*2*cp": (
        DENSE, [*TITAN, ("parallel.tp", 8), ("training.seq_len", 4104)],
        "training.seq_len", "divisible by tp*2*cp = 16 (ParallelDims.seq_len_divisor), got 4104; use seq_len 4096 or 4112",
        [("training.seq_len", 4096)],
    ),
    "torch V schedule on compiled blocks": (
        DENSE, [*TITAN, *PIPE, ("parallel.schedule", "zbv-fixed"), ("training.elementwise", "fused")],
        "parallel.schedule", "refuses stage modules compiled by torch.compile", [("training.elementwise", "eager")],
    ),
    "torch Schedule1F1B with fewer microbatches than stages": (
        DENSE, [*TITAN, ("cluster.gpus", 16), ("parallel.pp", 4), ("training.global_batch", 8)],
        "training.global_batch", "needs at least 4 microbatches (PyTorch's Schedule1F1B", [("training.global_batch", 16)],
    ),
    "DeepSpeed MoE under ZeRO-3": (
        MOE, [("framework", "deepspeed"), ("parallel.zero", 3)],
        "parallel.zero", "MoE not supported with Stage 3", [("parallel.zero", 1)],
    ),
    "DeepSpeed expert groups beyond dp": (
        MOE, [("framework", "deepspeed"), ("cluster.gpus", 16), ("parallel.tp", 4), ("parallel.ep", 8),
              ("training.global_batch", 64)],
        "parallel.ep", "must divide dp=4 (utils/groups.py); use ep 1, 2 or 4", [("parallel.ep", 4)],
    ),
    "Megatron-Core CPU offloading under a pipeline": (
        DENSE, [("framework", "megatron-core"), *PIPE, ("training.activation_offload_layers", 2)],
        "training.activation_offload_layers", "no support for Pipeline parallelism with CPU offloading",
        [("parallel.pp", 1)],
    ),
    "Megatron-Core CPU offloading with recomputation": (
        DENSE, [("training.activation_offload_layers", 2)],
        "training.activation_offload_layers", "CPU offloading does not work when activation recomputation is enabled",
        [("training.recompute", "none")],
    ),
    "Megatron-Core CPU offloading with CUDA graphs": (
        DENSE, [("framework", "nemo"), ("training.recompute", "none"), ("training.activation_offload_layers", 2),
                ("training.cuda_graphs", ["attn"])],
        "training.activation_offload_layers", "CUDA graphs not supported with CPU offloading",
        [("training.cuda_graphs", [])],
    ),
    "Megatron CUDA graphs under full recomputation": (
        DENSE, [("framework", "megatron-core"), ("training.recompute", "full"), ("training.cuda_graphs", ["attn"])],
        "training.cuda_graphs", "recompute_granularity must not be full when CUDA Graphs are enabled",
        [("training.recompute", "selective")],
    ),
    "Megatron-LM experts in fp16": (
        MOE, [("training.precision", "fp16")],
        "training.precision", "Expert parallelism is not supported with fp16 training", [("training.precision", "bf16")],
    ),
    "Megatron-Core biased experts split over expert TP": (
        MOE, [("framework", "megatron-bridge"), ("model", "gpt-oss-20b"), ("parallel.etp", None)],
        "parallel.etp", "Bias in Moe is only supported when ETP==1", [("parallel.etp", 1)],
    ),
    "Megatron-Core expert all-to-all overlap in fp32": (
        BRIDGE_MOE, [("training.precision", "fp32"), ("overlap.ep_comm", True)],
        "overlap.ep_comm", "only with a bf16 or fp16 model", [("training.precision", "bf16")],
    ),
    "Megatron-LM parameter gather without the gradient overlap": (
        DENSE, [("framework", "megatron-core"), ("overlap.dp_grad_reduce", False), ("overlap.param_gather", True)],
        "overlap.param_gather", "Must use --overlap-param-gather with --overlap-grad-reduce",
        [("overlap.dp_grad_reduce", True)],
    ),
    "Megatron-LM parameter gather without the distributed optimizer": (
        DENSE, [("framework", "megatron-core"), ("parallel.zero", 0), ("overlap.param_gather", True)],
        "overlap.param_gather", "only with the distributed optimizer or FSDP", [("parallel.zero", 1)],
    ),
    "Megatron-LM FP8 weights without the distributed optimizer": (
        DENSE, [("parallel.zero", 0), ("training.precision", "fp8"), ("training.fp8_param_gather", True)],
        "training.fp8_param_gather", "--fp8-param-gather only supported with distributed optimizer",
        [("parallel.zero", 1)],
    ),
    "Megatron-Core deferred head wgrad without accumulation fusion": (
        DENSE, [*PIPE, ("parallel.zero", 1), ("parallel.defer_head_wgrad", True)],
        "parallel.defer_head_wgrad", "only with gradient accumulation fusion",
        [("training.grad_accum_fusion", True)],
    ),
    "Megatron-Core layernorm recompute under FP8 delayed scaling": (
        DENSE, [("training.precision", "fp8"), ("training.recompute_modules", ["layernorm"])],
        "training.recompute_modules", "Delayed scaling does not support moe_act and layernorm recompute",
        [("training.fp8_recipe", "current")],
    ),
    "Megatron-Core mlp graph on a model of MoE layers only": (
        MOE, [("training.cuda_graphs", ["mlp"])],
        "training.cuda_graphs", "mlp cuda graph is only supported for dense layers",
        [("training.cuda_graphs", ["moe_router"])],
    ),
    "Megatron-Core moe_preprocess graph without the router's": (
        MOE, [("training.cuda_graphs", ["moe_preprocess"])],
        "training.cuda_graphs", "moe_preprocess cuda graph is only supported with moe_router cuda graph",
        [("training.cuda_graphs", ["moe_router", "moe_preprocess"])],
    ),
    "Megatron-Core mlp graph under the expert all-to-all overlap": (
        MOE, [("model", "deepseek-v2-lite"), ("cluster.gpus", 16), ("parallel.tp", 1), ("parallel.ep", 8),
              ("framework", "megatron-core"), ("training.cuda_graphs", ["mlp"]), ("overlap.ep_comm", True)],
        "training.cuda_graphs", "not supported with overlap_moe_expert_parallel_comm", [("overlap.ep_comm", False)],
    ),
    "nanotron 1F1B with fewer microbatches than pp-1": (
        DENSE, [("framework", "nanotron"), ("parallel.zero", 1), ("cluster.gpus", 16), ("parallel.pp", 4),
                ("parallel.tp", 1), ("training.global_batch", 8)],
        "training.global_batch", "must be at least PP_SIZE-1", [("parallel.schedule", "afab")],
    ),
    "Zero Bubble schedule without a pipeline": (
        ZB, [*ZB_FORK, ("parallel.pp", 1)],
        "parallel.schedule", "zero bubble must be enabled with pipeline parallelism", [("parallel.pp", 2)],
    ),
    "Zero Bubble V schedule with an odd number of layers a stage": (
        ZB, [*ZB_FORK, ("parallel.schedule", "zbv"), ("parallel.pp", 2)],
        "parallel.schedule", "number of layers per pipeline stage to be even", [("parallel.pp", 4)],
    ),
    "Zero Bubble interleaving that splits a layer": (
        ZB, [*ZB_FORK, ("parallel.schedule", "interleaved"), ("parallel.pp", 16), ("parallel.vpp", 3),
             ("training.optimizer_post_validation", False)],
        "parallel.vpp", "number of layers per pipeline stage must be divisible", [("parallel.vpp", 2)],
    ),
    "Zero Bubble post-validation in bf16": (
        ZB, [*ZB_FORK, ("training.precision", "bf16")],
        "training.optimizer_post_validation", "zero bubble post validation", [("training.precision", "fp16")],
    ),
    "Zero Bubble post-validation under 1F1B": (
        ZB, [*ZB_FORK, ("parallel.schedule", "1f1b")],
        "training.optimizer_post_validation", "turns it off under '1f1b'",
        [("training.optimizer_post_validation", False)],
    ),
    "Zero Bubble distributed optimizer beside Megatron's DP overlap": (
        ZB, [*ZB_FORK, ("cluster.gpus", 64), ("parallel.zero", 1), ("overlap.dp_grad_reduce", True)],
        "overlap.dp_grad_reduce", "not supported yet because we didn't verify the correctness",
        [("overlap.dp_grad_reduce", False)],
    ),
    "Zero Bubble experts beside TP without sequence parallelism": (
        MOE, [*ZB_FORK, ("parallel.sequence_parallel", False)],
        "parallel.sequence_parallel", "only with sequence parallelism", [("parallel.sequence_parallel", True)],
    ),
    "Zero Bubble experts in fp16": (
        MOE, [*ZB_FORK, ("training.precision", "fp16")],
        "training.precision", "Expert parallelism is not supported with fp16 training", [("training.precision", "bf16")],
    ),
    "AutoModel with more stages than layers": (
        DENSE, [("framework", "automodel"), ("parallel.zero", 3), ("model.layers", 8), *PIPE,
                ("parallel.schedule", "interleaved"), ("parallel.vpp", 5)],
        "parallel.vpp", "cannot exceed number of layers (8)", [("parallel.vpp", 4)],
    ),
    "DeepEP dispatch padded to capacity": (
        MOE, [("moe.dispatcher", "deepep"), ("moe.capacity_factor", 1.0), ("moe.pad_to_capacity", True)],
        "moe.pad_to_capacity", "refuses it with the flex dispatcher", [("moe.dispatcher", "alltoall")],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_frameworks_startup_refusal_is_one_line_and_its_fix_passes(case):
    scenario, overrides, field, words, fix = REFUSED[case]
    with pytest.raises(UserError) as err:
        build_context(load_scenario(scenario, overrides))
    assert err.value.field == field
    assert words in str(err.value) and "\n" not in str(err.value)
    build_context(load_scenario(scenario, [*overrides, *fix]))


def test_the_refusal_is_an_exit_code_2_without_a_traceback(cli):
    res = cli("memory", MOE, "--set", "framework=deepspeed", "--set", "parallel.zero=3")
    assert res.code == 2 and "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1
    assert "parallel.zero" in res.err and "MoE not supported with Stage 3" in res.err


def test_what_other_frameworks_run_is_not_refused():
    """The same combinations where the code that runs them allows them: Megatron's 1F1B with
    fewer microbatches than stages (its warm-up is min(p - rank - 1, m)), nanotron's with pp - 1; a Mixtral under
    DeepSpeed's ZeRO-3 without expert parallelism (Hugging Face's dense expert modules, no
    DeepSpeed-MoE layer); torchtitan's DDP alone; Megatron's seq_len rule (seq_len/cp divisible
    by tp) where torchtitan's would refuse."""
    few = [("cluster.gpus", 16), ("parallel.pp", 4), ("training.global_batch", 8)]
    megatron = [("framework", "megatron-core"), ("parallel.zero", 1)]
    assert build_context(load_scenario(DENSE, [*megatron, *few])).layout.microbatches == 2
    # nanotron's 1F1B at exactly pp - 1 microbatches (its bound), and its AFAB engine below it
    nanotron = [("framework", "nanotron"), ("parallel.zero", 1), ("parallel.tp", 1), *few]
    assert build_context(load_scenario(DENSE, [*nanotron, ("training.global_batch", 12)])).layout.microbatches == 3
    build_context(load_scenario(DENSE, [*nanotron, ("parallel.schedule", "afab")]))
    build_context(load_scenario(MOE, [("framework", "deepspeed"), ("parallel.zero", 3), ("parallel.ep", 1),
                                      ("parallel.etp", None)]))  # fmt: skip
    build_context(load_scenario(DENSE, [("framework", "torchtitan"), ("parallel.zero", 0)]))
    build_context(load_scenario(DENSE, [("framework", "megatron-core"), ("parallel.tp", 8), ("training.seq_len", 4104)]))


def test_the_megatron_presets_pair_their_overlaps_as_megatron_requires():
    """--overlap-param-gather needs --overlap-grad-reduce and the distributed optimizer, and
    --fp8-param-gather the distributed optimizer (validate_args): the presets leave them off
    where the scenario writes those off, instead of producing what Megatron refuses."""
    reduce_off = load_scenario(DENSE, [("framework", "megatron-core"), ("overlap.dp_grad_reduce", False)])
    assert not reduce_off.overlap.param_gather
    zero_0 = load_scenario(DENSE, [("framework", "nemo"), ("parallel.zero", 0)])
    assert not zero_0.overlap.param_gather
    assert load_scenario(DENSE, [("framework", "megatron-core")]).overlap.param_gather
    fp8 = [("framework", "megatron-bridge"), ("training.precision", "fp8")]
    assert load_scenario(DENSE, fp8).training.fp8_param_gather
    assert not load_scenario(DENSE, [*fp8, ("parallel.zero", 0)]).training.fp8_param_gather
