"""``moe:``: routing balance, dispatch, token dropping and the dispatcher's host sync."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simcluster.scenario.base import SectionBase


class MoeSection(SectionBase):
    """``moe:`` — expert routing and token dispatch."""

    @property
    def reads_counts(self) -> bool:
        """Whether the dispatcher syncs the host on the per-expert token counts (``host_sync``
        resolved)."""
        if self.host_sync is not None:
            return self.host_sync
        return not self.padded

    @property
    def per_destination(self) -> bool:
        """Whether the dispatcher sends a token once per GPU (or NVLink domain) holding its
        experts, DeepEP's way (deepep, hybridep), not once per routed expert (alltoall)."""
        return self.dispatcher != "alltoall"

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
    dispatcher: Literal["alltoall", "deepep", "hybridep"] = Field(
        default="alltoall",
        description=(
            "alltoall: each of a token's top_k copies goes straight to its expert's GPU "
            "(Megatron's alltoall dispatcher); deepep: a token crosses to each NVLink domain "
            "holding its experts once and is forwarded inside it over NVLink, and inside one "
            "domain goes once to each GPU holding its experts (DeepEP, DeepSeek-V3); hybridep: "
            "the same routing by NVIDIA's HybridEP kernels (Megatron-Core's flex dispatcher "
            "with --moe-flex-dispatcher-backend hybridep; its TMA copies need an NVIDIA GPU from "
            "Hopper on), at the profile's efficiency.hybridep_nvlink rate"
        ),
    )
    dispatch_sms: int | None = Field(
        default=None,
        ge=1,
        description=(
            "SMs the deepep or hybridep dispatch and combine kernels run on (Megatron-Core's "
            "--moe-deepep-num-sms, --moe-hybridep-num-sms): held beside the compute they overlap, "
            "and inside one NVLink domain the kernels' rate read at that count where the profile "
            "measured it (efficiency.deepep_nvlink_by_sms, hybridep_nvlink_by_sms); DeepEP takes "
            "an even count. Unset: Megatron-Core's defaults, 20 for deepep and 16 for hybridep"
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
    router_dtype: Literal["fp32"] | None = Field(
        default=None,
        description=(
            "Megatron-Core's --moe-router-dtype: fp32 returns the gating GEMM's logits in FP32 "
            "(TransformerEngine's general GEMM on the 16-bit input and weight) and runs its "
            "input and weight gradients as FP32 GEMMs, which cuBLAS computes on TF32 tensor "
            "cores, with the casts around them (moe_utils.RouterGatingLinearFunction); unset: "
            "the activations' 16-bit dtype. Megatron-Bridge's DeepSeek and Qwen3-Next "
            "providers set fp32, its Qwen3-MoE ones leave it unset"
        ),
    )
    shared_expert_overlap: bool = Field(
        default=False,
        description=(
            "Megatron-Core's --moe-shared-expert-overlap: the shared experts run on a side "
            "stream, fc1 and its activation under the dispatch all-to-all, fc2 under the "
            "combine (and their input gradients under the backward's all-to-alls); only with "
            "the alltoall dispatcher, as Megatron-Core's TransformerConfig requires"
        ),
    )
    fp8_dispatch: bool = Field(
        default=False,
        description="send the dispatch (and its backward, the gradient before the down-projection) in FP8",
    )
    aligned_dispatch: bool = Field(
        default=False,
        description=(
            "FP8/FP4 dropless: the dispatch (or the routing) already delivers each local "
            "expert's rows in multiples of the GEMMs' alignment, so the experts copy nothing to "
            "align them (DeepEP's Buffer.dispatch expert_alignment, Megatron-Core's hybridep "
            "backend or moe_router_padding_for_fp8); false: TransformerEngine's Fp8Padding "
            "copies them, as Megatron-Core's TEGroupedMLP does behind its alltoall and flex "
            "(DeepEP) dispatchers"
        ),
    )
