"""TransformerEngine's quantised copies of the linear weights in FP8 and NVFP4 training.

A TE linear quantises its 16-bit weight before its forward GEMM. Called with
``is_first_microbatch`` (True on a step's first microbatch, False after), it keeps the copy in
a workspace cache and refreshes it only on the first microbatch (``TransformerEngineBaseModule
.get_weight_workspace``: ``cache_name="weight"``, ``_fp8_workspaces``); Megatron-Core's TE
wrappers pass the flag unless ``disable_parameter_transpose_cache`` is set (``TELinear
.forward``, ``TEGroupedLinear.forward``) and its schedules set it on each model chunk's first
microbatch (``forward_step`` -> ``set_is_first_microbatch``). So: one cast per weight per step
and a copy kept in memory for good (``training.fp8_weight_cache``); without the flag the
weight is cast in every microbatch's forward and the copy goes with that microbatch. TE 1.x
did the same: 1.4-1.7 in persistent ``weight1_fp8`` / ``weight1_t_fp8`` buffers
(``set_fp8_weights``, "cache the FP8 values and transposed FP8 values in between
microbatches"), 1.8-1.10 in ``_fp8_workspaces`` (``get_fp8_workspace``, ``cast_transpose_``);
1.11-1.13's transpose cache was not read.

The cast is the activations' kernel (:meth:`KernelModel.quantise`): on Hopper a cast-transpose
writing the FP8 data and its transpose, which the input-gradient GEMM needs (FP8 tensor cores
take K-major operands only); on datacenter Blackwell one copy under a per-tensor scale; both
directions under block scales. With FP8 parameters (``training.fp8_param_gather``) the weight
is an FP8 tensor already, stored at 1 B where a 16-bit one takes 2 (Megatron-Core's parameter
buffer is uint8 for them): only Hopper's transpose is made, once per step after the optimizer
refreshed the data (``Float8Tensor.update_usage`` -> ``_create_transpose``).

MXFP8 parameters (block scales on datacenter Blackwell) hold both directions, and Megatron-Core
cannot map them into its flat parameter buffer (TransformerEngine's ``replace_raw_data`` has no
MXFP8 tile layout), so its distributed optimizer copies the updated 16-bit shard into a 16-bit
buffer aliased on the idle gradient buffer (``--reuse-grad-buf-for-mxfp8-param-ag``, which
Megatron-Bridge's ``bf16_with_mxfp8_mixed`` and Megatron-LM's MXFP8 recipes set), all-gathers
it in 16 bits, and every rank quantises each of its weights from it in both directions
(``DistributedDataParallel.start_param_sync`` / ``finish_param_sync``: ``param.data.copy_``,
"The parameters are cast from bf16 to MXFP8 during copy"; Megatron-LM pull request 4987: "the
all-gather ships bf16 and then quantizes back to MXFP8 in place on every rank"; pull request
6094: "the cast kernels are still one per param"): a cast of
every local weight once per step, where the first microbatch's forward gathers them, and no
FP8 pass in the optimizer's tail (:func:`requantises_mxfp8_parameters`).

NVFP4 parameters (``training.fp4_param``, a LoRA run's frozen weights quantised once, as
Megatron-Core's ``fp4_param`` builds them and MLPerf v5.1's LoRA callback replaces each 16-bit
weight with an NVFP4 tensor holding both directions) are never cast and take
:data:`NVFP4_CACHED_BYTES` in place of the 16-bit weight.

Megatron FSDP (ZeRO-3 on a Megatron-Core stack) with 16-bit parameters casts and caches as ZeRO
1-2 does (:func:`caches_megatron_fsdp_casts`): Megatron leaves ``is_first_microbatch`` on and
TransformerEngine keeps its workspace unless it detects PyTorch's FSDP2, so each layer's whole
quantised copy stays beside the sharded state (read by a research helper, session 95: Megatron-LM
``TELinear.forward``, ``validate_args``' Megatron FSDP block, ``mcore_fsdp_adapter.py``;
TransformerEngine ``module/linear.py``'s ``cache_name``, ``base.py``'s ``is_fsdp2``). Under
PyTorch's FSDP and DeepSpeed's ZeRO-3 TransformerEngine's casts are not modelled (ASSUMPTION:
left out, inert note); torchao's, which never cache, are (``torchao_float8.weight_cast_seconds``). With FP8 parameters Megatron FSDP gathers them as their rowwise data only, again for
each backward (its bucket is freed after the forward), and where FP8 GEMMs take K-major operands
alone (Hopper) TransformerEngine makes the input-gradient GEMM's transposed copy after that
gather, a read and a write of each byte (``megatron_fsdp`` param_and_grad_buffer:
``fp8_create_transpose_cache`` -> TransformerEngine's ``post_all_gather_processing``,
``_create_transpose`` where ``is_non_tn_fp8_gemm_supported()`` is false, ``_create_columnwise``
for blockwise weights; read by a research helper, session 95): :func:`backward_transpose_seconds`.
On datacenter Blackwell a per-tensor weight needs none and an MXFP8 one's backward gathers its
columnwise plane from a buffer of its own.
"""

from __future__ import annotations

from simcluster.compute import QUANTISED, KernelModel, keeps_fp8_transpose, non_tn_fp8_gemms
from simcluster.layout import Layout
from simcluster.scenario import TrainingSection

#: bytes of an MXFP8 element's scales, one E8M0 byte per 32 values in each direction
MXFP8_SCALE_BYTES = 2 / 32
#: bytes of an NVFP4 weight element cached in both directions: two 4-bit values and an E4M3
#: scale per 16 values each (TE's NVFP4 weights, 2-D 16 x 16 blocks, rowwise and columnwise)
NVFP4_CACHED_BYTES = 2 * (0.5 + 1 / 16)
#: bytes per element of Hopper's FP8 transpose of an FP8 weight: read the data, write the copy
TRANSPOSE_BYTES = 2.0


def applies(training: TrainingSection, layout: Layout) -> bool:
    """Whether the transformer linears run quantised GEMMs on weights this module accounts for:
    FP8 or NVFP4 outside ZeRO-3, and under Megatron FSDP with 16-bit parameters, whose gathered
    weights TransformerEngine casts and caches as it does at ZeRO 1-2 (the module's docstring)."""
    if training.precision not in QUANTISED:
        return False
    return layout.zero != 3 or caches_megatron_fsdp_casts(training, layout)


def caches_megatron_fsdp_casts(training: TrainingSection, layout: Layout) -> bool:
    """Whether Megatron FSDP's 16-bit weights are quantised by TransformerEngine's modules with
    their workspace cache: Megatron neither sets ``disable_parameter_transpose_cache`` nor stops
    passing ``is_first_microbatch`` under it, and TransformerEngine drops the cache only where it
    detects PyTorch's FSDP2 (``is_fsdp2``), so the whole (TP-sliced) copy of every layer is kept
    across microbatches and steps as at ZeRO 1-2."""
    return layout.megatron_fsdp and not training.fp8_param_gather and not training.fp4_param


def transposes_fp8_parameters(training: TrainingSection, compute_capability: float | None) -> bool:
    """Whether FP8 parameters (``training.fp8_param_gather``) still need a cast each step: their
    transpose under a per-tensor scale where FP8 GEMMs take K-major operands only (Hopper);
    block-scaled ones got both directions from the optimizer's cast."""
    return (
        training.fp8_param_gather
        and training.fp8_recipe != "block"
        and keeps_fp8_transpose(training.fp8_recipe, compute_capability)
    )


def requantises_mxfp8_parameters(training: TrainingSection, layout: Layout, compute_capability: float | None) -> bool:
    """Whether the FP8 parameters are MXFP8 ones that Megatron-Core's distributed optimizer
    all-gathers in 16 bits and every rank quantises again after the gather (the module's
    docstring): block scales on datacenter Blackwell, ZeRO 1-2 (Megatron FSDP gathers each
    direction's FP8 plane, 1 B, where it is needed), trained weights (a LoRA run's frozen ones are
    never gathered)."""
    return (
        training.precision == "fp8"
        and training.fp8_param_gather
        and training.fp8_recipe == "block"
        and (compute_capability or 0.0) >= 10.0
        and layout.zero < 3
        and layout.lora is None
    )


def forward_cast_seconds(
    km: KernelModel, training: TrainingSection, layout: Layout, weights: list[float], dtype: str | None = None
) -> float:
    """Seconds one microbatch's forward spends quantising the weights of ``weights``
    (elements of each tensor on this GPU) for GEMMs in ``dtype``: a cached cast charged as
    1/m of it per microbatch (m microbatches a step; the kernels run on the first), an uncached
    one whole. Zero where :func:`applies` is false."""
    dtype = dtype or km.gemm_dtype
    if not applies(training, layout) or dtype not in QUANTISED or training.fp4_param:
        return 0.0  # NVFP4 parameters are frozen NVFP4 tensors: nothing to cast
    cc = km.profile.gpu.compute_capability
    if dtype == "fp8" and requantises_mxfp8_parameters(training, layout, cc):
        # quantised from the 16-bit gather once a step, whatever the transpose cache says
        return cast_seconds(km, weights, dtype) / layout.microbatches
    if training.fp8_param_gather:
        if layout.lora is not None and training.fp8_weight_cache:
            return 0.0  # frozen FP8 weights: their cached transposes never go stale
        if dtype != "fp8" or not transposes_fp8_parameters(training, cc):
            return 0.0
        seconds = transpose_seconds(km, weights)
    else:
        seconds = cast_seconds(km, weights, dtype)
    share = 1.0 / layout.microbatches if training.fp8_weight_cache else 1.0
    return share * seconds


def transposes_gathered_fp8_parameters(
    training: TrainingSection, layout: Layout, compute_capability: float | None
) -> bool:
    """Whether each microbatch's backward transposes the FP8 parameters Megatron FSDP gathered
    (the module's docstring): trained FP8 weights under ZeRO-3 on a Megatron-Core stack, where
    FP8 GEMMs take K-major operands alone."""
    return (
        layout.megatron_fsdp
        and training.precision == "fp8"
        and training.fp8_param_gather
        and layout.lora is None
        and not non_tn_fp8_gemms(compute_capability)
    )


def backward_transpose_seconds(
    km: KernelModel, training: TrainingSection, layout: Layout, weights: list[float], dtype: str | None = None
) -> float:
    """Seconds one microbatch's backward spends transposing the gathered FP8 weights of
    ``weights`` (elements of each tensor on this GPU) for input-gradient GEMMs in ``dtype``:
    one kernel per weight, :data:`TRANSPOSE_BYTES` per element; 1/m of it where a pipeline keeps
    the stage's parameters gathered for the whole step (``Layout.zero3_pipelined``), so the
    transpose made in the first backward stays valid."""
    dtype = dtype or km.gemm_dtype
    if dtype != "fp8" or not transposes_gathered_fp8_parameters(training, layout, km.profile.gpu.compute_capability):
        return 0.0
    share = 1.0 / layout.microbatches if layout.zero3_pipelined else 1.0
    return share * transpose_seconds(km, weights)


def cast_seconds(km: KernelModel, weights: list[float], dtype: str, columnwise: bool = True) -> float:
    """Seconds quantising each of ``weights`` (elements) for GEMMs in ``dtype``, a kernel each;
    ``columnwise`` False: the rowwise copy alone (:meth:`KernelModel.quantise`)."""
    return sum(km.quantise(n, dtype, weight=True, columnwise=columnwise) for n in weights if n > 0)


def transpose_seconds(km: KernelModel, weights: list[float]) -> float:
    """Seconds transposing each FP8 weight of ``weights`` (elements), a kernel each:
    :data:`TRANSPOSE_BYTES` per element."""
    return sum(km.memory(TRANSPOSE_BYTES * n) for n in weights if n > 0)


def cached_bytes_per_weight(training: TrainingSection, compute_capability: float | None) -> float:
    """Bytes per transformer-linear weight element held beyond the 16-bit weight the static
    memory counts (negative where FP8 parameters take less): the cached quantised copy, or
    with FP8 parameters their 1 B in place of 2 plus Hopper's transpose (when cached)."""
    if training.precision == "nvfp4":
        if training.fp4_param:
            return NVFP4_CACHED_BYTES - 2.0  # held as NVFP4 in both directions, no 16-bit weight
        return NVFP4_CACHED_BYTES if training.fp8_weight_cache else 0.0
    two_way = keeps_fp8_transpose(training.fp8_recipe, compute_capability)
    block = training.fp8_recipe == "block"
    scales = MXFP8_SCALE_BYTES if block and (compute_capability or 0.0) >= 10.0 else 0.0
    if training.fp8_param_gather:
        if scales:
            return 2.0 + scales - 2.0  # an MXFP8 parameter holds both directions, cache or not
        # without the cache (disable_parameter_transpose_cache) the transpose is made for each
        # microbatch and freed: only the 1 B parameter is kept
        return (2.0 if two_way and training.fp8_weight_cache else 1.0) + scales - 2.0
    if not training.fp8_weight_cache:
        return 0.0
    return (2.0 if two_way else 1.0) + scales
