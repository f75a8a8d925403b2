"""``zero3:`` and ``dp:``: ZeRO-3's gathers and buffers, and the framework's gradient buckets and passes."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator

from simcluster.scenario.base import SectionBase


class Zero3Section(SectionBase):
    """``zero3:`` — how ZeRO-3 / FSDP gathers parameters and reduces gradients."""

    prefetch: bool = Field(
        default=True,
        description=(
            "ZeRO-3 gathers the next layer's parameters ahead of its compute; false: each gather "
            "waits at its layer"
        ),
    )
    buffers: Literal["views", "copies", "flat"] = Field(
        default="views",
        description=(
            "views: parameters are views of the gathered flat buffer and gradients are reduced "
            "from the fp32 main-gradient buffer, beside 16-bit weights and an fp32 master "
            "(Megatron-FSDP, DeepSpeed ZeRO-3); copies: PyTorch FSDP2 "
            "(fully_shard, torchtitan) copies every gather out into per-parameter tensors on "
            "the compute stream and copy-casts the gradients into the reduce-scatter buffer, "
            "with no unsharded fp32 main gradient; flat: PyTorch FSDP1 "
            "(FullyShardedDataParallel): one FlatParameter per wrapped unit, its parameters "
            "views of the gathered buffer (no copy), the fp32 shard stepped in place (no master), "
            "and the root unit (embedding, final norm, LM head) gathered once per forward and "
            "kept until its gradient, reduced after the whole backward"
        ),
    )
    reshard_after_forward: bool | None = Field(
        default=None,
        description=(
            "free a layer's gathered parameters after its forward (true: gathered again for the "
            "backward) or keep them for the backward (false); default: true without a pipeline, "
            "false with one (torchtitan's default policy). Under a pipeline (pp > 1, "
            "torch.distributed.pipelining) the parameters then stay gathered for the whole step "
            "and the gradients, accumulated unsharded, are reduce-scattered after each stage's "
            "last backward"
        ),
    )
    backward_prefetch: Literal["pre", "post", "none"] = Field(
        default="pre",
        description=(
            "when the next unit's all-gather is issued in the backward, FSDP1's "
            "backward_prefetch: pre (BACKWARD_PRE, the default and FSDP2's behaviour: before "
            "this unit's gradient computation, ahead of its reduce-scatter), post "
            "(BACKWARD_POST: after the computation, still ahead of its reduce-scatter) or none "
            "(None: at the next unit's own pre-backward hook, queued behind this unit's "
            "reduce-scatter on the process group's one NCCL stream). Needs zero3.prefetch"
        ),
    )
    forward_prefetch: bool = Field(
        default=False,
        description=(
            "PyTorch FSDP (zero3.buffers copies or flat): when the next unit's forward "
            "all-gather is issued. false (FSDP1's forward_prefetch default, FSDP2's implicit "
            "prefetch): at that unit's pre-forward hook, once the host has issued this unit's "
            "kernels; true (FullyShardedDataParallel(forward_prefetch=True), FSDP2's "
            "set_modules_to_forward_prefetch): before this unit's computation is issued. Only "
            "a host that does not run ahead of the GPU (host-bound steps) tells them apart. "
            "Needs zero3.prefetch"
        ),
    )
    limit_all_gathers: bool = Field(
        default=True,
        description=(
            "FSDP1's rate limiter: the host waits before an all-gather until the unit gathered "
            "two before it is freed, so at most two gathered units exist at once. false lets the "
            "host issue every all-gather of a GPU-bound forward ahead of the compute, and the "
            "caching allocator cannot reuse a freed unit's memory (record_stream) until the "
            "compute reached it: every unit of the forward counted gathered at once (an upper "
            "bound). Issue order, and so timing, is the same"
        ),
    )
    replica_all_reduce: Literal["every_microbatch", "last_microbatch"] = Field(
        default="every_microbatch",
        description=(
            "under hybrid sharding (parallel.zero_shard), when the replicas all-reduce their "
            "reduce-scattered gradient shard: every_microbatch (PyTorch FSDP2's and FSDP1's "
            "HYBRID_SHARD default) or last_microbatch (FSDPModule.set_requires_all_reduce(False) "
            "until the last microbatch: each microbatch's shard is accumulated, then all-reduced "
            "once; torchtitan's trainer does so when dp_replicate > 1). Without a pipeline only; "
            "under one the stage reduces once per step anyway"
        ),
    )

    gradient_sync: Literal["every_microbatch", "last_microbatch"] = Field(
        default="every_microbatch",
        description=(
            "when FSDP2 (zero3.buffers: copies) reduce-scatters gradients without a pipeline: "
            "every_microbatch (its default) or last_microbatch (FSDPModule."
            "set_requires_gradient_sync(False) until the last microbatch, as HF accelerate's "
            "no_sync does for FSDP2: each microbatch's gradients are added into unsharded "
            "accumulators in the reduce dtype, held across the step, and reduce-scattered once "
            "in the last backward). Under a pipeline the stage defers it anyway"
        ),
    )
    reshard_after_backward: bool = Field(
        default=True,
        description=(
            "FSDP2 (zero3.buffers: copies) without a pipeline: false keeps each layer's "
            "gathered parameters after the backward of every microbatch but the last "
            "(FSDPModule.set_reshard_after_backward(False)), so the next microbatch's forward "
            "finds them gathered and all-gathers nothing; with zero3.reshard_after_forward "
            "false too, each layer is gathered once per step. Memory: the gathered parameters "
            "counted all step (an upper bound with reshard_after_forward true)"
        ),
    )


    # DeepSpeed ZeRO-3's own knobs (deepspeed/runtime/zero/config.py DeepSpeedZeroConfig; the
    # stage3_ names are key aliases): unset, ZeRO-3 runs as FSDP does (one whole unit
    # prefetched, nothing kept whole, each unit's gradients reduce-scattered on their own);
    # framework deepspeed sets DeepSpeed's defaults. Counts are parameter elements per GPU.
    prefetch_bucket_size: int | Literal["auto"] | None = Field(
        default=None,
        description=(
            "DeepSpeed's stage3_prefetch_bucket_size: parameter elements fetched ahead of use (its "
            "default 5e7); 0 prefetches nothing. Gathers run per unit (a layer): the next unit's is "
            "issued with the current one's when this is above 0, and the window sizes what the "
            "prefetched gather holds in memory (partitioned_param_coordinator.py fetch_sub_module)"
        ),
    )
    param_persistence_threshold: int | Literal["auto"] = Field(
        default=0,
        description=(
            "DeepSpeed's stage3_param_persistence_threshold: a parameter tensor of at most this many "
            "elements (norms, biases, a router) stays gathered all run, never all-gathered again and "
            "held whole beside its shard (parameter_offload.py mark_persistent_parameters: "
            "ds_numel <= threshold); DeepSpeed's default 1e5, 0 here: none"
        ),
    )
    max_live_parameters: int | None = Field(
        default=None,
        ge=0,
        description=(
            "DeepSpeed's stage3_max_live_parameters: a prefetch is cut to what keeps the gathered "
            "elements at most this many (fetch_sub_module: min(max_live - available, "
            "prefetch_bucket_size)); the unit being computed is gathered regardless. DeepSpeed's "
            "default 1e9; unset: no limit"
        ),
    )
    max_reuse_distance: int | None = Field(
        default=None,
        ge=0,
        description=(
            "DeepSpeed's stage3_max_reuse_distance: a unit used again within this many parameter "
            "elements of the module trace is not released, so the last layers of the forward stay "
            "gathered for their backward (partitioned_param_coordinator.py __params_to_release). "
            "DeepSpeed's default 1e9; unset: released after use (FSDP's reshard after forward)"
        ),
    )
    reduce_bucket_size: int | Literal["auto"] | None = Field(
        default=None,
        description=(
            "DeepSpeed's reduce_bucket_size at ZeRO-3: gradients are copied into one contiguous "
            "buffer of this many elements (allocated whole for the run, contiguous_gradients) and "
            "reduce-scattered when the next unit would overflow it, and at the backward's end "
            "(stage3.py __add_grad_to_ipg_bucket, __reduce_and_partition_ipg_grads); DeepSpeed's "
            "default 5e8. Unset: each unit reduce-scattered on its own, as FSDP. (At ZeRO 0-2 "
            "DeepSpeed's reduce_bucket_size is dp.bucket_mb: elements x 2 bytes / 1e6)"
        ),
    )
    # (prefetch_bucket_size, param_persistence_threshold and reduce_bucket_size also take
    # 'auto', Hugging Face Trainer's: resolved with the model by context.build_context)
    # ZeRO++ (Wang et al. 2023, arXiv 2306.10209; DeepSpeed's zero_hpz_partition_size,
    # zero_quantized_weights and zero_quantized_gradients, key aliases): modelled in
    # parallelism/zeropp.py under DeepSpeed's coordinator
    hpz_partition_size: int = Field(
        default=1,
        ge=1,
        description=(
            "ZeRO++ hpZ (DeepSpeed's zero_hpz_partition_size): after a unit's first gather of the "
            "step each rank keeps a secondary 16-bit partition over this many consecutive ranks of "
            "its ZeRO group (inside one node), and every later gather of the step (backward, later "
            "microbatches) runs over them; 1: off"
        ),
    )
    quantized_weights: bool = Field(
        default=False,
        description=(
            "ZeRO++ qwZ (DeepSpeed's zero_quantized_weights): parameter all-gathers carry int8 with "
            "one fp32 scale per group of at most 8000 elements, quantized before and dequantized "
            "after on the GPU"
        ),
    )
    quantized_gradients: bool = Field(
        default=False,
        description=(
            "ZeRO++ qgZ (DeepSpeed's zero_quantized_gradients): each gradient reduce-scatter becomes "
            "an int4 all-to-all inside each node, a reduction, and an int4 all-to-all across nodes "
            "(coalesced_collectives.all_to_all_quant_reduce); needs pure data parallelism"
        ),
    )

    @field_validator(
        "prefetch_bucket_size", "param_persistence_threshold", "max_live_parameters", "max_reuse_distance",
        "reduce_bucket_size", mode="before",
    )  # fmt: skip
    @classmethod
    def _element_count(cls, value: Any) -> Any:
        # DeepSpeed configs write these as 5e7 or 5e8, which YAML reads as a string (YAML 1.1
        # needs a dot) and JSON as a float: either is the whole number it names
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return value
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            return int(value)
        return value

    @field_validator("prefetch_bucket_size", "param_persistence_threshold", "reduce_bucket_size")
    @classmethod
    def _not_negative(cls, value: Any) -> Any:
        if isinstance(value, int) and value < 0:
            raise ValueError("must be a number of elements, 0 or more")
        return value


class DpSection(SectionBase):
    """``dp:`` — gradient buckets and the collective that reduces them."""

    bucket_mb: float | Literal["megatron-core", "comm-overlap"] = Field(
        default=25.0,
        description=(
            "gradient bucket size, MB (1e6 B) of gradients on the wire; whole parameter tensors "
            "are added in backward order until a bucket holds this much (torch DDP's "
            "bucket_cap_mb). megatron-core: max(40M, 1M x dp) parameters, one bucket when the "
            "reduction is not overlapped (Megatron-Core's default bucket_size); comm-overlap: "
            "128 Mi parameters, the bucket_size NeMo 2's MegatronCommOverlapCallback and "
            "Megatron-Bridge's CommOverlapConfig give Megatron-Core with the distributed optimizer "
            "(one bucket likewise when the reduction is not overlapped)"
        ),
    )

    @field_validator("bucket_mb", mode="before")
    @classmethod
    def _megabytes_or_megatron(cls, value: Any) -> Any:
        if value in ("megatron-core", "comm-overlap"):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf:
            return float(value)
        raise ValueError("must be a finite number of MB above 0, 'megatron-core' or 'comm-overlap'")

    bucket_stages: Literal["all", "first", "none"] = Field(
        default="all",
        description=(
            "all: every pipeline stage and model chunk splits its gradients into buckets; "
            "first: only the first pipeline stage's first model chunk does, every other stage "
            "and chunk reduces its gradients as one bucket after its last backward "
            "(Megatron-Core's DistributedDataParallel: bucket_size None when pp_rank > 0 or "
            "disable_bucketing); none: every stage and chunk is one bucket (Megatron-Core's "
            "get_model under overlap_param_gather_with_optimizer_step disables bucketing on "
            "every chunk)"
        ),
    )
    grad_collective: Literal["auto", "all_reduce", "reduce_scatter"] = Field(
        default="auto",
        description="auto: all_reduce for zero 0, reduce_scatter for zero >= 1; all_reduce with "
        "zero 1 is nanotron's ZeRO-1 (full gradient all-reduced, optimizer on the shard), with "
        "zero 2 DeepSpeed's default use_multi_rank_bucket_allreduce (each bucket all-reduced "
        "whole every microbatch, the rank keeping its slices)",
    )
    reduce_op: Literal["sum", "avg", "premul_sum"] = Field(
        default="sum",
        description=(
            "the reduction the data-parallel gradient collectives ask NCCL for (every bucket's "
            "all-reduce or reduce-scatter, and under hybrid sharding the all-reduce across the "
            "replicas): sum (torch ReduceOp.SUM: DDP's reducer, DeepSpeed, FSDP1, Megatron-Core's "
            "default), avg (ReduceOp.AVG: nanotron, Megatron-Core with average_in_collective as "
            "NeMo and Megatron-Bridge set it, FSDP2's default with an fp32 or bf16 reduce dtype) "
            "or premul_sum (torch's _make_nccl_premul_sum: FSDP2's reduce-scatter after "
            "set_gradient_divide_factor). NCCL runs NVLS and NVLS_TREE for sum only "
            "(ncclNvlsSupported: avg becomes ncclDevPreMulSum), so avg and premul_sum "
            "all-reduces take ring or tree. Set by framework nanotron, nemo and megatron-bridge"
        ),
    )
    reduce_dtype: Literal["fp32", "16bit"] | None = Field(
        default=None,
        description=(
            "the dtype ZeRO 0-2's gradient buckets go on the wire in, when it is not the dtype "
            "they accumulate in (training.fp32_grad_accum): fp32 or 16bit (training.precision's "
            "bf16 or fp16). Each bucket is cast to it before its reduction and the result "
            "copied back after, on the compute stream, as DeepSpeed's engine does for its "
            "communication_data_type (engine.py allreduce_bucket: tensor.to(...), then "
            "tensor.copy_). Unset: the accumulated dtype, no cast. framework deepspeed sets "
            "16bit for the BF16_Optimizer's fp32 buffers (bf16 communication_data_type by "
            "default), and fp32 for bf16 at ZeRO 0-2 when named with release 0.9.0 or 0.9.1, "
            "whose default was fp32"
        ),
    )
    flatten_copies: bool = Field(
        default=False,
        description=(
            "each gradient bucket is flattened into a new contiguous tensor before its "
            "reduction and the result copied back into the gradients after (a read and a write "
            "each, in the accumulated dtype, on the compute stream), the flat copy held until "
            "then: DeepSpeed's ZeRO 0-1 reductions of many tensors (engine.py and "
            "stage_1_and_2.py allreduce_bucket: self.flatten(bucket); allreduce_and_copy: "
            "buf.copy_(synced)); set by framework deepspeed where it reduces .grad tensors (not "
            "the BF16_Optimizer's flat buffers, which flatten to a view)"
        ),
    )
    nan_check: bool = Field(
        default=False,
        description=(
            "before each gradient bucket's reduction (ZeRO 0-2), a norm of the bucket (one read of "
            "it on the compute stream), as Megatron-Core's check_for_nan_in_grad does; like "
            "Megatron's --check-for-nan-in-loss-and-grad, the bucket's norm and each "
            "microbatch's loss are then checked on the host (a sync each)"
        ),
    )
    prescale: bool = Field(
        default=False,
        description=(
            "before each gradient bucket's reduction (ZeRO 0-2), the gradients are multiplied by "
            "1/dp in place (a read and a write of the bucket on the compute stream): Megatron's "
            "gradient_scaling_factor without average_in_collective, Megatron-LM's local DDP"
        ),
    )
    zero_grad_buffer: bool = Field(
        default=False,
        description=(
            "each step clears the persistent gradient buffer the microbatches accumulate into "
            "(ZeRO 0-1: every local gradient, one write on the compute stream before the first "
            "forward): Megatron's zero_grad_buffer, nanotron's fp32 gradient accumulator, "
            "DeepSpeed's BF16_Optimizer. Off: gradients freed (set_to_none), as PyTorch's default"
        ),
    )
    bucket_copies: bool = Field(
        default=False,
        description=(
            "PyTorch DDP without gradient_as_bucket_view (its default; nanotron's ZeRO-0 path): "
            "each 16-bit gradient is copied into its bucket when it is ready and the bucket back "
            "into .grad when the backward finishes (Reducer copy_grad_to_bucket / "
            "copy_bucket_to_grad), a read and a write each, on the compute stream of the "
            "synchronising backward; in memory the buckets hold every gradient again (at ZeRO-2, "
            "DeepSpeed's one ipg bucket, two with overlap.dp_grad_reduce)"
        ),
    )
    shard_accumulate: bool = Field(
        default=False,
        description=(
            "ZeRO-2/3: each microbatch's gradient leaves .grad once its bucket is reduced, and "
            "only the rank's shard of the reduced gradient is accumulated (a 16-bit add over 1/dp "
            "of the gradients instead of autograd's add over all of them), as DeepSpeed does "
            "(stage_1_and_2.py: zero_grad(set_to_none) after each reduce epilogue, then "
            "accumulated_grad.add_ on the partition; stage3.py partition_grads: grad_buffer.add_)"
        ),
    )
    wait_reduction: bool | None = Field(
        default=None,
        description=(
            "before a gradient reduction is issued, the compute stream waits for the one issued "
            "before it, so at most one overlaps the backward: PyTorch FSDP2 (its post_backward "
            "waits on the previous reduce-scatter's event, the copy-in then runs on the compute "
            "stream); DeepSpeed's ZeRO-1/2 overlap_comm, which fills two ipg buffers in turn "
            "(stage_1_and_2.py average_tensor: current_stream().wait_stream(reduction_stream), "
            "since 0.14.4). Off: reductions queue on their stream and the backward never waits "
            "(PyTorch DDP, Megatron's DDP, FSDP1, DeepSpeed's ZeRO-3). Default: on for FSDP2 "
            "(zero3.buffers: copies), off otherwise. At ZeRO 0-2 it acts with "
            "overlap.dp_grad_reduce only: without it the reductions block the backward anyway"
        ),
    )
    backward_sync: Literal["none", "stream", "host"] | None = Field(
        default=None,
        description=(
            "how a backward that reduced gradients ends: none (its reductions run on into the "
            "next forward: PyTorch DDP, Megatron), stream (the compute stream waits for them: "
            "FSDP2's root post-backward callback), host (the host synchronizes the device, so "
            "the next forward is issued from a standstill: DeepSpeed's "
            "independent_gradient_partition_epilogue under overlap_comm, every microbatch at "
            "ZeRO-2/3). Default: stream for FSDP2 (zero3.buffers: copies), none otherwise. At "
            "ZeRO 0-2 it acts with overlap.dp_grad_reduce only"
        ),
    )
    param_unpack: Literal["flat", "per_tensor"] = Field(
        default="flat",
        description=(
            "how ZeRO-1/2's gathered parameters reach the model: flat (gathered in place into one "
            "buffer, as Megatron's distributed optimizer and DeepSpeed do); per_tensor (nanotron's "
            "all_gather_coalesced: a Python loop that slices every parameter tensor for every DP "
            "rank and copies each piece back, so the GPU waits on the host for "
            "2 x tensors x dp eager ops of efficiency.kernel_launch_us each)"
        ),
    )
