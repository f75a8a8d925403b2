"""The PyTorch-native frameworks: torchtitan, NeMo AutoModel, plain DDP and FSDP1, and the
batch readers their pipelines share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simcluster.errors import UserError
from simcluster.frameworks.base import Defaults, parallel_degree, raw_section, zero_stage


def _dp_batch(raw: Mapping[str, Any]) -> tuple[int, int] | None:
    """(data-parallel degree, global batch) of a raw scenario, None when not yet known."""
    gpus, batch = raw_section(raw, "cluster").get("gpus"), raw_section(raw, "training").get("global_batch")
    if not isinstance(gpus, int) or not isinstance(batch, int):
        return None
    model_parallel = parallel_degree(raw, "tp", 1) * parallel_degree(raw, "pp", 1) * parallel_degree(raw, "cp", 1)
    dp = parallel_degree(raw, "dp", 0) or (gpus // model_parallel if model_parallel > 0 and gpus % model_parallel == 0 else 0)
    return (dp, batch) if dp > 0 else None


def _pipeline_microbatch(raw: Mapping[str, Any]) -> int | None:
    """torchtitan's micro-batch under a pipeline: each data-parallel rank's batch split into as
    many microbatches as there are stages (``pipeline_parallel_microbatches`` defaults to the
    pipeline degree); None when the scenario sets it or the split is not whole."""
    pp = parallel_degree(raw, "pp", 1)
    known = _dp_batch(raw)
    if pp <= 1 or "micro_batch" in raw_section(raw, "training") or known is None:
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

    pp, parallel = parallel_degree(raw, "pp", 1), raw_section(raw, "parallel")
    if pp <= 1 or "microbatch_group" in parallel:
        return None
    name = normalise_spellings({"parallel": dict(parallel)})["parallel"].get("schedule")
    if name != "interleaved" and not (name is None and parallel_degree(raw, "vpp", 1) > 1):
        return None
    known = _dp_batch(raw)
    if micro_batch is None:
        micro_batch = raw_section(raw, "training").get("micro_batch", 1)
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
    zero = zero_stage(raw)
    if zero in (1, 2):
        raise UserError(
            "parallel.zero",
            f"framework {name} replicates (zero 0, DDP) or fully shards (zero 3, FSDP2), it has "
            f"no ZeRO-{zero}; use zero 3 (with zero3.reshard_after_forward: false to keep the "
            "gathered parameters from forward to backward) or zero 0",
        )


def torchtitan(raw: Mapping[str, Any]) -> Defaults:
    """torchtitan's trainer defaults for a raw scenario."""
    _fsdp2_stages_only(raw, "torchtitan")
    defaults = _torchtitan_defaults(raw)
    if raw_section(raw, "training").get("precision") == "fp8":
        # its float8 converter is torchao's Float8Linear (parallelism/torchao_float8.py)
        defaults["training"]["fp8_library"] = "torchao"
    if parallel_degree(raw, "tp", 1) > 1:
        # its TP plan shards every norm along the sequence (apply_tp: "tensor + sequence
        # parallelism to every transformer block"): its TP is always sequence-parallel
        defaults.setdefault("parallel", {})["sequence_parallel"] = True
    if raw_section(raw, "overlap").get("tp_comm"):
        # its enable_async_tensor_parallel is PyTorch's micro-pipelined TP, not TransformerEngine's
        # userbuffers (userbuffers.PYTORCH_ASYNC_TP)
        defaults["overlap"]["tp_comm_cfg"] = "pytorch-async-tp"
    if parallel_degree(raw, "cp", 1) > 1:
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
    # its step's host loop was not read for training.step_tail (not charged)
    training: dict[str, Any] = {"elementwise": "eager", "step_tail": "none"}
    micro_batch = _pipeline_microbatch(raw)
    if micro_batch is not None:
        training["micro_batch"] = micro_batch
    defaults: Defaults = {
        "training": training,
        "zero3": {"buffers": "copies"},
        "overlap": {"tp_grad_async": False},  # DTensor TP in eager mode: its collectives block
    }
    if raw_section(raw, "parallel").get("zero_shard"):
        # under HSDP its trainer defers the replicas' all-reduce to the last microbatch
        # (trainer.py: set_requires_all_reduce(is_last) when dp_replicate is enabled)
        defaults["zero3"]["replica_all_reduce"] = "last_microbatch"
    parallel: dict[str, Any] = _dtensor_sp(raw)
    if parallel_degree(raw, "ep", 1) > 1:
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
    return {"sp_regather": False} if parallel_degree(raw, "tp", 1) > 1 else {}


def pytorch_ddp(raw: Mapping[str, Any]) -> Defaults:
    """Plain PyTorch DistributedDataParallel (with torch.distributed.pipelining for stages)."""
    if zero_stage(raw) != 0 or any(parallel_degree(raw, k, 1) > 1 for k in ("cp", "ep")):
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
            "step_tail": "none",
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


def pytorch_fsdp(raw: Mapping[str, Any]) -> Defaults:
    """PyTorch FullyShardedDataParallel (FSDP1) defaults for a raw scenario."""
    given = raw_section(raw, "parallel").get("zero") is not None
    zero = zero_stage(raw) if given else 3  # FullyShardedDataParallel's default: FULL_SHARD
    if zero != 3:
        raise UserError(
            "parallel.zero",
            f"framework pytorch-fsdp (FullyShardedDataParallel) shards at zero 3, got zero={zero}; "
            "write parallel.fsdp: FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD or _HYBRID_SHARD_ZERO2, "
            "or use framework pytorch-ddp for NO_SHARD",
        )
    if any(parallel_degree(raw, k, 1) > 1 for k in ("cp", "ep")):
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
        "training": {"elementwise": "eager", "fp32_grad_accum": False, "step_tail": "none"},
        "zero3": {"buffers": "flat"},
        "overlap": {"tp_grad_async": False},  # DTensor TP in eager mode: its collectives block
    }


def automodel(raw: Mapping[str, Any]) -> Defaults:
    """NeMo AutoModel: torchtitan's FSDP2 with TransformerEngine kernels and DeepEP."""
    # torchtitan's FSDP2 composition with TransformerEngine's fused kernels (its summary's
    # "TE" kernel column) and DeepEP's dispatch for experts ("DeepEP")
    defaults = _torchtitan_defaults(raw)
    defaults["training"]["elementwise"] = "fused"
    # ASSUMED: its loop keeps FSDP2's default under HSDP (all-reduce every microbatch); not
    # read from its recipes, unlike torchtitan's trainer
    defaults["zero3"].pop("replica_all_reduce", None)
    if parallel_degree(raw, "ep", 1) > 1:
        defaults["moe"] = {"dispatcher": "deepep"}
    return defaults
