"""DeepSpeed's engine (and Megatron-DeepSpeed on it) as a framework."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simcluster.frameworks.base import Defaults, parallel_degree, raw_section, zero_stage


def deepspeed(raw: Mapping[str, Any]) -> Defaults:
    """DeepSpeed's defaults for a raw scenario (its ZeRO stage and precision pick the optimizer path)."""
    training_raw = raw_section(raw, "training")
    zero = zero_stage(raw)
    precision = training_raw.get("precision", "bf16")
    # bf16 at ZeRO 0/1 runs the BF16_Optimizer when gradients accumulate in fp32
    # (engine._do_optimizer_sanity_check: bf16 model, fp32 grad_accum_dtype, stage 1 ->
    # BFLOAT16), as Megatron-DeepSpeed and BLOOM ran it; a scenario that writes
    # fp32_grad_accum false (data_types.grad_accum_dtype bf16, current DeepSpeed's default
    # under ZeRO) runs stage 1 of DeepSpeedZeroOptimizer instead
    zero_optimizer = precision == "fp16" or zero >= 2 or training_raw.get("fp32_grad_accum") is False
    defaults: Defaults = {
        "overlap": _overlap(zero),
        "training": _training(zero, zero_optimizer),
        "dp": _dp(zero, zero_optimizer, bf16_optimizer=not zero_optimizer and precision != "fp32"),
        "parallel": _parallel(raw),
    }
    if zero == 3:
        # DeepSpeed's ZeRO-3 coordinator with its defaults (runtime/zero/config.py
        # DeepSpeedZeroConfig: stage3_prefetch_bucket_size 5e7, stage3_param_persistence_threshold
        # 1e5, stage3_max_live_parameters 1e9, stage3_max_reuse_distance 1e9, reduce_bucket_size
        # 5e8; parallelism/zero3_coordinator.py)
        defaults["zero3"] = {
            "prefetch_bucket_size": 50_000_000, "param_persistence_threshold": 100_000,
            "max_live_parameters": 1_000_000_000, "max_reuse_distance": 1_000_000_000,
            "reduce_bucket_size": 500_000_000,
        }  # fmt: skip
    return defaults


def _training(zero: int, zero_optimizer: bool) -> dict[str, Any]:
    """The ``training`` section: attention, elementwise style and the gradients' path."""
    # Megatron-DeepSpeed's attention is its classic softmax on materialised scores unless a run
    # passes --use-flash-attn-v1 / -v2 / -triton (arguments.py: store_true flags, off by default)
    # the pipeline engine's clear_lp_grads() (param.grad = None) runs just before each
    # backward and update_hp_grads(clear_lp_grads=False) after it: the bf16 gradients live
    # through the next forwards beside the BF16_Optimizer's fp32 buffer (runtime/pipe/engine.py
    # _exec_backward_pass); fp16 and ZeRO-2/3 accumulate in .grad itself
    # its optimizers' host loops were not read for training.step_tail (not charged)
    training: dict[str, Any] = {
        "elementwise": "fused", "flash_attention": False, "grad_16bit_freed": "step", "step_tail": "none",
    }  # fmt: skip
    if not zero_optimizer:
        # the BF16_Optimizer's update_hp_grads after every microbatch's backward:
        # hp_grad.add_(lp.grad.to(fp32)), a cast to a temporary, then the add
        training["grad_accum_cast"] = True
        return training
    # fp16 ZeRO-1 accumulates the microbatches in the fp16 .grad; ZeRO-2/3 keep their
    # gradient partitions in the model's dtype (engine.get_data_types: grad_accum_dtype is
    # the model dtype under ZeRO) and reduce them in it (communication_data_type), casting to
    # fp32 only at the step. The BF16_Optimizer, by contrast, adds every microbatch into an
    # fp32 buffer (ZeRO 0/1 in bf16: the default)
    training["fp32_grad_accum"] = False
    if zero in (1, 2):
        # DeepSpeedZeroOptimizer.step (stage_1_and_2.py): the norm through fp64 copies, the
        # shard flattened and cast, one fp32 multiply every step (data.deepspeed_step_bytes)
        training["grad_clip"] = "deepspeed"
    return training


def _overlap(zero: int) -> dict[str, Any]:
    """The ``overlap`` section: what DeepSpeed and Megatron-DeepSpeed leave blocking."""
    # Megatron-DeepSpeed's linears reduce the input gradient in a blocking all-reduce
    # (mpu/layers.py copy_to_tensor_model_parallel_region, forked before Megatron's async one)
    # the pipeline engine partitions a stage's output over the model-parallel group and the
    # receiver all-gathers it (runtime/pipe/engine.py is_pipe_partitioned / is_grad_partitioned,
    # PartitionedTensor.full)
    overlap: dict[str, Any] = {
        "tp_comm": False, "tp_grad_async": False, "pp_comm": False, "pp_p2p": "serial",
        "pp_scatter_gather": True,
    }  # fmt: skip
    if zero < 3:
        # the pipeline engine reduces after the last backward; without a pipeline, ZeRO-1/2's
        # overlap_comm defaults to false as well (ZeRO-3's to true: left to the zero3 model)
        overlap.update(dp_grad_reduce=False, param_gather=False)
    return overlap


def _dp(zero: int, zero_optimizer: bool, bf16_optimizer: bool) -> dict[str, Any]:
    """The ``dp`` section: how the engine's gradient reduction runs at each ZeRO stage."""
    # reduce_bucket_size 5e8 elements of 16-bit gradients; the BF16_Optimizer zeroes its
    # fp32 gradient buffer after each step (clear_hp_grads), fp16 ZeRO frees the .grad.
    # The BF16_Optimizer's gradients are reduced as its flat fp32 buffers, one per parameter
    # group (get_grads_for_reduction: non_expert_gradients, the fp32_groups_gradients_flat),
    # and engine.allreduce_no_retain never splits a tensor: each group in one all-reduce
    dp: dict[str, Any] = {"bucket_mb": 1000.0 if zero_optimizer else 1e6, "zero_grad_buffer": not zero_optimizer}
    if bf16_optimizer:
        # the BF16_Optimizer's fp32 buffers go through engine.allreduce_bucket, which casts them
        # to communication_data_type (bf16 when bf16 is enabled and the config names none:
        # engine.py's property, as in the 2022 engine BLOOM ran and today's), all-reduces and
        # copies the result back: bf16 on the wire (0.6.5's engine as today's). Releases 0.9.0
        # and 0.9.1 defaulted to fp32 for bf16 (framework_releases.py)
        dp["reduce_dtype"] = "16bit"
    elif zero <= 1:
        # ZeRO 0-1 reduce .grad tensors many to a bucket, each bucket flattened into a new
        # tensor and copied back after (engine.py and stage_1_and_2.py allreduce_bucket:
        # self.flatten(bucket); allreduce_and_copy: buf.copy_(synced)), through
        # buffered_allreduce_fallback (ZeRO-0) and buffered_reduce_fallback (ZeRO-1 without
        # contiguous gradients: under a pipeline, and at stage 1 where the engine turns them
        # off); the BF16_Optimizer's one-tensor buckets flatten to views
        dp["flatten_copies"] = True
    if zero <= 2:
        # every ZeRO 0-2 reduction divides by dp in a pass of its own over the bucket:
        # engine.allreduce_bucket (ZeRO-0 and the BF16_Optimizer: all_reduce, then
        # mul_(1/dp), prescale_gradients false by default), stage_1_and_2.py
        # gradient_reduction_w_predivide (ZeRO-1: all_reduce, then mul_) and average_tensor
        # (ZeRO-2: div_ before); the pass is charged before the reduction, as the engine
        # issues its collective after it (the same traffic on the same stream)
        dp["prescale"] = True
    if zero >= 2:
        # ZeRO-2/3 free .grad after each microbatch's reduction and add the reduced gradient
        # into the rank's partition only (stage_1_and_2.py independent_gradient_partition_epilogue:
        # zero_grad(set_to_none=True), accumulated_grad.add_; stage3.py partition_grads)
        dp["shard_accumulate"] = True
    if zero == 2:
        # every microbatch each bucket is copied into the ipg buffer in the gradient hook,
        # divided by dp in place (average_tensor: tensor.div_), flattened and all-reduced whole
        # (use_multi_rank_bucket_allreduce, the default: allreduce_and_scatter -> dist.all_reduce),
        # the rank then keeping its slices; with overlap_comm off (stage 2's default) all on the
        # compute stream. The two copies are charged as dp.bucket_copies, the division as
        # dp.prescale
        dp.update(grad_collective="all_reduce", bucket_copies=True)
    if zero in (1, 2):
        # with overlap_comm, each bucket flush makes the compute stream wait for the reduction
        # stream before the next reduction is queued (average_tensor's
        # current_stream().wait_stream(stream), DeepSpeed 0.14.4 on): one reduction in flight
        dp["wait_reduction"] = True
    if zero >= 1:
        # with overlap_comm each reducing backward ends in a host sync
        # (independent_gradient_partition_epilogue: get_accelerator().synchronize() at ZeRO-1/2,
        # reduce_and_partition_stream.synchronize() at ZeRO-3, every microbatch at ZeRO-2/3);
        # ZeRO-3 throttles its reductions on the host only (max_param_reduce_events 2), not
        # the compute stream: no wait_reduction there
        dp["backward_sync"] = "host"
    if zero == 1:
        # ZeRO-1 all-reduces every bucket whole, with or without a pipeline: without contiguous
        # gradients (forced off at stage 1 by engine._configure_zero_optimizer until recent
        # releases, and under a pipeline) reduce_ipg_grads takes buffered_reduce_fallback; with
        # them (today's default) average_tensor's use_multi_rank_bucket_allreduce (default true)
        # runs allreduce_and_scatter, an all_reduce; the BF16_Optimizer all-reduces its fp32
        # buffers (buffered_allreduce_fallback). The optimizer's shard is then all-gathered
        dp["grad_collective"] = "all_reduce"
    return dp


def _parallel(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The ``parallel`` section: DeepSpeed's sequence and expert parallelism."""
    # DeepSpeed's sequence parallelism is Ulysses (deepspeed/sequence/layer.py
    # DistributedAttention; it has no ring attention): its backward all-to-alls only the
    # output's gradient in, where TE's moves the output too
    parallel: dict[str, Any] = {"cp_a2a_impl": "deepspeed"}
    if parallel_degree(raw, "cp", 1) > 1:
        parallel["cp_comm"] = "a2a"
    if parallel_degree(raw, "ep", 1) > 1:
        # DeepSpeed-MoE keeps whole experts per rank (enable_expert_tensor_parallelism False)
        parallel["etp"] = 1
    return parallel
