"""``training:``: sequence, batch, precision, recomputation, kernels and the optimizer's settings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from simcluster.limits import addressable_gib
from simcluster.scenario.base import SectionBase

RecomputeModule = Literal["core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp"]
OffloadModule = Literal["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act"]


class TrainingSection(SectionBase):
    """``training:`` — batch, precision, recomputation, optimizer."""

    seq_len: int = Field(
        gt=0, description="tokens per sequence; also written with a binary suffix, 8K = 8192 (token_counts.py)"
    )
    micro_batch: int = Field(
        default=1, gt=0,
        description="sequences per microbatch on each data-parallel rank",
    )
    document_tokens: int | None = Field(
        default=None, gt=0,
        description=(
            "packed sequences: the length of the documents packed into each sequence (for "
            "documents of mixed lengths, the root mean square of their lengths). Attention then "
            "runs per document, as TransformerEngine's THD format with cu_seqlens does (NeMo's "
            "and Megatron's packed_seq_params): seq_len / document_tokens causal attentions of "
            "document_tokens each, not one over seq_len; the linears and memory are unchanged. "
            "Needs fused attention, and with parallel.cp > 1 the p2p ring (each document split "
            "into 2 cp chunks, as TransformerEngine's THD context parallelism does). Unset: one "
            "document per sequence"
        ),
    )
    global_batch: int = Field(gt=0, description="sequences per optimizer step")
    grad_accum: int | None = Field(
        default=None,
        gt=0,
        description="microbatches per data-parallel rank per step (a table's GA column): sets "
        "global_batch when it is absent, else must equal global_batch / (dp x micro_batch)",
    )
    precision: Literal["fp32", "bf16", "fp16", "fp8", "nvfp4"] = Field(
        default="bf16",
        description=(
            "the transformer linears' GEMMs: fp32/bf16/fp16, fp8 (TransformerEngine FP8, see "
            "fp8_recipe) or nvfp4 (TransformerEngine NVFP4BlockScaling on Blackwell: 4-bit "
            "values in blocks of 16 with E4M3 scales); attention, the LM head and the "
            "activations stay 16-bit under fp8 and nvfp4"
        ),
    )
    fp8_recipe: Literal["delayed", "current", "block"] = Field(
        default="delayed",
        description=(
            "how FP8 scales are found: delayed (amax history, TE DelayedScaling), current (an "
            "amax pass over each tensor first, TE Float8CurrentScaling), block (per-tile scales "
            "inside the cast: DeepSeek-V3 1x128, MXFP8)"
        ),
    )
    nvfp4_hadamard: bool = Field(
        default=True,
        description=(
            "NVFP4: TransformerEngine's random Hadamard transform of the columnwise copies of "
            "activations and gradients the weight-gradient GEMM reads (NVFP4BlockScaling's "
            "default, a second read of each tensor); false: NVTE_NVFP4_DISABLE_RHT=1, one cast "
            "kernel writes both copies (NVIDIA's MLPerf v5.1 'Vanilla recipe')"
        ),
    )
    nvfp4_stochastic_rounding: bool = Field(
        default=True,
        description=(
            "NVFP4: gradients rounded stochastically when cast (NVFP4BlockScaling's default, a "
            "slower cast kernel); false: NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING=1, round to "
            "nearest. Weights' 2-D 16 x 16 scaling (NVTE_NVFP4_DISABLE_2D_QUANTIZATION) moves "
            "the same bytes either way and has no field"
        ),
    )
    tp_only_amax_red: bool = Field(
        default=False,
        description=(
            "FP8 delayed scaling's amax all-reduce over the tensor- and context-parallel ranks "
            "only, not every rank of the pipeline stage (Megatron-Core's --tp-only-amax-red, "
            "TransformerConfig.tp_only_amax_red: get_amax_reduction_group's tp-cp group; NeMo 2's "
            "GPT-3 175B performance script sets it)"
        ),
    )
    fp8_amax_async: bool = Field(
        default=False,
        description=(
            "FP8 delayed scaling's amax all-reduce issued asynchronously (TransformerEngine up to "
            "1.5 with NVTE_ASYNC_AMAX_REDUCTION=1: async_op=True, waited on by the next autocast "
            "region's first module), so the compute stream does not stop at the region's end; TE "
            "1.6 and later ignore the variable and reduce blocking (NVIDIA's MLPerf v3.1 GPT-3 "
            "configs set it)"
        ),
    )
    fp8_library: Literal["te", "torchao"] = Field(
        default="te",
        description=(
            "the library running the FP8 linears (per-tensor scales; block scales are costed as "
            "TransformerEngine's): te, TransformerEngine (each operand's cast-transpose, the "
            "quantised input kept for the weight gradient), or torchao, Float8Linear's tensorwise "
            "recipe as torchtitan's float8 converter runs it (framework torchtitan's default): the "
            "forward casts its input rowwise only and keeps the 16-bit input, the backward casts it "
            "again for the weight gradient, writes the output gradient in both layouts and copies "
            "the FP8 weight column-major for the input gradient, as torch._scaled_mm takes it; "
            "without fp8_param_gather it casts each 16-bit weight in every forward and again in "
            "every backward, keeping no quantised copy"
        ),
    )
    fp8_param_gather: bool = Field(
        default=False,
        description=(
            "FP8 parameters (Megatron-Core's fp8_param_gather, set by NeMo's and Megatron-Bridge's "
            "FP8 recipes): the transformer layers' weights are kept and all-gathered (ZeRO-1/2/3) "
            "in FP8, 1 B per element instead of 2 (the scales stay local: every rank computes "
            "them); embeddings, the LM head and norms stay 16-bit. MXFP8 ones (block scales on Blackwell, ZeRO 1-2) are "
            "gathered in 16 bits and quantised again on every rank once a step, as Megatron-Core does"
        ),
    )
    fp4_param: bool = Field(
        default=False,
        description=(
            "NVFP4 parameters (Megatron-Core's fp4_param; MLPerf v5.1 LoRA's pre-quantised "
            "model): a LoRA run's frozen transformer-linear weights held only as NVFP4 tensors, "
            "rowwise and columnwise (1.125 B per element instead of 2), and never cast again; "
            "needs precision nvfp4 and lora: (trained NVFP4 parameters are not modelled)"
        ),
    )
    fp8_weight_cache: bool = Field(
        default=True,
        description=(
            "FP8/NVFP4: TransformerEngine casts each linear's weight on a step's first "
            "microbatch and keeps the quantised copy (on Hopper with its transpose) for the "
            "rest, as Megatron-Core's TE layers run (is_first_microbatch); false casts it in "
            "every microbatch's forward and keeps no copy (Megatron-Core's "
            "disable_parameter_transpose_cache, a TE model called without the flag); with FP8 "
            "parameters the transposed copy a GPU's FP8 GEMMs need is then made for each "
            "microbatch and not kept (a LoRA run's frozen FP8 weights keep theirs from step to "
            "step when cached). Under Megatron FSDP with 16-bit parameters the whole copy of every "
            "layer is kept beside the sharded state; under PyTorch's FSDP it has no effect"
        ),
    )
    fp32_grad_accum: bool = Field(
        default=True,
        description=(
            "weight gradients accumulated (and reduced) in fp32 main gradients, Megatron's "
            "accumulate_allreduce_grads_in_fp32; false: in the 16-bit training dtype"
        ),
    )
    autocast: bool = Field(
        default=False,
        description=(
            "fp32 parameters under torch.autocast (16-bit precision only): the model is built in "
            "fp32 and each linear's weight is cast to 16 bits in the forward, so weights, "
            "gradients and DDP's bucket copies are fp32, the optimizer steps the parameters in "
            "place (no master copy), and each microbatch's 16-bit weight casts are kept for its "
            "backward (autograd saves them as the matmul's input), counted with its activations. "
            "Set by framework pytorch-ddp; ZeRO-3's PyTorch FSDP state counts its own casts"
        ),
    )
    grad_accum_fusion: bool = Field(
        default=False,
        description=(
            "the weight-gradient GEMM accumulates into the fp32 main gradient (Megatron "
            "gradient_accumulation_fusion, TE fuse_wgrad_accumulation): no 16-bit gradient buffer"
        ),
    )
    grad_16bit_freed: Literal["add", "backward", "step"] = Field(
        default="add",
        description=(
            "when a parameter's 16-bit gradient is freed once an fp32 (or separate 16-bit) "
            "accumulator exists: add (right after it is added into the main gradient, Megatron's "
            "DDP hook: param.main_grad.add_(param.grad); param.grad = None; 4 B/param kept, one "
            "tensor's gradient transient), backward (after the microbatch's whole backward, "
            "nanotron's FP32GradientAccumulator.backward: the chunk's 16-bit gradients transient "
            "at its end), step (kept across microbatches beside the fp32 buffer, DeepSpeed's "
            "BF16_Optimizer under its pipeline engine: 6 B/param kept)"
        ),
    )
    grad_accum_cast: bool = Field(
        default=False,
        description=(
            "without grad_accum_fusion, each microbatch's 16-bit gradient is cast to a temporary "
            "fp32 tensor and then added to the fp32 gradient (DeepSpeed's BF16_Optimizer: "
            "hp_grad.add_(lp.grad.to(fp32))): 18 bytes per parameter per microbatch instead of "
            "an in-place add's 10"
        ),
    )
    recompute: Literal["none", "selective", "full", "op"] = Field(
        default="none",
        description=(
            "none; selective (Megatron: the modules of recompute_modules); full (every layer's "
            "forward reruns); op (torchtitan's op-level selective checkpointing: each layer "
            "keeps its attention output and every other matmul output and reruns the rest)"
        ),
    )
    recompute_modules: list[RecomputeModule] | None = Field(
        default=None,
        description=(
            "with recompute: selective, what is recomputed in the backward instead of stored "
            "(Megatron-Core --recompute-modules): core_attn (the default), layernorm, "
            "mla_up_proj, moe_act, mlp"
        ),
    )
    recompute_num_layers: int | None = Field(
        default=None,
        ge=0,
        description=(
            "with recompute: full, how many layers of each pipeline chunk are recomputed (the "
            "first ones, Megatron --recompute-method block --recompute-num-layers); the rest keep "
            "their activations; at most the layers of a chunk. Default: all"
        ),
    )
    recompute_partitioned: bool = Field(
        default=False,
        description=(
            "with recompute: full and tp > 1, each recomputed layer keeps its input as a 1/tp "
            "slice and all-gathers it over the TP group before its recompute (Megatron-LM "
            "--distribute-saved-activations, DeepSpeed activation_checkpointing."
            "partition_activations); no effect with sequence parallelism, whose input is "
            "already split"
        ),
    )
    optimizer: Literal["adam", "ademamix", "sgd"] = Field(
        default="adam",
        description=(
            "the update's state per parameter: adam (Adam/AdamW: two moments), ademamix "
            "(AdEMAMix, Pagliardini et al. 2024: a fast and a slow gradient average and the "
            "second moment, three; Apertus's optimizer), sgd (momentum: one)"
        ),
    )
    grad_clip: Literal["shard", "local_scale", "deepspeed", "none"] = Field(
        default="shard",
        description=(
            "the gradient-norm clipping pass of the optimizer step: none (no norm at all: a "
            "loop that never calls clip_grad_norm_, as NeMo AutoModel's benchmarks state, 'No "
            "gradient clipping applied'); shard (Megatron's "
            "clip_grad_norm_fp32: the norm reads the fp32 gradients the rank's optimizer steps, "
            "its ZeRO shard; it scales them only when the norm exceeds the limit, not charged); "
            "local_scale (nanotron's clip_grad_norm: the norm reads every local fp32 gradient, "
            "ZeRO-1 too, and every one is multiplied by the clamped coefficient, a read and a "
            "write, every step); deepspeed (DeepSpeed's ZeRO-1/2 optimizer, set by framework "
            "deepspeed where it runs: the norm of each 16-bit gradient through an fp64 copy, the "
            "shard flattened before its fp32 cast, and one multiply of the fp32 shard every "
            "step, unscaling and clipping together; fp16 first checks it for inf/NaN through an "
            "fp32 copy)"
        ),
    )
    step_tail: Literal["megatron", "none"] = Field(
        default="megatron",
        description=(
            "the host's eager end of the step, after the gradient norm's .item() (and NeMo's "
            "Lightning logging syncs) empty the GPU's queue: megatron (Megatron-Core's "
            "distributed optimizer step issued from Python: per shard tensor the gradient's "
            "cast, list entries and the copy back, FusedAdam's and the norm's launches, and "
            "with training.fp8_param_gather TransformerEngine's pass over every FP8 weight; "
            "host_op_us per kernel-launching op, a view a seventh of it; it runs beside the "
            "optimizer's kernels, the longer of the two counts; parallelism/step_tail.py); none "
            "(not charged: DeepSpeed, nanotron and PyTorch's frameworks, whose steps were not "
            "read for it, or an optimizer captured in a CUDA graph)"
        ),
    )
    optimizer_post_validation: bool = Field(
        default=False,
        description=(
            "Zero Bubble's post-update validation (sail-sg --enable-optimizer-post-validation, "
            "Qi et al. ICLR'24 Sec 4): no all-reduce across pipeline stages before the optimizer "
            "step, so each stage starts its next step once its own is done and consecutive steps "
            "overlap; the step time is then the longest stage's span"
        ),
    )
    optimizer_moments: Literal["fp32", "bf16"] = Field(
        default="fp32",
        description=(
            "precision of the optimizer's moments (Adam m and v); bf16 as DeepSeek-V3 trained "
            "(report Sec 3.3.3) and Megatron's precision-aware optimizer allows; the fp32 "
            "master weights stay"
        ),
    )
    master_weights: Literal["fp32", "remainder"] = Field(
        default="fp32",
        description=(
            "the optimizer's fp32 master copy of each bf16 weight: fp32 (4 B a parameter, "
            "Megatron's distributed optimizer) or remainder, only the 16 low bits beside the "
            "bf16 weight (2 B; apex DistributedFusedAdam's store_param_remainders, which NeMo 1.x "
            "sets for a bf16 model without FP8 parameters), whose fused step writes the bf16 "
            "weight itself, no separate copy"
        ),
    )
    optimizer_offload: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description=(
            "share of the optimizer (fp32 master weights, moments and their update) held and "
            "stepped on the host CPU: after the backward its gradients go to the host, the CPU "
            "updates them and the new 16-bit weights come back (Megatron-Core "
            "--optimizer-cpu-offload --optimizer-offload-fraction; DeepSpeed offload_optimizer: 1.0); "
            "needs the profile's node.host_link_GBps and node.host_memory_GBps"
        ),
    )
    activation_offload_layers: int = Field(
        default=0,
        ge=0,
        description=(
            "the first N transformer layers of each pipeline chunk keep their saved activations in "
            "host memory between forward and backward (Megatron-Core --cpu-offloading "
            "--cpu-offloading-num-layers, TransformerEngine's double-buffered CPU offload): a "
            "layer's copy to the host runs under the next layer's forward, the one after it waits "
            "for it; its copy back is started one layer ahead in the backward; needs the "
            "profile's node.host_link_GBps"
        ),
    )
    offload_modules: list[OffloadModule] = Field(
        default_factory=list,
        description=(
            "Megatron-Core's fine-grained activation offloading (--fine-grained-activation-offloading "
            "--offload-modules): the tensors each named module saves for its backward (expert_fc1: the "
            "routed experts' input; moe_act: their activation's input; core_attn: Q, K and V; attn_proj: "
            "the attention output, needs core_attn; mlp_norm and attn_norm: a separate norm's input; "
            "qkv_linear: the QKV linear's fused-norm input and its own) go to pinned host memory on one "
            "copy stream after the module's forward, the compute not waiting (see offload_max_inflight), and come back one layer "
            "ahead in the backward; each chunk's last layer stays on the GPU; needs the profile's "
            "node.host_link_GBps"
        ),
    )
    offload_min_elements: int = Field(
        default=1_048_576,
        ge=0,
        description=(
            "Megatron-Core's --min-offloaded-tensor-size with training.offload_modules: a saved tensor "
            "of fewer elements stays on the GPU (its default 1 Mi elements; the K and V of grouped-query "
            "attention at high tp can be below it)"
        ),
    )
    offload_max_inflight: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Megatron-Core's --fine-grained-offloading-max-inflight-offloads with "
            "training.offload_modules: after each layer's copy to the host is started, the compute "
            "stream waits for the copy N layers back of the same microbatch and chunk (0: for its own), "
            "so at most N more layers' moved tensors wait on the GPU for their copies; default none: "
            "the forward never waits, and where the copies fall behind the tensors waiting for them "
            "stay on the GPU (run reports that backlog)"
        ),
    )
    flash_attention: bool = Field(
        default=True, description="fused attention: the s x s scores are never stored"
    )
    attention_kernel: str | None = Field(
        default=None,
        description=(
            "which fused-attention kernel's benchmark curves to use (a key of the profile's "
            "efficiency.attention_kernels, e.g. fa2 for the flash-attn 2 package, cudnn for "
            "TransformerEngine on Hopper; a name with a library release, e.g. cudnn-9.13, is that "
            "release's curves where a profile keeps them beside its default ones); default: the profile's"
        ),
    )
    fp8_attention: bool = Field(
        default=False,
        description=(
            "TransformerEngine's FP8 dot-product attention (Megatron-Core's "
            "--fp8-dot-product-attention, NeMo's fp8_dot_product_attention, with "
            "NVTE_FP8_DPA_BWD=1): under fp8 or nvfp4 precision the fused attention runs in FP8 "
            "at the rate of the profile's '<kernel>-fp8' curves, keeps Q, K, V and its output "
            "for the backward in FP8 (1 B, not 2) and casts Q, K, V in and its output back to "
            "16 bits (and dO in, dQ, dK, dV out in the backward)"
        ),
    )
    attention_output_bytes: float | None = Field(
        default=None,
        gt=0,
        le=4,
        description=(
            "bytes per element of the one copy of the attention's output kept for both its own "
            "backward and the output projection's weight gradient, where the training stack "
            "caches it once in a format of its own (DeepSeek-V3's E5M6: 1.5); unset: as "
            "TransformerEngine keeps it, the fused attention's output (16-bit, FP8 under "
            "fp8_attention) beside an FP8 or NVFP4 linear's own copy"
        ),
    )
    activation_fp8_store: bool = Field(
        default=False,
        description=(
            "SwiGLU's input kept for its backward as a plain FP8 (E4M3) cast, 1 B instead of 2, "
            "and cast back before the backward (Megatron-Core's "
            "--activation-func-fp8-input-store, NeMo's activation_func_fp8_input_store; "
            "fused SwiGLU only, dense MLPs and experts): a cast kernel each way"
        ),
    )
    elementwise: Literal["fused", "compiled-blocks", "eager", "nanotron"] = Field(
        default="fused",
        description=(
            "how norms, rotary embedding, activation and residual adds run: fused kernels "
            "(Megatron/TransformerEngine, torch.compile), torch.compile on each block with "
            "the loss in PyTorch eager (compiled-blocks: torchtitan from December 2024 to "
            "April 2025), PyTorch eager, one kernel per "
            "operation with fp32 upcasts (torchtitan without compile, HF Transformers), or "
            "nanotron's mix (Triton norm and rotary, PyTorch re-layout copies around them, "
            "unfused SwiGLU)"
        ),
    )
    cuda_graphs: list[Literal["attn", "mlp", "moe_router", "moe_preprocess", "full_iteration"]] = Field(
        default_factory=list,
        description=(
            "layer parts captured in CUDA graphs (Megatron-Core's cuda_graph_scope with "
            "TransformerEngine's partial capture): each part's kernels are issued by one graph "
            "launch instead of op by op, forward and backward; a dropless MoE layer's experts "
            "and dispatch cannot be captured (their sizes come from the host sync). "
            "full_iteration, alone: Megatron-Core's FullCudaGraphWrapper (cuda_graph_impl "
            "full_iteration, or local with scope full_iteration) replays every microbatch's "
            "forward and backward with their collectives as one graph, so no op of them costs "
            "the host anything; the optimizer step stays eager (training.step_tail). It holds "
            "no host sync: MoE needs a sync-free dispatch (moe.host_sync false: the static "
            "expert-rank capacity with paged stash) and dp.nan_check false. The graph's memory "
            "pool is not counted"
        ),
    )
    launch_blocking: bool = Field(
        default=False,
        description=(
            "CUDA_LAUNCH_BLOCKING=1: each kernel launch returns only once the kernel has run, so "
            "the host cannot run ahead and its time to issue each op of a layer (efficiency."
            "host_op_us per Python op, kernel_launch_us per C++ launch, as parallelism/host.py "
            "counts them) adds to the GPU's instead of hiding under it, and so do the "
            "BF16_Optimizer's two ops per parameter tensor per microbatch (grad_accum_cast); "
            "a collective's launch waits for it too, so no overlap.* collective runs beside "
            "compute (a preset's are off, one written true is refused); "
            "BigScience's BLOOM-176B runs exported it against hangs"
        ),
    )
    fused_cross_entropy: bool | Literal["native", "te"] = Field(
        default=False,
        description=(
            "how the vocab-parallel cross-entropy runs: false, Megatron's and nanotron's unfused "
            "fp32 loss (9.5 fp32 logit sizes moved forward, 3.5 backward; three TP all-reduces); "
            "native, Megatron-Core's fused_vocab_parallel_cross_entropy (--cross-entropy-loss-"
            "fusion, impl native) compiled by torch.compile before its in-place rewrite: the "
            "same fp32 passes as the unfused loss but its in-place updates materialised and "
            "copied back (7.5 forward, 4.5 backward), two all-reduces; te, TransformerEngine's "
            "parallel cross-entropy (impl te, Megatron-Bridge's and NeMo 2's performance "
            "scripts): two reads of the 16-bit logits and the gradient written over them forward, "
            "that gradient scaled in place backward, one all-gather; true, one fused kernel "
            "(Liger-Kernel's): the 16-bit logits read once forward, the gradient written once"
        ),
    )
    memory_overhead_gib: Annotated[float, AfterValidator(addressable_gib)] = Field(
        default=1.0, ge=0, description="CUDA context, cuBLAS workspace, NCCL buffers"
    )
    pipeline_flushes: int = Field(
        default=1,
        ge=1,
        description=(
            "with a pipeline, gradient accumulation over whole pipeline schedules: each "
            "data-parallel rank's microbatches run as this many flushes one after another, each "
            "filling and draining the pipeline (torchtitan's and NeMo AutoModel's gradient "
            "accumulation steps around torch.distributed.pipelining, local batch x steps); 1 = "
            "one schedule over all of them (Megatron, DeepSpeed)"
        ),
    )

    def fully_recomputed(self, position: int) -> bool:
        """Whether the layer at ``position`` (0-based) within its pipeline chunk reruns its
        whole forward before its backward."""
        if self.recompute != "full":
            return False
        return self.recompute_num_layers is None or position < self.recompute_num_layers

    @property
    def attended_tokens(self) -> int:
        """Tokens a token attends over at most: its packed document's (``document_tokens``),
        else the sequence's."""
        return self.document_tokens or self.seq_len

    @property
    def recomputed(self) -> frozenset[str]:
        """Modules selective recomputation reruns (Megatron-Core's default: the core attention)."""
        if self.recompute != "selective":
            return frozenset()
        return frozenset(self.recompute_modules or ("core_attn",))
