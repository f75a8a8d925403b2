"""Scenario schema (YAML), loading, ``--set a.b=c`` overrides, and field-naming errors.

The keys here are public: tests, docs and ``--set`` use them. Unknown keys are errors with a
did-you-mean hint; every error names the dotted field and the fix.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from simcluster import yamlio
from simcluster.data import data_dir
from simcluster.errors import UserError, did_you_mean
from simcluster.frameworks import apply_framework
from simcluster.limits import MAX_GPUS
from simcluster.nodes import expand_nodes
from simcluster.paths import anchor_paths
from simcluster.spellings import normalise_spellings


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ModelSection(_Section):
    """``model:`` — a preset, a Hugging Face config.json, or explicit fields (overrides allowed)."""

    preset: str | None = None
    hf_config: str | None = None
    name: str | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    ffn: int | None = None
    vocab: int | None = None
    mlp: Literal["gelu", "relu2", "swiglu"] | None = Field(
        default=None,
        description="gelu / relu2 (squared ReLU, Nemotron-4): two matrices; swiglu: any gated MLP (three)",
    )
    experts: int | None = None
    top_k: int | None = None
    expert_ffn: int | None = None
    shared_experts: int | None = None
    dense_layers: int | None = None
    tied_embeddings: bool | None = None
    position: Literal["rope", "learned", "alibi"] | None = None
    max_positions: int | None = Field(
        default=None,
        description="rows of a learned position embedding (position: learned); seq_len may "
        "not exceed it",
    )
    norm: Literal["rmsnorm", "layernorm"] | None = None
    bias: bool | None = None
    dropout: bool | None = None
    mla: dict[str, int] | None = None
    mtp_layers: int | None = Field(
        default=None, ge=0, description="multi-token prediction modules (DeepSeek-V3: 1)"
    )
    sliding_window: int | None = Field(
        default=None,
        ge=0,
        description="keys a query of a local (sliding-window) layer attends to; 0 = all layers global",
    )
    global_every: int | None = Field(
        default=None,
        ge=0,
        description="with sliding_window: layer i attends globally when (i+1) % global_every == 0 "
        "(Gemma 2 and gpt-oss: 2, Gemma 3: 6); 0 = every layer local",
    )


class ClusterSection(_Section):
    """``cluster:`` — the hardware profile, the GPU count, and overrides of profile fields."""

    hardware: str = "dgx-h100"
    gpus: int = Field(gt=0, le=MAX_GPUS, description=f"GPUs in the job (at most {MAX_GPUS:,})")
    gpus_per_node: int | None = Field(default=None, gt=0)
    network: Literal["simulated", "ideal"] = "simulated"
    # overrides of hardware profile fields (see hardware.CLUSTER_OVERRIDES)
    nic_gbps: float | None = Field(default=None, gt=0)
    nics_per_node: int | None = Field(default=None, gt=0)
    nic_latency_us: float | None = Field(default=None, ge=0)
    nvlink_GBps: float | None = Field(default=None, gt=0)
    nvlink_latency_us: float | None = Field(default=None, ge=0)
    nvlink_domain: int | None = Field(default=None, gt=0)
    segment_nodes: int | None = Field(
        default=None, gt=0, description="nodes of each NVLink domain a multi-domain job takes (Slurm --segment)"
    )
    nvls: bool | None = None
    oversubscription: float | None = Field(default=None, ge=1)
    nodes_per_leaf: int | None = Field(default=None, gt=0)
    topology: str | None = None
    memory_gib: float | None = Field(default=None, gt=0)
    hbm_tbps: float | None = Field(default=None, gt=0)
    speed_spread: float | None = Field(
        default=None, ge=0, le=0.2, description="per-GPU throughput spread; 0 = identical GPUs"
    )
    profile: dict[str, Any] | None = Field(
        default=None,
        description="any hardware-profile field by its path, e.g. {efficiency: {nic: 0.8}} "
        "(--set cluster.profile.efficiency.nic=0.8)",
    )

    def overrides(self) -> dict[str, Any]:
        """The profile overrides given in this section."""
        from simcluster.hardware import CLUSTER_OVERRIDES

        return {k: getattr(self, k) for k in CLUSTER_OVERRIDES if getattr(self, k) is not None}


ScheduleName = Literal[
    "afab", "1f1b", "interleaved", "looped-bfs", "zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-auto", "zbv",
    "v-half", "v-min", "dualpipe", "dualpipev",
]


class ParallelSection(_Section):
    """``parallel:`` — the layout. dp is derived from the GPU count when omitted."""

    dp: int | None = Field(default=None, gt=0)
    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    cp: int = Field(default=1, gt=0)
    cp_comm: str = Field(
        default="p2p",
        description="how cp ranks share K and V: p2p (ring attention, Megatron-Core's default), "
        "all_gather (Llama 3; gather exposed) or a2a (DeepSpeed-Ulysses all-to-all over heads)",
    )
    ep: int = Field(default=1, gt=0)
    etp: int | None = Field(
        default=None,
        gt=0,
        description=(
            "expert tensor parallelism: each routed expert's matrices split over etp ranks "
            "(Megatron-Core's expert_tensor_parallel_size); default: tp for a mixture-of-experts "
            "model, as Megatron-Core defaults it (frameworks that do not shard experts set 1)"
        ),
    )
    vpp: int = Field(default=1, gt=0)
    zero: int = Field(default=0, ge=0, le=3)
    zero_shard: int | None = Field(
        default=None,
        gt=0,
        description="ranks that shard the ZeRO state; the dp*cp group is split into replicas of "
        "this size that all-reduce their shards (PyTorch HSDP, Megatron's distributed-optimizer "
        "instances); None = shard over all dp*cp ranks",
    )
    sequence_parallel: bool = False
    schedule: str = "1f1b"
    layers_per_stage: list[int] | None = None
    microbatch_group: int | None = Field(
        default=None,
        gt=0,
        description="interleaved schedule: microbatches that go through each chunk in a row "
        "(Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage; Llama 3's N); "
        "None = pp, at least pp",
    )
    partition: Literal["megatron", "nanotron"] = Field(
        default="megatron",
        description="how layers split over pipeline stages when layers_per_stage is unset: "
        "megatron (even; the first and last stage one fewer when that evens out the embedding "
        "and head) or nanotron (balanced by nanotron's per-block cost, the LM head included)",
    )
    order: str = "tp,cp,dp,pp"
    ep_placement: Literal["packed", "spread"] = Field(
        default="packed", description="EP groups of consecutive ranks (inside nodes) or strided across nodes"
    )


RecomputeModule = Literal["core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp"]


class TrainingSection(_Section):
    """``training:`` — batch, precision, recomputation, optimizer."""

    seq_len: int = Field(gt=0)
    micro_batch: int = Field(default=1, gt=0)
    global_batch: int = Field(gt=0, description="sequences per optimizer step")
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
    fp8_param_gather: bool = Field(
        default=False,
        description=(
            "FP8 parameters (Megatron-Core's fp8_param_gather, set by NeMo's and Megatron-Bridge's "
            "FP8 recipes): the transformer layers' weights are kept and all-gathered (ZeRO-1/2/3) "
            "in FP8, 1 B per element (+1/32 for block scales) instead of 2; embeddings, the LM "
            "head and norms stay 16-bit"
        ),
    )
    fp32_grad_accum: bool = True
    grad_accum_fusion: bool = Field(
        default=False,
        description=(
            "the weight-gradient GEMM accumulates into the fp32 main gradient (Megatron "
            "gradient_accumulation_fusion, TE fuse_wgrad_accumulation): no 16-bit gradient buffer"
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
    optimizer: Literal["adam", "sgd"] = "adam"
    grad_clip: Literal["shard", "local_scale"] = Field(
        default="shard",
        description=(
            "the gradient-norm clipping pass of the optimizer step: shard (Megatron's "
            "clip_grad_norm_fp32: the norm reads the fp32 gradients the rank's optimizer steps, "
            "its ZeRO shard; it scales them only when the norm exceeds the limit, not charged); "
            "local_scale (nanotron's clip_grad_norm: the norm reads every local fp32 gradient, "
            "ZeRO-1 too, and every one is multiplied by the clamped coefficient, a read and a "
            "write, every step)"
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
    flash_attention: bool = Field(
        default=True, description="fused attention: the s x s scores are never stored"
    )
    attention_kernel: str | None = Field(
        default=None,
        description=(
            "which fused-attention kernel's benchmark curves to use (a key of the profile's "
            "efficiency.attention_kernels, e.g. fa2 for the flash-attn 2 package, cudnn for "
            "TransformerEngine on Hopper); default: the profile's"
        ),
    )
    elementwise: Literal["fused", "eager", "nanotron"] = Field(
        default="fused",
        description=(
            "how norms, rotary embedding, activation and residual adds run: fused kernels "
            "(Megatron/TransformerEngine, torch.compile), PyTorch eager, one kernel per "
            "operation with fp32 upcasts (torchtitan without compile, HF Transformers), or "
            "nanotron's mix (Triton norm and rotary, PyTorch re-layout copies around them, "
            "unfused SwiGLU)"
        ),
    )
    cuda_graphs: list[Literal["attn", "mlp", "moe_router", "moe_preprocess"]] = Field(
        default_factory=list,
        description=(
            "layer parts captured in CUDA graphs (Megatron-Core's cuda_graph_scope with "
            "TransformerEngine's partial capture): each part's kernels are issued by one graph "
            "launch instead of op by op, forward and backward; a dropless MoE layer's experts "
            "and dispatch cannot be captured (their sizes come from the host sync)"
        ),
    )
    fused_cross_entropy: bool = Field(
        default=False,
        description="one fused loss kernel; false = Megatron's unfused fp32 vocab-parallel cross-entropy",
    )
    memory_overhead_gib: float = Field(
        default=1.0, ge=0, description="CUDA context, cuBLAS workspace, NCCL buffers"
    )

    def fully_recomputed(self, position: int) -> bool:
        """Whether the layer at ``position`` (0-based) within its pipeline chunk reruns its
        whole forward before its backward."""
        if self.recompute != "full":
            return False
        return self.recompute_num_layers is None or position < self.recompute_num_layers

    @property
    def recomputed(self) -> frozenset[str]:
        """Modules selective recomputation reruns (Megatron-Core's default: the core attention)."""
        if self.recompute != "selective":
            return frozenset()
        return frozenset(self.recompute_modules or ("core_attn",))


class OverlapSection(_Section):
    """``overlap:`` — which communication may hide behind compute (framework options)."""

    dp_grad_reduce: bool = True
    param_gather: bool = True
    optimizer_offload: bool = Field(
        default=False,
        description=(
            "with training.optimizer_offload: pipeline the gradients' copy to the host, the CPU "
            "update and the weights' copy back parameter group by parameter group, so the "
            "slowest of the three sets the time (Megatron-Core --overlap-cpu-optimizer-d2h-h2d); "
            "false: one after the other"
        ),
    )
    tp_comm: bool = False
    tp_comm_cfg: str | dict[str, Any] | None = Field(
        default=None,
        description=(
            "TransformerEngine userbuffers settings of overlap.tp_comm: a preset name (NeMo's / "
            "Megatron-Bridge's, e.g. userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192, or te-1 / "
            "te-2 for TransformerEngine's defaults) or a mapping from overlap name (qkv_fprop ... "
            "fc2_dgrad) to {method, num_sm, set_sm_margin, num_splits}; unset: TransformerEngine "
            "2.x's defaults (simcluster/userbuffers.py)"
        ),
    )

    @field_validator("tp_comm_cfg", mode="before")
    @classmethod
    def _preset_or_mapping(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, (str, dict)):
            raise ValueError(
                "must be a userbuffers preset name or a mapping from overlap name to its settings"
            )
        return value
    tp_grad_async: bool = Field(
        default=True,
        description=(
            "Megatron's and TransformerEngine's asynchronous input-gradient collective: with a "
            "schedule that keeps W inside the backward, a column-parallel linear's input-gradient "
            "reduce-scatter (sequence parallelism) or all-reduce (without) runs under its "
            "weight-gradient GEMM (LinearWithGradAccumulationAndAsyncCommunication, before it "
            "ColumnParallelLinearWithAsyncAllreduce); false: it blocks before the weight gradients "
            "(Megatron-LM of the SC'21 paper, Megatron-DeepSpeed, nanotron without its async "
            "linears, torchtitan)"
        ),
    )
    tp_async: bool = Field(
        default=False,
        description=(
            "nanotron's tp_linear_async_communication (with sequence parallelism, its "
            "REDUCE_SCATTER mode): a column linear all-gathers its input under the GEMM of its "
            "own token shard and reduce-scatters its input gradient under its weight-gradient "
            "GEMM; a row linear all-gathers its output gradient under its own shard's GEMM. "
            "Weight gradients run inside the backward (a schedule that keeps it whole)"
        ),
    )
    pp_comm: bool = True
    pp_p2p: Literal["batched", "serial"] = Field(
        default="batched",
        description=(
            "batched: a stage's send and its receive for the next op go out together "
            "(Megatron's batched isend/irecv); serial: DeepSpeed's and nanotron's pipeline "
            "engines, one blocking send or receive at a time, a receive of the next activation before the previous "
            "gradient's send, and a transfer starts only once its receiver is in its receive "
            "(1f1b with pp_comm false only)"
        ),
    )
    pp_scatter_gather: bool = Field(
        default=False,
        description=(
            "without sequence parallelism, each tensor-parallel rank sends only its 1/tp slice "
            "of the activation or gradient to the next stage, and the receiving stage all-gathers "
            "the slices over its TP group before using them (Megatron-LM 2021's "
            "--scatter-gather-tensors-in-pipeline, on by default there; DeepSpeed's pipeline "
            "engine partitions them likewise); false: every TP rank sends the whole tensor "
            "(Megatron-Core, nanotron, torch pipelining)"
        ),
    )
    ep_comm: bool = Field(
        default=False,
        description=(
            "Megatron-Core's overlap_moe_expert_parallel_comm: the steady state combines one "
            "microbatch's forward with another's backward so each one's expert-parallel "
            "all-to-alls hide behind the other's compute (needs ep > 1; with pp > 1 the "
            "interleaved schedule)"
        ),
    )


class Zero3Section(_Section):
    """``zero3:`` — how ZeRO-3 / FSDP gathers parameters and reduces gradients."""

    prefetch: bool = True
    buffers: Literal["views", "copies"] = Field(
        default="views",
        description=(
            "views: parameters are views of the gathered flat buffer and gradients are reduced "
            "from the fp32 main-gradient buffer (FSDP1, Megatron-FSDP); copies: PyTorch FSDP2 "
            "(fully_shard, torchtitan) copies every gather out into per-parameter tensors on "
            "the compute stream and copy-casts the gradients into the reduce-scatter buffer, "
            "with no unsharded fp32 main gradient"
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


class DpSection(_Section):
    """``dp:`` — gradient buckets and the collective that reduces them."""

    bucket_mb: float | Literal["megatron-core"] = Field(
        default=25.0,
        description=(
            "gradient bucket size, MB (1e6 B) of gradients on the wire; whole parameter tensors "
            "are added in backward order until a bucket holds this much (torch DDP's "
            "bucket_cap_mb). megatron-core: max(40M, 1M x dp) parameters, one bucket when the "
            "reduction is not overlapped (Megatron-Core's default bucket_size)"
        ),
    )

    @field_validator("bucket_mb", mode="before")
    @classmethod
    def _megabytes_or_megatron(cls, value: Any) -> Any:
        if value == "megatron-core":
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf:
            return float(value)
        raise ValueError("must be a finite number of MB above 0 or 'megatron-core'")

    bucket_stages: Literal["all", "first"] = Field(
        default="all",
        description=(
            "all: every pipeline stage and model chunk splits its gradients into buckets; "
            "first: only the first pipeline stage's first model chunk does, every other stage "
            "and chunk reduces its gradients as one bucket after its last backward "
            "(Megatron-Core's DistributedDataParallel: bucket_size None when pp_rank > 0 or "
            "disable_bucketing)"
        ),
    )
    grad_collective: Literal["auto", "all_reduce", "reduce_scatter"] = Field(
        default="auto",
        description="auto: all_reduce for zero 0, reduce_scatter for zero >= 1; all_reduce with "
        "zero 1 is nanotron's ZeRO-1 (full gradient all-reduced, optimizer on the shard)",
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
            "synchronising backward"
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


class MoeSection(_Section):
    """``moe:`` — expert routing and token dispatch."""

    @property
    def reads_counts(self) -> bool:
        """Whether the dispatcher syncs the host on the per-expert token counts (``host_sync``
        resolved)."""
        if self.host_sync is not None:
            return self.host_sync
        return not self.padded

    @property
    def padded(self) -> bool:
        """Whether every expert runs exactly its capacity (token dropping padded to it)."""
        return self.capacity_factor is not None and self.pad_to_capacity

    @property
    def expert_load(self) -> float:
        """Rows the busiest local expert runs, as a multiple of the mean share: the imbalance
        dropless, cut at the capacity with token dropping, the capacity itself when padded."""
        if self.capacity_factor is None:
            return self.load_imbalance
        if self.pad_to_capacity:
            return self.capacity_factor
        return min(self.load_imbalance, self.capacity_factor)

    @property
    def padded_rows(self) -> float:
        """Rows every expert keeps for its backward, as a multiple of the mean share: the
        capacity when padded to it (each expert then runs exactly that many), else the mean
        (dropless imbalance moves between experts and layers, so a rank keeps the mean)."""
        if self.padded:
            assert self.capacity_factor is not None  # padded implies a capacity factor
            return self.capacity_factor
        return 1.0

    @property
    def wire_share(self) -> float:
        """Routed copies an all-to-all carries, as a multiple of top_k per token: the padding
        with pad_to_capacity, at most the capacity when tokens are dropped."""
        if self.capacity_factor is None:
            return 1.0
        if self.pad_to_capacity:
            return self.capacity_factor
        return min(1.0, self.capacity_factor)

    load_imbalance: float = Field(
        default=1.0, ge=1.0, description="max/mean tokens per expert; slows expert GEMMs"
    )
    dispatcher: Literal["alltoall", "deepep"] = Field(
        default="alltoall",
        description=(
            "alltoall: each of a token's top_k copies goes straight to its expert's GPU "
            "(Megatron's alltoall dispatcher); deepep: a token crosses to each node holding "
            "its experts once and is forwarded inside the node over NVLink (DeepEP, DeepSeek-V3)"
        ),
    )
    max_nodes_per_token: int | None = Field(
        default=None,
        ge=1,
        description="node-limited routing: a token's experts on at most M nodes (MoE models; "
        "the moe: settings are errors on a dense model)",
    )
    capacity_factor: float | None = Field(
        default=None,
        gt=0,
        description=(
            "token dropping: each expert takes at most capacity_factor x its mean share of the "
            "routed tokens, the rest are dropped (Megatron-Core's moe_expert_capacity_factor); "
            "unset: dropless"
        ),
    )
    pad_to_capacity: bool = Field(
        default=False,
        description=(
            "with capacity_factor: every expert's input is padded to its capacity, so each runs "
            "exactly capacity rows and the all-to-alls carry the padding "
            "(moe_pad_expert_input_to_capacity)"
        ),
    )
    host_sync: bool | None = Field(
        default=None,
        description=(
            "the dispatcher reads the per-expert token counts back to the host once per MoE "
            "layer forward, so the host loses its lead on the GPU there (Megatron-Core's "
            "dropless alltoall and flex/DeepEP dispatchers); false for a sync-free dispatch "
            "(device-side splits). Unset: true, except with capacity_factor and "
            "pad_to_capacity, whose token counts are fixed (Megatron-Core's drop-and-pad path "
            "skips the sync)"
        ),
    )
    fp8_dispatch: bool = Field(
        default=False,
        description="send the dispatch (and its backward, the gradient before the down-projection) in FP8",
    )


class Straggler(_Section):
    """One known-slow part of the cluster: a GPU whose kernels run slower, or a node whose
    NICs run below their rated bandwidth (``simulation.stragglers``)."""

    gpu: int | None = Field(default=None, ge=0, description="global rank of a slow GPU")
    compute: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description="with gpu: how many times longer its kernels take (1.25 = a GPU 20% slow)",
    )
    node: int | None = Field(default=None, ge=0, description="a node whose NICs are degraded")
    nic: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="with node: the fraction of their bandwidth its NICs keep (0.5 = a 400G "
        "link trained down to 200G)",
    )


class SimulationSection(_Section):
    all_ranks: bool = Field(default=False, description="simulate every rank, not one per stage")
    stragglers: list[Straggler] = Field(
        default_factory=list,
        description="known-slow GPUs or degraded NICs; simulated with every rank (all_ranks)",
    )


class Scenario(_Section):
    """A validated scenario."""

    name: str = "scenario"
    description: str = ""
    framework: str | None = Field(
        default=None,
        description=(
            "the training framework (simcluster list frameworks): fills the overlap, gradient "
            "reduction and kernel fields the scenario leaves unset with what that framework does"
        ),
    )
    model: ModelSection
    cluster: ClusterSection
    parallel: ParallelSection = ParallelSection()
    training: TrainingSection
    overlap: OverlapSection = OverlapSection()
    zero3: Zero3Section = Zero3Section()
    dp: DpSection = DpSection()
    moe: MoeSection = MoeSection()
    simulation: SimulationSection = SimulationSection()


_SECTIONS: dict[str, type[BaseModel]] = {
    name: f.annotation  # type: ignore[misc]
    for name, f in Scenario.model_fields.items()
    if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
}


def _scenarios_dir() -> Path:
    """The shipped scenarios/ folder."""
    return data_dir("scenarios")


def shipped_scenarios() -> list[str]:
    """Names of the scenarios shipped in scenarios/."""
    return sorted(p.stem for p in _scenarios_dir().glob("*.yaml"))


def resolve_scenario_path(name_or_path: str | Path) -> Path:
    """A scenario name ('llama3-8b-8xh100') or a path -> an existing file."""
    text = str(name_or_path)
    path = Path(text)
    if path.is_file():
        return path
    if path.is_dir():
        raise UserError("scenario", f"'{text}' is a directory; give a scenario YAML file")
    if path.suffix in (".yaml", ".yml") or "/" in text:
        raise UserError("scenario", f"file '{text}' not found")
    candidate = _scenarios_dir() / f"{text}.yaml"
    if candidate.is_file():
        return candidate
    names = shipped_scenarios()
    raise UserError(
        "scenario",
        f"'{text}' is neither a file nor a shipped scenario{did_you_mean(text, names)}; "
        f"shipped: {', '.join(names)}",
    )


def parse_set(items: list[str] | None) -> list[tuple[str, Any]]:
    """Parse ``--set a.b=c`` items; values are YAML scalars (numbers, booleans, lists)."""
    result = []
    for item in items or []:
        if "=" not in item:
            raise UserError("--set", f"'{item}' must look like key.path=value")
        key, _, raw = item.partition("=")
        key = key.strip()
        if not key:
            raise UserError("--set", f"'{item}' has an empty key")
        if any(not part.strip() for part in key.split(".")):
            raise UserError(
                "--set", f"'{item}': the key '{key}' has an empty part; write e.g. parallel.tp=4"
            )
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        result.append((key, value))
    return result


def apply_overrides(data: dict[str, Any], overrides: list[tuple[str, Any]]) -> dict[str, Any]:
    """Apply dotted overrides to a raw scenario dict (unknown keys are caught by validation)."""
    out = copy.deepcopy(data)
    for key, value in overrides:
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise UserError(key, f"cannot set inside '{part}', which is not a section")
            node = child
        node[parts[-1]] = value
    return out


def _format_error(exc: ValidationError) -> UserError:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    field = ".".join(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = loc[:-1]
        model: type[BaseModel] = Scenario
        for part in parent:
            sub = model.model_fields.get(part)
            if sub is None or not (
                isinstance(sub.annotation, type) and issubclass(sub.annotation, BaseModel)
            ):
                break
            model = sub.annotation
        hint = did_you_mean(loc[-1], model.model_fields)
        return UserError(field, f"unknown key{hint}; remove it or fix the spelling")
    if kind == "missing":
        return UserError(field, "is required; add it to the scenario")
    got = err.get("input")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return UserError(field, f"must be a mapping of keys (a section), got {got!r}")
    if kind == "literal_error":
        return UserError(field, f"got {got!r}; {err['msg'].lower()}")
    if kind == "value_error":  # a validator's own message
        return UserError(field, f"{err['msg'].removeprefix('Value error, ')} (got {got!r})")
    return UserError(field, f"{err['msg'].lower()} (got {got!r})")


def _expand_model_shorthand(data: dict[str, Any]) -> dict[str, Any]:
    """``model: llama3-8b`` means ``model: {preset: llama3-8b}`` (``*.json``: ``hf_config``).

    Expanded before ``--set`` so that ``--set model.layers=4`` still works on a shorthand.
    """
    model = data.get("model")
    name = model.strip() if isinstance(model, str) else ""
    if not name:
        return data
    key = "hf_config" if name.endswith(".json") else "preset"
    return {**data, "model": {key: name}}


def scenario_from_dict(data: Any, overrides: list[tuple[str, Any]] | None = None) -> Scenario:
    """Validate a raw scenario mapping (after applying overrides)."""
    if not isinstance(data, dict):
        raise UserError(
            "scenario", "must be a YAML mapping with model, cluster, parallel, training"
        )
    data = apply_overrides(_expand_model_shorthand(data), overrides or [])
    data = apply_framework(normalise_spellings(expand_nodes(data)))
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise _format_error(exc) from None


def load_scenario(
    name_or_path: str | Path, overrides: list[tuple[str, Any]] | None = None
) -> Scenario:
    """Load a scenario by shipped name or path, apply ``--set`` overrides and validate."""
    path = resolve_scenario_path(name_or_path)
    data = anchor_paths(yamlio.load_user_file(path, "scenario", "scenario file"), path.parent)
    scenario = scenario_from_dict(data, overrides)
    if scenario.name == "scenario":
        scenario = scenario.model_copy(update={"name": path.stem})
    return scenario
