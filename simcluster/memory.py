"""Per-GPU memory: parameters, gradients, optimizer state and activations.

Static memory (bytes per parameter, by precision and ZeRO stage) follows the Ultra-Scale
Playbook and the ZeRO paper: fp32 Adam = 4 + 4 + 8 = 16 B/param; bf16 mixed precision =
2 (bf16 weights) + 2 (bf16 grads) + 4 (fp32 grad accumulation) + 12 (fp32 master + 2 moments)
= 20 B/param (16 without fp32 accumulation); 18 where the framework frees each 16-bit gradient
before the step ends (simcluster.grad_lifetime: Megatron, nanotron), the 16-bit gradients then a
transient on top of the stash. ZeRO-1 shards the optimizer state, ZeRO-2 also the
gradients, ZeRO-3 also the weights, over the data-parallel group.

Activations per layer follow Korthikanti et al. 2022 (Table 2), generalised to GQA, SwiGLU,
no-dropout models, context parallelism and MoE: for GPT-style layers without parallelism
sbh(34 + 5as/h) bytes; TP+SP divides everything by t; selective recompute (or fused
flash attention) drops the 5as^2b score terms; full recompute keeps only the layer input 2sbh
(2sbh/t when it is stored split over the TP ranks: training.recompute_partitioned).
FP8 training keeps the linear layers' inputs as the 1-byte FP8 copies TransformerEngine cast.
Where the column-parallel linears keep the all-gathered sequence instead of their 1/t shard
(PyTorch's DTensor and async TP: parallelism/saved_gather.py), those inputs count t times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from simcluster.activation_widths import act_bytes, attention_widths, gemm_input_bytes
from simcluster.grad_lifetime import separate_16bit_grad_kept
from simcluster.held_microbatches import Held
from simcluster.layout import Layout
from simcluster.lora import FrozenInputs, layer_adapter_params, lora_activation_change
from simcluster.model import ModelSpec
from simcluster.module_offload import offloaded_bytes
from simcluster.parallelism import (
    autocast_casts,
    fp8_weights,
    fsdp2_accumulation,
    logit_softcap,
    loss_kernels,
    torchao_float8,
)
from simcluster.parallelism.elementwise import STYLES
from simcluster.parallelism.partitioned_checkpoints import partitions
from simcluster.parallelism.saved_gather import gathered_factor
from simcluster.peak_parts import STASH
from simcluster.placement import EMBEDDING_LAYER, HEAD_LAYER, Chunk
from simcluster.scenario import TrainingSection
from simcluster.stash_basis import StashBasis


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes per parameter of each static category before sharding."""

    params: float
    grads: float
    optimizer: float


#: moments an optimizer keeps per parameter: Adam m and v; AdEMAMix's fast and slow gradient
#: averages and v (Pagliardini et al. 2024, Algorithm 1); SGD's momentum
OPTIMIZER_MOMENTS = {"adam": 2, "ademamix": 3, "sgd": 1}


def bytes_per_param(
    precision: str,
    optimizer: str,
    fp32_grad_accum: bool,
    grad_accum_fusion: bool = False,
    moment_bytes: float = 4.0,
    keep_16bit_grad: bool = True,
    autocast: bool = False,
    remainder: bool = False,
) -> BytesPerParam:
    """Static bytes per parameter (Ultra-Scale Playbook, 'Memory usage in Transformers').

    With ``grad_accum_fusion`` the weight-gradient GEMM adds straight into the fp32 main
    gradient (Megatron's ``gradient_accumulation_fusion``, TransformerEngine's
    ``fuse_wgrad_accumulation``), so no 16-bit gradient is kept beside it; nor is one where
    the framework frees it before the step ends (``keep_16bit_grad`` False:
    ``training.grad_16bit_freed`` add or backward, simcluster.grad_lifetime, whose transient
    is counted on top of the stash). ``moment_bytes`` is the width of each optimizer moment
    (2 with ``training.optimizer_moments: bf16``). Under ``autocast`` (fp32 parameters, 16-bit
    compute by torch.autocast) the parameters and their ``.grad`` stay fp32 and the optimizer
    steps them in place: fp32 training's bytes, the 16-bit weight casts being activations
    (:func:`autocast_weight_bytes`). With ``remainder`` (:func:`keeps_remainders`) the master
    copy is the 16 bits the bf16 weight lacks: 2 B, not 4.
    """
    moments = OPTIMIZER_MOMENTS[optimizer] * moment_bytes
    if precision == "fp32" or autocast:
        return BytesPerParam(params=4.0, grads=4.0, optimizer=moments)
    if fp32_grad_accum:
        grads = 6.0 if keep_16bit_grad and not grad_accum_fusion else 4.0
    else:
        grads = 2.0
    master = MASTER_REMAINDER_BYTES if remainder else 4.0
    return BytesPerParam(params=2.0, grads=grads, optimizer=master + moments)  # + the master copy


#: the precisions whose weights are bf16 (FP8 and NVFP4 GEMMs quantise bf16 weights)
BF16_WEIGHT_PRECISIONS = ("bf16", "fp8", "nvfp4")
#: bytes of a master weight kept as the remainder of a bf16 one (apex's int16 remainder shard)
MASTER_REMAINDER_BYTES = 2.0


def keeps_remainders(training: TrainingSection, torch_fsdp: bool = False) -> bool:
    """Whether the optimizer keeps only the 16 low bits of each fp32 master weight beside the
    bf16 weight (``training.master_weights: remainder``): apex DistributedFusedAdam's
    ``store_param_remainders`` (``StateBucket``: an int16 ``param_remainders_shard``; its step,
    ``multi_tensor_fused_adam_with_param_remainders``, writes the bf16 weight). Only a bf16
    weight completes it: not in fp16 or fp32, not under autocast (fp32 parameters), not with
    FP8 parameters (NeMo's ``setup_optimization`` sets ``store_params`` there instead), not under
    PyTorch FSDP (``torch_fsdp``: it steps fp32 parameter shards in place, with no master copy)."""
    return (
        not torch_fsdp
        and training.master_weights == "remainder"
        and training.precision in BF16_WEIGHT_PRECISIONS
        and not training.autocast
        and not training.fp8_param_gather
    )


def fsdp2_bytes_per_param(optimizer: str, moment_bytes: float = 4.0) -> BytesPerParam:
    """Static bytes per parameter of PyTorch FSDP2 (``fully_shard``) before sharding.

    FSDP2 keeps each parameter as a shard in the dtype the model was built in (fp32 under mixed
    precision, whose ``MixedPrecisionPolicy.param_dtype`` only casts the all-gather's input),
    and the optimizer updates that shard in place: there is no separate master copy and no
    persistent 16-bit one. The reduce-scatter's output is cast back to the shard's dtype and
    accumulated into the sharded ``.grad`` (``foreach_reduce``), so gradients are fp32 shards
    whatever ``reduce_dtype`` is. 4 + 4 + moments in every precision (only the all-gathered
    copy is 16-bit): for Adam the ZeRO paper's 16 bytes, split differently (Rajbhandari et al.
    2020: 2 + 2 + 12)."""
    return BytesPerParam(params=4.0, grads=4.0, optimizer=OPTIMIZER_MOMENTS[optimizer] * moment_bytes)


def moment_bytes(training: TrainingSection) -> float:
    """Bytes of one optimizer moment per parameter (fp32 training keeps fp32 moments)."""
    return 2.0 if training.optimizer_moments == "bf16" and training.precision != "fp32" else 4.0


def sharded(bpp: BytesPerParam, zero: int, n: int) -> BytesPerParam:
    """Bytes per parameter per GPU after ZeRO stage ``zero`` over ``n`` data-parallel ranks."""
    return BytesPerParam(
        params=bpp.params / n if zero >= 3 else bpp.params,
        grads=bpp.grads / n if zero >= 2 else bpp.grads,
        optimizer=bpp.optimizer / n if zero >= 1 else bpp.optimizer,
    )


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one GPU of a stage, split by how they are replicated."""

    dense: float  # sharded by tp, replicated over dp*cp
    expert: float  # sharded by ep x etp, replicated over edp
    #: frozen parameters (a LoRA run's base model): held, never trained; not in ``total``
    frozen: float = 0.0

    @property
    def total(self) -> float:
        """The trained parameters (what has gradients, optimizer state and reductions)."""
        return self.dense + self.expert


def stage_params(model: ModelSpec, layout: Layout, chunks: list[Chunk]) -> StageParams:
    """Parameters per GPU of a stage holding ``chunks``.

    TP shards the dense matrices; EP x ETP shards the routed experts (ep whole experts per rank
    group, each split over etp ranks). In a LoRA run (``layout.lora``) all of them are frozen
    and the layers' adapters (over tp) are what trains.
    """
    base = base_layout(layout)
    dense = 0.0
    expert = 0.0
    adapters = 0.0
    for ch in chunks:
        for i in ch.layer_indices:
            layer_dense, layer_expert = layer_split(model, base, i)
            dense += layer_dense
            expert += layer_expert
            if layout.lora is not None:
                adapters += layer_split(model, layout, i)[0]
        if ch.embedding:
            dense += model.embedding_params() / layout.tp  # vocab-parallel embedding
        if ch.head:
            head_dense, head_expert = head_unit_params(model, base, ch)
            dense += head_dense
            expert += head_expert
    if layout.lora is not None:
        return StageParams(dense=adapters, expert=0.0, frozen=dense + expert)
    return StageParams(dense=dense, expert=expert)


def base_layout(layout: Layout) -> Layout:
    """``layout`` without LoRA adapters: whose layer parameters are the base model's weights
    (what a LoRA run holds frozen and casts) rather than the adapters it trains."""
    return layout if layout.lora is None else replace(layout, lora=None)


def layer_split(model: ModelSpec, layout: Layout, layer: int) -> tuple[float, float]:
    """(dense, expert) trained parameters per GPU of transformer layer ``layer``: the dense
    ones over tp, a MoE layer's routed experts over ep x etp; a LoRA run's adapters alone."""
    if layout.lora is not None:
        return layer_adapter_params(model, layout.lora, layout.tp), 0.0
    full = model.layer_params(layer)
    if model.is_moe_layer(layer):
        routed = model.experts * model.expert_params()
        return (full - routed) / layout.tp, routed / layout.expert_shard
    return full / layout.tp, 0.0


def head_unit_params(model: ModelSpec, layout: Layout, chunk: Chunk) -> tuple[float, float]:
    """(dense, expert) trained parameters per GPU of a chunk's LM head with the MTP modules
    after it, and the word-embedding copy the stage keeps when it lacks the embedding but needs
    it (none in a LoRA run: they are frozen)."""
    if layout.lora is not None:
        return 0.0, 0.0
    routed = model.mtp_routed_params()
    copy = model.vocab * model.hidden if embedding_copy(model, chunk) else 0
    return (model.head_params() + model.mtp_params() - routed + copy) / layout.tp, routed / layout.expert_shard


def layer_activation_bytes(
    model: ModelSpec,
    layout: Layout,
    training: TrainingSection,
    layer: int,
    position: int = 0,
    routed_rows: float = 1.0,
) -> float:
    """Activation bytes one GPU stores for one layer and one microbatch (Korthikanti Table 2);
    ``position`` is the layer's place in its pipeline chunk (for ``recompute_num_layers``);
    ``routed_rows`` the rows each routed expert keeps over its mean share
    (``MoeSection.padded_rows``: the capacity when padded to it)."""
    base = StashBasis.of(model, layout, training)
    s, b, sbh, t, e, g, rep, kg = base.s, base.b, base.sbh, base.t, base.e, base.g, base.rep, base.kg
    h = model.hidden
    if training.fully_recomputed(position):
        # the layer's input; kept as a 1/tp slice when partitioned (parallelism/partitioned_checkpoints.py)
        return e * sbh / (t if partitions(training, layout) else rep)
    if training.recompute == "op":
        return _op_checkpoint_bytes(model, base)
    redo = base.redo
    norm_out = base.norm_out  # a recomputed norm output (the next GEMM's input) is not kept
    q_dim, k_dim, v_dim, out_dim = base.widths
    mask = 1.0 if model.dropout else 0.0
    # FP8 attention (training.fp8_attention) keeps Q, K, V and its output as the FP8 copies its
    # kernel read and wrote (TransformerEngine's FusedAttnFunc saves only those with
    # NVTE_FP8_DPA_BWD=1), and two fp32 softmax statistics (M, ZInv) per row for one LSE
    # (a recomputed core attention keeps its 16-bit inputs instead, and casts them again)
    fa8 = training.fp8_attention and "core_attn" not in training.recomputed
    # attention block: norm input, QKV-GEMM input, Q and K, V, output-projection input, mask;
    # the output projection reads the attention's output, heads x the value head width wide
    # (Korthikanti's 2sbh where that is h)
    qkv = _qkv_bytes(model, layer, redo, s, b, t, e, g, q_dim, k_dim, v_dim, kept=1.0 if fa8 else e)
    # an output norm (model.post_norms) keeps its input, the block's output, for its backward
    post = e * sbh / rep if model.post_norms else 0.0
    o_kept, proj_own = _attention_output_kept(training, fa8, e, g)
    out_kept = (o_kept + proj_own) * s * b * out_dim / t
    att = e * sbh / rep + norm_out * kg * sbh / rep + qkv + out_kept + mask * sbh / rep + post
    # softmax out (e), dropout mask (1), dropout out (e) of the scores the rank computes: its
    # s/cp queries against all seq_len keys (with cp > 1 only Ulysses runs unfused attention,
    # on heads/cp heads of the whole sequence: the same count)
    scores = model.heads * s * training.seq_len * b
    if training.flash_attention or "core_attn" in redo:
        att += (8.0 if fa8 else 4.0) * model.heads * s * b / t  # flash-attention log-sum-exp (fp32)
        if layout.cp > 1 and layout.cp_comm == "all_gather" and "core_attn" not in redo:
            # TE's AttnFuncWithCPAndKVAllGather saves its two chunks' outputs (out_per_step)
            # for the backward beside the output it returns, a copy of them: the output twice
            att += e * s * b * out_dim / t
    else:
        att += (2 * e + mask) * scores / t

    # MLP block: norm input, first-GEMM input, activation input(s), second-GEMM input, mask;
    # SwiGLU run as act(gate) * up in two kernels also keeps act(gate) for the product's backward
    gate_out = e if model.mlp == "swiglu" and STYLES[training.elementwise].gate_unfused else 0.0

    def mlp(width: float, tokens: float, first_in: float, act_out: float, act_in: float = e) -> float:
        up = model.up_width(width)
        kept_gate = gate_out if act_out else 0.0  # a recomputed activation keeps neither
        return tokens * b * (first_in * h / rep + (act_in * up + (act_out + kept_gate) * width) / t)

    # a parallel block's MLP norm reads the layer input the attention's norm keeps already; with
    # one norm for both branches its output is the QKV input too, one tensor both linears save
    # (16-bit; FP8 linears each keep their own cast of it)
    norm_mask = (0.0 if model.parallel_block else e * sbh / rep) + mask * sbh / rep + post
    mlp_in = 0.0 if model.shared_norm and g == e else norm_out
    act_in = base.act_in  # the SwiGLU input (fp8_store.py)
    if model.is_moe_layer(layer):
        # routed experts read the permuted tokens (kept; with expert TP the ETP group's gathered
        # tokens, etp times as many rows on 1/etp of the width); a recomputed activation is not kept
        act_out = 0.0 if "moe_act" in redo else g
        rows = s * model.top_k * routed_rows
        routed = mlp(model.expert_ffn, rows, g * layout.etp, act_out, act_in) + e * s * b * model.experts * 2 / t
        shared = mlp(model.expert_ffn * model.shared_experts, s, norm_out * kg, g, act_in) if model.shared_experts else 0.0
        ffn = norm_mask + routed + shared
    elif "mlp" in redo:
        ffn = norm_mask + e * sbh / rep  # the whole MLP reruns from its input, kept 16-bit
    else:
        ffn = norm_mask + mlp(model.ffn, s, mlp_in * kg, g, act_in)
    if layout.lora is not None:
        frozen = FrozenInputs(
            qkv=norm_out * kg * sbh / rep,
            # the projection's own copy of its input (none beside the attention's 16-bit output)
            proj=proj_own * s * b * out_dim / t,
            fc1=mlp_in * kg * sbh / rep,
            fc2=g * s * b * model.ffn / t,
        )
        att += lora_activation_change(model, layout.lora, frozen, t, s * b, e, mlp_rerun="mlp" in redo)
    return att + ffn + autocast_weight_bytes(model, layout, training, layer)


def _attention_output_kept(training: TrainingSection, fa8: bool, e: float, g: float) -> tuple[float, float]:
    """Bytes per element of the attention output a layer keeps: (the fused attention's own copy
    for its backward, the output projection's own copy of its input for its weight gradient).
    One tensor in 16 bits; beside it an FP8 or NVFP4 linear's cast (TransformerEngine); one
    cached copy of ``training.attention_output_bytes`` where the stack keeps it once. A rerun
    or unfused attention keeps none of its own."""
    o_kept = 0.0 if not training.flash_attention or "core_attn" in training.recomputed else 1.0 if fa8 else e
    if o_kept and training.attention_output_bytes is not None:
        return training.attention_output_bytes, 0.0
    return o_kept, 0.0 if g == e and o_kept == e else g


def _qkv_bytes(
    model: ModelSpec,
    layer: int,
    redo: frozenset[str],
    s: float,
    b: int,
    t: int,
    e: int,
    g: float,
    q_dim: int,
    k_dim: int,
    v_dim: int,
    kept: float,
) -> float:
    """The attention block's kept Q, K and V of one layer and one microbatch (``s`` x ``b``
    tokens, 1/``t`` of the heads, ``kept`` bytes each: ``e``, or 1 in FP8 attention), with the
    QK norms' inputs (``e`` bytes) or MLA's compressed latents (``g``: a GEMM input's bytes);
    part of :func:`layer_activation_bytes`."""
    qkv = kept * s * b * (q_dim + k_dim + v_dim) / t
    if model.has_qk_norm and model.mla is None and not (model.nope_global and model.is_global_layer(layer)):
        qkv += e * s * b * (q_dim + k_dim) / t  # the norms' inputs (none on a NoPE layer)
    if model.mla is not None:
        # the compressed latents, inputs of the up-projections (after their norms)
        a = model.mla
        att_latent = g * s * b * ((a.q_lora_rank or 0) + a.kv_lora_rank)
        qkv = att_latent if "mla_up_proj" in redo else qkv + att_latent
    return qkv


def autocast_weight_bytes(model: ModelSpec, layout: Layout, training: TrainingSection, layer: int) -> float:
    """Bytes of one layer's 16-bit weight casts one microbatch keeps for its backward under
    ``training.autocast`` (HEAD_LAYER: the LM head's). torch.autocast casts each fp32 weight
    to 16 bits as a linear runs (cached while the autocast region lasts), and the matmul's
    backward needs that cast to compute its input gradient, so autograd holds it until the
    layer's backward: one copy per microbatch in flight. Norm weights are counted with the
    linears' (2h of about 12h^2 per layer; the Llama reference's fp32 RMSNorm multiplies in
    fp32, no cast); the embedding is looked up in fp32 (embedding is not on autocast's list).
    Not under full recomputation (the checkpointed forward saves only the layer's input), nor
    with a 16-bit model (no casts), nor under a pipeline, whose one autocast region per step
    caches each cast for the whole step (:func:`autocast_cache_bytes`). Not counted: autocast's
    cache keeps every cast until the autocast region exits (the model's forward, in
    calibrate/step_train.py), so under full recomputation the whole model's casts exist for a
    moment at the forward's end."""
    if not autocast_casts.casts_weights(training, layout) or layout.pp > 1:
        return 0.0  # PyTorch FSDP gathers 16-bit parameters (MixedPrecision): nothing to cast
    return _cast_bytes(model, layout, layer)


def autocast_cache_bytes(model: ModelSpec, layout: Layout, training: TrainingSection, chunks: list[Chunk]) -> float:
    """Bytes of a pipeline stage's 16-bit weight casts under ``training.autocast``: the
    calibrate loop runs the whole schedule step in one autocast region
    (calibrate/step_pipeline.py), whose cache (``cached_cast``, cleared when the region exits)
    holds one cast of each of the stage's linear weights from its first forward to the step's
    end, shared by every microbatch's graph; counted with the parameters."""
    if not autocast_casts.casts_weights(training, layout) or layout.pp == 1:
        return 0.0
    total = 0.0
    for ch in chunks:
        total += sum(_cast_bytes(model, layout, i) for i in ch.layer_indices)
        if ch.head:
            total += _cast_bytes(model, layout, HEAD_LAYER)
    return total


def _cast_bytes(model: ModelSpec, layout: Layout, layer: int) -> float:
    """Bytes of one layer's 16-bit weight casts (HEAD_LAYER: the LM head's) on one GPU."""
    if layer == HEAD_LAYER:
        return WEIGHT_CAST_BYTES * model.vocab * model.hidden / layout.tp
    return WEIGHT_CAST_BYTES * sum(layer_split(model, base_layout(layout), layer))


def fp8_weight_bytes(
    model: ModelSpec, layout: Layout, training: TrainingSection, chunks: list[Chunk],
    compute_capability: float | None,
) -> float:
    """Bytes of a stage's quantised weight copies beyond its 16-bit weights
    (``parallelism/fp8_weights.py``): TransformerEngine's cached FP8/NVFP4 copies of the
    transformer layers' linears, or their FP8 parameters' 1 B (and Hopper's transpose) in
    place of 2; norms and routers are counted with them (a few thousandths of a layer).
    Counted with the parameters; zero where ``fp8_weights.applies`` is false (outside FP8/NVFP4,
    and under ZeRO-3 but for Megatron FSDP's 16-bit weights), and for torchao's 16-bit weights,
    which it casts anew in every forward and backward and never keeps (``torchao_float8``)."""
    if not fp8_weights.applies(training, layout):
        return 0.0
    if torchao_float8.applies(training) and not training.fp8_param_gather:
        return 0.0
    per = fp8_weights.cached_bytes_per_weight(training, compute_capability)
    if per == 0.0:
        return 0.0
    base = base_layout(layout)  # a LoRA run's FP8 weights are its frozen base's
    return per * sum(sum(layer_split(model, base, i)) for ch in chunks for i in ch.layer_indices)


def with_weight_copies(
    params_bytes: float, model: ModelSpec, layout: Layout, training: TrainingSection, chunks: list[Chunk],
    compute_capability: float | None,
) -> float:
    """A stage's parameter bytes with the weight copies counted beside the static memory:
    autocast's 16-bit casts (:func:`autocast_cache_bytes`), then TransformerEngine's quantised
    ones (:func:`fp8_weight_bytes`)."""
    return (
        params_bytes
        + autocast_cache_bytes(model, layout, training, chunks)
        + fp8_weight_bytes(model, layout, training, chunks, compute_capability)
    )


WEIGHT_CAST_BYTES = 2.0  # bytes of an element of autocast's 16-bit weight cast


def _op_checkpoint_bytes(model: ModelSpec, base: StashBasis) -> float:
    """torchtitan's op-level selective checkpointing (``selective_ac_option: op``) of a dense
    layer: it keeps the block's input, the attention kernel's output and log-sum-exp, and the
    output of every other ``aten.mm`` (its policy counts the layer's seven matmuls wq, wk, wv,
    wo, w1, w3, w2 and saves the odd ones; the count runs on across microbatches, so over a
    step half of each matmul's output is kept on average), and recomputes the rest."""
    s, b, t, e, rep = base.s, base.b, base.t, base.e, base.rep
    h = model.hidden
    q_dim = model.heads * model.d_head
    kv_dim = model.kv_heads * model.d_head
    up = model.up_width(model.ffn)
    mm_outputs = (q_dim + 2 * kv_dim + up) / t + 2 * h / rep  # q, k, v, w1 (+ w3); wo, w2
    kept = h / rep + q_dim / t + 0.5 * mm_outputs
    return e * s * b * kept + 4.0 * model.heads * s * b / t


def logit_elements(model: ModelSpec, layout: Layout, training: TrainingSection) -> float:
    """Logits one GPU of the last stage holds per microbatch: s/cp x b x V/tp (vocab-parallel)."""
    return training.seq_len / layout.cp * training.micro_batch * model.vocab / layout.tp


def head_activation_bytes(model: ModelSpec, layout: Layout, training: TrainingSection) -> float:
    """The output layer's stash on the last stage (Korthikanti et al. 2022, Sec. 4.3, "output
    layer": 4sbh/t (1 + v/h) with sequence parallelism; Megatron-LM's
    ``report_theoretical_memory`` adds the same term): the final norm's input and the LM head's
    input (the norm's output, a 16-bit GEMM input: Megatron's output layer is not an FP8 TE
    linear), each sbh/t with SP and sbh without (the head's sbh where it keeps the gathered
    input: parallelism/saved_gather.py), and what the loss keeps of the logits: the fp32
    softmax of the unfused and native losses, 4sbv/t, or the 16-bit logits TransformerEngine's
    and a fused kernel overwrite with the gradient (``loss_kernels.kept_bytes_per_logit``);
    with a soft-capped output (``model.logit_softcap``) outside a fused loss, the 16-bit copy
    of the logits its tanh keeps (parallelism/logit_softcap.py)."""
    s = training.seq_len / layout.cp
    rep = layout.tp if layout.sequence_parallel else 1
    # the norm's input, and the head's (all-gathered when its linear keeps it: saved_gather.py)
    inputs = (1 + gathered_factor(layout)) * act_bytes(training.precision) * s * training.micro_batch * model.hidden / rep
    logits = logit_elements(model, layout, training)
    cap = logit_softcap.kept_bytes(
        model.logit_softcap, loss_kernels.folds_softcap(training.fused_cross_entropy), logits,
        act_bytes(training.precision),
    )
    cast = autocast_weight_bytes(model, layout, training, HEAD_LAYER)
    kept = loss_kernels.kept_bytes_per_logit(training.fused_cross_entropy, act_bytes(training.precision))
    return inputs + kept * logits + cap + cast


def embedding_activation_bytes(model: ModelSpec, layout: Layout, training: TrainingSection) -> float:
    """The embedding's stash for one microbatch on the first stage: the dropout mask on its
    output, 1 byte per element, sharded over tp with sequence parallelism (Korthikanti et al.
    2022, Sec. 4.3: sbhp/t for the p microbatches in flight; Megatron-LM's
    ``report_theoretical_memory``: "Dropout in embedding layer"), and with BLOOM's embedding
    norm (``model.embedding_norm``) the norm's input, kept for its backward at the activation
    width. The embedding's output is the first layer's input, counted there; models without
    dropout or the norm keep nothing."""
    rep = layout.tp if layout.sequence_parallel else 1
    sbh = training.seq_len / layout.cp * training.micro_batch * model.hidden / rep
    norm = act_bytes(training.precision) * sbh if model.embedding_norm else 0.0
    return (sbh if model.dropout else 0.0) + norm


def loss_transient_bytes(model: ModelSpec, layout: Layout, training: TrainingSection) -> float:
    """Bytes alive only while the unfused loss runs, on top of the fp32 logits it keeps.

    The LM head writes 16-bit logits; the loss converts them to fp32 (the copy it keeps for the
    backward, :func:`head_activation_bytes`) while the 16-bit ones are still referenced, so the
    last stage's peak holds both. Megatron's ``vocab_parallel_cross_entropy`` then subtracts the
    max in place (``vocab_parallel_logits -= logits_max``); nanotron's ``_ShardedCrossEntropy``
    (``sharded_logits - logits_max``) and PyTorch's ``cross_entropy`` (``log_softmax``) write one
    more fp32 tensor while their fp32 input is alive. A fused loss kernel keeps none of these;
    Megatron-Core's compiled native one (``loss_kernels``) keeps the unfused loss's and, while
    a graph that mutates its logits runs, the fresh fp32 buffer Inductor materialises them in,
    forward and backward.

    PyTorch's loss holds more in its backward: ``nll_loss_backward`` writes a dense fp32
    gradient of the log-probabilities (``zeros_like`` then a scatter) and
    ``_log_softmax_backward_data`` a new fp32 gradient of the logits from it and the saved
    log_softmax output, 8 bytes per logit beside the 4 kept (the 16-bit logits are freed by
    then: torchtitan's train step ``del pred`` before ``loss.backward()``). Megatron's and
    nanotron's backwards compute the gradient in place in their saved softmax. The larger of
    the two moments is counted, at the loss's forward: the stash is the same at its backward
    on a last stage that runs a microbatch's B right after its F (1F1B) or every F first (AFAB).
    """
    if not loss_kernels.keeps_fp32_copies(training.fused_cross_entropy):
        return 0.0
    compiled = loss_kernels.compiled_transient_per_logit(training.fused_cross_entropy, act_bytes(training.precision))
    if compiled is not None:
        return logit_elements(model, layout, training) * compiled
    style = STYLES[training.elementwise]
    forward = act_bytes(training.precision) + (4.0 if style.loss_out_of_place else 0.0)
    backward = 8.0 if style.loss_backward_out_of_place else 0.0
    return logit_elements(model, layout, training) * max(forward, backward)


def embedding_copy(model: ModelSpec, chunk: Chunk) -> bool:
    """Whether a chunk with the LM head but not the embedding keeps its own copy of the word
    embedding: for tied embeddings (the head is the embedding) and for MTP modules (they embed
    the next tokens); its gradient is synchronised with the first stage (parallelism/tied.py)."""
    return chunk.head and not chunk.embedding and (model.tied_embeddings or model.mtp_layers > 0)


def mtp_activation_bytes(
    model: ModelSpec, layout: Layout, training: TrainingSection, routed_rows: float = 1.0
) -> float:
    """Each MTP module's stash for one microbatch: its two normalised inputs (the 2h projection
    input), its transformer layer, and its output layer's stash through the shared head (its
    final norm's and the head's inputs, the fp32 logits of its loss)."""
    s = training.seq_len / layout.cp
    sbh = s * training.micro_batch * model.hidden
    per = 2 * sbh * gemm_input_bytes(training.precision) / layout.tp + head_activation_bytes(model, layout, training)
    return sum(
        per + layer_activation_bytes(model, layout, training, model.mtp_layer_index(d), routed_rows=routed_rows)
        for d in range(model.mtp_layers)
    )


def chunk_activation_bytes(
    model: ModelSpec, layout: Layout, training: TrainingSection, chunk: Chunk, routed_rows: float = 1.0
) -> float:
    """Activation bytes of one microbatch through one chunk held on the GPU: what is offloaded
    (``training.activation_offload_layers`` or ``offload_modules``) lives in host memory, but for
    one layer's of it in flight (the copy under the next layer)."""
    total = sum(
        layer_activation_bytes(model, layout, training, i, pos, routed_rows)
        for pos, i in enumerate(chunk.layer_indices)
    )
    if chunk.embedding:
        total += embedding_activation_bytes(model, layout, training)
    if chunk.head:
        total += head_activation_bytes(model, layout, training)
        total += mtp_activation_bytes(model, layout, training, routed_rows)
    offloaded = offloaded_layer_bytes(model, layout, training, chunk, routed_rows)
    if offloaded:
        total -= sum(offloaded.values()) - max(offloaded.values())
    return total


def stash_cumulative_shares(
    model: ModelSpec,
    layout: Layout,
    training: TrainingSection,
    chunk: Chunk,
    units: Sequence[Sequence[int]],
    routed_rows: float = 1.0,
) -> tuple[float, ...]:
    """How a chunk's stash (:func:`chunk_activation_bytes`) builds up over its forward units,
    as cumulative fractions ending at exactly 1.0: ``units`` (one or more) are the layer indices of each unit
    in forward order (-1 the embedding, -2 the LM head and loss). A layer's activations are
    saved as its forward runs, and freed as its backward runs, in reverse; the offloaded layers
    hold only what was not moved and the in-flight buffer, counted with the first of them."""
    offloaded = offloaded_layer_bytes(model, layout, training, chunk, routed_rows)
    position = {layer: pos for pos, layer in enumerate(chunk.layer_indices)}
    buffer = max(offloaded.values()) if offloaded else 0.0
    sizes = []
    for unit in units:
        size = 0.0
        for layer in unit:
            if layer == HEAD_LAYER:
                size += head_activation_bytes(model, layout, training)
                size += mtp_activation_bytes(model, layout, training, routed_rows)
            elif layer == EMBEDDING_LAYER:
                size += embedding_activation_bytes(model, layout, training)
            elif layer in offloaded:
                # what stays of the layer (nothing when offloaded whole), and the in-flight copy once
                kept = layer_activation_bytes(model, layout, training, layer, position[layer], routed_rows)
                size, buffer = size + kept - offloaded[layer] + buffer, 0.0
            elif layer >= 0:
                size += layer_activation_bytes(model, layout, training, layer, position[layer], routed_rows)
        sizes.append(size)
    total = sum(sizes)
    if total <= 0.0:  # nothing kept: the last unit carries the (zero) change
        return (0.0,) * (len(sizes) - 1) + (1.0,)
    running, out = 0.0, []
    for size in sizes[:-1]:
        running += size
        out.append(min(running / total, 1.0))
    return (*out, 1.0)


def offloaded_layer_bytes(
    model: ModelSpec, layout: Layout, training: TrainingSection, chunk: Chunk, routed_rows: float = 1.0
) -> dict[int, float]:
    """Layer index -> activation bytes of one microbatch that go to host memory: the chunk's first
    ``training.activation_offload_layers`` layers whole, or what ``training.offload_modules``
    moves of each layer but the chunk's last (:mod:`simcluster.module_offload`)."""
    if training.offload_modules:
        return offloaded_bytes(model, layout, training, list(chunk.layer_indices), routed_rows)
    n = min(training.activation_offload_layers, chunk.layers)
    return {
        i: layer_activation_bytes(model, layout, training, i, pos, routed_rows)
        for pos, i in enumerate(chunk.layer_indices[:n])
    }


@dataclass(frozen=True)
class StageMemory:
    """Memory of the most loaded GPU of one pipeline stage (bytes)."""

    stage: int
    #: trained parameters on the GPU (a LoRA run's adapters alone)
    params_per_gpu: float
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float
    #: the TP comm+GEMM overlaps' persistent buffers (simcluster.tp_overlap_buffers)
    comm_buffers_bytes: float = 0.0
    #: the chunk passes whose activations the stage holds at its peak (memory_report's walk)
    held: Held = Held()
    #: what sets the activations' peak: the stash alone or a transient on it (memory_report.WalkPeak)
    peak_part: str = STASH
    #: the stash under that peak (bytes)
    peak_stash_bytes: float = 0.0
    #: frozen parameters on the GPU (a LoRA run's base model)
    frozen_params_per_gpu: float = 0.0

    @property
    def total_bytes(self) -> float:
        return (
            self.params_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.other_bytes
            + self.comm_buffers_bytes
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_bytes"] = self.total_bytes
        return d


def static_memory(
    model: ModelSpec, layout: Layout, training: TrainingSection, params: StageParams
) -> tuple[float, float, float]:
    """(params, grads, optimizer) bytes on one GPU of a stage."""
    zero = layout.zero
    fused = training.grad_accum_fusion
    if layout.zero3_pipelined:
        # FSDP2 under torch.distributed.pipelining: the stage's parameters stay gathered and
        # its gradients accumulate unsharded (each microbatch's 16-bit gradient freed once
        # added) for the whole step; only the optimizer's state, with the master, is sharded
        zero, fused = 1, True
    # PyTorch FSDP's MixedPrecision gathers 16-bit parameters and keeps its own fp32 state,
    # autocast or not (as autocast_weight_bytes and the inert note have it): its kept gathers
    # (reshard_after_forward false, a pipelined stage) are 16-bit
    autocast = training.autocast and not (layout.zero == 3 and layout.torch_fsdp)
    bpp = bytes_per_param(
        training.precision, training.optimizer, training.fp32_grad_accum, fused,
        moment_bytes(training), keep_16bit_grad=separate_16bit_grad_kept(layout, training),
        autocast=autocast, remainder=keeps_remainders(training, layout.torch_fsdp),
    )
    gathered = bpp.params  # a parameter's bytes once all-gathered (the compute copy)
    if zero == 3 and layout.torch_fsdp:
        # FSDP1's FlatParameter keeps the same state: its sharded flat parameter in the dtype
        # the model was built in, stepped in place, and the reduce-scattered gradient cast back
        # to it (_runtime_utils.py _accumulate_sharded_grad: _cast_grad_to_param_dtype)
        bpp = fsdp2_bytes_per_param(training.optimizer, moment_bytes(training))
    dense = sharded(bpp, zero, layout.zero_group)
    expert = sharded(bpp, zero, layout.expert_zero_group)
    if zero == 3 and (layout.zero3_keep_for_backward or layout.zero3_keep_after_backward):
        # every layer's gathered parameters are held from its forward to its backward: at the
        # end of the forward all of them are (beside FSDP2's own shards); kept from a backward
        # into the next forward instead (FSDP2's reshard_after_backward false), all of them at
        # the backward's end: counted all step, an upper bound
        own = layout.torch_fsdp
        dense = replace(dense, params=gathered + (dense.params if own else 0.0))
        expert = replace(expert, params=gathered + (expert.params if own else 0.0))
    # FSDP2 deferring its gradient sync to the last microbatch: an unsharded accumulator per
    # parameter in the reduce dtype, alive from the first backward to the last reduce-scatter
    held = fsdp2_accumulation.unsharded_grad_bytes(training, layout)
    if held:
        dense = replace(dense, grads=dense.grads + held)
        expert = replace(expert, grads=expert.grads + held)
    # the offloaded share of the optimizer (master weights and moments) lives in host memory
    on_gpu = 1.0 - training.optimizer_offload
    return (
        params.dense * dense.params + params.expert * expert.params + params.frozen * gathered,
        params.dense * dense.grads + params.expert * expert.grads,
        (params.dense * dense.optimizer + params.expert * expert.optimizer) * on_gpu,
    )


def stage_memory(
    model: ModelSpec,
    layout: Layout,
    training: TrainingSection,
    stage: int,
    chunks: list[Chunk],
    activations: float,
    comm_buffers: float = 0.0,
    compute_capability: float | None = None,
) -> StageMemory:
    """Memory of one stage's GPU given its peak activation stash and the TP overlaps'
    persistent buffers (bytes) on a GPU of ``compute_capability`` (its FP8 weight copies)."""
    params = stage_params(model, layout, chunks)
    p_bytes, g_bytes, o_bytes = static_memory(model, layout, training, params)
    p_bytes = with_weight_copies(p_bytes, model, layout, training, chunks, compute_capability)
    return StageMemory(
        stage=stage,
        params_per_gpu=params.total,
        frozen_params_per_gpu=params.frozen,
        params_bytes=p_bytes,
        grads_bytes=g_bytes,
        optimizer_bytes=o_bytes,
        activations_bytes=activations,
        other_bytes=training.memory_overhead_gib * 2**30,
        comm_buffers_bytes=comm_buffers,
    )


def wgrad_retained_fraction(model: ModelSpec, layout: Layout, training: TrainingSection) -> float:
    """Share of a layer's stash still needed after B: the inputs of its linear layers (for W).

    Zero-bubble schedules free the rest at B and this share at W (Qi et al. 2024, M_W < M_B).
    """
    if training.recompute == "full":
        return 1.0
    index = model.first_moe_layer  # a routed layer of a MoE model, any layer of a dense one
    moe = model.is_moe_layer(index)
    total = layer_activation_bytes(model, layout, training, index)
    t = layout.tp
    rep = t if layout.sequence_parallel else 1
    s = training.seq_len / layout.cp
    g = gemm_input_bytes(training.precision)
    b = training.micro_batch
    h = model.hidden
    out_dim = attention_widths(model)[3]
    kg = gathered_factor(layout)  # the column linears' inputs, gathered when kept so
    gemm_inputs = g * s * b * (kg * h / rep + out_dim / t)
    if moe:
        # the routed experts' fc1 reads the ETP group's gathered tokens (etp times the rows, as
        # layer_activation_bytes keeps them), fc2 its 1/etp of the width; a shared expert is a
        # tensor-parallel MLP on the layer's tokens
        gemm_inputs += g * s * model.top_k * b * (layout.etp * h / rep + model.expert_ffn / t)
        if model.shared_experts:
            gemm_inputs += g * s * b * (kg * h / rep + model.expert_ffn * model.shared_experts / t)
    else:
        gemm_inputs += g * s * b * (kg * h / rep + model.ffn / t)
    return min(1.0, gemm_inputs / total) if total > 0 else 1.0


def wgrad_retained_bytes(
    model: ModelSpec, layout: Layout, training: TrainingSection, chunk: Chunk, routed_rows: float = 1.0
) -> float:
    """Bytes of one microbatch through ``chunk`` held from its B to its W: the inputs of the
    linear layers, which the weight gradients read.

    Without full recomputation they are the share of F's stash that
    :func:`wgrad_retained_fraction` gives. Under full recomputation F keeps only each layer's
    input, and B reruns the forward: the linear inputs it recomputes stay until W, as many bytes
    as selective recomputation keeps after B (more than F's stash, so B grows the stash; a
    split backward gives back the memory that full recomputation saves, between B and W)."""
    if training.recompute == "full":
        training = training.model_copy(update={"recompute": "selective"})
    stash = chunk_activation_bytes(model, layout, training, chunk, routed_rows)
    return stash * wgrad_retained_fraction(model, layout, training)
