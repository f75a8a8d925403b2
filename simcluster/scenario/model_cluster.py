"""``model:`` and ``cluster:``: the model's shape (or preset) and the hardware it runs on."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from simcluster.limits import MAX_GPUS, addressable_gib
from simcluster.nccl_ctas import MAX_CHANNELS
from simcluster.rate_bounds import HBM, LATENCY, LINK, NIC
from simcluster.scenario.base import SectionBase
from simcluster.scenario.nccl import NcclCommunicator, check_communicators


class ModelSection(SectionBase):
    """``model:`` — a preset, a Hugging Face config.json, or explicit fields (overrides allowed)."""

    preset: str | None = Field(
        default=None,
        description=(
            "a shipped model (simcluster list presets); fields written beside it override the "
            "preset's"
        ),
    )
    hf_config: str | None = Field(
        default=None,
        description=(
            "a Hugging Face config.json, or the folder holding it (relative paths from the "
            "scenario's folder; a Hub id is not fetched); fields written beside it override it"
        ),
    )
    name: str | None = Field(
        default=None,
        description="the model's name in outputs; alone (no shape fields) it names a preset",
    )
    params: float | None = Field(
        default=None,
        gt=0,
        description="the parameter count a paper or model card states ('18.4B', or params_b: "
        "18.4), as a check: the shape must come within 10% of it (active parameters for a "
        "mixture of experts also count)",
    )
    layers: int | None = Field(
        default=None,
        description="transformer layers (required without preset or hf_config)",
    )
    hidden: int | None = Field(
        default=None,
        description="hidden size h (required without preset or hf_config)",
    )
    heads: int | None = Field(
        default=None,
        description="attention (query) heads (required without preset or hf_config)",
    )
    kv_heads: int | None = Field(
        default=None,
        description=(
            "key/value heads: fewer than heads for grouped-query attention, 1 for multi-query; "
            "default heads"
        ),
    )
    head_dim: int | None = Field(
        default=None,
        description="width of one attention head; default hidden / heads",
    )
    ffn: int | None = Field(
        default=None,
        description=(
            "the MLP's inner width (of each branch of a gated MLP); default Megatron-LM's: 4h, or "
            "for swiglu 8h/3 rounded down to a multiple of 64"
        ),
    )
    vocab: int | None = Field(
        default=None,
        description=(
            "vocabulary size: the embedding's and LM head's rows (required without preset or "
            "hf_config)"
        ),
    )
    mlp: Literal["gelu", "relu2", "swiglu"] | None = Field(
        default=None,
        description="gelu / relu2 (squared ReLU, Nemotron-4): two matrices; swiglu: any gated MLP (three)",
    )
    experts: int | None = Field(
        default=None,
        description="routed experts of a mixture-of-experts layer; unset or 0: a dense model",
    )
    top_k: int | None = Field(default=None, description="routed experts each token goes to")
    expert_ffn: int | None = Field(
        default=None,
        description="inner width of each routed expert's MLP",
    )
    shared_experts: int | None = Field(
        default=None,
        description="experts every token goes to, each expert_ffn wide (DeepSeek's n_shared_experts)",
    )
    dense_layers: int | None = Field(
        default=None,
        description=(
            "leading layers with a dense MLP (ffn wide) before the mixture-of-experts layers "
            "(DeepSeek-V3: 3)"
        ),
    )
    moe_every: int | None = Field(
        default=None,
        ge=0,
        description="after dense_layers, every moe_every-th layer is MoE (layer i when (i + 1) % "
        "moe_every == 0; Llama 4 Maverick: 2), the others dense with ffn; 0 or 1 = every layer",
    )
    router_groups: int | None = Field(
        default=None,
        ge=0,
        description="group-limited routing: the experts split into this many equal groups, of which "
        "each token's experts come from group_topk (DeepSeek-V3: 8 and 4); bounds the GPUs or nodes "
        "a DeepEP-family dispatch sends a token to; 0 = no groups",
    )
    group_topk: int | None = Field(
        default=None,
        ge=0,
        description="with router_groups: the groups each token picks, by the sum of its best "
        "top_k / group_topk scores in each (DeepSeek-V3: 4)",
    )
    tied_embeddings: bool | None = Field(
        default=None,
        description="the LM head shares the input embedding's matrix (default false)",
    )
    position: Literal["rope", "learned", "alibi"] | None = Field(
        default=None,
        description=(
            "position encoding: rope (the default), learned (an embedding of max_positions rows) "
            "or alibi (a bias on the attention scores)"
        ),
    )
    max_positions: int | None = Field(
        default=None,
        description="rows of a learned position embedding (position: learned); seq_len may "
        "not exceed it",
    )
    norm: Literal["rmsnorm", "layernorm"] | None = Field(
        default=None,
        description="rmsnorm (the default) or layernorm",
    )
    norm_bias: bool | None = Field(
        default=None,
        description="whether a LayerNorm has a bias beside its weight (default true; Cohere's has none)",
    )
    bias: bool | str | list[str] | None = Field(
        default=None,
        description="which linears carry a bias: true (every linear of the layers), false, or a list "
        "of qkv, attn_out, mlp, lm_head (GPT-J: [mlp, lm_head]; Qwen2: [qkv])",
    )
    qkv_bias: bool | None = Field(
        default=None,
        description="the older spelling of bias: [qkv] (Qwen2, ChatGLM's add_qkv_bias): true adds "
        "the Q/K/V biases, false takes them off",
    )
    dropout: bool | None = Field(
        default=None,
        description=(
            "dropout layers run (their masks count in memory and their passes in time, by "
            "training.elementwise); default false"
        ),
    )
    qk_norm: bool | Literal["none", "shared", "per_head", "whole", "weightless"] | None = Field(
        default=None,
        description="a norm on queries and keys before the rotary embedding: shared (one head_dim "
        "weight: Qwen3, Gemma 3, Apertus, Megatron's --qk-layernorm; true), per_head (Cohere, "
        "StableLM), whole (over the projection: OLMo 2, OLMoE), weightless (Llama 4), none (false)",
    )
    parallel_block: bool | None = Field(
        default=None,
        description="attention and MLP in parallel off one residual, y = x + Attn(LN(x)) + MLP(LN(x)) "
        "(GPT-J, GPT-NeoX use_parallel_residual / gpt_j_residual, Falcon parallel_attn, PaLM, Cohere)",
    )
    parallel_norms: Literal[1, 2] | None = Field(
        default=None,
        description="with parallel_block: 1 = one norm feeds both branches (GPT-J, Falcon-7B, PaLM, "
        "Cohere; the default), 2 = a norm each (GPT-NeoX, Falcon-40B/180B; Falcon's num_ln_in_parallel_attn)",
    )
    nope_global: bool | None = Field(
        default=None,
        description="the global layers of global_every have no rotary embedding or query/key norm "
        "(Llama 4's NoPE layers, Cohere2's global layers)",
    )
    post_norms: bool | None = Field(
        default=None,
        description="a norm on each block's output before the residual add, beside the pre-block "
        "norms (Gemma 2 and 3's post_attention_layernorm and post_feedforward_layernorm)",
    )
    logit_softcap: float | None = Field(
        default=None,
        ge=0,
        description="tanh soft-capping of the output logits, c * tanh(logits / c) (Gemma 2's "
        "final_logit_softcapping: 30); 0 = none",
    )
    attention_sinks: bool | None = Field(
        default=None,
        description="a learned logit per query head and layer in each softmax denominator (gpt-oss's "
        "sinks); needs a kernel that runs them (cudnn) or flash_attention: false",
    )
    embedding_norm: bool | None = Field(
        default=None, description="a norm on the token embeddings before the first layer (BLOOM)"
    )
    shared_expert_gate: bool | None = Field(
        default=None,
        description="a sigmoid gate of one h-wide row on the shared experts' output (Qwen2-MoE)",
    )
    mla: dict[str, int] | None = Field(
        default=None,
        description=(
            "DeepSeek's multi-head latent attention instead of per-head K/V projections: "
            "{q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim} "
            "(q_lora_rank 0: queries not compressed)"
        ),
    )
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
        description="with sliding_window or attention_chunk: layer i attends globally when "
        "(i+1) % global_every == 0 (Gemma 2 and gpt-oss: 2, Gemma 3: 6, Llama 4: 4); 0 = every layer local",
    )
    attention_chunk: int | None = Field(
        default=None,
        ge=0,
        description="chunked local attention: a local layer's query attends to the keys of its own "
        "aligned chunk of this many tokens (Llama 4: 8192, with global_every 4); 0 = none",
    )


class ClusterSection(SectionBase):
    """``cluster:`` — the hardware profile, the GPU count, and overrides of profile fields."""

    hardware: str = Field(
        default="dgx-h100",
        description=(
            "a shipped hardware profile (simcluster list hardware) or a profile YAML's path, e.g. "
            "one calibrate wrote"
        ),
    )
    gpus: int = Field(gt=0, description=f"GPUs in the job (at most {MAX_GPUS:,})")
    gpus_per_node: int | None = Field(
        default=None, gt=0,
        description="GPUs used on each node, at most the profile's node.gpus_per_node (its default)",
    )

    @field_validator("gpus")
    @classmethod
    def _gpus_within_bound(cls, gpus: int) -> int:
        if gpus > MAX_GPUS:  # the bound's reason with it, not pydantic's bare 'less than or equal'
            raise ValueError(
                f"more than the {MAX_GPUS:,} GPUs simcluster builds a cluster for (the largest published "
                "clusters have about 100,000); lower it"
            )
        return gpus
    network: Literal["simulated", "ideal"] = Field(
        default="simulated",
        description=(
            "simulated: every collective and pipeline transfer on the modelled links; ideal: "
            "communication takes no time (the compute-bound limit)"
        ),
    )
    # overrides of hardware profile fields (see hardware.CLUSTER_OVERRIDES)
    nic_gbps: Annotated[float, NIC] | None = Field(
        default=None, gt=0,
        description="overrides the profile's node.nic_gbps: each NIC's rate, Gbit/s per direction",
    )
    nics_per_node: int | None = Field(
        default=None, gt=0,
        description="overrides the profile's node.nics_per_node: NICs (rails) per node",
    )
    nic_latency_us: Annotated[float, LATENCY] | None = Field(
        default=None, ge=0,
        description="overrides the profile's node.nic_latency_us: a network hop's latency, microseconds",
    )
    nvlink_GBps: Annotated[float, LINK] | None = Field(
        default=None, gt=0,
        description=(
            "overrides the profile's node.nvlink_GBps: each GPU's NVLink (scale-up) bandwidth, "
            "GB/s per direction"
        ),
    )
    nvlink_latency_us: Annotated[float, LATENCY] | None = Field(
        default=None, ge=0,
        description="overrides the profile's node.nvlink_latency_us: an NVLink hop's latency, microseconds",
    )
    nvlink_domain: int | None = Field(
        default=None, gt=0,
        description=(
            "overrides the profile's node.nvlink_domain: GPUs one NVLink domain joins (72 for "
            "NVL72)"
        ),
    )
    segment_nodes: int | None = Field(
        default=None,
        gt=0,
        description="overrides the profile's fabric.segment_nodes: nodes of each NVLink domain a "
        "multi-domain job takes (Slurm --segment)",
    )
    nvls: bool | None = Field(
        default=None,
        description=(
            "overrides the profile's node.nvls: whether the NVSwitches reduce in the switch "
            "(NVLink SHARP), which NCCL's NVLS algorithms need"
        ),
    )
    nccl_communicators: Annotated[
        dict[str, NcclCommunicator] | None, AfterValidator(check_communicators)
    ] = Field(
        default=None,
        description=(
            "per-communicator NCCL CTA limits by Megatron-Core's group names, as its "
            "--nccl-communicator-config-path YAML gives them, e.g. {dp_cp: {max_ctas: 8}, cp: "
            "{max_ctas: 1}}: a limited group runs on fewer channels, holds fewer SMs and moves "
            "at most what they move (profile efficiency.channel_busbw; a profile without it: "
            "the SMs only). Userbuffers exchanges are not NCCL calls and are not limited"
        ),
    )
    nccl_min_ctas: int | None = Field(
        default=None, ge=1, le=MAX_CHANNELS,
        description="NCCL_MIN_CTAS: replaces every communicator's min_ctas",
    )
    nccl_max_ctas: int | None = Field(
        default=None, ge=1, le=MAX_CHANNELS,
        description="NCCL_MAX_CTAS: replaces every communicator's max_ctas",
    )
    nccl_min_nchannels: int | None = Field(
        default=None, ge=1, le=MAX_CHANNELS,
        description="NCCL_MIN_NCHANNELS: the fewest channels of every communicator, over its max_ctas",
    )
    nccl_max_nchannels: int | None = Field(
        default=None, ge=1, le=MAX_CHANNELS,
        description="NCCL_MAX_NCHANNELS: the most channels of every communicator",
    )
    oversubscription: float | None = Field(
        default=None, ge=1,
        description=(
            "overrides the profile's fabric.oversubscription: leaf-to-spine oversubscription (1 = "
            "a non-blocking fabric)"
        ),
    )
    nodes_per_leaf: int | None = Field(
        default=None, gt=0,
        description="overrides the profile's fabric.nodes_per_leaf: nodes under one leaf switch",
    )
    topology: str | None = Field(
        default=None,
        description="overrides the profile's fabric.topology: rail_fat_tree, fat_tree or nvl_domain",
    )
    memory_gib: Annotated[float, AfterValidator(addressable_gib)] | None = Field(
        default=None, gt=0,
        description="overrides the profile's gpu.memory_gib: each GPU's memory, GiB",
    )
    hbm_tbps: Annotated[float, HBM] | None = Field(
        default=None, gt=0,
        description="overrides the profile's gpu.hbm_tbps: each GPU's memory bandwidth, TB/s",
    )
    speed_spread: float | None = Field(
        default=None,
        ge=0,
        le=0.2,
        description="overrides the profile's gpu.speed_spread: the per-GPU throughput spread "
        "(standard deviation over mean); 0 = identical GPUs",
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
