"""Megatron's family as frameworks: Megatron-Core, NeMo, Megatron-Bridge, the Megatron-LM of
the 2021/2023 papers, and sail-sg's Zero Bubble fork."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simcluster.frameworks.base import (
    Defaults,
    parallel_degree,
    parallel_flag,
    raw_section,
    zero_stage,
)


def megatron_core(raw: Mapping[str, Any]) -> Defaults:
    """Megatron-Core's defaults for a raw scenario, as NVIDIA's performance recipes run it."""
    # the distributed optimizer (ZeRO-1) and sequence parallelism with TP: the overlaps below
    # need them (Megatron refuses --overlap-param-gather without --use-distributed-optimizer and
    # --tp-comm-overlap without --sequence-parallel), and every NeMo / Megatron-Bridge recipe
    # and README benchmark sets both
    parallel: dict[str, Any] = {"zero": 1}
    if parallel_degree(raw, "tp", 1) > 1:
        parallel["sequence_parallel"] = True
    return {
        "parallel": parallel,
        "overlap": {
            "dp_grad_reduce": True, "param_gather": _param_gather(raw), "tp_comm": True, "pp_comm": True,
        },  # fmt: skip
        "training": {"grad_accum_fusion": True, "elementwise": "fused"},
        # Megatron-LM's defaults for its DDP buckets: --check-for-nan-in-loss-and-grad is on and
        # averaging is a 1/dp scaling before the collective (no --ddp-average-in-collective);
        # NeMo's and Megatron-Bridge's performance recipes turn both off
        # buckets as its DistributedDataParallel sizes them (bucket_size None: max(40M, 1M x dp)
        # parameters) and only on pipeline rank 0's first model chunk
        "dp": {
            "nan_check": True,
            "prescale": True,
            "zero_grad_buffer": True,
            "bucket_mb": "megatron-core",
            "bucket_stages": "first",
        },
    }


def _param_gather(raw: Mapping[str, Any]) -> bool:
    """--overlap-param-gather as the recipes pair it: with the gradient reduce-scatter overlapped
    and the distributed optimizer, which Megatron-LM's validate_args requires of it ("Must use
    --overlap-param-gather with --overlap-grad-reduce"; "only supported with distributed
    optimizer"): off where the scenario writes either one off."""
    reduce_off = raw_section(raw, "overlap").get("dp_grad_reduce") is False
    return not (reduce_off or _writes_zero_0(raw))


def _writes_zero_0(raw: Mapping[str, Any]) -> bool:
    """Whether a raw scenario writes zero 0 (no distributed optimizer; unwritten, the preset's 1)."""
    return "zero" in raw_section(raw, "parallel") and zero_stage(raw) == 0


def _gathers_with_optimizer_step(raw: Mapping[str, Any]) -> bool:
    """Whether NeMo 2's and Megatron-Bridge's performance scripts set
    overlap_param_gather_with_optimizer_step: with interleaved stages (pp and vpp > 1; with dp > 1,
    below which there is nothing to reduce), not for MXFP8 or NVFP4 (Bridge's overrides skip
    them; the block recipe is taken as MXFP8). Megatron-Core's get_model then disables bucketing
    on every chunk ("disable_bucketing=(model_chunk_idx > 0) or
    overlap_param_gather_with_optimizer_step")."""
    training = raw_section(raw, "training")
    precision, recipe = training.get("precision"), training.get("fp8_recipe")
    block = precision == "nvfp4" or (precision == "fp8" and recipe == "block")
    return parallel_degree(raw, "pp", 1) > 1 and parallel_degree(raw, "vpp", 1) > 1 and not block


def nemo(raw: Mapping[str, Any]) -> Defaults:
    """NeMo 2's and Megatron-Bridge's: Megatron-Core's without the bucket NaN check and 1/dp pass,
    with their comm-overlap config's buckets and their FP8 recipes' FP8 weights."""
    # Megatron-Core under NeMo 2 / Megatron-Bridge's performance recipes: their scripts turn the
    # bucket NaN check off ("Disable local gradient checker at non-debugging mode") and the
    # recipes average in the collective (average_in_collective=True: no 1/dp pass, and
    # _ParamAndGradBucketGroup.start_grad_sync then asks for torch.distributed.ReduceOp.AVG)
    defaults = megatron_core(raw)
    defaults["dp"].update(nan_check=False, prescale=False, reduce_op="avg")
    # the loss as TransformerEngine's parallel cross-entropy: NeMo 2's GPTConfig and Bridge's
    # GPTModelProvider set cross_entropy_loss_fusion True, and NeMo's performance scripts since
    # 25.04 (set_primary_perf_configs: "enable cross entropy fusion with TE kernel") and Bridge's
    # recipes and scripts set cross_entropy_fusion_impl "te" (earlier NeMo releases: dated)
    defaults["training"] = {**defaults.get("training", {}), "fused_cross_entropy": "te"}
    if parallel_degree(raw, "zero", 1) in (1, 2):  # unwritten: the preset's distributed optimizer
        # with the distributed optimizer their comm-overlap config gives Megatron-Core's DDP
        # buckets of 128 Mi parameters (NeMo 2's MegatronCommOverlapCallback and Megatron-Bridge's
        # CommOverlapConfig, _get_optimizer_overlap_cfgs: bucket_size = 128 * 1024 * 1024 when
        # dp > 1); Megatron FSDP (zero 3) and the plain DDP (zero 0) keep Megatron-Core's default
        defaults["dp"]["bucket_mb"] = "comm-overlap"
        if _gathers_with_optimizer_step(raw):
            defaults["dp"]["bucket_stages"] = "none"
    if raw_section(raw, "training").get("precision") == "fp8" and not _writes_zero_0(raw):
        # their FP8 mixed-precision recipes keep the layers' weights in FP8 and gather them so
        # (NeMo 2's bf16_with_fp8_mixed / bf16_with_fp8_current_scaling_mixed, Megatron-Bridge's
        # bf16_with_fp8_delayed_scaling_mixed / _current_scaling_mixed / bf16_with_mxfp8_mixed:
        # fp8_param_gather True); with the distributed optimizer or FSDP only, as Megatron-LM's
        # validate_args refuses --fp8-param-gather without them
        defaults["training"] = {**defaults.get("training", {}), "fp8_param_gather": True}
    return defaults


def megatron_bridge(raw: Mapping[str, Any]) -> Defaults:
    """Megatron-Bridge's performance configs: NeMo's with bf16 main gradients."""
    # Megatron-Bridge's performance configs on top of NeMo's recipe settings: main gradients kept
    # and reduced in bf16 (grad_reduce_in_fp32 False); the loss is nemo's, TransformerEngine's
    # (GPTModelProvider: cross_entropy_loss_fusion True, "Generally beneficial"; the Llama 3
    # recipes' _llama3_common and the performance scripts' set_common_perf_overrides:
    # cross_entropy_fusion_impl = "te")
    defaults = nemo(raw)
    defaults["training"] = {**defaults.get("training", {}), "fp32_grad_accum": False}
    return defaults


def megatron_lm_2021(raw: Mapping[str, Any]) -> Defaults:
    """The Megatron-LM of the SC'21 and MLSys'23 papers."""
    # the backward's TP collective: blocking in the SC'21 code; asynchronous under the weight
    # gradient in the 2022 code that brought sequence parallelism (its asynchronous all-reduce
    # came with it), so a run with SP is taken to be the 2022 code
    sp = parallel_flag(raw, "sequence_parallel")
    training: dict[str, Any] = {"flash_attention": False, "elementwise": "fused"}
    if raw_section(raw, "training").get("precision") == "fp16":
        # arguments.py forces accumulate_allreduce_grads_in_fp32 for bf16 only; an fp16 run
        # without the flag keeps its main_grad buffer in fp16 and all-reduces it so
        training["fp32_grad_accum"] = False
    return {
        # pipeline transfers as 1/tp slices, all-gathered by the receiving stage
        # (--scatter-gather-tensors-in-pipeline, default on; p2p_communication.py _communicate)
        "overlap": {
            "dp_grad_reduce": False, "tp_comm": False, "tp_grad_async": sp, "pp_comm": False,
            "pp_scatter_gather": True,
        },
        "training": training,
        # the local DDP's buffer_.data /= dp, then one all-reduce of the whole buffer; the buffer
        # zeroed each step
        "dp": {"prescale": True, "zero_grad_buffer": True, "bucket_mb": 1.0e6},
    }


def zero_bubble(raw: Mapping[str, Any]) -> Defaults:
    """sail-sg's Zero Bubble fork as its example scripts run it."""
    # sail-sg's fork as examples/pretrain_zero_bubble.sh runs it: no --use-flash-attn,
    # --no-overlap-p2p-communication, and --enable-optimizer-post-validation whenever a
    # zero-bubble schedule is on (its ZB-1p / ZB-2p / ZB-V) unless SYNC_OPTIMIZER is set, which
    # examples/test_all_schedules.sh exports for zbv-half and zbv-min (V-Half, V-Min: no
    # post-validation); Megatron's weight-gradient accumulation fusion stays on (the script
    # does not pass --no-gradient-accumulation-fusion); the script trains in fp16 (--fp16 unless
    # FP32 is set; it has no bf16 path) and post-validation runs only in fp16 (validate_args:
    # assert args.fp16); Megatron's DP overlaps stay off (store_true flags of that Megatron,
    # which the script does not pass; validate_args refuses them beside the distributed
    # optimizer under zero bubble)
    training: dict[str, Any] = {"flash_attention": False, "grad_accum_fusion": True, "precision": "fp16"}
    schedule = raw_section(raw, "parallel").get("schedule")
    precision = raw_section(raw, "training").get("precision", "fp16")
    if schedule in ("zb-1p", "zb-2p", "zbv") and precision == "fp16":
        training["optimizer_post_validation"] = True
    overlap = {"pp_comm": False, "dp_grad_reduce": False, "param_gather": False}
    return {"overlap": overlap, "training": training}
