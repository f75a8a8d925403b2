"""``lora:``: low-rank adapters on a frozen model (LoRA fine-tuning, Hu et al. 2021)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simcluster.scenario.base import SectionBase

LoraTarget = Literal["qkv", "proj", "fc1", "fc2"]
#: NeMo's LoRA default (``target_modules: [linear_qkv, linear_proj]``)
DEFAULT_TARGETS: tuple[LoraTarget, ...] = ("qkv", "proj")


class LoraSection(SectionBase):
    """``lora:`` — which linears carry rank-``rank`` adapters while every base weight stays
    frozen (rank 0: every weight is trained, as in pretraining)."""

    rank: int = Field(
        default=0,
        ge=0,
        description=(
            "the adapters' rank r: each targeted linear W (k x n) gets A (k x r) and B (r x n), "
            "the only weights trained; the base weights, embedding and LM head are frozen (no "
            "weight gradients, gradient buffers, optimizer state or data-parallel reduction of "
            "their own). 0: no adapters, every weight trained"
        ),
    )
    targets: list[LoraTarget] = Field(
        default_factory=lambda: list(DEFAULT_TARGETS),
        min_length=1,
        description=(
            "the linears that carry adapters: qkv (the fused QKV projection), proj (attention "
            "output), fc1 (MLP up/gate), fc2 (MLP down); NeMo's default and MLPerf's "
            "llama2_70b_lora are qkv and proj"
        ),
    )
    dropout: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description=(
            "dropout probability on each adapter's input (NeMo's dropout_position pre; MLPerf's "
            "llama2_70b_lora 0.1): a mask and a masked copy of the input, kept for the backward"
        ),
    )
    op_fuser: bool = Field(
        default=False,
        description=(
            "TransformerEngine's op fuser runs each adapter beside its base linear (NeMo's "
            "TEFusedLoRALinear, use_transformer_engine_op_fuser; MLPerf v5.1's USE_TE_OPS=1): the "
            "scale and the add into the base output become the B GEMM's epilogue, the backward "
            "scale its input-gradient GEMM's alpha, and the adapter's input gradient is "
            "accumulated by the base linear's input-gradient GEMM; its dropout is "
            "TransformerEngine's fused kernel, a 1-bit mask where PyTorch's is a 1-byte bool; "
            "NeMo builds it at tp 1 only"
        ),
    )
    a2a: bool = Field(
        default=False,
        description=(
            "with tp > 1 and sequence parallelism, a row-parallel target's adapter (proj, fc2) "
            "turns its hidden-split output into the sequence shard with one all-to-all each way "
            "(NeMo's a2a_experimental; MLPerf's LORA_A2A=1) instead of an all-gather of the "
            "whole output (and of its gradient)"
        ),
    )
