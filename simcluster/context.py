"""Resolve a validated scenario into the objects every command needs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from simcluster import (
    attention_head_dims,
    attention_sinks,
    fp8_attention,
    full_iteration,
    userbuffers,
)
from simcluster.divisors import divisors, one_of
from simcluster.ep_kernel_rates import DISPATCH_SMS
from simcluster.errors import UserError
from simcluster.frameworks import (
    PYTORCH_PIPELINING,
    with_framework_fp8_weights,
    with_framework_kernel,
    with_framework_weight_cache,
)
from simcluster.frameworks.schedules import (
    check_framework_schedule,
    check_framework_sequence_parallel,
)
from simcluster.hardware import HardwareProfile, load_profile
from simcluster.layout import Layout, build_layout
from simcluster.model import ModelSpec, build_model
from simcluster.nccl_ctas import channels_note
from simcluster.parallelism import fsdp2_accumulation, zero3_coordinator, zeropp
from simcluster.parallelism.expert import hidden_row_bytes, unmeasured_rate_note
from simcluster.parallelism.zero3_coordinator import coordinated
from simcluster.pipeline_p2p_overlap import with_pipeline_p2p_overlap
from simcluster.placement import Chunk, stage_chunks
from simcluster.profile_sources import quick_run_note, unsourced_note
from simcluster.scenario import MoeSection, Scenario, TrainingSection
from simcluster.schedules import OpCosts, PipeOp, Schedule, ScheduleSpec, get_schedule
from simcluster.schedules.base import VShapeSchedule
from simcluster.schedules.ep_overlap import pair_orders
from simcluster.schedules.partition import MEGATRON_INTERLEAVED, megatron_accounted, megatron_vpp
from simcluster.stragglers import resolve as resolve_stragglers
from simcluster.topology import job_domain


@dataclass(frozen=True)
class Context:
    """Model, layout, hardware and stage placement of one scenario."""

    scenario: Scenario
    model: ModelSpec
    layout: Layout
    profile: HardwareProfile
    chunks: list[list[Chunk]]
    schedule: Schedule
    spec: ScheduleSpec
    #: what the run should say about choices made for the user (an attention kernel that cannot
    #: train the model's heads, replaced as TransformerEngine replaces it)
    notes: tuple[str, ...] = ()

    @property
    def capacity_bytes(self) -> float:
        return self.profile.memory_bytes

    @property
    def unpipelined(self) -> bool:
        """Whether the schedule would split weight gradients off on a single stage of a single
        chunk, where there is no bubble for them to fill: Megatron and the Zero Bubble fork run
        forward_backward_no_pipelining at pp 1 (each microbatch's forward, then its whole
        backward), torchtitan no pipeline schedule at all (:meth:`stage_orders`)."""
        return self.spec.p == 1 and self.schedule.chunks(self.spec) == 1 and self.schedule.splits_backward

    def stage_orders(self, costs: OpCosts | None = None) -> list[list[PipeOp]]:
        """Each stage's op order: the schedule's, with ``overlap.ep_comm``'s combined
        forward/backward pairs marked. ``costs`` feed a cost-aware schedule (unit times when
        None); other schedules ignore them. With ``training.pipeline_flushes`` = n the
        schedule of one flush (``spec.m`` microbatches) runs n times in a row on every stage,
        microbatches numbered on: each stage starts the next flush when it is done with its
        part of the last, as a rank calling the schedule's step once per accumulation step does."""
        spec = replace(self.spec, costs=costs) if costs and self.schedule.cost_aware else self.spec
        if self.unpipelined:
            orders = [[PipeOp(kind, mb) for mb in range(spec.m) for kind in ("F", "BW")]]
        else:
            orders = self.schedule.build(spec)
        if self.scenario.overlap.ep_comm:
            orders = pair_orders(orders)
        flushes = self.scenario.training.pipeline_flushes
        if flushes > 1:
            m = spec.m
            orders = [[replace(op, microbatch=op.microbatch + k * m) for k in range(flushes) for op in ops] for ops in orders]
        return orders


def build_context(
    scenario: Scenario, hardware: str | None = None, hf_parsed: dict[str, Any] | None = None
) -> Context:
    """Resolve model, hardware profile (``hardware`` overrides cluster.hardware) and layout.
    ``hf_parsed``: the JSON object of the scenario's model.hf_config, when the caller has read
    the file already (the importer: it is read once)."""
    model = build_model(scenario.model.model_dump(exclude_none=True), hf_parsed)
    profile = load_profile(
        hardware or scenario.cluster.hardware,
        scenario.cluster.overrides(),
        field="--hardware" if hardware else "cluster.hardware",
        patch=scenario.cluster.profile,
    )
    gpn = scenario.cluster.gpus_per_node or profile.node.gpus_per_node
    if (
        scenario.cluster.gpus_per_node
        and scenario.cluster.gpus_per_node > profile.node.gpus_per_node
    ):
        raise UserError(
            "cluster.gpus_per_node",
            f"{gpn} exceeds the {profile.node.gpus_per_node} GPUs per node of '{profile.name}'",
        )
    pinned = scenario.training.attention_kernel is not None  # named by the scenario, not defaulted
    scenario = with_framework_kernel(_with_virtual_stages(_with_hf_auto(scenario, model), model), profile)
    scenario = with_framework_weight_cache(with_framework_fp8_weights(scenario, profile))
    scenario = with_pipeline_p2p_overlap(scenario)
    profile.attention_curves(scenario.training.attention_kernel)  # an unknown kernel fails here
    scenario, notes = _with_head_dim_kernel(scenario, model, profile, pinned)
    scenario = fp8_attention.with_fp8_kernel(scenario, profile)
    if sourceless := unsourced_note(profile.name, profile.unsourced):
        notes = (*notes, sourceless)  # a number taken on trust is said, not refused
    if quick := quick_run_note(profile.name, profile.provenance):
        notes = (*notes, quick)
    if ctas := channels_note(scenario.cluster, profile):
        notes = (*notes, ctas)
    kernel = profile.attention_kernel_in_use(scenario.training.attention_kernel)
    attention_sinks.check(model, scenario.training.flash_attention, kernel, profile)
    _check_precision(scenario.training, profile)
    _check_recompute(scenario.training, model)
    _check_cuda_graphs(scenario.training, model)
    full_iteration.check(scenario, model)
    _check_positions(scenario.training, model)
    _check_documents(scenario)
    _check_moe_settings(scenario.moe, model)
    _check_dispatcher_gpu(scenario.moe, model, profile)
    _check_dispatch_sms(scenario.moe, model, profile)
    check_framework_schedule(scenario.framework, scenario.parallel.schedule, scenario.parallel.pp)
    check_framework_sequence_parallel(scenario.framework, scenario.parallel.schedule, scenario.parallel.sequence_parallel)
    schedule = get_schedule(scenario.parallel.schedule)
    layout = build_layout(scenario, model, gpn)
    # the NVLink domain build_cluster refuses, refused here too: memory and sweep's prefilter
    # build no cluster, and accepted a domain smaller than a node that run then refused
    domain = job_domain(profile, scenario.cluster.gpus, layout.gpus_per_node)
    layout = replace(layout, nvlink_domain=domain)
    rows = hidden_row_bytes(model, scenario.training.precision)
    if model.is_moe and (unmeasured := unmeasured_rate_note(profile, layout, scenario.moe, rows)):
        notes = (*notes, unmeasured)
    spec = ScheduleSpec(
        p=layout.pp,
        m=_flush_microbatches(scenario, layout),
        v=layout.vpp,
        group=layout.microbatch_group,
        rounds=scenario.framework in PYTORCH_PIPELINING,
        activation_limit=scenario.parallel.activation_limit,
    )
    schedule.validate(spec)
    zeropp.check(scenario, layout, coordinated(scenario))
    zero3_coordinator.check(scenario)
    fsdp2_accumulation.check(scenario)
    _check_ep_overlap(scenario, layout)
    _check_serial_p2p(scenario)
    _check_tp_async(scenario, layout, schedule)
    # stragglers outside the job are refused here, with the other layout checks, so memory,
    # compare and sweep refuse them before anything is simulated (not only run, at its start)
    resolve_stragglers(scenario.simulation.stragglers, layout.world, -(-layout.world // layout.gpus_per_node))
    _check_userbuffers(scenario, profile)
    chunks = stage_chunks(
        model, layout, schedule, spec, scenario.parallel.layers_per_stage, scenario.parallel.partition
    )
    _check_recompute_layers(scenario.training, model, chunks)
    _check_activation_offload(scenario, chunks)
    return Context(
        scenario=scenario, model=model, layout=layout, profile=profile, chunks=chunks, schedule=schedule, spec=spec,
        notes=notes,
    )  # fmt: skip


def _with_head_dim_kernel(
    scenario: Scenario, model: ModelSpec, profile: HardwareProfile, pinned: bool
) -> tuple[Scenario, tuple[str, ...]]:
    """``scenario`` with an attention kernel that trains the model's head dimensions
    (``attention_head_dims.choose``: the kernel in use, else TransformerEngine's fallback), and
    the note saying so when it changed."""
    training, par = scenario.training, scenario.parallel
    if not training.flash_attention:
        return scenario, ()
    choice = attention_head_dims.choose(
        model,
        profile.attention_kernel_in_use(training.attention_kernel),
        pinned,
        list(profile.attention_kernels),
        profile.gpu.compute_capability,
        cp_ring=par.cp > 1 and par.cp_comm != "a2a",
        framework=scenario.framework,
    )
    if choice.note is None:
        return scenario, ()
    update = {"attention_kernel": choice.kernel} if choice.fused else {"flash_attention": False}
    return scenario.model_copy(update={"training": training.model_copy(update=update)}), (choice.note,)


def _with_hf_auto(scenario: Scenario, model: ModelSpec) -> Scenario:
    """``scenario`` with DeepSpeed's ZeRO-3 sizes given as ``auto`` filled in as Hugging Face's
    Trainer fills them from the model's hidden size h (transformers
    ``integrations/deepspeed.py`` ``HfTrainerDeepSpeedConfig.trainer_config_finalize``:
    reduce_bucket_size h^2, stage3_prefetch_bucket_size 0.9 h^2, which DeepSpeed's config
    reads as an integer, stage3_param_persistence_threshold 10 h)."""
    z = scenario.zero3
    h = model.hidden
    filled = {"prefetch_bucket_size": int(0.9 * h * h), "param_persistence_threshold": 10 * h, "reduce_bucket_size": h * h}
    update = {key: value for key, value in filled.items() if getattr(z, key) == "auto"}
    if not update:
        return scenario
    return scenario.model_copy(update={"zero3": z.model_copy(update=update)})


def _with_virtual_stages(scenario: Scenario, model: ModelSpec) -> Scenario:
    """``scenario`` with ``parallel.layers_per_virtual_stage`` turned into ``vpp`` as Megatron
    does (the layers, plus one each for ``embedding_in_split`` / ``loss_in_split``, over pp, then
    over it: ``partition.megatron_vpp``), the interleaved schedule for vpp > 1 when the scenario
    names none, and with ``embedding_in_split`` / ``loss_in_split`` on a pipeline the pp*vpp
    virtual stages' layers as Megatron-Core builds them (``partition.megatron_accounted``): the
    rules ``simcluster import megatron`` applies to the same flags."""
    par = scenario.parallel
    per_virtual = par.layers_per_virtual_stage
    accounted = par.embedding_in_split or par.loss_in_split
    if per_virtual is None and not (accounted and par.pp > 1):
        return scenario
    written = scenario.written  # the user's, not a preset's (none of which sets these)
    update: dict[str, Any] = {}
    if per_virtual is not None:
        extra = par.embedding_in_split + par.loss_in_split
        vpp = megatron_vpp(model.layers, par.pp, per_virtual, extra, "parallel.layers_per_virtual_stage")
        if "parallel.vpp" in written and par.vpp != vpp:
            raise UserError(
                "parallel.layers_per_virtual_stage",
                f"{per_virtual} layers per virtual stage make vpp = {vpp}, but parallel.vpp is {par.vpp}; give one of them",
            )
        update["vpp"] = vpp
        if vpp > 1 and "parallel.schedule" not in written:
            update["schedule"] = "interleaved"
    if accounted and par.pp > 1:
        field = "parallel.embedding_in_split" if par.embedding_in_split else "parallel.loss_in_split"
        _check_accounted(scenario, update.get("schedule", par.schedule), field)
        vpp = update.get("vpp", par.vpp)
        update["layers_per_stage"] = megatron_accounted(
            model.layers, par.pp, vpp, par.embedding_in_split, par.loss_in_split, field
        )
    return scenario.model_copy(update={"parallel": par.model_copy(update=update)})


def _check_userbuffers(scenario: Scenario, profile: HardwareProfile) -> None:
    """``overlap.tp_comm_cfg`` leaves every GEMM an SM and, where TransformerEngine's
    userbuffers run, has a reduce-scatter buffer exactly where ``overlap.tp_comm_rs_dgrad``
    uses one."""
    overlap = scenario.overlap
    cfg = userbuffers.resolve(overlap.tp_comm_cfg)
    userbuffers.check_sms(cfg, profile.gpu.sm_count, profile.gpu.name)
    if overlap.tp_comm and userbuffers.switches_act(overlap):
        userbuffers.check_rs_dgrad(cfg, overlap.tp_comm_cfg, overlap)


def _check_accounted(scenario: Scenario, schedule: str, field: str) -> None:
    """Refuse ``embedding_in_split`` / ``loss_in_split`` where Megatron's accounted split is not
    the one that runs: beside an explicit split or nanotron's, under a V schedule (its 2p
    virtual stages are not Megatron's pp*vpp loop), or in a framework without the flags
    (Megatron-LM 2021, the Zero Bubble fork, non-Megatron frameworks:
    ``partition.MEGATRON_INTERLEAVED``)."""
    par = scenario.parallel
    if par.layers_per_stage is not None:
        raise UserError(field, "counts the embedding/loss in Megatron's split, but parallel.layers_per_stage lists the split; drop one")
    if par.partition != "megatron":
        raise UserError(field, f"is Megatron's split, but parallel.partition is {par.partition}; drop one")
    if isinstance(get_schedule(schedule), VShapeSchedule):
        raise UserError(field, f"is Megatron's split of looped stages; schedule '{schedule}' places its stages in a V: drop it")
    if max(MEGATRON_INTERLEAVED.get(scenario.framework, (0,))) == 0:
        raise UserError(
            field,
            f"is Megatron-Core's --account-for-embedding/loss-in-pipeline-split, which framework "
            f"{scenario.framework} does not have; drop it, or list the split in parallel.layers_per_stage",
        )


def _flush_microbatches(scenario: Scenario, layout: Layout) -> int:
    """Microbatches of one pipeline flush: the data-parallel rank's, over
    ``training.pipeline_flushes`` (which must divide them and needs a pipeline)."""
    flushes = scenario.training.pipeline_flushes
    if flushes == 1:
        return layout.microbatches
    if layout.pp == 1:
        raise UserError(
            "training.pipeline_flushes",
            f"{flushes} flushes need a pipeline (pp > 1); without one, gradient accumulation is "
            "the microbatches themselves: drop it",
        )
    if layout.microbatches % flushes:
        raise UserError(
            "training.pipeline_flushes",
            f"{flushes} must divide the {layout.microbatches} microbatches of each data-parallel "
            f"rank (global_batch / (micro_batch x dp)); use {one_of(divisors(layout.microbatches))} "
            "or change the batch",
        )
    return layout.microbatches // flushes


#: schedules whose backward keeps each layer's input and weight gradients together (no split
#: W, no paired forward/backward ops), the ones activation offloading is modelled for
OFFLOAD_SCHEDULES = ("1f1b", "interleaved", "afab", "looped-bfs")


def _check_activation_offload(scenario: Scenario, chunks: list[list[Chunk]]) -> None:
    """Megatron-Core offloads fewer layers than a chunk has (the last layer's activations are
    used at once by the backward), on schedules without split weight gradients; its fine-grained
    offload (``training.offload_modules``) keeps each layer's weight-gradient inputs whole too."""
    modules = scenario.training.offload_modules
    if modules and scenario.parallel.schedule not in OFFLOAD_SCHEDULES:
        raise UserError(
            "training.offload_modules",
            f"is modelled on the {', '.join(OFFLOAD_SCHEDULES)} schedules; use one of them or set it to []",
        )
    n = scenario.training.activation_offload_layers
    if n == 0:
        return
    fewest = min(c.layers for stage in chunks for c in stage)
    if n >= fewest:
        fix = f"offload at most {fewest - 1}" if fewest > 1 else "a chunk of one layer keeps it; set 0"
        raise UserError(
            "training.activation_offload_layers",
            f"{n} is not fewer than the {fewest} layer(s) of a pipeline chunk; {fix}",
        )
    if scenario.parallel.schedule not in OFFLOAD_SCHEDULES or scenario.overlap.ep_comm:
        raise UserError(
            "training.activation_offload_layers",
            f"is modelled on the {', '.join(OFFLOAD_SCHEDULES)} schedules without overlap.ep_comm; "
            f"use one of them or set it to 0",
        )


def _check_precision(training: TrainingSection, profile: HardwareProfile) -> None:
    """The GPU has a peak for the precision (bf16 on a V100 has none: checked before simulating,
    whose GEMMs would otherwise run at a stand-in rate); NVFP4 GEMMs need FP4 tensor cores
    (Blackwell) and a measured rate for them; FP8 parameters need FP8 training."""
    if training.fp8_param_gather and training.precision != "fp8":
        raise UserError(
            "training.fp8_param_gather",
            f"keeps the weights in FP8 for FP8 training; precision is {training.precision}: "
            "set training.precision fp8 or drop it",
        )
    if training.fp4_param and training.precision != "nvfp4":
        raise UserError(
            "training.fp4_param",
            f"keeps the weights in NVFP4 for NVFP4 training; precision is {training.precision}: "
            "set training.precision nvfp4 or drop it",
        )
    if training.precision != "nvfp4":
        profile.training_peak_flops(training.precision)
        return
    missing = profile.gemm_rate_missing("nvfp4")
    if missing is None:
        return
    raise UserError(
        "training.precision",
        f"nvfp4 needs FP4 tensor cores and their GEMM rates; hardware '{profile.name}' "
        f"({profile.gpu.name}) lists {missing}; use a Blackwell profile (dgx-b200, gb200-nvl72, "
        "gb300-nvl72) or precision fp8",
    )


def _check_cuda_graphs(training: TrainingSection, model: ModelSpec) -> None:
    """The MoE graph scopes capture parts of an MoE layer; a dense model has none."""
    moe_graphs = [g for g in training.cuda_graphs if g.startswith("moe_")]
    if moe_graphs and not model.is_moe:
        raise UserError(
            "training.cuda_graphs",
            f"{moe_graphs[0]} captures a part of an MoE layer but the model is dense; drop it",
        )


def _check_recompute(training: TrainingSection, model: ModelSpec) -> None:
    """Recomputation settings that only make sense together."""
    if training.recompute_modules and training.recompute != "selective":
        raise UserError(
            "training.recompute_modules",
            f"lists what selective recomputation reruns; set training.recompute: selective "
            f"(it is '{training.recompute}') or drop the list",
        )
    if "mla_up_proj" in training.recomputed and model.mla is None:
        raise UserError(
            "training.recompute_modules", "mla_up_proj needs an MLA model (model.mla); drop it"
        )
    if training.recompute == "op" and model.is_moe:
        raise UserError(
            "training.recompute",
            "op (torchtitan's op-level checkpointing) is modelled for dense layers; use "
            "selective or full for a mixture-of-experts model",
        )
    if training.recompute_num_layers is not None and training.recompute != "full":
        raise UserError(
            "training.recompute_num_layers",
            f"counts the layers full recomputation reruns; set training.recompute: full "
            f"(it is '{training.recompute}') or drop it",
        )


def _check_positions(training: TrainingSection, model: ModelSpec) -> None:
    """A learned position embedding has one row per position, so a longer sequence has no
    embedding for its tail (RoPE and ALiBi have no table and no such bound). max_positions 0
    means the table's size was not given; nothing to check against."""
    if model.position != "learned" or not model.max_positions:
        return
    if training.seq_len > model.max_positions:
        raise UserError(
            "training.seq_len",
            f"{training.seq_len} is longer than model.max_positions={model.max_positions}, the "
            f"rows of the model's learned position embedding; use seq_len <= "
            f"{model.max_positions} or raise model.max_positions",
        )


def _check_documents(scenario: Scenario) -> None:
    """Packed documents (``training.document_tokens``) fit in the sequence and run where the
    model costs them: fused attention (TransformerEngine's THD format and flash-attn's varlen
    kernels exist only there; Megatron's unfused path masks one whole sequence) and, with context
    parallelism, the p2p ring (TransformerEngine splits each document into 2 cp chunks over it;
    its all-gather path asserts ``qkv_format != "thd"``; the all-to-all ones are not modelled
    with documents)."""
    training = scenario.training
    doc = training.document_tokens
    if doc is None:
        return
    if doc > training.seq_len:
        raise UserError("training.document_tokens", f"{doc} is longer than training.seq_len={training.seq_len}; use at most the sequence, or unset it for one document per sequence")
    if not training.flash_attention:
        raise UserError("training.document_tokens", "needs fused attention (THD / varlen kernels); set training.flash_attention: true or unset document_tokens")
    comm = scenario.parallel.cp_comm
    if scenario.parallel.cp > 1 and comm != "p2p":
        raise UserError("training.document_tokens", f"with parallel.cp_comm={comm} is not modelled (packed THD sequences over context parallelism: the p2p ring only); set parallel.cp_comm: p2p or unset document_tokens")


def _check_dispatcher_gpu(moe: MoeSection, model: ModelSpec, profile: HardwareProfile) -> None:
    """HybridEP copies tokens with the Tensor Memory Accelerator (deepseek-ai/DeepEP
    docs/README_Hybrid-EP.md: "NVLink-optimized data transfer using Tensor Memory Accelerator
    (TMA) instructions"), which NVIDIA GPUs have from Hopper (compute capability 9.0) on."""
    cc = profile.gpu.compute_capability
    if model.is_moe and moe.dispatcher == "hybridep" and (cc is None or cc < 9.0):
        raise UserError(
            "moe.dispatcher",
            f"HybridEP moves tokens with TMA copies, which NVIDIA GPUs have from Hopper on (compute "
            f"capability 9.0); '{profile.name}' ({profile.gpu.name}) has none: use deepep or alltoall",
        )


def _check_dispatch_sms(moe: MoeSection, model: ModelSpec, profile: HardwareProfile) -> None:
    """DeepEP runs its normal kernels on pairs of SMs (``Buffer.set_num_sms``: "The SM count
    must be even"), and no kernel can hold all of a GPU's SMs beside the compute it overlaps."""
    sms, total = moe.dispatch_sms, profile.gpu.sm_count
    if not model.is_moe or sms is None or moe.dispatcher == "alltoall":
        return
    if moe.dispatcher == "deepep" and sms % 2:
        raise UserError(
            "moe.dispatch_sms",
            f"DeepEP runs its kernels on an even number of SMs (Buffer.set_num_sms); {sms} is odd: use {sms + 1}",
        )
    if total is not None and sms >= total:
        raise UserError(
            "moe.dispatch_sms",
            f"{sms} is not below the {total} SMs of '{profile.name}' ({profile.gpu.name}); Megatron-Core's "
            f"defaults are {DISPATCH_SMS['deepep']} (deepep) and {DISPATCH_SMS['hybridep']} (hybridep)",
        )


def _check_moe_settings(moe: MoeSection, model: ModelSpec) -> None:
    """The moe: section acts on routed experts only; on a dense model a setting there would
    be silently ignored, so it is refused as model.top_k and the other MoE fields are."""
    if model.is_moe:
        if moe.pad_to_capacity and moe.capacity_factor is None:
            raise UserError(
                "moe.pad_to_capacity",
                "pads each expert's input to its capacity; set moe.capacity_factor (e.g. 1.0) or drop it",
            )
        if moe.pad_to_capacity and moe.per_destination:
            # Megatron-Core TransformerConfig.__post_init__: "Flex token dispatcher ... does not
            # support moe_pad_expert_input_to_capacity" (DeepEP sends each token's copies as routed)
            raise UserError(
                "moe.pad_to_capacity",
                f"the {moe.dispatcher} dispatcher does not pad experts to their capacity (Megatron-Core "
                "refuses it with the flex dispatcher); set moe.dispatcher=alltoall, or drop pad_to_capacity",
            )
        if moe.shared_expert_overlap and moe.dispatcher != "alltoall":
            # Megatron-Core TransformerConfig.__post_init__: "moe_shared_expert_overlap only
            # works with alltoall token dispatcher" (the flex/DeepEP one has no such hooks)
            raise UserError(
                "moe.shared_expert_overlap",
                f"runs only with moe.dispatcher alltoall (Megatron-Core refuses it with the flex "
                f"dispatcher), not {moe.dispatcher}; set moe.dispatcher=alltoall or drop it",
            )
        return
    for key, spec in MoeSection.model_fields.items():
        if getattr(moe, key) != spec.default:
            raise UserError(
                f"moe.{key}",
                f"is for mixture-of-experts models but model.experts is {model.experts}; set "
                f"model.experts or drop moe.{key}",
            )


def _check_recompute_layers(
    training: TrainingSection, model: ModelSpec, chunks: list[list[Chunk]]
) -> None:
    """recompute_num_layers counts layers within one pipeline chunk (Megatron's block method);
    more than the largest chunk holds would read as a setting that does something when it
    is the same as recomputing every layer."""
    wanted = training.recompute_num_layers
    if wanted is None:
        return
    most = max(chunk.layers for stage in chunks for chunk in stage)
    if wanted <= most:
        return
    virtual = len({chunk.virtual_stage for stage in chunks for chunk in stage})
    where = (
        f"the model's {model.layers} layers (model.layers)"
        if virtual == 1
        else f"the {most} layers of the largest pipeline chunk (model.layers={model.layers} "
        f"over {virtual} chunks)"
    )
    raise UserError(
        "training.recompute_num_layers",
        f"{wanted} is more than {where}; use at most {most}, or drop it to recompute every layer",
    )


#: schedules whose one-at-a-time p2p is modelled: DeepSpeed's TrainSchedule and nanotron's
#: OneForwardOneBackward engine (1f1b), nanotron's AllForwardAllBackward engine (afab: each
#: op's output sent right after it, before the next op's receive), Megatron-DeepSpeed's
#: ZeroBubbleH1Pipeline on DeepSpeed's engine (zb-h1-ds, and zb-h1-ds-exact with its exact semantics)
SERIAL_SCHEDULES = ("1f1b", "afab", "zb-h1-ds", "zb-h1-ds-exact")


def _check_serial_p2p(scenario: Scenario) -> None:
    """The one-at-a-time pipeline p2p of DeepSpeed's and nanotron's engines is modelled for
    the schedules those engines run (a scenario naming either framework is held to them
    before, by frameworks.schedules)."""
    if scenario.overlap.pp_p2p != "serial":
        return
    if scenario.parallel.schedule not in SERIAL_SCHEDULES:
        raise UserError(
            "overlap.pp_p2p",
            f"serial (DeepSpeed's and nanotron's pipeline engines) is modelled for "
            f"{', '.join(SERIAL_SCHEDULES)} only (schedule is '{scenario.parallel.schedule}'); "
            "use parallel.schedule: 1f1b, or overlap.pp_p2p: batched to run that schedule",
        )
    if scenario.overlap.pp_comm:
        raise UserError(
            "overlap.pp_p2p", "serial sends and receives block the stage; set overlap.pp_comm: false"
        )


def _check_ep_overlap(scenario: Scenario, layout: Layout) -> None:
    """Where Megatron-Core's expert-parallel overlap can run (schedules/ep_overlap.py)."""
    if not scenario.overlap.ep_comm:
        return
    field = "overlap.ep_comm"
    if layout.ep <= 1:
        raise UserError(field, "hides expert-parallel all-to-alls; it needs parallel.ep > 1 (or drop it)")
    name = scenario.parallel.schedule
    if name.startswith("dualpipe"):
        raise UserError(field, f"{name} overlaps its forward/backward pairs by itself; drop overlap.ep_comm")
    if layout.pp > 1 and name != "interleaved":
        raise UserError(
            field,
            f"with pp > 1 Megatron-Core combines forward and backward only in the interleaved "
            f"schedule; set parallel.schedule: interleaved (it is '{name}') or drop overlap.ep_comm",
        )
    if scenario.training.recompute == "full":
        raise UserError(field, "Megatron-Core does not combine it with full recomputation; use selective or none")
    if layout.pp == 1 and name not in ("1f1b", "interleaved"):
        raise UserError(field, f"combines the 1F1B steady state; use parallel.schedule: 1f1b (it is '{name}')")


def _check_tp_async(scenario: Scenario, layout: Layout, schedule: Schedule) -> None:
    """nanotron's async TP linears exist in its REDUCE_SCATTER mode only (its row linear asserts
    it) and run each weight gradient inside the backward (parallelism/tp_async.py)."""
    if not scenario.overlap.tp_async or layout.tp == 1:
        return
    field = "overlap.tp_async"
    if not layout.sequence_parallel:
        raise UserError(
            field, "is nanotron's REDUCE_SCATTER mode; set parallel.sequence_parallel: true or overlap.tp_async: false"
        )
    if scenario.overlap.tp_comm:
        raise UserError(field, "and overlap.tp_comm are two frameworks' TP overlaps; keep one of them")
    if schedule.splits_backward:
        raise UserError(
            field,
            f"runs weight gradients inside the backward, which '{scenario.parallel.schedule}' splits out; "
            "use a schedule such as 1f1b or set overlap.tp_async: false",
        )
