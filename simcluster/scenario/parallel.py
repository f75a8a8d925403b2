"""``parallel:``: the layout (dp, tp, pp, cp, ep, etp, vpp, ZeRO) and the pipeline schedule."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from simcluster.raw_sections import whole
from simcluster.scenario.base import SectionBase


class ParallelSection(SectionBase):
    """``parallel:`` — the layout. dp is derived from the GPU count when omitted."""

    dp: int | None = Field(
        default=None, gt=0,
        description="data-parallel degree; default GPUs / (tp x pp x cp)",
    )
    tp: int = Field(
        default=1, gt=0,
        description=(
            "tensor-parallel degree (Megatron's column/row-parallel linears); must divide heads "
            "and kv_heads"
        ),
    )
    pp: int = Field(default=1, gt=0, description="pipeline stages")
    cp: int = Field(
        default=1, gt=0,
        description=(
            "context-parallel degree: each sequence split over cp ranks (parallel.cp_comm says how "
            "they share K and V)"
        ),
    )
    cp_comm: str = Field(
        default="p2p",
        description="how cp ranks share K and V: p2p (ring attention, Megatron-Core's default), "
        "all_gather (Llama 3; gather exposed), a2a (DeepSpeed-Ulysses all-to-all over heads) or "
        "a2a+p2p (all-to-all inside groups of cp_a2a ranks, the ring across them)",
    )
    cp_a2a: int | None = Field(
        default=None,
        gt=0,
        description="with cp_comm a2a+p2p: the ranks of each all-to-all group, consecutive in cp "
        "(Megatron-Core's hierarchical_context_parallel_sizes [cp_a2a, cp/cp_a2a]); the ring runs "
        "over the cp/cp_a2a groups",
    )
    cp_a2a_impl: Literal["te", "deepspeed"] = Field(
        default="te",
        description="whose all-to-all attention runs cp_comm a2a: te (TransformerEngine's "
        "AttnFuncWithCPAndQKVOA2A, whose backward all-to-alls the saved output and its gradient "
        "in) or deepspeed (DeepSpeed's DistributedAttention, whose backward moves only the output "
        "gradient: its local attention saved the head-sharded output); set by framework deepspeed",
    )
    parallel_block_comm: Literal["separate", "gpt-neox", "fused"] | None = Field(
        default=None,
        description="the TP collectives of a parallel attention + MLP block (model.parallel_block): "
        "separate (each branch its own, as NeMo's Falcon layer on Megatron-Core; the default), "
        "gpt-neox (one all-reduce of the summed outputs forward, one per branch backward; no sequence "
        "parallelism) or fused (one set around the whole block, as its shared input allows: PaLM)",
    )
    ep: int = Field(
        default=1, gt=0,
        description=(
            "expert-parallel degree: routed experts split over ep ranks of each pipeline stage; "
            "must divide experts"
        ),
    )
    etp: int | None = Field(
        default=None,
        gt=0,
        description=(
            "expert tensor parallelism: each routed expert's matrices split over etp ranks "
            "(Megatron-Core's expert_tensor_parallel_size); default: tp for a mixture-of-experts "
            "model, as Megatron-Core defaults it (frameworks that do not shard experts set 1)"
        ),
    )
    vpp: int = Field(
        default=1, gt=0,
        description="virtual stages (model chunks) per pipeline rank, for the interleaved and V schedules",
    )
    layers_per_virtual_stage: int | None = Field(
        default=None,
        gt=0,
        description="Megatron's --num-layers-per-virtual-pipeline-stage (Narayanan et al.'s "
        "tables): vpp = (layers // pp) // this, resolved with the model; the interleaved "
        "schedule when that is above 1 and no schedule is named",
    )
    embedding_in_split: bool = Field(
        default=False,
        description="Megatron-Core's --account-for-embedding-in-pipeline-split: the embedding counts "
        "as one layer of the split, (layers + 1 (+ 1 for loss_in_split)) / pp a rank and that / vpp "
        "a virtual stage, the first virtual stage one layer short; layers_per_virtual_stage counts "
        "it too (schedules/partition.py megatron_accounted / megatron_vpp, the importer's rule)",
    )
    loss_in_split: bool = Field(
        default=False,
        description="Megatron-Core's --account-for-loss-in-pipeline-split: the LM head and loss "
        "count as one layer of the split, the last virtual stage one layer short (as embedding_in_split)",
    )
    zero: int = Field(
        default=0, ge=0, le=3,
        description=(
            "ZeRO stage: 0 replicates the model state, 1 shards the optimizer state (Megatron's "
            "distributed optimizer), 2 also the gradients, 3 also the parameters (FSDP)"
        ),
    )
    zero_shard: Annotated[int, Field(gt=0)] | Literal["node"] | None = Field(
        default=None,
        description="ranks that shard the ZeRO state; the dp*cp group is split into replicas of "
        "this size that all-reduce their shards (PyTorch HSDP, Megatron's distributed-optimizer "
        "instances); node = the data-parallel ranks of one node (PyTorch FSDP1's HYBRID_SHARD "
        "default: intra-node sharding, inter-node replicas); None = shard over all dp*cp ranks",
    )
    sequence_parallel: bool = Field(
        default=False,
        description=(
            "with tp > 1, norms and dropout run on a 1/tp shard of the sequence and the TP "
            "all-reduces become all-gathers and reduce-scatters (Korthikanti et al. 2022); default "
            "false unless the framework sets it"
        ),
    )
    sp_regather: bool | None = Field(
        default=None,
        description="with sequence parallelism: true, a column-parallel linear keeps its 1/tp "
        "shard of the input and all-gathers it again in the backward for its weight gradient "
        "(Korthikanti et al. 2022; Megatron-LM/Core, TransformerEngine, nanotron's "
        "tp_recompute_allgather); false, it keeps the gathered input from the forward, tp times "
        "the bytes and no second all-gather (PyTorch DTensor tensor parallelism: torchtitan, "
        "pytorch-ddp, pytorch-fsdp, AutoModel; PyTorch's async TP); unset: false with "
        "overlap.tp_comm_cfg pytorch-async-tp, true otherwise",
    )
    schedule: str = Field(
        default="1f1b",
        description="pipeline schedule; when not given, 1f1b, or interleaved when vpp > 1 "
        "(virtual stages are what Megatron's interleaved 1F1B runs)",
    )
    activation_limit: float | None = Field(
        default=None,
        gt=0,
        description="schedule v-auto: each stage's activation memory at most this fraction of "
        "1F1B's (p microbatches of a stage), e.g. 0.5; the V schedule with the shortest step "
        "within it (Qi et al.'s controllable memory: V-Min's blocks need about 1/3, V-Half's "
        "1/2, ZB-V's 1)",
    )

    @field_validator("activation_limit")
    @classmethod
    def _limit_within_1f1b(cls, limit: float | None) -> float | None:
        if limit is not None and limit > 1:  # the search keeps no block above 1F1B's 2p (v_auto.py)
            raise ValueError(
                "is a fraction of 1F1B's activation memory, at most 1 (the V schedules search within "
                "1F1B's; ZB-V's blocks need 1, V-Min's about 1/3); write e.g. 0.5"
            )
        return limit
    layers_per_stage: list[int] | None = Field(
        default=None,
        description=(
            "layers of each pipeline stage, first to last (their sum is model.layers); default an "
            "even split (parallel.partition)"
        ),
    )
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
    defer_head_wgrad: bool = Field(
        default=False,
        description="Megatron-Core's --defer-embedding-wgrad-compute: with pp > 1 the last "
        "stage keeps each microbatch's LM-head input and output gradient and runs the head's "
        "weight-gradient GEMMs after its last backward, in the pipeline flush "
        "(schedules.py finish_embedding_wgrad_compute; with sequence parallelism each input "
        "all-gathered again under the previous GEMM: utils.py drain_embedding_wgrad_compute)",
    )
    head_wgrad_deferral_limit: int = Field(
        default=0,
        ge=0,
        description="Megatron-Core's --wgrad-deferral-limit: with defer_head_wgrad, only the "
        "first this many microbatches' LM-head weight gradients wait for the flush, the rest "
        "run in their backward (0: every microbatch's)",
    )
    order: str = Field(
        default="tp,cp,dp,pp",
        description=(
            "the rank grid's dimensions, innermost first (Megatron's tp-cp-dp-pp): which ranks "
            "share a node"
        ),
    )
    ep_placement: Literal["packed", "spread"] = Field(
        default="packed", description="EP groups of consecutive ranks (inside nodes) or strided across nodes"
    )

    @model_validator(mode="before")
    @classmethod
    def _interleaved_for_virtual_stages(cls, data: Any) -> Any:
        # a table's "VP 5" with no schedule named means Megatron's interleaved 1F1B (setting
        # --num-layers-per-virtual-pipeline-stage is what selects it there)
        if not isinstance(data, dict):
            return data
        # a table's empty cell: no virtual stages
        data = {k: v for k, v in data.items() if not (k in ("vpp", "layers_per_virtual_stage") and v is None)}
        if "schedule" not in data and (whole(data.get("vpp")) or 0) > 1:
            return {**data, "schedule": "interleaved"}
        return data
