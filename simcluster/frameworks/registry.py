"""The registry of framework entries, ``FRAMEWORKS``: each entry's summary, sources and the
function of the raw scenario that gives its defaults."""

from __future__ import annotations

from simcluster.frameworks.base import Framework
from simcluster.frameworks.deepspeed import deepspeed
from simcluster.frameworks.megatron import (
    megatron_bridge,
    megatron_core,
    megatron_lm_2021,
    nemo,
    zero_bubble,
)
from simcluster.frameworks.nanotron import nanotron
from simcluster.frameworks.pytorch import automodel, pytorch_ddp, pytorch_fsdp, torchtitan

#: the pipeline schedules each codebase runs (``parallel.schedule``). Megatron-Core's
#: ``get_forward_backward_func``: forward_backward_pipelining_without_interleaving (1F1B) or
#: _with_interleaving (its combined 1F1B for the EP overlap runs inside them); Megatron-LM
#: 2021's schedules.py likewise
MEGATRON_SCHEDULES = ("1f1b", "interleaved")
#: deepspeed/runtime/pipe/schedule.py TrainSchedule, and Megatron-DeepSpeed's
#: ZeroBubbleH1Pipeline in its place (--enable-zbh1-pipeline, --enable-zbh1-exact-semantics)
DEEPSPEED_SCHEDULES = ("1f1b", "zb-h1-ds", "zb-h1-ds-exact")
#: nanotron parallel/pipeline_parallel/engine.py: OneForwardOneBackwardPipelineEngine,
#: AllForwardAllBackwardPipelineEngine
NANOTRON_SCHEDULES = ("1f1b", "afab")
#: sail-sg's fork (examples/test_all_schedules.sh: 1f1b, interleaved, zb with its pending-backward
#: limit, zbv, zbv-half, zbv-min; examples/pretrain_zbh1.sh) and its papers' handcrafted and
#: adaptive schedules
ZERO_BUBBLE_SCHEDULES = (
    "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-auto", "zbv", "v-half", "v-min", "v-auto",
)  # fmt: skip
#: torch.distributed.pipelining.schedules: Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
#: ScheduleLoopedBFS, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV
PYTORCH_SCHEDULES = ("1f1b", "afab", "interleaved", "looped-bfs", "interleaved-zb", "zbv-fixed", "dualpipev")

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
            megatron_core,
            recompute=("none", "selective", "full"),
            schedules=MEGATRON_SCHEDULES,
        ),
        Framework(
            "nemo",
            "Megatron-Core as NeMo 2 and Megatron-Bridge's performance recipes run it: megatron-core's "
            "overlaps and zeroed gradient buffer, without the bucket NaN check and with "
            "the 1/dp averaging done in the collective; with the distributed optimizer, gradient "
            "buckets of 128 Mi parameters (dp.bucket_mb comm-overlap), at FP8 the layers' "
            "weights kept and gathered in FP8, and TransformerEngine's cross-entropy "
            "(training.fused_cross_entropy te; before 25.04 Megatron-Core's native fused loss, "
            "NeMo 1.x the unfused one) (their benchmark configs also reduce in bf16 "
            "for some models: set training.fp32_grad_accum false there)",
            "NVIDIA-NeMo/Megatron-Bridge scripts/performance (check_for_nan_in_grad False) and "
            "recipes (DistributedDataParallelConfig average_in_collective=True); NeMo 2's "
            "scripts/performance likewise; NeMo 2's MegatronCommOverlapCallback and Megatron-Bridge's "
            "CommOverlapConfig (_get_optimizer_overlap_cfgs: bucket_size = 128 * 1024 * 1024 with the "
            "distributed optimizer and dp > 1); NeMo 2's recipes/precision/mixed_precision.py "
            "(bf16_with_fp8_mixed, bf16_with_fp8_current_scaling_mixed: fp8_param_gather True); "
            "GPTConfig's cross_entropy_loss_fusion True and scripts/performance's "
            "cross_entropy_fusion_impl 'te' (set_primary_perf_configs, NeMo 2.3.0 on)",
            nemo,
            recompute=("none", "selective", "full"),
            schedules=MEGATRON_SCHEDULES,
        ),
        Framework(
            "megatron-bridge",
            "NVIDIA's Megatron-Bridge as its performance configs run it (the Megatron-Bridge "
            "summaries, NeMo 25.09 and later containers): nemo's settings, with the main gradients "
            "kept and reduced in bf16, and 16-bit weights under the block FP8 recipe "
            "before Blackwell, as its blockwise recipe keeps them",
            "NVIDIA-NeMo/Megatron-Bridge scripts/performance (utils/helpers.py "
            "set_basic_perf_overrides, configs/llama3/llama3_llm_pretrain.py "
            "set_llama3_common_configs: grad_reduce_in_fp32 False; set_common_perf_overrides and "
            "recipes/llama/llama3.py _llama3_common: cross_entropy_fusion_impl 'te', beside "
            "models/gpt_provider.py's cross_entropy_loss_fusion True; the "
            "bf16_with_fp8_current_scaling_mixed / bf16_with_mxfp8_mixed recipes: fp8_param_gather "
            "True; bf16_with_fp8_subchannel_scaling_mixed, 'blockwise (for Hopper only)': False)",
            megatron_bridge,
            recompute=("none", "selective", "full"),
            schedules=MEGATRON_SCHEDULES,
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
            megatron_lm_2021,
            recompute=("none", "selective", "full"),
            schedules=MEGATRON_SCHEDULES,
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
            deepspeed,
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
            schedules=DEEPSPEED_SCHEDULES,
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
            nanotron,
            attention_kernel="fa2",
            recompute=("none", "full"),
            schedules=NANOTRON_SCHEDULES,
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
            pytorch_ddp,
            attention_kernel="fa2",
            recompute=("none", "op", "full"),
            schedules=PYTORCH_SCHEDULES,
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
            pytorch_fsdp,
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
            "overlap.tp_comm as PyTorch's async TP (tp_comm_cfg pytorch-async-tp), tp > 1 always "
            "sequence-parallel (its TP plan), cp > 1 with K and V all-gathered (cp_comm all_gather) "
            "and FP8 linears cast as torchao's Float8Linear casts them (fp8_library torchao)",
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
            "torch/_inductor/fx_passes/micro_pipeline_tp.py for enable_async_tensor_parallel; "
            "parallelize.py apply_tp (SequenceParallel on every norm); components/float8.py (the "
            "float8 converter: torchao Float8Linear, pytorch/ao torchao/float8)",
            torchtitan,
            attention_kernel="fa2",
            moe_tp_gather=True,
            recompute=("none", "op", "full"),
            schedules=PYTORCH_SCHEDULES,
        ),
        Framework(
            "zero-bubble",
            "sail-sg's Zero Bubble fork of Megatron-LM (Qi et al., ICLR'24) as its example script "
            "runs it: fp16, attention on materialised scores (no FlashAttention), blocking pipeline "
            "send/recv, Megatron's weight-gradient accumulation fusion, Megatron's DP overlaps off, "
            "and the optimizer step with post-validation under its zero-bubble schedules (zb-1p, "
            "zb-2p, zbv) in fp16",
            "sail-sg/zero-bubble-pipeline-parallelism examples/pretrain_zero_bubble.sh (--fp16 unless "
            "FP32; no --use-flash-attn; --no-overlap-p2p-communication; --enable-optimizer-post-validation "
            "with zero bubble on; no --no-gradient-accumulation-fusion, --overlap-grad-reduce or "
            "--overlap-param-gather); megatron/arguments.py validate_args (assert args.fp16 for "
            "post-validation); the paper's Table 4 peak memory matches stored attention "
            "scores in all 16 rows (docs/accuracy.md)",
            zero_bubble,
            recompute=("none", "selective", "full"),
            schedules=ZERO_BUBBLE_SCHEDULES,
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
            automodel,
            moe_tp_gather=True,
            recompute=("none", "op", "full"),
            schedules=PYTORCH_SCHEDULES,
        ),
    )
}
