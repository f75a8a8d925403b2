"""The layout checks ``build_layout`` runs, in the order a user meets them.

Each helper checks one concern of a scenario's parallel layout against the model and cluster
and, where the concern derives a degree, returns it: the data-parallel degree, the rank order,
the expert tensor-parallel degree, the gradient collective, the ZeRO shard. The order matters:
an error names the first field to change, and a fix one check names is not refused by a later
one (the degree lists they offer are computed to pass the checks before them).
"""

from __future__ import annotations

import math

from simcluster.divisors import divisors, one_of
from simcluster.errors import UserError
from simcluster.limits import MAX_MICROBATCHES
from simcluster.lora import Adapters
from simcluster.model import ModelSpec
from simcluster.parallelism.context import check_algorithm
from simcluster.scenario import ParallelSection, Scenario, TrainingSection
from simcluster.schedules import get_schedule
from simcluster.schedules.base import VShapeSchedule
from simcluster.schedules.partition import (
    check_interleaved_ranks,
    check_megatron_pipeline_split,
    check_megatron_virtual_split,
)

DIMS = ("tp", "cp", "dp", "pp")

# dp.grad_collective each ZeRO stage admits: ZeRO-0 keeps no shard to scatter to; ZeRO-3 keeps
# only a gradient shard, so the full gradient never exists to be all-reduced. ZeRO-2 keeps only a
# shard too, but DeepSpeed's default (use_multi_rank_bucket_allreduce) all-reduces each bucket
# that spans several ranks' partitions and then copies its own slices. The first entry is what
# "auto" picks (PyTorch DDP / Megatron: all-reduce; distributed optimizer: reduce-scatter).
GRAD_COLLECTIVES: dict[int, tuple[str, ...]] = {
    0: ("all_reduce",),
    1: ("reduce_scatter", "all_reduce"),
    2: ("reduce_scatter", "all_reduce"),
    3: ("reduce_scatter",),
}

# the frameworks whose ZeRO-3 does not run under pipeline stages: DeepSpeed's PipelineEngine
# asserts ZeRO < 2; Megatron's FSDP and nanotron's ZeRO do not pipeline. Only
# torch.distributed.pipelining composes FSDP with pipeline stages.
_UNPIPELINED_ZERO3 = ("deepspeed", "megatron-core", "megatron-lm-2021", "nanotron")


def resolve_dp(par: ParallelSection, gpus: int) -> int:
    """The data-parallel degree: ``parallel.dp`` checked against the GPUs, or derived from them."""
    inner = par.tp * par.pp * par.cp
    if par.dp is None:
        if gpus % inner:
            raise UserError(
                "parallel",
                f"tp*pp*cp = {inner} does not divide cluster.gpus={gpus}; change the degrees or the GPU count",
            )
        return gpus // inner
    if par.dp * inner != gpus:
        fix = (
            f"set dp={gpus // inner} or omit dp to derive it"
            if gpus % inner == 0
            else f"tp*pp*cp = {inner} does not divide it either; change the degrees or the GPU count"
        )
        raise UserError(
            "parallel.dp",
            f"dp*tp*pp*cp = {par.dp}*{par.tp}*{par.pp}*{par.cp} = {par.dp * inner} != cluster.gpus={gpus}; {fix}",
        )
    return par.dp


def rank_order(par: ParallelSection) -> tuple[str, ...]:
    """``parallel.order``: the grid's dimensions, innermost first, each once."""
    order = tuple(d.strip() for d in par.order.split(","))
    if sorted(order) != sorted(DIMS):
        raise UserError(
            "parallel.order", f"must list each of {', '.join(DIMS)} once, e.g. 'tp,cp,dp,pp'"
        )
    return order


def check_model_split(scenario: Scenario, model: ModelSpec) -> None:
    """TP must split the heads (and query groups) evenly, the pipeline the layers, as the
    schedule and framework cut them."""
    par, gpus = scenario.parallel, scenario.cluster.gpus
    if model.heads % par.tp:
        raise UserError(
            "parallel.tp", f"tp={par.tp} must divide the model's heads={model.heads}{_tp_choices(model, gpus, par.pp * par.cp)}"
        )
    if model.mla is None and model.kv_heads % par.tp:
        raise UserError(
            "parallel.tp",
            f"tp={par.tp} must divide kv_heads={model.kv_heads} (Megatron's query groups){_tp_choices(model, gpus, par.pp * par.cp)}",
        )
    if par.pp * par.vpp > model.layers + 2:
        raise UserError(
            "parallel.pp",
            f"pp*vpp={par.pp * par.vpp} exceeds the model's {model.layers} layers + embedding + head; "
            f"use pp*vpp <= {model.layers + 2}",
        )
    _check_schedule_split(scenario, model)


def _check_schedule_split(scenario: Scenario, model: ModelSpec) -> None:
    """The schedule's chunks per stage, and Megatron's even split of the layers over them."""
    par = scenario.parallel
    if par.microbatch_group is not None and par.schedule != "interleaved":
        raise UserError(
            "parallel.microbatch_group",
            f"sets how many microbatches go through a chunk in a row in schedule 'interleaved' "
            f"(got schedule '{par.schedule}'); drop it or use schedule: interleaved",
        )
    schedule = get_schedule(par.schedule)
    if par.vpp > 1 and not schedule.uses_vpp:
        raise UserError("parallel.vpp", _vpp_refusal(par.schedule, par.vpp))
    if schedule.uses_vpp:
        check_interleaved_ranks(par.pp, par.vpp, scenario.framework, scenario.overlap.pp_comm)
    if par.layers_per_stage is not None or par.partition != "megatron":
        return
    if par.schedule == "interleaved":
        check_megatron_virtual_split(model.layers, par.pp, par.vpp, scenario.framework)
    if par.vpp == 1 and not isinstance(schedule, VShapeSchedule):
        gpus = scenario.cluster.gpus
        check_megatron_pipeline_split(model.layers, par.pp, scenario.framework, gpus // (par.tp * par.cp))


def check_sequence_split(scenario: Scenario, model: ModelSpec) -> None:
    """Context and sequence parallelism must cut the sequence as their kernels do."""
    par, tr = scenario.parallel, scenario.training
    check_cp_comm(par.cp_comm, par.cp, par.tp, model, tr.flash_attention, par.cp_a2a)
    check_parallel_block_comm(scenario, model)
    windowed = any(model.attention_span(i, tr.seq_len) < tr.seq_len for i in range(model.layers))
    if par.cp > 1 and windowed and par.cp_comm != "a2a":
        local_field = "sliding_window" if model.sliding_window else "attention_chunk"
        local_size = model.sliding_window or model.attention_chunk
        raise UserError(
            "parallel.cp_comm",
            f"'{par.cp_comm}' context parallelism is not modelled for sliding-window or chunked layers "
            f"(model.{local_field}={local_size} < seq_len); use a2a, or cp=1",
        )
    if par.cp > 1 and tr.seq_len % (2 * par.cp):
        raise UserError(
            "training.seq_len",
            f"seq_len={tr.seq_len} must be divisible by 2*cp={2 * par.cp} (load-balanced causal chunks: "
            f"each rank takes 2 of the 2*cp chunks); use seq_len {_multiples(tr.seq_len, 2 * par.cp)} or a cp "
            "that fits",
        )
    if par.sequence_parallel and par.tp > 1 and (tr.seq_len // par.cp) % par.tp:
        # Megatron-Core's _split_along_first_dim scatters each rank's s/cp tokens over tp:
        # "First dimension of the tensor should be divisible by tensor parallel size"
        raise UserError(
            "training.seq_len",
            f"seq_len/cp = {tr.seq_len // par.cp} tokens per context-parallel rank must divide by tp={par.tp} "
            "(sequence parallelism splits them over the TP group); change seq_len, cp or tp, or turn "
            "sequence_parallel off",
        )


def check_experts(par: ParallelSection, model: ModelSpec, dp: int) -> int:
    """EP must split the experts and one stage's ranks; returns the expert TP degree."""
    if par.ep > 1:
        if not model.is_moe:
            raise UserError(
                "parallel.ep", "ep>1 needs a mixture-of-experts model (model.experts > 0)"
            )
        stage = dp * par.cp * par.tp
        # the degrees both checks pass: a fix named for one is not refused by the other
        fixes = one_of(divisors(model.experts, lambda d: stage % d == 0))
        if model.experts % par.ep:
            raise UserError(
                "parallel.ep", f"ep={par.ep} must divide the model's experts={model.experts}; use ep {fixes}"
            )
        if stage % par.ep:
            raise UserError(
                "parallel.ep",
                f"ep={par.ep} must divide dp*cp*tp={stage}, the ranks of one pipeline stage "
                f"(EP groups are carved from them); use ep {fixes}",
            )
    return _expert_tp(par, model, dp)


def resolve_grad_collective(scenario: Scenario) -> str:
    """The ZeRO stage must run under the pipeline; returns the gradient collective it admits
    (``dp.grad_collective``, ``auto`` resolved), with the ``dp.*`` settings checked against it."""
    par = scenario.parallel
    if par.zero == 3 and par.pp > 1 and scenario.framework in _UNPIPELINED_ZERO3:
        raise UserError(
            "parallel.zero",
            f"zero=3 with pp={par.pp} is not run by framework {scenario.framework}; use zero<=1, pp=1, "
            "or framework torchtitan (FSDP2 under torch.distributed.pipelining)",
        )
    if scenario.fsdp1 and par.pp > 1:
        # torch.distributed.pipelining composes with FSDP2 (fully_shard) only: its stages call
        # FSDPModule methods (set_requires_gradient_sync, set_reshard_after_backward)
        raise UserError(
            "zero3.buffers",
            f"flat (PyTorch FSDP1) with pp={par.pp}: FSDP1 does not run under pipeline stages; "
            "use zero3.buffers copies (FSDP2, framework torchtitan) or pp=1",
        )
    if par.zero == 2 and par.pp > 1:
        raise UserError(
            "parallel.zero",
            f"zero=2 with pp={par.pp} is not supported by DeepSpeed/Megatron pipelines; use zero<=1, "
            "zero=3 (FSDP under torch.distributed.pipelining, as torchtitan runs it) or pp=1",
        )
    allowed = GRAD_COLLECTIVES[par.zero]
    grad_collective = (
        allowed[0] if scenario.dp.grad_collective == "auto" else scenario.dp.grad_collective
    )
    if grad_collective not in allowed:
        raise UserError(
            "dp.grad_collective",
            f"'{grad_collective}' does not fit zero={par.zero}; use {' or '.join(allowed)} (or auto)",
        )
    _check_dp_settings(scenario)
    return grad_collective


def _check_dp_settings(scenario: Scenario) -> None:
    """The ``dp.*`` settings that act only at some ZeRO stages or precisions."""
    par, dp = scenario.parallel, scenario.dp
    if dp.reduce_dtype is not None and par.zero == 3:
        raise UserError(
            "dp.reduce_dtype",
            "casts ZeRO 0-2's gradient buckets; at zero=3 the reduce-scatter's dtype is the "
            "accumulated one (set training.fp32_grad_accum instead), or drop dp.reduce_dtype",
        )
    if dp.reduce_dtype == "16bit" and scenario.training.precision == "fp32":
        raise UserError(
            "dp.reduce_dtype",
            "16bit needs a 16-bit training.precision (bf16 or fp16); use fp32 or drop it",
        )
    if dp.shard_accumulate and par.zero < 2:
        raise UserError(
            "dp.shard_accumulate",
            f"accumulates a gradient shard, which zero={par.zero} does not keep; set parallel.zero "
            "to 2 or 3, or drop it",
        )
    if dp.param_unpack == "per_tensor" and par.zero not in (1, 2):
        raise UserError(
            "dp.param_unpack",
            f"per_tensor unpacks ZeRO-1/2's parameter all-gather; zero={par.zero} has none "
            "(set parallel.zero to 1 or 2, or drop it)",
        )
    if dp.param_unpack == "per_tensor" and scenario.overlap.param_gather:
        raise UserError(
            "dp.param_unpack",
            "per_tensor unpacks the blocking all-gather after the optimizer (nanotron); set "
            "overlap.param_gather false, or dp.param_unpack flat",
        )


def resolve_zero_shard(scenario: Scenario, dp: int, gpus_per_node: int, grad_collective: str) -> int:
    """Hybrid sharding's group in ranks (0: plain ZeRO over all dp x cp ranks), checked."""
    par = scenario.parallel
    # a job inside one node: its GPUs
    zero_shard = _zero_shard(par, min(gpus_per_node, scenario.cluster.gpus))
    if not zero_shard:
        return 0
    if par.zero == 0:
        raise UserError("parallel.zero_shard", "shards ZeRO state; set parallel.zero to 1, 2 or 3 (or drop it)")
    if (dp * par.cp) % zero_shard:
        raise UserError(
            "parallel.zero_shard",
            f"{zero_shard} must divide dp*cp = {dp * par.cp} (the replicas split the group evenly); "
            f"use {one_of(divisors(dp * par.cp))}",
        )
    if grad_collective != "reduce_scatter":
        raise UserError(
            "parallel.zero_shard",
            "hybrid sharding reduce-scatters within a replica, then all-reduces the shard across "
            "replicas; it needs dp.grad_collective: reduce_scatter (or auto)",
        )
    return 0 if zero_shard == dp * par.cp else zero_shard  # one replica: plain ZeRO


def check_batch(tr: TrainingSection, dp: int) -> None:
    """The global batch must split into whole microbatches on every data-parallel rank, few
    enough to simulate."""
    per_step = dp * tr.micro_batch
    if tr.global_batch % per_step:
        # a smaller micro-batch that divides is often the fix a user means: an imported launch
        # script's case run on more nodes than its own (512 sequences over dp 512 at MBS 16)
        smaller = _smaller_micro_batch(tr.global_batch, dp, tr.micro_batch)
        also = f", or training.micro_batch={smaller}" if smaller else ""
        raise UserError(
            "training.global_batch",
            f"{tr.global_batch} is not divisible by dp*micro_batch = {dp}*{tr.micro_batch} = {per_step}; "
            f"use a multiple of {per_step}{also}",
        )
    if tr.grad_accum is not None and tr.grad_accum != tr.global_batch // per_step:
        raise UserError(
            "training.grad_accum",
            f"{tr.grad_accum} microbatches per rank, but global_batch {tr.global_batch} / (dp*micro_batch = "
            f"{per_step}) = {tr.global_batch // per_step}; give one of them",
        )
    if tr.global_batch // per_step > MAX_MICROBATCHES:
        raise UserError(
            "training.global_batch",
            f"{tr.global_batch} sequences are {tr.global_batch // per_step:,} microbatches of "
            f"{tr.micro_batch} per step on each of dp={dp}, more than the {MAX_MICROBATCHES:,} "
            "simcluster can simulate; lower the global batch or raise training.micro_batch",
        )


def check_lora(scenario: Scenario, model: ModelSpec) -> Adapters | None:
    """The LoRA adapters of ``lora:`` (None at rank 0), refused where their frozen base is not
    modelled: experts, MLA's compressed projections, a merged parallel block, multi-token
    prediction, ZeRO-3's gathers of frozen weights and nanotron's async TP linears."""
    lora = scenario.lora
    if lora.rank == 0:
        if scenario.training.fp4_param:
            # Megatron-Core cannot refresh NVFP4 parameters from the distributed optimizer's shards
            raise UserError(
                "training.fp4_param",
                "NVFP4 parameters are modelled for a LoRA run's frozen weights only; add lora: or drop it",
            )
        return None
    unmodelled = [
        (model.is_moe, "a mixture-of-experts model"),
        (model.mla is not None, "multi-head latent attention"),
        (model.parallel_block, "a parallel attention + MLP block"),
        (model.mtp_layers > 0, "multi-token prediction modules"),
        (scenario.parallel.zero == 3, "ZeRO-3 (frozen weights gathered)"),
        (scenario.overlap.tp_async, "overlap.tp_async"),
    ]
    for hit, what in unmodelled:
        if hit:
            raise UserError(
                "lora.rank", f"LoRA adapters with {what} are not modelled; set lora.rank: 0 (train every weight)"
            )
    return Adapters(
        rank=lora.rank, targets=tuple(dict.fromkeys(lora.targets)), dropout=lora.dropout, a2a=lora.a2a,
        # NeMo builds TEFusedLoRALinear only without tensor parallelism (lora.py: enable_op_fuser)
        op_fuser=lora.op_fuser and scenario.parallel.tp == 1,
    )


def check_whole_nodes(gpus: int, gpus_per_node: int) -> None:
    """A job past one node takes whole nodes."""
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise UserError(
            "cluster.gpus",
            f"{gpus} is not a multiple of gpus_per_node={gpus_per_node}; use whole nodes",
        )


def _check_cp_attention(name: str, model: ModelSpec, fused: bool) -> None:
    """Attention variants TransformerEngine runs under context parallelism only with one
    algorithm: learnable sinks with a2a, MLA with the p2p ring."""
    if model.attention_sinks and fused and name != "a2a":
        # TransformerEngine runs softmax_type learnable under cp only through the all-to-all
        # (NVIDIA/TransformerEngine#2148; its tests skip the rest, and #2541: p2p refuses it)
        raise UserError(
            "parallel.cp_comm",
            f"'{name}' does not run attention sinks (model.attention_sinks: TransformerEngine takes "
            "them under context parallelism only with a2a); use a2a, or cp=1",
        )
    if model.mla is not None and "p2p" not in name:
        raise UserError(
            "parallel.cp_comm",
            f"'{name}' does not run MLA attention (TransformerEngine takes its unequal K and V head "
            "dims only in its p2p ring); use p2p",
        )


def check_cp_comm(
    name: str, cp: int, tp: int, model: ModelSpec, fused: bool = True, cp_a2a: int | None = None
) -> None:
    """``parallel.cp_comm`` must be known and runnable as the frameworks run it:

    - the ring and the all-gather live inside TransformerEngine's fused attention; Megatron's
      unfused ``DotProductAttention`` asserts "Context parallelism is only supported by
      TEDotProductAttention!" (``fused`` = ``training.flash_attention``). Ulysses' all-to-alls
      wrap any local attention (DeepSpeed's ``DistributedAttention``), so a2a takes either;
    - MLA's unequal K and V head dims go only through TE's ring (its tests skip the others:
      "MLA CP currently only support KV P2P!");
    - Ulysses' all-to-all splits whole heads: TE's ``AttnFuncWithCPAndQKVOA2A`` asserts the
      query and key/value heads of a tp rank divide by its group's size (cp, or ``cp_a2a``
      under a2a+p2p, whose all-to-all groups must cut cp into runs and leave a ring)."""
    check_algorithm(name)
    if cp_a2a is not None and name != "a2a+p2p":
        raise UserError("parallel.cp_a2a", f"sizes a2a+p2p's all-to-all groups (cp_comm is '{name}'); drop it")
    if cp == 1:
        return
    if not fused and name != "a2a":
        raise UserError(
            "training.flash_attention",
            f"cp={cp} with cp_comm '{name}' runs inside TransformerEngine's fused attention, which "
            "flash_attention: false turns off; set training.flash_attention: true, or use "
            "parallel.cp_comm: a2a, or cp=1",
        )
    _check_cp_attention(name, model, fused)
    if name == "a2a+p2p":
        if cp_a2a is None or cp_a2a < 2 or cp_a2a >= cp or cp % cp_a2a:
            raise UserError(
                "parallel.cp_a2a",
                f"a2a+p2p needs the all-to-all group size, a divisor of cp={cp} between 2 and cp/2 "
                f"(got {cp_a2a}); set parallel.cp_a2a",
            )
        cp = cp_a2a
    elif name != "a2a":
        return
    for what, heads in (("heads", model.heads), ("kv_heads", model.kv_heads)):
        if (heads // tp) % cp:
            raise UserError(
                "parallel.cp_comm",
                f"{name}'s all-to-all splits each tp rank's {what} ({heads}/tp={heads // tp}) over {cp} "
                "ranks, which does not divide them; use p2p or all_gather, or a group size that divides them",
            )


def check_parallel_block_comm(scenario: Scenario, model: ModelSpec) -> None:
    """``parallel.parallel_block_comm`` needs a parallel block, and each implementation runs
    only where its code does: GPT-NeoX's layer all-reduces the summed branch outputs
    (``reduce_from_model_parallel_region``), which has no sequence-parallel form there; a fused
    block gathers one norm output for both branches (PaLM's one shared norm), so
    with sequence parallelism it needs ``model.parallel_norms: 1``; nanotron's async TP linears
    keep each branch's own collectives."""
    par = scenario.parallel
    comm = par.parallel_block_comm
    if comm is None:
        return
    field = "parallel.parallel_block_comm"
    if not model.parallel_block:
        raise UserError(
            field, "sets a parallel attention + MLP block's collectives, but the model's layers are "
            "sequential; drop it, or set model.parallel_block: true",
        )  # fmt: skip
    if par.tp == 1 or comm == "separate":
        return
    if comm == "gpt-neox" and par.sequence_parallel:
        raise UserError(
            field, "gpt-neox all-reduces the summed branch outputs and has no sequence-parallel form; "
            "set parallel.sequence_parallel: false, or parallel_block_comm: fused",
        )  # fmt: skip
    if comm == "fused" and par.sequence_parallel and model.parallel_norms == 2:
        raise UserError(
            field, "a fused block with sequence parallelism gathers one shared norm output; with "
            "model.parallel_norms: 2 use separate, or parallel_norms: 1",
        )  # fmt: skip
    if scenario.overlap.tp_async and par.sequence_parallel:
        raise UserError(
            field, f"nanotron's async TP linears (overlap.tp_async) keep each branch's collectives; "
            f"{comm} needs overlap.tp_async: false, or use separate",
        )  # fmt: skip


def etp_default_note(par: ParallelSection) -> str:
    """What an expert-TP error adds where the scenario left etp unset: where its value came from."""
    return " (etp defaults to tp, as Megatron-Core's expert_tensor_parallel_size)" if par.etp is None else ""


def _expert_tp(par: ParallelSection, model: ModelSpec, dp: int) -> int:
    """``parallel.etp`` resolved and checked: Megatron-Core's default is the attention's tp
    (``expert_tensor_parallel_size`` None -> ``tensor_model_parallel_size``); a dense model has
    no experts to split. ETP x EP groups are carved from one stage's dp*cp*tp ranks and each
    ETP rank holds expert_ffn/etp of every local expert's hidden width."""
    if not model.is_moe:
        if par.etp is not None and par.etp > 1:
            raise UserError("parallel.etp", "etp>1 splits routed experts; it needs a mixture-of-experts model")
        return 1
    etp = par.tp if par.etp is None else par.etp
    stage = dp * par.cp * par.tp
    # the etp values both checks pass (ep divides the stage's ranks: checked before), so 1 is one
    fixes = one_of(divisors(stage // par.ep, lambda d: model.expert_ffn % d == 0))
    if stage % (par.ep * etp):
        default = etp_default_note(par)
        raise UserError(
            "parallel.etp",
            f"ep*etp = {par.ep}*{etp} must divide dp*cp*tp={stage}, the ranks of one pipeline stage "
            f"(expert groups are carved from them){default}; use etp {fixes}",
        )
    if model.expert_ffn % etp:
        raise UserError(
            "parallel.etp",
            f"etp={etp} must divide the experts' hidden width expert_ffn={model.expert_ffn}; use etp {fixes}",
        )
    return etp


def _zero_shard(par: ParallelSection, gpus_per_node: int) -> int:
    """``parallel.zero_shard`` in ranks (0: none); ``node`` is the data-parallel ranks of one
    node, as FSDP1's HYBRID_SHARD builds its intra-node process group from the ranks of a node
    (``_init_intra_and_inter_node_groups``: ``_get_default_group`` split by
    ``torch.cuda.device_count()``); with tp or cp > 1 a node holds gpus_per_node / tp of them."""
    if par.zero_shard != "node":
        return par.zero_shard or 0
    if gpus_per_node % par.tp:
        raise UserError(
            "parallel.zero_shard",
            f"node: tp={par.tp} does not divide gpus_per_node={gpus_per_node}; give zero_shard in ranks",
        )
    return gpus_per_node // par.tp


def _smaller_micro_batch(global_batch: int, dp: int, micro_batch: int) -> int | None:
    """The largest micro-batch below ``micro_batch`` whose dp-wide step divides
    ``global_batch``, among layouts of at most :data:`MAX_MICROBATCHES` microbatches (more are
    refused below): searched by the microbatch count, so a micro-batch typed with extra zeros
    does not walk every smaller one (300,000,000 of them took 22 s)."""
    if micro_batch < 2 or global_batch % dp:
        return None
    per_rank = global_batch // dp
    first = -(-per_rank // (micro_batch - 1))  # the fewest microbatches at a micro-batch below the given
    for count in range(first, min(per_rank, MAX_MICROBATCHES) + 1):
        if per_rank % count == 0:
            return per_rank // count
    return None


def _tp_choices(model: ModelSpec, gpus: int, others: int) -> str:
    """'; tp 1, 2, 4 or 8 divide both': the degrees that split the heads (and, without MLA,
    Megatron's query groups) evenly and fit the GPUs beside the layout's other model-parallel
    degrees (``others`` = pp x cp: tp x pp x cp must divide the GPUs), so the error names a fix
    that is not refused next."""
    heads = model.heads if model.mla is not None else math.gcd(model.heads, model.kv_heads)
    fits = divisors(heads, lambda d: gpus % (d * others) == 0)
    both = "" if model.mla is not None or model.kv_heads == model.heads else " both"
    return f"; tp {one_of(fits)} divide{both}" if len(fits) > 1 else ""


def _vpp_refusal(schedule: str, vpp: int) -> str:
    """Why ``schedule`` does not take ``vpp`` chunks per stage, and the schedules that do (from
    the registry: a schedule added there is named here too)."""
    from simcluster.schedules import SCHEDULES

    takers = ", ".join(f"'{name}'" for name, s in sorted(SCHEDULES.items()) if s.uses_vpp)
    if isinstance(SCHEDULES[schedule], VShapeSchedule):
        return (
            f"schedule '{schedule}' always runs 2 chunks per stage (a V), whatever vpp says; drop "
            f"parallel.vpp, or for vpp={vpp} loops use {takers}"
        )
    return (
        f"vpp={vpp} needs a schedule that loops over chunks: {takers} (got '{schedule}', one "
        "chunk per stage); drop parallel.vpp or change parallel.schedule"
    )


def _multiples(value: int, step: int) -> str:
    """The multiples of ``step`` on either side of ``value`` ('4096 or 4104'), for a fix."""
    below = value // step * step
    return f"{below} or {below + step}" if below > 0 else str(step)
