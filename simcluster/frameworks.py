"""Training frameworks as scenario defaults (``framework:`` at the top of a scenario).

The same layout runs at different speeds under Megatron-Core, DeepSpeed's pipeline engine or
nanotron because each framework overlaps (or does not overlap) different communication, fuses
different kernels and reduces gradients differently. Those choices already exist as scenario
fields (``overlap.*``, ``dp.*``, ``training.elementwise`` ...); a framework entry is the set of
values that framework runs with by default or in its published recipes, so that a user can write
``framework: deepspeed`` instead of learning seven flags.

A framework only fills what the scenario leaves unset: an explicit field always wins. It never
touches the model or the parallel degrees (it may pick how layers split over the stages). Each entry names where its values were read.

A parallel attention + MLP block (``model.parallel_block``) runs under every entry with each
branch's own TP collectives (``parallel.parallel_block_comm: separate``, the schema's default),
since none of these codebases has a layer that shares them: Megatron-Core's TransformerLayer
is sequential and NeMo runs Falcon's parallel block as a subclass of it over the stock
SelfAttention and MLP modules (``FalconTransformerLayer``), which Megatron-Bridge inherits;
Megatron-LM 2021, Megatron-DeepSpeed and sail-sg's Zero Bubble fork keep the sequential
``ParallelTransformerLayer``; torchtitan's and NeMo AutoModel's tensor-parallel plans shard
each module (ColwiseParallel / RowwiseParallel), so each branch gathers and reduces its own;
nanotron has no parallel block. EleutherAI's GPT-NeoX (``gpt-neox``) and a block fused around
one set (``fused``, as PaLM's shared input allows) are chosen with that field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simcluster.errors import UserError, did_you_mean
from simcluster.framework_releases import (
    check_release,
    dated_defaults,
    dated_kernel,
    resolve_release,
    split_release,
)
from simcluster.names import loose_lookup

if TYPE_CHECKING:
    from simcluster.hardware import HardwareProfile
    from simcluster.scenario import Scenario

Defaults = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Framework:
    """One framework: what it sets (``defaults`` of the raw scenario, since some choices depend
    on the layout, e.g. nanotron's ZeRO-1 path) and where that was read (``sources``)."""

    name: str
    summary: str
    sources: str
    defaults: Callable[[Mapping[str, Any]], Defaults]
    #: the attention kernel it calls, used where the hardware profile has curves for it (the
    #: profile's default kernel otherwise, e.g. on a profile with no curves at all)
    attention_kernel: str | None = None
    #: its MoE module all-gathers the sequence-parallel input over the attention's TP group and
    #: reduce-scatters the output (torchtitan's PrepareModuleInputOutput on the moe module:
    #: Shard(1) in as Replicate, Partial out as Shard(1)); Megatron-Core's MoE layer routes the
    #: sequence shard it is given, with no TP collective around it (token_dispatcher.py)
    moe_tp_gather: bool = False
    #: the recomputation modes its code offers (training.recompute): Megatron's selective
    #: (--recompute-granularity selective) in the Megatron family, PyTorch's op-level selective
    #: activation checkpointing (torch.utils.checkpoint's context_fn policy, torchtitan's
    #: "selective op") in the PyTorch ones; what the fit hints may suggest
    recompute: tuple[str, ...] = ("none", "selective", "op", "full")

    def preset(self, raw: Mapping[str, Any], release: str | None = None) -> Defaults:
        """What it fills in ``raw``: its settings, with those of ``release`` where that release
        ran differently (simcluster.framework_releases)."""
        out = self.defaults(raw)
        for section, values in dated_defaults(self.name, release, raw).items():
            out[section] = {**out.get(section, {}), **values}
        return out

    def kernel(self, release: str | None = None) -> str | None:
        """The attention kernel it (at ``release``) calls."""
        return dated_kernel(self.name, release) or self.attention_kernel


def _parallel(raw: Mapping[str, Any], key: str, default: int) -> int:
    parallel = raw.get("parallel")
    value = parallel.get(key, default) if isinstance(parallel, Mapping) else default
    return value if isinstance(value, int) else default


def _parallel_flag(raw: Mapping[str, Any], key: str) -> bool:
    parallel = raw.get("parallel")
    return isinstance(parallel, Mapping) and parallel.get(key) is True


def _zero_stage(raw: Mapping[str, Any]) -> int:
    return _parallel(raw, "zero", 0)


def _megatron_core(raw: Mapping[str, Any]) -> Defaults:
    # the distributed optimizer (ZeRO-1) and sequence parallelism with TP: the overlaps below
    # need them (Megatron refuses --overlap-param-gather without --use-distributed-optimizer and
    # --tp-comm-overlap without --sequence-parallel), and every NeMo / Megatron-Bridge recipe
    # and README benchmark sets both
    parallel: dict[str, Any] = {"zero": 1}
    if _parallel(raw, "tp", 1) > 1:
        parallel["sequence_parallel"] = True
    return {
        "parallel": parallel,
        "overlap": {"dp_grad_reduce": True, "param_gather": True, "tp_comm": True, "pp_comm": True},
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


def _nemo(raw: Mapping[str, Any]) -> Defaults:
    # Megatron-Core under NeMo 2 / Megatron-Bridge's performance recipes: their scripts turn the
    # bucket NaN check off ("Disable local gradient checker at non-debugging mode") and the
    # recipes average in the collective (average_in_collective=True: no 1/dp pass, and
    # _ParamAndGradBucketGroup.start_grad_sync then asks for torch.distributed.ReduceOp.AVG)
    defaults = _megatron_core(raw)
    defaults["dp"].update(nan_check=False, prescale=False, reduce_op="avg")
    return defaults


def _megatron_bridge(raw: Mapping[str, Any]) -> Defaults:
    # Megatron-Bridge's performance configs on top of NeMo's recipe settings: main gradients kept
    # and reduced in bf16 (grad_reduce_in_fp32 False), and its FP8 mixed-precision recipes keep
    # the layers' weights in FP8 and gather them so (fp8_param_gather)
    defaults = _nemo(raw)
    training: dict[str, Any] = {"fp32_grad_accum": False}
    training_raw = raw.get("training")
    if isinstance(training_raw, Mapping) and training_raw.get("precision") == "fp8":
        training["fp8_param_gather"] = True
    defaults["training"] = {**defaults.get("training", {}), **training}
    return defaults


def _megatron_lm_2021(raw: Mapping[str, Any]) -> Defaults:
    # the backward's TP collective: blocking in the SC'21 code; asynchronous under the weight
    # gradient in the 2022 code that brought sequence parallelism (its asynchronous all-reduce
    # came with it), so a run with SP is taken to be the 2022 code
    sp = _parallel_flag(raw, "sequence_parallel")
    training: dict[str, Any] = {"flash_attention": False, "elementwise": "fused"}
    training_raw = raw.get("training")
    if isinstance(training_raw, Mapping) and training_raw.get("precision") == "fp16":
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


def _deepspeed(raw: Mapping[str, Any]) -> Defaults:
    # Megatron-DeepSpeed's attention is its classic softmax on materialised scores unless a run
    # passes --use-flash-attn-v1 / -v2 / -triton (arguments.py: store_true flags, off by default)
    # the pipeline engine's clear_lp_grads() (param.grad = None) runs just before each
    # backward and update_hp_grads(clear_lp_grads=False) after it: the bf16 gradients live
    # through the next forwards beside the BF16_Optimizer's fp32 buffer (runtime/pipe/engine.py
    # _exec_backward_pass); fp16 and ZeRO-2/3 accumulate in .grad itself
    training: dict[str, Any] = {"elementwise": "fused", "flash_attention": False, "grad_16bit_freed": "step"}
    training_raw = raw.get("training")
    fp16 = isinstance(training_raw, Mapping) and training_raw.get("precision") == "fp16"
    zero = _zero_stage(raw)
    # bf16 at ZeRO 0/1 runs the BF16_Optimizer when gradients accumulate in fp32
    # (engine._do_optimizer_sanity_check: bf16 model, fp32 grad_accum_dtype, stage 1 ->
    # BFLOAT16), as Megatron-DeepSpeed and BLOOM ran it; a scenario that writes
    # fp32_grad_accum false (data_types.grad_accum_dtype bf16, current DeepSpeed's default
    # under ZeRO) runs stage 1 of DeepSpeedZeroOptimizer instead
    bf16_grads = isinstance(training_raw, Mapping) and training_raw.get("fp32_grad_accum") is False
    zero_optimizer = fp16 or zero >= 2 or bf16_grads
    if zero_optimizer:
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
    else:
        # the BF16_Optimizer's update_hp_grads after every microbatch's backward:
        # hp_grad.add_(lp.grad.to(fp32)), a cast to a temporary, then the add
        training["grad_accum_cast"] = True
    precision = training_raw.get("precision", "bf16") if isinstance(training_raw, Mapping) else "bf16"
    bf16_optimizer = not zero_optimizer and precision != "fp32"
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
    defaults: Defaults = {
        "overlap": overlap,
        "training": training,
        # reduce_bucket_size 5e8 elements of 16-bit gradients; the BF16_Optimizer zeroes its
        # fp32 gradient buffer after each step (clear_hp_grads), fp16 ZeRO frees the .grad.
        # The BF16_Optimizer's gradients are reduced as its flat fp32 buffers, one per parameter
        # group (get_grads_for_reduction: non_expert_gradients, the fp32_groups_gradients_flat),
        # and engine.allreduce_no_retain never splits a tensor: each group in one all-reduce
        "dp": {"bucket_mb": 1000.0 if zero_optimizer else 1e6, "zero_grad_buffer": not zero_optimizer},
    }
    if bf16_optimizer:
        # the BF16_Optimizer's fp32 buffers go through engine.allreduce_bucket, which casts them
        # to communication_data_type (bf16 when bf16 is enabled and the config names none:
        # engine.py's property, as in the 2022 engine BLOOM ran and today's), all-reduces and
        # copies the result back: bf16 on the wire (0.6.5's engine as today's). Releases 0.9.0
        # and 0.9.1 defaulted to fp32 for bf16 (framework_releases.py)
        defaults["dp"]["reduce_dtype"] = "16bit"
    elif zero <= 1:
        # ZeRO 0-1 reduce .grad tensors many to a bucket, each bucket flattened into a new
        # tensor and copied back after (engine.py and stage_1_and_2.py allreduce_bucket:
        # self.flatten(bucket); allreduce_and_copy: buf.copy_(synced)), through
        # buffered_allreduce_fallback (ZeRO-0) and buffered_reduce_fallback (ZeRO-1 without
        # contiguous gradients: under a pipeline, and at stage 1 where the engine turns them
        # off); the BF16_Optimizer's one-tensor buckets flatten to views
        defaults["dp"]["flatten_copies"] = True
    if zero <= 2:
        # every ZeRO 0-2 reduction divides by dp in a pass of its own over the bucket:
        # engine.allreduce_bucket (ZeRO-0 and the BF16_Optimizer: all_reduce, then
        # mul_(1/dp), prescale_gradients false by default), stage_1_and_2.py
        # gradient_reduction_w_predivide (ZeRO-1: all_reduce, then mul_) and average_tensor
        # (ZeRO-2: div_ before); the pass is charged before the reduction, as the engine
        # issues its collective after it (the same traffic on the same stream)
        defaults["dp"]["prescale"] = True
    # DeepSpeed's sequence parallelism is Ulysses (deepspeed/sequence/layer.py
    # DistributedAttention; it has no ring attention): its backward all-to-alls only the
    # output's gradient in, where TE's moves the output too
    defaults["parallel"] = {"cp_a2a_impl": "deepspeed"}
    if _parallel(raw, "cp", 1) > 1:
        defaults["parallel"]["cp_comm"] = "a2a"
    if _parallel(raw, "ep", 1) > 1:
        # DeepSpeed-MoE keeps whole experts per rank (enable_expert_tensor_parallelism False)
        defaults["parallel"]["etp"] = 1
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
    if zero >= 2:
        # ZeRO-2/3 free .grad after each microbatch's reduction and add the reduced gradient
        # into the rank's partition only (stage_1_and_2.py independent_gradient_partition_epilogue:
        # zero_grad(set_to_none=True), accumulated_grad.add_; stage3.py partition_grads)
        defaults["dp"]["shard_accumulate"] = True
    if zero == 2:
        # every microbatch each bucket is copied into the ipg buffer in the gradient hook,
        # divided by dp in place (average_tensor: tensor.div_), flattened and all-reduced whole
        # (use_multi_rank_bucket_allreduce, the default: allreduce_and_scatter -> dist.all_reduce),
        # the rank then keeping its slices; with overlap_comm off (stage 2's default) all on the
        # compute stream. The two copies are charged as dp.bucket_copies, the division as
        # dp.prescale
        defaults["dp"].update(grad_collective="all_reduce", bucket_copies=True)
    if zero in (1, 2):
        # with overlap_comm, each bucket flush makes the compute stream wait for the reduction
        # stream before the next reduction is queued (average_tensor's
        # current_stream().wait_stream(stream), DeepSpeed 0.14.4 on): one reduction in flight
        defaults["dp"]["wait_reduction"] = True
    if zero >= 1:
        # with overlap_comm each reducing backward ends in a host sync
        # (independent_gradient_partition_epilogue: get_accelerator().synchronize() at ZeRO-1/2,
        # reduce_and_partition_stream.synchronize() at ZeRO-3, every microbatch at ZeRO-2/3);
        # ZeRO-3 throttles its reductions on the host only (max_param_reduce_events 2), not
        # the compute stream: no wait_reduction there
        defaults["dp"]["backward_sync"] = "host"
    if zero == 1:
        # ZeRO-1 all-reduces every bucket whole, with or without a pipeline: without contiguous
        # gradients (forced off at stage 1 by engine._configure_zero_optimizer until recent
        # releases, and under a pipeline) reduce_ipg_grads takes buffered_reduce_fallback; with
        # them (today's default) average_tensor's use_multi_rank_bucket_allreduce (default true)
        # runs allreduce_and_scatter, an all_reduce; the BF16_Optimizer all-reduces its fp32
        # buffers (buffered_allreduce_fallback). The optimizer's shard is then all-gathered
        defaults["dp"]["grad_collective"] = "all_reduce"
    return defaults


def _nanotron(raw: Mapping[str, Any]) -> Defaults:
    # clip_grad_norm over every local fp32 gradient, always multiplied (optim/clip_grads.py);
    # FP32GradientAccumulator.backward frees the bf16 .grad after the whole backward
    # (loss.backward(), then fp32_grad.add_(half_param.grad); half_param.grad = None)
    training = {"elementwise": "nanotron", "grad_clip": "local_scale", "grad_16bit_freed": "backward"}
    parallel = {"partition": "nanotron"}  # pipeline blocks balanced by their compute cost
    # REDUCE_SCATTER mode (sequence parallelism) with tp_linear_async_communication, as its
    # benchmark script and examples run it; its ALL_REDUCE mode has no async row linear
    tp_async = _parallel_flag(raw, "sequence_parallel")
    if _zero_stage(raw) >= 2:
        # its optimizer shards the states only (optim/zero.py ZeroDistributedOptimizer)
        raise UserError(
            "parallel.zero",
            f"framework nanotron runs ZeRO stages 0 and 1 only (got zero={_zero_stage(raw)}); "
            "use zero<=1, or framework torchtitan (FSDP2) or deepspeed for ZeRO-2/3",
        )
    if _zero_stage(raw) >= 1:
        # the non-DDP path: one blocking all-reduce of the whole fp32 gradient buffer after the
        # backward, then a blocking all-gather of the bf16 parameters; trainer.py's
        # training_step calls sync_gradients_across_dp(reduce_op=dist.ReduceOp.AVG), an
        # all_reduce(op=reduce_op) of the contiguous fp32 buffer (FP32GradientAccumulator)
        return {
            "training": training,
            "parallel": parallel,
            "dp": {
                "reduce_op": "avg",
                "grad_collective": "all_reduce",
                "bucket_mb": 1.0e6,
                "param_unpack": "per_tensor",
                "zero_grad_buffer": True,
            },
            "overlap": {
                "dp_grad_reduce": False,
                "param_gather": False,
                "tp_comm": False,
                "tp_async": tp_async,
                "tp_grad_async": False,
                "pp_comm": False,
                "pp_p2p": "serial",
            },
        }
    return {
        "training": training,
        "parallel": parallel,
        # torch DDP, bucket_cap_mb 25 MiB of bf16 gradients, all-reduced as their fp32 copies;
        # the fp32 accumulator's buffer is zeroed each step on both paths. The copies go through
        # the comm hook helpers.py registers, get_fp32_accum_hook(reduce_op=dist.ReduceOp.AVG)
        # (optim/gradient_accumulator.py fp32_accum_hook: all_reduce_coalesced(op=reduce_op)),
        # not DDP's own divide-then-SUM
        "dp": {"bucket_mb": 52.4288, "zero_grad_buffer": True, "bucket_copies": True, "reduce_op": "avg"},
        "overlap": {
            "dp_grad_reduce": True,
            "tp_comm": False,
            "tp_async": tp_async,
            "tp_grad_async": False,
            "pp_comm": False,
            "pp_p2p": "serial",
        },
    }


def _dp_batch(raw: Mapping[str, Any]) -> tuple[int, int] | None:
    """(data-parallel degree, global batch) of a raw scenario, None when not yet known."""
    training, cluster = raw.get("training"), raw.get("cluster")
    if not isinstance(training, Mapping) or not isinstance(cluster, Mapping):
        return None
    gpus, batch = cluster.get("gpus"), training.get("global_batch")
    if not isinstance(gpus, int) or not isinstance(batch, int):
        return None
    model_parallel = _parallel(raw, "tp", 1) * _parallel(raw, "pp", 1) * _parallel(raw, "cp", 1)
    dp = _parallel(raw, "dp", 0) or (gpus // model_parallel if model_parallel > 0 and gpus % model_parallel == 0 else 0)
    return (dp, batch) if dp > 0 else None


def _pipeline_microbatch(raw: Mapping[str, Any]) -> int | None:
    """torchtitan's micro-batch under a pipeline: each data-parallel rank's batch split into as
    many microbatches as there are stages (``pipeline_parallel_microbatches`` defaults to the
    pipeline degree); None when the scenario sets it or the split is not whole."""
    pp = _parallel(raw, "pp", 1)
    training = raw.get("training")
    known = _dp_batch(raw)
    if pp <= 1 or not isinstance(training, Mapping) or "micro_batch" in training or known is None:
        return None
    dp, batch = known
    if batch % (dp * pp):
        return None
    return batch // (dp * pp)


# the frameworks whose pipeline stages run torch.distributed.pipelining's schedules (their
# defaults set the interleaved group of PyTorch's rounds, ``_pipeline_rounds``):
# ``ScheduleSpec.rounds``, PyTorch's rule on the microbatches instead of Megatron-Core's
PYTORCH_PIPELINING = frozenset({"pytorch-ddp", "torchtitan", "automodel"})


def _pipeline_rounds(raw: Mapping[str, Any], micro_batch: int | None) -> int | None:
    """The microbatches per chunk in a row of torch.distributed.pipelining's interleaved 1F1B
    (``ScheduleInterleaved1F1B``): m microbatches in max(1, m // pp) rounds of m / rounds,
    where Megatron's default runs them in groups of pp (``parallel.microbatch_group``); None
    when the two agree (m a multiple of pp), the scenario sets the group, or it is not known."""
    from simcluster.spellings import normalise_spellings

    pp, parallel, training = _parallel(raw, "pp", 1), raw.get("parallel"), raw.get("training")
    if pp <= 1 or not isinstance(parallel, Mapping) or "microbatch_group" in parallel:
        return None
    name = normalise_spellings({"parallel": dict(parallel)})["parallel"].get("schedule")
    if name != "interleaved" and not (name is None and _parallel(raw, "vpp", 1) > 1):
        return None
    known = _dp_batch(raw)
    if micro_batch is None and isinstance(training, Mapping):
        micro_batch = training.get("micro_batch", 1)
    if known is None or not isinstance(micro_batch, int) or micro_batch < 1:
        return None
    dp, batch = known
    m = batch // (dp * micro_batch) if batch % (dp * micro_batch) == 0 else 0
    rounds = max(1, m // pp)
    if m == 0 or m % pp == 0 or m % rounds:
        return None
    return m // rounds


def _fsdp2_stages_only(raw: Mapping[str, Any], name: str) -> None:
    """torchtitan's data parallelism is DDP (``data_parallel_replicate_degree``) or FSDP2
    (``data_parallel_shard_degree``): parameters, gradients and optimizer state sharded
    together, no ZeRO-1/2. FSDP2 without resharding after the forward (FSDP's SHARD_GRAD_OP) is
    zero 3 with ``zero3.reshard_after_forward: false``. (NeMo AutoModel, which composes its
    FSDP2, also offers Megatron-FSDP's optimizer- and gradient-only sharding: not refused.)"""
    zero = _zero_stage(raw)
    if zero in (1, 2):
        raise UserError(
            "parallel.zero",
            f"framework {name} replicates (zero 0, DDP) or fully shards (zero 3, FSDP2), it has "
            f"no ZeRO-{zero}; use zero 3 (with zero3.reshard_after_forward: false to keep the "
            "gathered parameters from forward to backward) or zero 0",
        )


def _torchtitan(raw: Mapping[str, Any]) -> Defaults:
    _fsdp2_stages_only(raw, "torchtitan")
    defaults = _torchtitan_defaults(raw)
    overlap_raw = raw.get("overlap")
    if isinstance(overlap_raw, Mapping) and overlap_raw.get("tp_comm"):
        # its enable_async_tensor_parallel is PyTorch's micro-pipelined TP, not TransformerEngine's
        # userbuffers (userbuffers.PYTORCH_ASYNC_TP)
        defaults["overlap"]["tp_comm_cfg"] = "pytorch-async-tp"
    if _parallel(raw, "cp", 1) > 1:
        # job_config's context_parallel_rotate_method defaults to "allgather": PyTorch's
        # context_parallel all-gathers every K/V shard after the first sub-SDPA
        defaults.setdefault("parallel", {})["cp_comm"] = "all_gather"
    return defaults


def _torchtitan_defaults(raw: Mapping[str, Any]) -> Defaults:
    # dp.reduce_op stays sum: FSDP2's foreach_reduce asks for ReduceOp.AVG with an fp32 or bf16
    # reduce dtype when the divide factor is the data-parallel size (_fsdp_collectives.py
    # _get_gradient_divide_factors), but current torchtitan sets set_gradient_divide_factor(1.0)
    # and scales by the global token count, which turns the reduce-scatter into a PREMUL_SUM
    # and the HSDP all-reduce into a SUM; which one a dated run used is not known here. Only
    # the all-reduce's algorithm depends on it (simcluster runs no NVLS reduce-scatter)
    training: dict[str, Any] = {"elementwise": "eager"}
    micro_batch = _pipeline_microbatch(raw)
    if micro_batch is not None:
        training["micro_batch"] = micro_batch
    defaults: Defaults = {
        "training": training,
        "zero3": {"buffers": "copies"},
        "overlap": {"tp_grad_async": False},  # DTensor TP in eager mode: its collectives block
    }
    parallel_raw = raw.get("parallel")
    if isinstance(parallel_raw, Mapping) and parallel_raw.get("zero_shard"):
        # under HSDP its trainer defers the replicas' all-reduce to the last microbatch
        # (trainer.py: set_requires_all_reduce(is_last) when dp_replicate is enabled)
        defaults["zero3"]["replica_all_reduce"] = "last_microbatch"
    parallel: dict[str, Any] = _dtensor_sp(raw)
    if _parallel(raw, "ep", 1) > 1:
        # with expert parallelism its experts are split over EP only unless
        # expert_tensor_parallel_degree says otherwise (default 1)
        parallel["etp"] = 1
    group = _pipeline_rounds(raw, micro_batch)
    if group is not None:
        parallel["microbatch_group"] = group
    if parallel:
        defaults["parallel"] = parallel
    return defaults


def _dtensor_sp(raw: Mapping[str, Any]) -> dict[str, Any]:
    """DTensor's sequence parallelism keeps the all-gathered input its linears save for the
    backward, gathering nothing again (parallelism/saved_gather.py): set with tp > 1 only, as
    there is nothing to gather without."""
    return {"sp_regather": False} if _parallel(raw, "tp", 1) > 1 else {}


def _pytorch_ddp(raw: Mapping[str, Any]) -> Defaults:
    if _zero_stage(raw) != 0 or any(_parallel(raw, k, 1) > 1 for k in ("cp", "ep")):
        raise UserError(
            "framework",
            "pytorch-ddp is DistributedDataParallel with DTensor tensor parallelism and "
            "torch.distributed.pipelining stages at most (zero 0, cp = ep = 1); use torchtitan "
            "for FSDP2",
        )
    # DistributedDataParallel(bucket_cap_mb=25) without gradient_as_bucket_view: buckets of
    # 25 MiB of the parameters' (fp32) gradients, each gradient copied in and back out; the
    # optimizer's zero_grad(set_to_none=True) frees .grad, so the first microbatch writes it and
    # later ones add in place; clip_grad_norm_ reads and scales every gradient
    # the model is built in fp32 and run under torch.autocast (calibrate/step_train.py), so its
    # parameters, gradients and buckets are fp32 and the 16-bit weight casts are activations
    defaults: Defaults = {
        "training": {
            "elementwise": "eager", "grad_clip": "local_scale", "grad_accum_fusion": False, "autocast": True,
        },
        "dp": {"bucket_mb": 25 * 2**20 / 1e6, "bucket_copies": True, "zero_grad_buffer": False},
        # DTensor's tensor-parallel collectives are eager and blocking
        "overlap": {"dp_grad_reduce": True, "tp_grad_async": False},
    }
    parallel = _dtensor_sp(raw)
    group = _pipeline_rounds(raw, None)  # its pipeline stages run PyTorch's schedules
    if group is not None:
        parallel["microbatch_group"] = group
    if parallel:
        defaults["parallel"] = parallel
    return defaults


def _pytorch_fsdp(raw: Mapping[str, Any]) -> Defaults:
    parallel = raw.get("parallel")
    given = isinstance(parallel, Mapping) and parallel.get("zero") is not None
    zero = _zero_stage(raw) if given else 3  # FullyShardedDataParallel's default: FULL_SHARD
    if zero != 3:
        raise UserError(
            "parallel.zero",
            f"framework pytorch-fsdp (FullyShardedDataParallel) shards at zero 3, got zero={zero}; "
            "write parallel.fsdp: FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD or _HYBRID_SHARD_ZERO2, "
            "or use framework pytorch-ddp for NO_SHARD",
        )
    if any(_parallel(raw, k, 1) > 1 for k in ("cp", "ep")):
        raise UserError(
            "framework",
            "pytorch-fsdp wraps a model with data parallelism (and DTensor tensor parallelism at "
            "most: cp = ep = 1); use torchtitan for FSDP2 with context or expert parallelism",
        )
    # FullyShardedDataParallel's defaults as HF accelerate, llama-recipes and OLMo construct it:
    # MixedPrecision(param_dtype=bf16) with reduce_dtype unset or bf16 (api.py: "If
    # reduce_dtype is None but param_dtype is not None, then this takes on the param_dtype
    # value"; accelerate's bf16 policy sets all three to bf16), so gradients are
    # reduce-scattered in bf16 (OLMo's amp_bf16 reduces in fp32: set training.fp32_grad_accum
    # true); an eager model (unfused norms and rotary), SDPA's flash backend
    return {
        "parallel": {"zero": 3, **_dtensor_sp(raw)},
        "training": {"elementwise": "eager", "fp32_grad_accum": False},
        "zero3": {"buffers": "flat"},
        "overlap": {"tp_grad_async": False},  # DTensor TP in eager mode: its collectives block
    }


def _zero_bubble(raw: Mapping[str, Any]) -> Defaults:
    # sail-sg's fork as examples/pretrain_zero_bubble.sh runs it: no --use-flash-attn,
    # --no-overlap-p2p-communication, and --enable-optimizer-post-validation whenever a
    # zero-bubble schedule is on (its ZB-1p / ZB-2p / ZB-V) unless SYNC_OPTIMIZER is set, which
    # examples/test_all_schedules.sh exports for zbv-half and zbv-min (V-Half, V-Min: no
    # post-validation); Megatron's weight-gradient accumulation fusion stays on (the script
    # does not pass --no-gradient-accumulation-fusion)
    training: dict[str, Any] = {"flash_attention": False, "grad_accum_fusion": True}
    parallel = raw.get("parallel")
    schedule = parallel.get("schedule") if isinstance(parallel, Mapping) else None
    if schedule in ("zb-1p", "zb-2p", "zbv"):
        training["optimizer_post_validation"] = True
    return {"overlap": {"pp_comm": False}, "training": training}


def _automodel(raw: Mapping[str, Any]) -> Defaults:
    # torchtitan's FSDP2 composition with TransformerEngine's fused kernels (its summary's
    # "TE" kernel column) and DeepEP's dispatch for experts ("DeepEP")
    defaults = _torchtitan_defaults(raw)
    defaults["training"]["elementwise"] = "fused"
    # ASSUMED: its loop keeps FSDP2's default under HSDP (all-reduce every microbatch); not
    # read from its recipes, unlike torchtitan's trainer
    defaults["zero3"].pop("replica_all_reduce", None)
    if _parallel(raw, "ep", 1) > 1:
        defaults["moe"] = {"dispatcher": "deepep"}
    return defaults


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework(
            "megatron-core",
            "Megatron-Core as NVIDIA's performance recipes run it (NeMo, Megatron-Bridge, the "
            "Megatron-LM README benchmarks): the distributed optimizer (zero 1) and, with tp > 1, "
            "sequence parallelism unless the scenario says otherwise; "
            "grad reduce, param gather and TP comm overlapped, "
            "wgrad accumulated straight into the fp32 main gradient (Megatron's default; NeMo's and "
            "Megatron-Bridge's benchmark configs reduce in bf16: set training.fp32_grad_accum false), "
            "the gradient buffer zeroed at each step's start, gradients reduced in buckets of "
            "max(40M, 1M x dp) parameters on the first pipeline stage's first chunk and as one "
            "bucket per chunk elsewhere, "
            "each gradient bucket NaN-checked and scaled by 1/dp before its reduction (Megatron-LM's "
            "defaults; NeMo's and Megatron-Bridge's performance recipes do neither: framework nemo)",
            "NeMo / Megatron-Bridge performance recipes (use_distributed_optimizer, sequence_parallel, "
            "overlap_grad_reduce, overlap_param_gather, "
            "tp_comm_overlap, gradient_accumulation_fusion); the Megatron-LM README's benchmark flags; "
            "Megatron-LM's --check-for-nan-in-loss-and-grad default and Bucket.start_grad_sync; "
            "train_step's zero_grad_buffer (_ParamAndGradBuffer.reset: grad_data.zero_()); "
            "DistributedDataParallel.__init__ (bucket_size default, None when pp_rank > 0 or "
            "disable_bucketing, which get_model sets for model chunks after the first)",
            _megatron_core,
            recompute=("none", "selective", "full"),
        ),
        Framework(
            "nemo",
            "Megatron-Core as NeMo 2 and Megatron-Bridge's performance recipes run it: megatron-core's "
            "overlaps, bucketing and zeroed gradient buffer, without the bucket NaN check and with "
            "the 1/dp averaging done in the collective (their benchmark configs also reduce in bf16 "
            "for some models: set training.fp32_grad_accum false there)",
            "NVIDIA-NeMo/Megatron-Bridge scripts/performance (check_for_nan_in_grad False) and "
            "recipes (DistributedDataParallelConfig average_in_collective=True); NeMo 2's "
            "scripts/performance likewise",
            _nemo,
            recompute=("none", "selective", "full"),
        ),
        Framework(
            "megatron-bridge",
            "NVIDIA's Megatron-Bridge as its performance configs run it (the Megatron-Bridge "
            "summaries, NeMo 25.09 and later containers): nemo's settings, with the main gradients "
            "kept and reduced in bf16 and, at FP8, the layers' weights kept and gathered in FP8",
            "NVIDIA-NeMo/Megatron-Bridge scripts/performance (utils/helpers.py "
            "set_basic_perf_overrides, configs/llama3/llama3_llm_pretrain.py "
            "set_llama3_common_configs: grad_reduce_in_fp32 False; the "
            "bf16_with_fp8_current_scaling_mixed / bf16_with_mxfp8_mixed recipes: fp8_param_gather "
            "True)",
            _megatron_bridge,
            recompute=("none", "selective", "full"),
        ),
        Framework(
            "megatron-lm-2021",
            "Megatron-LM of the SC'21 and MLSys'23 papers: softmax on materialised attention "
            "scores, 'local' DDP (the gradient buffer, fp16 in an fp16 run and fp32 in a bf16 one, "
            "divided by dp, then all-reduced after the backward), blocking pipeline send/recv of 1/tp slices re-gathered by the receiving "
            "stage (the scatter/gather optimisation), no TP overlap; the backward's TP collective "
            "blocks as in the SC'21 code, "
            "unless sequence parallelism says it is the MLSys'23 code (async under the weight "
            "gradient; set overlap.tp_grad_async true for that code's runs without SP)",
            "NVIDIA/Megatron-LM megatron/arguments.py before 2023-08 (--DDP-impl default 'local'; "
            "accumulate_allreduce_grads_in_fp32 forced for bf16 only); "
            "examples/academic_paper_scripts/sc21; p2p_communication.py _communicate "
            "(--scatter-gather-tensors-in-pipeline on by default); FlashAttention (arXiv "
            "2205.14135) postdates it",
            _megatron_lm_2021,
            recompute=("none", "selective", "full"),
        ),
        Framework(
            "deepspeed",
            "DeepSpeed's pipeline engine (Megatron-DeepSpeed, as BLOOM and MT-NLG ran it): "
            "instructions run one after another, one blocking send or receive at a time of 1/tp "
            "partitions re-gathered by the receiving stage, every microbatch's bf16 gradients cast "
            "to fp32 and then added by the BF16_Optimizer (ZeRO 0/1; ZeRO-2/3, and ZeRO-1 with "
            "training.fp32_grad_accum false, keep and reduce bf16 gradients), gradients "
            "all-reduced (never reduce-scattered below ZeRO-3) only after the last backward, the "
            "BF16_Optimizer's as whole fp32 buffers cast to bf16 for the wire and copied back "
            "(its communication_data_type; dp.reduce_dtype), others in 5e8-element buckets flattened "
            "into a new tensor and copied back after (dp.flatten_copies), each divided "
            "by dp in a pass of its own (ZeRO-2: every "
            "microbatch, each bucket all-reduced whole on the compute stream, then only the "
            "rank's shard accumulated; with overlap.dp_grad_reduce, its overlap_comm, one "
            "bucket's reduction in flight and each reducing backward ended by a device sync, "
            "ZeRO-3's by a sync alone; ZeRO-3 with its parameter coordinator's defaults: a 5e7-"
            "element prefetch window, tensors of at most 1e5 elements kept whole, the last layers "
            "within 1e9 elements of reuse kept for their backward, gradients reduce-scattered from "
            "a 5e8-element bucket), attention on "
            "materialised scores (set training.flash_attention true for a run that passes "
            "--use-flash-attn-v1/-v2/-triton); with cp > 1 DeepSpeed-Ulysses' all-to-all "
            "attention, one exchange per tensor (Q, K, V, then the output) each with a contiguous "
            "copy on the compute stream, whose backward moves only the output's gradient in",
            "microsoft/DeepSpeed deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig defaults), "
            "partitioned_param_coordinator.py, parameter_offload.py (mark_persistent_parameters), "
            "stage3.py (__add_grad_to_ipg_bucket); deepspeed/sequence/layer.py (DistributedAttention, single_all_to_all, "
            "_SeqAllToAll.backward), deepspeed/runtime/pipe/engine.py (is_pipe_partitioned, "
            "is_grad_partitioned), schedule.py, p2p.py "
            "(enable_backward_allreduce False; 'Pipeline parallelism does not support overlapped "
            "communication'), runtime/engine.py (ZeRO-1 under a pipeline: overlap_comm and "
            "contiguous_gradients off, buffered_reduce_fallback all-reduces each bucket), "
            "engine.py get_data_types (grad_accum_dtype = the model dtype under ZeRO), communication_data_type "
            "(bf16 under bf16 unless configured) and allreduce_bucket (tensor.to it, then copy_ back), "
            "zero/stage_1_and_2.py (average_tensor, use_multi_rank_bucket_allreduce, "
            "independent_gradient_partition_epilogue), zero/config.py (overlap_comm on for stage 3 "
            "only), "
            "runtime/pipe/engine.py _exec_backward_pass (clear_lp_grads before each backward, "
            "update_hp_grads(clear_lp_grads=False) after: bf16 .grad kept between backwards), "
            "runtime/bf16_optimizer.py (fp32 gradient buffer added to every microbatch by "
            "update_hp_grads, hp_grad.add_(lp.grad.to(fp32)), zeroed after each step by "
            "clear_hp_grads); zero "
            "reduce_bucket_size default 5e8; Megatron-DeepSpeed megatron/arguments.py "
            "(--use-flash-attn-v1, --use-flash-attn-v2, --use-flash-attn-triton: store_true)",
            _deepspeed,
            # Megatron-DeepSpeed's options changed with its 2023 sync with upstream Megatron: the
            # 2022 fork that trained BLOOM (bigscience-workshop's and microsoft's megatron/
            # arguments.py then) had --checkpoint-activations (every layer, in chunks of
            # --checkpoint-num-layers) and nothing finer; microsoft/Megatron-DeepSpeed since has
            # --recompute-granularity selective, which checkpoints the core attention only on the
            # unfused path (transformer.py ParallelAttention: checkpoint_core_attention is set
            # only where no --use-flash-attn-* kernel and no DeepSpeed sequence parallelism runs;
            # with flash attention the model's selective keeps what none keeps, so it is never
            # the lighter mode that fits there)
            recompute=("none", "selective", "full"),
        ),
        Framework(
            "nanotron",
            "Hugging Face nanotron (the Ultra-Scale Playbook runs): flash-attn 2, Triton norm and "
            "rotary with PyTorch copies around them, DDP with fp32 bucket all-reduce in the last "
            "microbatch's backward (ZeRO-1: one blocking all-reduce after it, and a parameter "
            "all-gather unpacked tensor by tensor in Python), with sequence parallelism its async "
            "TP linears (collectives under their own shard's GEMM and the weight gradient), "
            "pipeline p2p one blocking transfer at a time, layers split over stages by their cost "
            "with the LM head's, torch DDP's gradient copies into its buckets and back, and its "
            "clipping of every local gradient every step",
            "huggingface/nanotron src/nanotron (models/llama.py get_block_compute_costs, models/base.py "
            "build_model, optim/gradient_accumulator.py (FP32GradientAccumulator.zero_grad; its backward "
            "frees each bf16 .grad after the microbatch's whole backward), "
            "optim/zero.py, optim/clip_grads.py, trainer.py (DistributedDataParallel without "
            "gradient_as_bucket_view), distributed.py, parallel/pipeline_parallel/p2p.py, state.py, "
            "engine.py, parallel/tensor_parallel/functional.py); examples/config_tiny_llama_bench.yaml; "
            "scripts/scaling_benchmarks.py (tp_mode REDUCE_SCATTER, tp_linear_async_communication)",
            _nanotron,
            attention_kernel="fa2",
            recompute=("none", "full"),
        ),
        Framework(
            "pytorch-ddp",
            "a plain PyTorch training loop in eager mode (the model written as the Llama reference "
            "code: fp32 RMSNorm and complex rotary, repeat_kv, SDPA), DistributedDataParallel "
            "with its default 25 MiB buckets, gradients copied into them and back, "
            "clip_grad_norm_ and AdamW; data parallelism, with tp > 1 DTensor's sequence-parallel "
            "plan (blocking collectives), with pp > 1 torch.distributed.pipelining stages (DDP "
            "per stage, gradients reduced in each stage's last backward; interleaved 1F1B in "
            "PyTorch's rounds) (what `python -m calibrate measure-step` runs)",
            "pytorch/pytorch torch/nn/parallel/distributed.py (bucket_cap_mb 25, "
            "gradient_as_bucket_view False), torch/csrc/distributed/c10d/reducer.cpp "
            "(copy_grad_to_bucket, copy_bucket_to_grad), torch/nn/utils/clip_grad.py "
            "(clip_grad_norm_: foreach norm, then grads multiplied by the clamped coefficient); "
            "meta-llama/llama model.py; calibrate/step_model.py",
            _pytorch_ddp,
            attention_kernel="fa2",
            recompute=("none", "op", "full"),
        ),
        Framework(
            "pytorch-fsdp",
            "PyTorch FSDP1 (FullyShardedDataParallel, as HF accelerate / Trainer, llama-recipes "
            "and OLMo wrap a model: one FlatParameter per transformer block and the root holding "
            "the embedding, final norm and LM head) in eager mode: each block gathered before its "
            "forward and again before its backward (the next one prefetched: BACKWARD_PRE, the "
            "rate limiter's two gathers in flight), the root gathered once per forward and kept "
            "until its gradient is reduced after the whole backward, reduce-scatters queued "
            "without waiting (the compute stream waits for them at the backward's end), fp32 "
            "flat shards stepped in place, gradients reduced in bf16 (MixedPrecision's "
            "reduce_dtype defaults to param_dtype). Sharding strategies through parallel.fsdp "
            "(FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, _HYBRID_SHARD_ZERO2); backward_prefetch and "
            "limit_all_gathers as zero3.backward_prefetch and zero3.limit_all_gathers; "
            "forward_prefetch as zero3.forward_prefetch (the next block's gather issued before "
            "this block's kernels, which matters only when the host falls behind the GPU); "
            "use_orig_params and MixedPrecision's buffer_dtype change nothing modelled "
            "(use_orig_params only aligns each tensor in the flat parameter to 16 bytes, and the "
            "flat parameter is padded to a multiple of the shard group, fewer elements than it has ranks; "
            "buffers are a rotary table at most)",
            "pytorch/pytorch torch/distributed/fsdp/_runtime_utils.py (_post_forward_reshard: "
            "not state._is_root; _pre_backward_hook / _post_backward_reshard -> _prefetch_handle; "
            "_reduce_grad: flat_param.grad = None, reduce_scatter then _accumulate_sharded_grad "
            "cast to the parameter dtype; _post_backward_final_callback: current_stream."
            "wait_stream(post_backward_stream)), _limiter_utils.py (_max_num_inflight_all_gathers "
            "2), _flat_param.py (padding to a multiple of the world size, 16-byte alignment with "
            "use_orig_params), api.py (MixedPrecision reduce_dtype default, ShardingStrategy), "
            "_init_utils.py (HYBRID_SHARD's intra-node group); huggingface/accelerate "
            "FullyShardedDataParallelPlugin (bf16 MixedPrecision for param, reduce and buffer dtype)",
            _pytorch_fsdp,
            attention_kernel="fa2",
            recompute=("none", "op", "full"),
        ),
        Framework(
            "torchtitan",
            "PyTorch torchtitan with FSDP2 (zero 3; zero 0 is its DDP, ZeRO-1/2 are refused) in "
            "eager mode: gathers copied out per parameter, "
            "gradients copy-cast into the reduce-scatter buffer on the compute stream once the "
            "previous reduce-scatter is done (one in flight), unfused norms and rotary (set "
            "training.elementwise fused with torch.compile, compiled-blocks when only the blocks "
            "are compiled); with pp > 1 FSDP2 under "
            "torch.distributed.pipelining (parameters gathered once per step, gradients "
            "reduce-scattered after each stage's last backward) and, unless training.micro_batch "
            "is set, each data-parallel rank's batch split into pp microbatches as torchtitan does; "
            "interleaved 1F1B in PyTorch's rounds (m microbatches in max(1, m // pp) rounds, "
            "parallel.microbatch_group = m / rounds when pp does not divide m); under hybrid "
            "sharding the replicas all-reduce only the last microbatch's gradient shard; "
            "overlap.tp_comm as PyTorch's async TP (tp_comm_cfg pytorch-async-tp) and cp > 1 with "
            "K and V all-gathered (cp_comm all_gather)",
            "pytorch/torchtitan (fully_shard / FSDP2; train configs with compile off; apply_fsdp's "
            "reshard_after_forward = not pp_enabled; experimental.pipeline_parallel_microbatches "
            "defaults to the number of stages); torch.distributed.pipelining "
            "ScheduleInterleaved1F1B (number_of_rounds = max(1, n_microbatches // pp_group_size)); "
            "torch.distributed.pipelining "
            "PipelineStage.backward_maybe_with_nosync; trainer.py set_requires_all_reduce(is_last) "
            "when dp_replicate > 1 (pytorch/torchtitan#4505); PyTorch SDPA's flash backend (FlashAttention-2 "
            "kernels) is its default on Hopper: pytorch/pytorch#138522 made the cuDNN backend opt-in "
            "after 2.5 (#142132: 'This is expected'), until check_prefer_cudnn_attention's cuDNN > "
            "9.15 gate; job_config context_parallel_rotate_method 'allgather' by default; "
            "torch/_inductor/fx_passes/micro_pipeline_tp.py for enable_async_tensor_parallel",
            _torchtitan,
            attention_kernel="fa2",
            moe_tp_gather=True,
            recompute=("none", "op", "full"),
        ),
        Framework(
            "zero-bubble",
            "sail-sg's Zero Bubble fork of Megatron-LM (Qi et al., ICLR'24) as its example script "
            "runs it: attention on materialised scores (no FlashAttention), blocking pipeline "
            "send/recv, Megatron's weight-gradient accumulation fusion, and the optimizer step "
            "with post-validation under its zero-bubble schedules (zb-1p, zb-2p, zbv)",
            "sail-sg/zero-bubble-pipeline-parallelism examples/pretrain_zero_bubble.sh (no "
            "--use-flash-attn; --no-overlap-p2p-communication; --enable-optimizer-post-validation "
            "with zero bubble on; no --no-gradient-accumulation-fusion); the paper's Table 4 peak memory matches stored attention "
            "scores in all 16 rows (docs/accuracy.md)",
            _zero_bubble,
            recompute=("none", "selective", "full"),
        ),
        Framework(
            "automodel",
            "NVIDIA NeMo AutoModel (PyTorch backend): FSDP2 as torchtitan composes it (with pp > 1 "
            "under torch.distributed.pipelining, gradient accumulation as training.pipeline_flushes), "
            "TransformerEngine's fused kernels, DeepEP's dispatch for expert parallelism, experts "
            "split over EP only",
            "NVIDIA-NeMo/Automodel docs/performance-summary.md (pre-training table: Kernel "
            "Optimizations 'TE + DeepEP', 'TE + fsdp2_prefetch'; LBS and GA columns); its FSDP2 "
            "(fully_shard) and pipelining as in torchtitan",
            _automodel,
            moe_tp_gather=True,
            recompute=("none", "op", "full"),
        ),
    )
}


def framework_names() -> list[str]:
    """Names accepted by ``framework:``."""
    return sorted(FRAMEWORKS)


#: other names of the frameworks above, compared as names.loose_key does: today's Megatron-LM
#: trains on Megatron-Core; Megatron-DeepSpeed is DeepSpeed's pipeline engine
FRAMEWORK_ALIASES = {
    "megatron": "megatron-core", "megatron-lm": "megatron-core", "mcore": "megatron-core",
    "nemo2": "nemo", "nemo-2": "nemo", "nemo-megatron-bridge": "megatron-bridge", "bridge": "megatron-bridge",
    # NVIDIA's own names for it: "NVIDIA NeMo", "NeMo Framework 24.07"
    "nvidia-nemo": "nemo", "nemo-framework": "nemo", "nvidia-nemo-framework": "nemo",
    "megatron-deepspeed": "deepspeed",
    "nemo-automodel": "automodel",
    "pytorch": "pytorch-ddp", "torch-ddp": "pytorch-ddp", "ddp": "pytorch-ddp",
    "fsdp": "pytorch-fsdp", "fsdp1": "pytorch-fsdp", "torch-fsdp": "pytorch-fsdp",
    "fully-sharded-data-parallel": "pytorch-fsdp",
    "zb": "zero-bubble", "zero-bubble-pipeline-parallelism": "zero-bubble", "sail-sg": "zero-bubble",
}  # fmt: skip


def get_framework(name: Any) -> Framework:
    """The framework called ``name`` (or an alias; without case, spaces, hyphens or
    underscores; a release after it is ignored here, see :func:`framework_and_release`); a
    one-line error naming the field otherwise."""
    return framework_and_release(name)[0]


def framework_and_release(name: Any) -> tuple[Framework, str | None]:
    """The framework ``name`` names and the release written after it ('NeMo 24.07' ->
    nemo, '24.07'), checked (simcluster.framework_releases)."""
    if isinstance(name, str):
        bare, release = split_release(name)
        for text, rel in ((name, None), (bare, release)):
            key = loose_lookup(text, (*FRAMEWORKS, *FRAMEWORK_ALIASES))
            key = FRAMEWORK_ALIASES.get(key, key) if key else None
            if key in FRAMEWORKS:
                if rel is not None:
                    check_release(key, rel)
                return FRAMEWORKS[key], rel
    text = str(name)
    setting = loose_lookup(text, SETTINGS_NOT_FRAMEWORKS) if isinstance(name, str) else None
    hint = f" ({SETTINGS_NOT_FRAMEWORKS[setting]})" if setting else did_you_mean(text, FRAMEWORKS)
    raise UserError(
        "framework",
        f"unknown framework '{text}'{hint}; known: {', '.join(framework_names())}",
    )


#: names users give as a framework that are a parallelism setting: what to write instead
SETTINGS_NOT_FRAMEWORKS = {
    name: "FSDP2 is a sharding, not a framework: parallel.fsdp: true (ZeRO-3), and framework: "
    "torchtitan or automodel for PyTorch FSDP2 as those run it (pytorch-fsdp is FSDP1)"
    for name in ("fsdp2", "pytorch-fsdp2", "torch-fsdp2", "hsdp")  # fsdp, fsdp1: pytorch-fsdp
}


def with_framework_kernel(scenario: Scenario, profile: HardwareProfile) -> Scenario:
    """``scenario`` with its framework's attention kernel (that of its release, if the release
    called another) when it names none and ``profile`` has curves for that kernel (a
    framework's kernel is a preference, not a demand on the hardware)."""
    if scenario.framework is None or scenario.training.attention_kernel is not None:
        return scenario
    kernel = get_framework(scenario.framework).kernel(scenario.framework_release)
    if kernel is None or kernel not in profile.attention_kernels:
        return scenario
    training = scenario.training.model_copy(update={"attention_kernel": kernel})
    return scenario.model_copy(update={"training": training})


def apply_framework(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with its framework's defaults (those of its release, where they differ) filled
    in wherever the scenario is silent."""
    out = dict(data)
    name = out.get("framework")
    given_release = out.get("framework_release")
    if name is None:
        if given_release is not None:
            raise UserError("framework_release", "a release needs its framework; set framework too")
        return out
    framework, release = framework_and_release(name)
    out["framework"] = framework.name  # an alias or other spelling reads as the entry's name
    release = resolve_release(framework.name, name, release, given_release)
    if release is not None:
        out["framework_release"] = release
    for section, values in framework.preset(data, release).items():
        given = out.get(section)
        if given is None:
            given = {}
        if not isinstance(given, Mapping):
            continue  # the schema reports the malformed section itself
        out[section] = {**values, **given}
    return out


__all__ = [
    "FRAMEWORKS",
    "FRAMEWORK_ALIASES",
    "Framework",
    "apply_framework",
    "framework_and_release",
    "framework_names",
    "get_framework",
    "with_framework_kernel",
]
