"""``overlap:``: which communication runs under compute, and how (TP, DP, PP, EP)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from simcluster.scenario.base import SectionBase


class OverlapSection(SectionBase):
    """``overlap:`` — which communication may hide behind compute (framework options)."""

    dp_grad_reduce: bool = Field(
        default=True,
        description=(
            "data-parallel gradient reductions run under the backward as their buckets fill "
            "(Megatron's overlap_grad_reduce, DDP's hooks); false: after the last backward, "
            "exposed"
        ),
    )
    param_gather: bool = Field(
        default=True,
        description=(
            "ZeRO's parameter all-gathers run under the forward, layer by layer (Megatron's "
            "overlap_param_gather); false: blocking, after the optimizer step"
        ),
    )
    optimizer_offload: bool = Field(
        default=False,
        description=(
            "with training.optimizer_offload: pipeline the gradients' copy to the host, the CPU "
            "update and the weights' copy back parameter group by parameter group, so the "
            "slowest of the three sets the time (Megatron-Core --overlap-cpu-optimizer-d2h-h2d); "
            "false: one after the other"
        ),
    )
    tp_comm: bool = Field(
        default=False,
        description=(
            "tensor-parallel collectives overlapped with their GEMMs (TransformerEngine's "
            "userbuffers, tp_comm_overlap; PyTorch's async TP under torchtitan); needs sequence "
            "parallelism"
        ),
    )
    tp_comm_cfg: str | dict[str, Any] | None = Field(
        default=None,
        description=(
            "TransformerEngine userbuffers settings of overlap.tp_comm: a preset name (NeMo's / "
            "Megatron-Bridge's, e.g. userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192, or te-1 / "
            "te-2 for TransformerEngine's defaults, pytorch-async-tp for PyTorch's async TP, "
            "torchtitan's) or a mapping from overlap name (qkv_fprop ... "
            "fc2_dgrad) to {method, num_sm, set_sm_margin, num_splits, fp8_buf, atomic_gemm (proj_fprop / "
            "fc2_fprop: the GEMM as one atomic-counter kernel, the reduce-scatter still in slices)}; unset: "
            "TransformerEngine 2.x's defaults (simcluster/userbuffers.py)"
        ),
    )

    tp_comm_rs_dgrad: bool = Field(
        default=False,
        description=(
            "with overlap.tp_comm: a column-parallel linear's input-gradient reduce-scatter "
            "overlapped with its input-gradient GEMM through the qkv_dgrad / fc1_dgrad userbuffer "
            "(Megatron-Core tp_comm_overlap_rs_dgrad; that buffer's method in overlap.tp_comm_cfg "
            "must be ring_exchange or pipeline); the norm output the weight gradient reads is then "
            "gathered by an asynchronous NCCL call under that GEMM"
        ),
    )
    tp_comm_disable_qkv: bool = Field(
        default=False,
        description=(
            "with overlap.tp_comm: the fused QKV linear runs without userbuffers in the forward "
            "(Megatron-Core tp_comm_overlap_disable_qkv): its input all-gather a blocking NCCL "
            "call, no overlap.tp_comm_rs_dgrad for it; a LoRA adapter beside it then reads the "
            "gathered norm output instead of gathering its input itself"
        ),
    )
    tp_comm_disable_fc1: bool = Field(
        default=False,
        description=(
            "as overlap.tp_comm_disable_qkv for the MLP's first linear (Megatron-Core "
            "tp_comm_overlap_disable_fc1)"
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
    pp_comm: bool = Field(
        default=True,
        description=(
            "pipeline sends and receives overlap the next op (Megatron's overlap_p2p_comm); "
            "turned off unless written for a 1F1B without virtual stages of megatron-core, nemo, "
            "megatron-bridge or a scenario without a framework, as Megatron's validate_args does, "
            "and for the 1F1B of pytorch-ddp, torchtitan and automodel (torch's Schedule1F1B "
            "waits on its sends where the stage turns between forwards and backwards)"
        ),
    )
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
