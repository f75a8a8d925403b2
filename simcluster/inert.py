"""Settings the user wrote that do nothing in their layout (``zero3.*`` below ZeRO-3,
``parallel.cp_comm`` at cp 1, ``overlap.tp_comm`` at tp 1, ...).

Such a setting is not an error (a sweep template legitimately carries ``cp_comm`` into its
cp = 1 layouts), but a user who wrote it believes it acts, so ``run``, ``memory``,
``compare``, ``sweep`` and ``validate`` name it in one plain line::

    note: zero3.reshard_after_forward has no effect at parallel.zero=1 (only ZeRO-3 gathers per layer)

A rule fires only on a key the scenario itself wrote (``Scenario.written``: after key
aliases, misplaced keys, ``--set`` and the other ways of stating a key, before a framework
preset fills its defaults: a preset's values are meant for every layout) and only when the
value written is not the field's own default (writing the default states what happens
anyway). ``test_inert`` checks every note by simulation: without the setting, the same step
and memory bit for bit. Settings the layout checks already refuse
(``moe.*`` and ``parallel.etp > 1`` on a dense model, ``parallel.microbatch_group`` outside
the interleaved schedule, ``vpp`` on a one-chunk schedule, ``parallel.cp_a2a`` without
a2a+p2p, ``overlap.ep_comm`` at ep 1, ``training.fp8_param_gather`` without FP8) stay errors
and have no rule here. Each rule cites the code that makes the setting inert.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from simcluster.compute import QUANTISED
from simcluster.context import Context
from simcluster.frameworks.stacks import runs_megatron_core
from simcluster.lora import ROW_PARALLEL
from simcluster.memory import BF16_WEIGHT_PRECISIONS, keeps_remainders
from simcluster.module_offload import layer_module_bytes
from simcluster.parallelism import fp8_weights, torchao_float8
from simcluster.parallelism.data import grad_reduce_bytes, grad_wire_bytes
from simcluster.parallelism.expert import (
    deepep_copies,
    ep_nodes,
    padded_expert_rows,
    quantisation_alignment,
)
from simcluster.parallelism.fp8_amax import delayed_under_te_autocast
from simcluster.parallelism.zero3_coordinator import coordinated
from simcluster.userbuffers import switches_act, tp_overlaps_run

#: where the setting does nothing and why, or None where it acts
Verdict = tuple[str, str] | None


@dataclass(frozen=True)
class InertRule:
    """One setting and when it does nothing."""

    setting: str  # dotted scenario key, as the user writes it
    inert: Callable[[Context], Verdict]


@dataclass(frozen=True)
class InertNote:
    """A setting the scenario wrote that does nothing in its layout."""

    setting: str
    where: str
    why: str

    @property
    def text(self) -> str:
        return f"{self.setting} has no effect {self.where} ({self.why})"


def _zero_below_3(ctx: Context) -> Verdict:
    # the zero3: section is read only by ZeRO-3's per-layer gathers and reduce-scatters
    # (engine/dp_ops.py, parallelism/data.py; Scenario.fsdp2 needs zero == 3)
    zero = ctx.layout.zero
    return (f"at parallel.zero={zero}", "only ZeRO-3 gathers parameters per layer") if zero != 3 else None


def _zero3_per_layer(ctx: Context) -> Verdict:
    # DeepSpeed's knobs act on per-layer gathers and reductions; under a pipeline ZeRO-3 runs
    # as FSDP2 under torch.distributed.pipelining, gathered once per step (layout.zero3_pipelined)
    if ctx.layout.zero != 3:
        return _zero_below_3(ctx)
    if ctx.layout.zero3_pipelined:
        return (f"at parallel.pp={ctx.layout.pp}", "under a pipeline ZeRO-3 gathers each stage once per step")
    return None


def _reduce_bucket(ctx: Context) -> Verdict:
    # engine/dp_ops.py: the bucket is DeepSpeed's; FSDP2's one reduce-scatter in flight
    # (dp.wait_reduction, zero3.buffers copies) reduces each unit on its own
    verdict = _zero3_per_layer(ctx)
    if verdict is None and ctx.scenario.wait_reduction:
        return ("with dp.wait_reduction", "FSDP2's reductions go one unit at a time, one in flight")
    return verdict


def _coordinator(ctx: Context) -> Verdict:
    # read only by DeepSpeed's coordinator, which zero3.prefetch_bucket_size switches on
    # (parallelism/zero3_coordinator.py coordinated)
    verdict = _zero3_per_layer(ctx)
    if verdict is not None:
        return verdict
    if ctx.scenario.zero3.prefetch_bucket_size is None:
        return ("without zero3.prefetch_bucket_size", "it sizes DeepSpeed's prefetch window, which these limit; set it")
    return None


def _max_live(ctx: Context) -> Verdict:
    # read only by zero3_coordinator.prefetch_window, which runs only when the coordinator
    # fetches ahead (dp_ops._zero3_gather, working_bytes): nothing is with zero3.prefetch false
    verdict = _coordinator(ctx)
    if verdict is None and not ctx.scenario.zero3.prefetch:
        return ("with zero3.prefetch false", "it caps what is fetched ahead, and nothing is")
    return verdict


def _zeropp_quantized(ctx: Context) -> Verdict:
    # ZeRO++'s qwZ and qgZ act on the ZeRO group's gathers and reductions, which one rank does
    # not run (partition_parameters.py all_gather_coalesced: num_partitions == 1; dp_ops.py)
    if ctx.layout.zero != 3:
        return _zero_below_3(ctx)
    if ctx.layout.zero_group == 1:
        return ("with one ZeRO rank", "there is no parameter gather or gradient reduction to quantize")
    return None


def _replica_all_reduce(ctx: Context) -> Verdict:
    # HSDP's replica all-reduce exists only with more than one replica (dp_ops: zero_replicas);
    # FSDPModule.set_requires_all_reduce is FSDP2's, i.e. ZeRO-3's
    if ctx.layout.zero != 3:
        return _zero_below_3(ctx)
    if ctx.layout.zero_shard == 0:
        return ("without hybrid sharding", "one replica has no shard to all-reduce; set parallel.zero_shard to use it")
    if ctx.layout.zero3_pipelined:
        # engine/worker.py reduces a pipelined stage once, after its last backward
        # (_zero3_reduce_all), the all-reduce included, as torch.distributed.pipelining does:
        # its stages set_requires_gradient_sync(False) for every microbatch's backward and
        # set_requires_gradient_sync(True) (reduce-scatter and all-reduce alike) before the
        # one post_backward of the step (stage.py backward_maybe_with_nosync, perform_reduce_grad)
        return (
            f"at parallel.pp={ctx.layout.pp}",
            "each stage reduces its gradients once per step, after its last backward, the replicas' all-reduce included",
        )
    return None


def _cp_one(ctx: Context) -> Verdict:
    # parallelism/context.py adds CP collectives only for cp > 1 (layout_checks.check_cp_comm returns at cp 1)
    return ("at parallel.cp=1", "no context-parallel attention to communicate") if ctx.layout.cp == 1 else None


def _a2a_impl(ctx: Context) -> Verdict:
    # parallelism/context.py reads cp_a2a_impl only in the a2a algorithm's backward
    if ctx.layout.cp == 1:
        return _cp_one(ctx)
    if ctx.layout.cp_comm != "a2a":
        return (f"with parallel.cp_comm={ctx.layout.cp_comm}", "only the a2a algorithm has two implementations")
    return None


def _tp_one(what: str) -> Callable[[Context], Verdict]:
    def rule(ctx: Context) -> Verdict:
        return ("at parallel.tp=1", what) if ctx.layout.tp == 1 else None

    return rule


def _pp_one(what: str) -> Callable[[Context], Verdict]:
    def rule(ctx: Context) -> Verdict:
        return ("at parallel.pp=1", what) if ctx.layout.pp == 1 else None

    return rule


def _deferral_limit(ctx: Context) -> Verdict:
    # parallelism/head_wgrad_deferral.deferred_microbatches: the limit counts deferred ones
    if not ctx.scenario.parallel.defer_head_wgrad:
        return ("without parallel.defer_head_wgrad", "no LM-head weight gradient is deferred")
    return _pp_one("no pipeline flush to run the LM head's weight gradients in")(ctx)


def _tp_comm(ctx: Context) -> Verdict:
    # userbuffers.tp_overlaps_run, which parallelism/layer.py asks: userbuffers overlaps only
    # with tp > 1 and sequence parallelism (TransformerEngine's ub overlap wraps the SP
    # all-gather / reduce-scatter)
    if ctx.layout.tp == 1:
        return ("at parallel.tp=1", "no TP collectives to overlap")
    if not tp_overlaps_run(ctx.scenario.overlap, ctx.layout)[0]:
        return ("without parallel.sequence_parallel", "TransformerEngine's userbuffers overlap the sequence-parallel collectives")
    return None


def _tp_grad_async(ctx: Context) -> Verdict:
    # parallelism/layer.py fuses_wgrad, the flag's one reader: ``tp > 1 and not tp_async and
    # not (userbuffers is None and not tp_grad_async)``, so it acts only at tp > 1 with neither
    # userbuffers (overlap.tp_comm, which then overlap the input gradient's collective under
    # the weight-gradient GEMMs) nor nanotron's async linears (overlap.tp_async) running
    if ctx.layout.tp == 1:
        return ("at parallel.tp=1", "no input-gradient TP collective to overlap")
    userbuffers, async_linears = tp_overlaps_run(ctx.scenario.overlap, ctx.layout)
    if userbuffers:
        return ("with overlap.tp_comm", "its userbuffers overlap the input-gradient collective already")
    if async_linears:
        return ("with overlap.tp_async", "nanotron's async linears schedule the input-gradient collective themselves")
    return None


def _ep_one_node(ctx: Context) -> Verdict:
    # parallelism/expert.py copies_per_token and deepep_link_factor, the readers of
    # moe.dispatcher: inside an NVLink domain DeepEP's copy kernels spend link time on a rank's
    # own share too, so it always acts there; across domains it sends a token once per domain
    # holding its experts, which is all-to-all's top_k copies only when each lies in one of its own
    lay = ctx.layout
    if lay.ep == 1:
        return ("at parallel.ep=1", "no expert-parallel all-to-all to dispatch")
    if ep_nodes(lay) > 1 and deepep_copies(ctx.model, lay, ctx.scenario.moe) == ctx.model.top_k:
        return ("with each routed expert of a token on its own node", "DeepEP sends top_k copies across nodes there too")
    return None


def _dispatch_sms(ctx: Context) -> Verdict:
    # parallelism/expert.py dispatch_sms, its one reader: the SMs a DeepEP-family all-to-all
    # holds beside compute and, inside an NVLink domain, the kernels' rate
    moe = ctx.scenario.moe
    if not moe.per_destination:
        return ("with moe.dispatcher=alltoall", "NCCL's all-to-all runs on its own channels (efficiency.collective_sms)")
    if ctx.layout.ep == 1:
        return ("at parallel.ep=1", "no expert-parallel all-to-all to run")
    return None


def _aligned_dispatch(ctx: Context) -> Verdict:
    # parallelism/expert.py padding_seconds, its one reader: the alignment copies exist only
    # for quantised grouped GEMMs fed arbitrary per-expert counts
    precision = ctx.scenario.training.precision
    if precision not in QUANTISED:
        return (f"at training.precision={precision}", "only FP8/FP4 grouped GEMMs need aligned splits")
    moe, training, lay = ctx.scenario.moe, ctx.scenario.training, ctx.layout
    if moe.padded:
        moe_tokens = training.micro_batch * training.seq_len / lay.cp / lay.tp  # Shapes.moe_tokens
        rows = padded_expert_rows(moe_tokens, ctx.model, lay, moe)
        if rows % quantisation_alignment(training, ctx.profile) == 0:
            return ("with moe.pad_to_capacity", "every expert runs its fixed, aligned capacity, which Fp8Padding leaves as it is")
    return None


def _shared_expert_overlap(ctx: Context) -> Verdict:
    # parallelism/expert.py overlaps_shared_experts, its one reader
    if not ctx.model.shared_experts:
        return ("without model.shared_experts", "there are no shared experts to run on the side stream")
    if ctx.layout.ep == 1:
        return ("at parallel.ep=1", "no expert-parallel all-to-all to hide the shared experts under")
    if ctx.scenario.overlap.ep_comm:
        return ("with overlap.ep_comm", "the paired op's compute fills the all-to-alls; the shared experts stay in the op")
    return None


def _tp_comm_cfg(ctx: Context) -> Verdict:
    if not ctx.scenario.overlap.tp_comm:
        return ("with overlap.tp_comm false", "it configures the userbuffers overlap that is off")
    return _tp_comm(ctx)


def _mcore_ub_switch(ctx: Context) -> Verdict:
    # userbuffers.block_overlaps, their reader: Megatron-Core's per-linear switches of the
    # userbuffers overlaps, which PyTorch's async TP does not have
    if not switches_act(ctx.scenario.overlap):
        return ("with overlap.tp_comm_cfg pytorch-async-tp", "PyTorch's async TP has no per-linear userbuffers switches")
    return _tp_comm_cfg(ctx)


def _rs_dgrad(ctx: Context) -> Verdict:
    # userbuffers.block_overlaps gives a block its rs_dgrad overlap only where its column
    # linear's userbuffers are not disabled
    overlap = ctx.scenario.overlap
    verdict = _mcore_ub_switch(ctx)
    if verdict is None and overlap.tp_comm_disable_qkv and overlap.tp_comm_disable_fc1:
        return ("with overlap.tp_comm_disable_qkv and _fc1", "both column-parallel linears run without userbuffers")
    return verdict


def _pp_scatter_gather(ctx: Context) -> Verdict:
    # parallelism/shapes.py pipe_transfer: the 1/tp slice is sent only where the tensor is
    # replicated over tp (no sequence parallelism) and there is a next stage
    lay = ctx.layout
    if lay.pp == 1:
        return ("at parallel.pp=1", "no activations pass between stages")
    if lay.tp == 1:
        return ("at parallel.tp=1", "no TP replicas to split the transfer over")
    if lay.sequence_parallel:
        return ("with parallel.sequence_parallel", "each rank already sends only its sequence shard")
    return None


def _no_data_parallel(ctx: Context) -> Verdict:
    # one dp x cp rank and no expert data parallelism: no gradient reduction or parameter
    # gather to overlap (engine/dp_ops.py reduces over groups of size > 1 only)
    lay = ctx.layout
    if lay.dp * lay.cp == 1 and (not ctx.model.is_moe or lay.edp == 1):
        return ("at dp=1 (cp=1)", "no data-parallel gradient reduction or parameter gather")
    return None


def _dp_grad_reduce(ctx: Context) -> Verdict:
    # engine/dp_ops.py: PyTorch FSDP's reduce-scatters run beside the backward whatever the
    # setting; DeepSpeed's coordinator (_zero3_default_stream) runs its gathers and
    # reduce-scatters on the compute stream without it; engine/worker.py reduces buckets after
    # the backward at ZeRO 0-1 only
    if ctx.layout.zero == 3 and not coordinated(ctx.scenario):
        return (
            "at parallel.zero=3 outside DeepSpeed's coordinator",
            "PyTorch FSDP's per-layer reduce-scatters always run beside the backward",
        )
    return _no_data_parallel(ctx)


def _param_gather(ctx: Context) -> Verdict:
    # engine/worker.py: the overlapped all-gather after the optimizer is ZeRO-1/2's; ZeRO-3
    # gathers per layer (zero3.prefetch) and ZeRO-0 gathers nothing
    zero = ctx.layout.zero
    if zero not in (1, 2):
        return (f"at parallel.zero={zero}", "only ZeRO-1/2 all-gather the updated parameters after the optimizer")
    return _no_data_parallel(ctx)


def _dp_ordering(ctx: Context) -> Verdict:
    # data_parallel.py: at ZeRO 0-2 these act only with overlap.dp_grad_reduce (without it the
    # reductions block the backward anyway)
    sc = ctx.scenario
    if ctx.layout.zero < 3 and not sc.overlap.dp_grad_reduce:
        return ("with overlap.dp_grad_reduce false", "the gradient reductions already block the backward")
    return None


def _reduce_dtype(ctx: Context) -> Verdict:
    # parallelism/data.py: a bucket is cast only when the wire dtype differs from the one its
    # gradients accumulate in, and only where there is a reduction
    if grad_wire_bytes(ctx.scenario) == grad_reduce_bytes(ctx.scenario):
        return ("as the accumulated gradients' dtype", "the buckets go on the wire as they are, no cast")
    return _no_data_parallel(ctx)


def _flatten_copies(ctx: Context) -> Verdict:
    # engine/dp_ops.py: the pass before a ZeRO 0-2 bucket's reduction; ZeRO-3 reduces per unit
    if ctx.layout.zero == 3:
        return ("at parallel.zero=3", "its reduce-scatters take no ZeRO 0-2 bucket pass")
    return _no_data_parallel(ctx)


def _optimizer_offload(ctx: Context) -> Verdict:
    if ctx.scenario.training.optimizer_offload == 0:
        return ("at training.optimizer_offload=0", "no optimizer on the host to pipeline")
    return None


def _fine_grained_only(ctx: Context) -> Verdict:
    # engine/worker.py _offload_after, module_offload.py: the cap and the floor act on the
    # fine-grained offload's copies only
    if not ctx.scenario.training.offload_modules:
        return ("without training.offload_modules", "no fine-grained offload for it to act on")
    return None


def _offload_modules(ctx: Context) -> Verdict:
    """Names of ``training.offload_modules`` that move nothing in any layer: a dense model's
    experts, a norm fused into its linear, a recomputed attention, a fully recomputed layer."""
    sc = ctx.scenario
    moving: set[str] = set()
    for stage in ctx.chunks:
        for chunk in stage:
            for pos, layer in enumerate(chunk.layer_indices[:-1]):
                parts = layer_module_bytes(ctx.model, ctx.layout, sc.training, layer, pos, sc.moe.padded_rows)
                moving |= {name for name, nbytes in parts.items() if nbytes > 0}
    idle = [name for name in dict.fromkeys(sc.training.offload_modules) if name not in moving]
    if not idle:
        return None
    return (
        f"for {', '.join(idle)}",
        "they save nothing to move in any offloaded layer here: no routed experts, a norm fused into "
        "its linear, a recomputed attention or a fully recomputed layer, one layer a chunk (kept), or "
        "every tensor below training.offload_min_elements",
    )


def _bucket_stages(ctx: Context) -> Verdict:
    # engine/plan.py: 'first' changes only stages > 0 and chunks > 0 ('none' every chunk)
    lay = ctx.layout
    if lay.pp == 1 and lay.vpp == 1 and ctx.scenario.dp.bucket_stages != "none":
        return ("at parallel.pp=1 (vpp=1)", "the first stage's first chunk is the whole model")
    return None


def _not_v_auto(ctx: Context) -> Verdict:
    # read only by schedules/v_auto.py (ScheduleSpec.activation_limit): no other schedule
    # searches for an order within a limit given by the user
    name = ctx.scenario.parallel.schedule
    return (f"with schedule '{name}'", "only v-auto searches for a V order within it") if name != "v-auto" else None


def _ep_one(ctx: Context) -> Verdict:
    return ("at parallel.ep=1", "no expert-parallel groups to place") if ctx.layout.ep == 1 else None


def _dense_etp(ctx: Context) -> Verdict:
    # layout_checks._expert_tp: a dense model has no routed experts to split (etp > 1 is refused there)
    return ("on a dense model", "model.experts is 0: no routed experts to split") if not ctx.model.is_moe else None


def _read_at_precision(precision: str, why: str) -> Callable[[Context], Verdict]:
    """The rule of a setting only ``training.precision: precision`` reads, with ``why``."""

    def rule(ctx: Context) -> Verdict:
        actual = ctx.scenario.training.precision
        return (f"at training.precision={actual}", why) if actual != precision else None

    return rule


# compute.py quantise(): the recipe sets FP8 scaling only; NVFP4 has its own block scaling
_fp8_recipe = _read_at_precision("fp8", "it is how FP8 scales are found")


def _fp8_library(ctx: Context) -> Verdict:
    # parallelism/torchao_float8.py: torchao's casts for per-tensor scales only
    tr = ctx.scenario.training
    if tr.precision != "fp8":
        return (f"at training.precision={tr.precision}", "it is which library casts the FP8 operands")
    if tr.fp8_recipe == "block":
        return ("at training.fp8_recipe=block", "block-scaled casts are costed as TransformerEngine's")
    return None


# compute.py quantise(): the Hadamard transform and stochastic rounding are NVFP4BlockScaling's
_nvfp4_recipe = _read_at_precision("nvfp4", "it is a choice of the NVFP4 recipe")


def _one_document(ctx: Context) -> Verdict:
    # parallelism/attention_time.py: documents as long as the sequence are one per sequence
    training = ctx.scenario.training
    if training.document_tokens == training.seq_len:
        return (f"at training.seq_len={training.seq_len}", "a document as long as the sequence fills it alone")
    return None


def _amax_reduction(ctx: Context) -> Verdict:
    # parallelism/fp8_amax.py: its group and its blocking matter only where the amax all-reduce runs
    if delayed_under_te_autocast(ctx.scenario):
        return None
    tr = ctx.scenario.training
    if tr.precision != "fp8":
        where = f"at training.precision={tr.precision}"
    elif tr.fp8_recipe != "delayed":
        where = f"at training.fp8_recipe={tr.fp8_recipe}"
    else:
        where = f"under framework {ctx.scenario.framework}"
    return (where, "only FP8 delayed scaling under Megatron-Core's TransformerEngine autocast all-reduces amaxes")


def _fp8_weight_cache(ctx: Context) -> Verdict:
    # parallelism/fp8_weights.py: the cache holds a cast the weights need; FP8 parameters need
    # none on Blackwell under a per-tensor scale, nor with block scales (the optimizer's cast)
    tr, layout = ctx.scenario.training, ctx.layout
    if tr.precision not in QUANTISED:
        return (f"at training.precision={tr.precision}", "only FP8 and NVFP4 linears quantise their weights")
    if layout.zero == 3 and not fp8_weights.caches_megatron_fsdp_casts(tr, layout):
        return ("at parallel.zero=3", "ZeRO-3's gathered weights are not cached across microbatches here")
    if not runs_megatron_core(ctx.scenario.framework):
        return (f"under framework {ctx.scenario.framework}", "only Megatron-Core's TE layers cache them (is_first_microbatch)")
    if tr.fp4_param:
        return ("with training.fp4_param", "NVFP4 parameters are never cast, so nothing is cached")
    if torchao_float8.applies(tr) and not ctx.model.experts:
        return ("with training.fp8_library=torchao", "torchao casts each weight anew in every forward and backward")
    cc = ctx.profile.gpu.compute_capability
    if fp8_weights.requantises_mxfp8_parameters(tr, layout, cc):
        return ("with training.fp8_param_gather", "MXFP8 parameters are quantised once a step after their gather")
    if tr.precision == "fp8" and tr.fp8_param_gather and not fp8_weights.transposes_fp8_parameters(tr, cc):
        return ("with training.fp8_param_gather", "FP8 parameters are used as they are, with no cast to cache")
    return None


def _fp8_swiglu_store(ctx: Context) -> Verdict:
    # fp8_store.fp8_swiglu_store: Megatron-Core's fused SwiGLU keeps the FP8 copy
    tr, model = ctx.scenario.training, ctx.model
    if model.mlp != "swiglu":
        return (f"with model.mlp={model.mlp}", "only Megatron-Core's fused SwiGLU keeps its input in FP8")
    if tr.elementwise != "fused":
        return (f"at training.elementwise={tr.elementwise}", "only Megatron-Core's fused SwiGLU has the option")
    return None


def _attention_output_bytes(ctx: Context) -> Verdict:
    # memory.layer_activation_bytes: the cached copy replaces what a fused attention keeps
    tr = ctx.scenario.training
    if not tr.flash_attention:
        return ("at training.flash_attention=false", "unfused attention keeps no output for its backward")
    if "core_attn" in tr.recomputed:
        return ("with the core attention recomputed", "the rerun attention keeps no output to cache")
    return None


def _master_weights(ctx: Context) -> Verdict:
    # memory.keeps_remainders: the remainder completes a bf16 weight the optimizer writes
    tr = ctx.scenario.training
    if ctx.layout.torch_fsdp:
        return ("under PyTorch FSDP", "it steps fp32 parameter shards in place, with no master copy")
    if keeps_remainders(tr):
        return None
    if tr.precision not in BF16_WEIGHT_PRECISIONS:
        return (f"at training.precision={tr.precision}", "only a bf16 weight has an fp32 master's upper half")
    if tr.autocast:
        return ("with training.autocast", "the optimizer steps fp32 parameters in place")
    return ("with training.fp8_param_gather", "FP8 parameters keep a whole fp32 master (NeMo's store_params)")


def _grad_lifetime(ctx: Context) -> Verdict:
    # its two readers, grad_lifetime._transient_applies and separate_16bit_grad_kept, are both
    # false at ZeRO-3 (which counts its unsharded gradients itself) and in fp32 training (no
    # 16-bit gradient). Without fp32 accumulation it still acts: add frees Megatron's fp16
    # .grad into a 16-bit main_grad (a transient), backward and step describe a .grad that is
    # itself the accumulator (none)
    tr = ctx.scenario.training
    if ctx.layout.zero == 3:
        return ("at parallel.zero=3", "ZeRO-3's unsharded gradients live until their reduce-scatter")
    if tr.precision == "fp32":
        return ("at training.precision=fp32", "there is no 16-bit gradient")
    return None


def _backward_prefetch(ctx: Context) -> Verdict:
    # engine/dp_ops.py _zero3_gather / _zero3_post_compute: the backward's prefetch of the next
    # unit, which a pipelined stage does not run (its parameters stay gathered all step)
    if ctx.layout.zero != 3:
        return _zero_below_3(ctx)
    if not ctx.scenario.zero3.prefetch:
        return ("with zero3.prefetch false", "no unit is gathered ahead")
    if ctx.layout.zero3_pipelined:
        return (f"at parallel.pp={ctx.layout.pp}", "a pipelined stage keeps its parameters gathered all step")
    if ctx.layout.zero3_keep_for_backward:
        # dp_ops._gather_key: the backward looks up the forward's gather, so it issues none
        return ("with zero3.reshard_after_forward false", "the backward uses the forward's gathers and gathers nothing")
    return None


def _limit_all_gathers(ctx: Context) -> Verdict:
    # parallelism/data.py zero3_working_bytes: FSDP1's rate limiter (_limiter_utils.py); FSDP2
    # and DeepSpeed prefetch one unit, and a kept gather is held from forward to backward anyway
    if not ctx.scenario.fsdp1:
        return ("without zero3.buffers flat", "the rate limiter is PyTorch FSDP1's")
    if ctx.layout.zero3_keep_for_backward:
        return ("with zero3.reshard_after_forward false", "every unit stays gathered from its forward to its backward")
    return None


def _forward_prefetch(ctx: Context) -> Verdict:
    # dp_ops._forward_issue times the next unit's forward gather by the host only for PyTorch
    # FSDP (layout.torch_fsdp), and only a unit gathered ahead (zero3.prefetch) has one
    if ctx.layout.zero != 3:
        return _zero_below_3(ctx)
    if not ctx.layout.torch_fsdp:
        return ("with zero3.buffers views", "it is PyTorch FSDP's; these gathers are issued as the GPU reaches each unit")
    if not ctx.scenario.zero3.prefetch:
        return ("with zero3.prefetch false", "no unit is gathered ahead")
    return None


def _gradient_sync(ctx: Context) -> Verdict:
    # engine/worker.py skips FSDP2's post-backward reduce-scatter before the last microbatch
    # (layout.zero3_deferred_sync: FSDP2 without a pipeline); under one every stage reduces
    # once per step anyway (_zero3_reduce_all); with one microbatch its backward is the last
    if ctx.layout.zero != 3:
        return _zero_below_3(ctx)
    if ctx.layout.zero3_pipelined:
        return (f"at parallel.pp={ctx.layout.pp}", "each stage reduces its gradients once per step, after its last backward")
    if ctx.layout.microbatches == 1:
        return ("with one microbatch per step", "its backward is the last, which reduce-scatters")
    return None


def _reshard_after_backward(ctx: Context) -> Verdict:
    # dp_ops._gather_key reuses a backward's gathers in the next forward only for FSDP2
    # without a pipeline (layout.zero3_keep_after_backward), and the last microbatch's
    # backward reshards; torch.distributed.pipelining sets it on its stages itself
    if ctx.layout.zero != 3:
        return _zero_below_3(ctx)
    if ctx.layout.zero3_pipelined:
        return (f"at parallel.pp={ctx.layout.pp}", "torch.distributed.pipelining sets each stage's resharding itself")
    if ctx.layout.microbatches == 1:
        return ("with one microbatch per step", "the last microbatch's backward reshards")
    return None


def _autocast(ctx: Context) -> Verdict:
    # memory.bytes_per_param and autocast_weight_bytes: fp32 training has nothing to cast, and
    # PyTorch FSDP's state and 16-bit gathers are its own (zero3.buffers copies or flat)
    if ctx.scenario.training.precision == "fp32":
        return ("at training.precision=fp32", "nothing is cast to 16 bits")
    if ctx.layout.zero == 3 and ctx.layout.torch_fsdp:
        return ("under PyTorch FSDP (zero 3)", "its MixedPrecision gathers 16-bit parameters and keeps fp32 shards itself")
    return None


def _sequence_parallel(ctx: Context) -> Verdict:
    # layout.py: Layout.sequence_parallel = par.sequence_parallel and tp > 1
    return ("at parallel.tp=1", "there is no TP group to split the sequence over") if ctx.layout.tp == 1 else None


def _sp_regather(ctx: Context) -> Verdict:
    # parallelism/saved_gather.keeps_gather: only sequence parallelism gathers a linear's input,
    # and op-level checkpointing reruns that gather whatever the linear kept
    if not ctx.layout.sequence_parallel:
        where = "at parallel.tp=1" if ctx.layout.tp == 1 else "without parallel.sequence_parallel"
        return (where, "only sequence parallelism all-gathers a column-parallel linear's input")
    if ctx.scenario.training.recompute == "op":
        return ("at training.recompute=op", "op-level checkpointing reruns the all-gather before the backward")
    return None


def _recompute_partitioned(ctx: Context) -> Verdict:
    # parallelism/partitioned_checkpoints.partitions: the input is split over a TP group, and
    # Megatron's transformer block skips it under sequence parallelism
    # (distribute_saved_activations and not sequence_parallel), whose input is already a shard
    recompute = ctx.scenario.training.recompute
    if recompute != "full":
        # DeepSpeed's partition_activations acts inside deepspeed.checkpointing.checkpoint only;
        # Megatron asserts full granularity with it (the launch importer refuses it there)
        return (f"at training.recompute={recompute}", "only full recomputation keeps checkpointed layer inputs")
    if ctx.layout.tp == 1:
        return ("at parallel.tp=1", "there is no TP group to split the checkpointed inputs over")
    if ctx.layout.sequence_parallel:
        return ("with parallel.sequence_parallel", "each checkpointed input is already a 1/tp sequence shard")
    return None


def _one_stage_schedule(ctx: Context) -> Verdict:
    # context.Context.stage_orders: at pp 1 a split-backward schedule runs as no pipelining
    if ctx.unpipelined:
        return ("at parallel.pp=1", "one stage runs each microbatch's forward, then its whole backward: no bubble for weight gradients to fill")
    return None


def _lora_off(ctx: Context) -> Verdict:
    # the adapters' targets and dropout are read only when adapters exist (layout.lora)
    return ("at lora.rank=0", "there are no adapters: every weight is trained") if ctx.layout.lora is None else None


def _lora_a2a(ctx: Context) -> Verdict:
    # parallelism/lora_blocks.py: the all-to-all replaces a row-parallel adapter's gather into
    # the sequence shard, which exists with tp > 1 and sequence parallelism
    lay = ctx.layout
    if lay.lora is None:
        return ("at lora.rank=0", "there are no adapters")
    if lay.tp == 1 or not lay.sequence_parallel:
        return ("without tp > 1 and sequence parallelism", "no adapter output is cut into a sequence shard")
    if not ROW_PARALLEL & set(lay.lora.targets):
        return ("without a proj or fc2 target", "only a row-parallel linear's adapter gathers its output")
    return None


def _lora_op_fuser(ctx: Context) -> Verdict:
    # layout_checks.check_lora: NeMo's lora.py builds TEFusedLoRALinear only at tp 1
    lay = ctx.layout
    if lay.lora is None:
        return ("at lora.rank=0", "there are no adapters")
    if lay.tp > 1:
        return (f"at parallel.tp={lay.tp}", "NeMo builds the op-fused adapter (TEFusedLoRALinear) only at tp 1")
    return None


#: one entry per setting, in the order the notes print (scenario order: parallel, training,
#: overlap, zero3, dp, moe, lora)
RULES: tuple[InertRule, ...] = (
    InertRule("parallel.sequence_parallel", _sequence_parallel),
    InertRule("parallel.schedule", _one_stage_schedule),
    InertRule("parallel.sp_regather", _sp_regather),
    InertRule("parallel.cp_comm", _cp_one),
    InertRule("parallel.cp_a2a", _cp_one),
    InertRule("parallel.cp_a2a_impl", _a2a_impl),
    InertRule("parallel.parallel_block_comm", _tp_one("each branch's TP collectives exist only with tp > 1")),
    InertRule("parallel.etp", _dense_etp),
    InertRule("parallel.ep_placement", _ep_one),
    InertRule("parallel.partition", _pp_one("one stage holds every layer")),
    InertRule("parallel.embedding_in_split", _pp_one("one stage holds the embedding and every layer")),
    InertRule("parallel.loss_in_split", _pp_one("one stage holds every layer and the loss")),
    InertRule("parallel.defer_head_wgrad", _pp_one("no pipeline flush to run the LM head's weight gradients in")),
    InertRule("parallel.head_wgrad_deferral_limit", _deferral_limit),
    InertRule("parallel.activation_limit", _not_v_auto),
    InertRule("training.document_tokens", _one_document),
    InertRule("training.fp8_recipe", _fp8_recipe),
    InertRule("training.fp8_library", _fp8_library),
    InertRule("training.nvfp4_hadamard", _nvfp4_recipe),
    InertRule("training.nvfp4_stochastic_rounding", _nvfp4_recipe),
    InertRule("training.tp_only_amax_red", _amax_reduction),
    InertRule("training.fp8_amax_async", _amax_reduction),
    InertRule("training.fp8_weight_cache", _fp8_weight_cache),
    InertRule("training.master_weights", _master_weights),
    InertRule("training.grad_16bit_freed", _grad_lifetime),
    InertRule("training.autocast", _autocast),
    InertRule("training.recompute_partitioned", _recompute_partitioned),
    InertRule("training.activation_fp8_store", _fp8_swiglu_store),
    InertRule("training.attention_output_bytes", _attention_output_bytes),
    InertRule("training.offload_modules", _offload_modules),
    InertRule("training.offload_max_inflight", _fine_grained_only),
    InertRule("training.offload_min_elements", _fine_grained_only),
    InertRule("overlap.tp_comm", _tp_comm),
    InertRule("overlap.tp_comm_cfg", _tp_comm_cfg),
    InertRule("overlap.tp_comm_rs_dgrad", _rs_dgrad),
    InertRule("overlap.tp_comm_disable_qkv", _mcore_ub_switch),
    InertRule("overlap.tp_comm_disable_fc1", _mcore_ub_switch),
    InertRule("overlap.tp_async", _tp_one("nanotron's async TP linears need a TP group")),
    InertRule("overlap.tp_grad_async", _tp_grad_async),
    InertRule("overlap.pp_comm", _pp_one("no pipeline sends or receives to overlap")),
    InertRule("overlap.pp_p2p", _pp_one("no pipeline sends or receives")),
    InertRule("overlap.pp_scatter_gather", _pp_scatter_gather),
    InertRule("overlap.dp_grad_reduce", _dp_grad_reduce),
    InertRule("overlap.param_gather", _param_gather),
    InertRule("overlap.optimizer_offload", _optimizer_offload),
    InertRule("zero3.prefetch", _zero_below_3),
    InertRule("zero3.buffers", _zero_below_3),
    InertRule("zero3.reshard_after_forward", _zero_below_3),
    InertRule("zero3.backward_prefetch", _backward_prefetch),
    InertRule("zero3.limit_all_gathers", _limit_all_gathers),
    InertRule("zero3.forward_prefetch", _forward_prefetch),
    InertRule("zero3.replica_all_reduce", _replica_all_reduce),
    InertRule("zero3.gradient_sync", _gradient_sync),
    InertRule("zero3.reshard_after_backward", _reshard_after_backward),
    InertRule("zero3.prefetch_bucket_size", _zero3_per_layer),
    InertRule("zero3.param_persistence_threshold", _zero3_per_layer),
    InertRule("zero3.max_live_parameters", _max_live),
    InertRule("zero3.max_reuse_distance", _coordinator),
    InertRule("zero3.reduce_bucket_size", _reduce_bucket),
    InertRule("zero3.hpz_partition_size", _zero_below_3),
    InertRule("zero3.quantized_weights", _zeropp_quantized),
    InertRule("zero3.quantized_gradients", _zeropp_quantized),
    InertRule("dp.bucket_stages", _bucket_stages),
    InertRule("dp.reduce_dtype", _reduce_dtype),
    InertRule("dp.flatten_copies", _flatten_copies),
    InertRule("dp.wait_reduction", _dp_ordering),
    InertRule("dp.backward_sync", _dp_ordering),
    InertRule("moe.dispatcher", _ep_one_node),
    InertRule("moe.dispatch_sms", _dispatch_sms),
    InertRule("moe.aligned_dispatch", _aligned_dispatch),
    InertRule("moe.shared_expert_overlap", _shared_expert_overlap),
    InertRule("lora.targets", _lora_off),
    InertRule("lora.dropout", _lora_off),
    InertRule("lora.op_fuser", _lora_op_fuser),
    InertRule("lora.a2a", _lora_a2a),
)


def _differs_from_default(scenario: BaseModel, setting: str) -> bool:
    """Whether ``setting``'s value is not its field's schema default."""
    section_name, key = setting.split(".")
    section = getattr(scenario, section_name)
    field = type(section).model_fields[key]
    default = field.get_default(call_default_factory=True)
    return bool(getattr(section, key) != default)


def inert_settings(ctx: Context, written: Iterable[str] | None = None) -> list[InertNote]:
    """The settings of ``written`` (default: what ``ctx.scenario`` itself wrote) that do
    nothing in ``ctx``'s layout, in :data:`RULES` order."""
    keys = frozenset(ctx.scenario.written if written is None else written)
    notes = []
    for rule in RULES:
        if rule.setting not in keys or not _differs_from_default(ctx.scenario, rule.setting):
            continue
        verdict = rule.inert(ctx)
        if verdict is not None:
            notes.append(InertNote(rule.setting, *verdict))
    return notes


def common_notes(per_layout: Sequence[Sequence[InertNote]]) -> list[InertNote]:
    """A sweep's notes: the settings inert in every layout it ran (a setting that acts in
    some is what a template carries on purpose), each distinct reason once, in rule order."""
    if not per_layout:
        return []
    everywhere = set.intersection(*({n.setting for n in notes} for notes in per_layout))
    seen: dict[tuple[str, str, str], InertNote] = {}
    for notes in per_layout:
        for n in notes:
            if n.setting in everywhere:
                seen.setdefault((n.setting, n.where, n.why), n)
    order = {rule.setting: i for i, rule in enumerate(RULES)}
    return sorted(seen.values(), key=lambda n: (order[n.setting], n.where, n.why))


def note_lines(notes: Iterable[InertNote], prefix: str = "") -> list[str]:
    """One plain line per note: ``note: SETTING has no effect WHERE (WHY)``."""
    return [f"note: {prefix}{n.text}" for n in notes]
