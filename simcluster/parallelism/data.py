"""Data parallelism and ZeRO: gradient buckets, their reduction, and parameter gathers.

As the frameworks do (PyTorch DDP / Megatron DDP with ``overlap_grad_reduce``): whole parameter
tensors are grouped into buckets of ``dp.bucket_mb`` in the order backward produces their
gradients; a bucket's reduction starts when the last microbatch's gradients of all its tensors
exist, in bucket order, overlapped with the rest of the backward pass. ZeRO-0 all-reduces a bucket; ZeRO-1/2 reduce-scatter it and, after the optimizer
step, all-gather the updated parameters (``overlap.param_gather``: issued at the next step's
start and waited for layer by layer, as Megatron's distributed optimizer does). Gradient
accumulation: reductions happen once per step, not per microbatch. ZeRO-3 / FSDP gathers each
layer's parameters before its forward and backward (prefetching the next layer) and
reduce-scatters its gradients, for every microbatch (FSDP and DeepSpeed re-gather per micro-step).
Dense parameters reduce over dp x cp; routed experts over their expert-data-parallel group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simcluster.layout import Layout
from simcluster.lora import BACKWARD_ORDER, BLOCK, adapter_gemms
from simcluster.memory import (
    OPTIMIZER_MOMENTS,
    head_unit_params,
    keeps_remainders,
    layer_split,
    moment_bytes,
)
from simcluster.model import ModelSpec
from simcluster.placement import Chunk
from simcluster.scenario import Scenario


@dataclass(frozen=True)
class Bucket:
    """A gradient bucket of one chunk: reduced as one collective."""

    chunk: int
    group: str  # "dp" (dense, dp x cp ranks) or "edp" (experts)
    layers: tuple[int, ...]  # layer indices in backward order (-1 embedding, -2 head)
    params: float  # parameters per GPU in the bucket
    #: of which transformer-layer weights (FP8 on the wire with training.fp8_param_gather)
    layer_params: float = 0.0
    #: its last tensor is an MLP weight of its last layer: ready once that layer's MLP weight
    #: gradients are done, before the layer's attention backward
    early: bool = False

    @property
    def ready_layer(self) -> int:
        """The bucket is ready once this layer's weight gradients (last microbatch) are done."""
        return self.layers[-1]


def grad_reduce_bytes(scenario: Scenario) -> float:
    """Bytes per gradient element on the wire (fp32 when accumulating in fp32, as Megatron, and
    under autocast, whose fp32 parameters get fp32 gradients; PyTorch FSDP reduces in its own
    MixedPrecision reduce dtype, autocast or not)."""
    tr = scenario.training
    autocast = tr.autocast and not scenario.torch_fsdp
    return 4.0 if tr.precision == "fp32" or tr.fp32_grad_accum or autocast else 2.0


def grad_wire_bytes(scenario: Scenario) -> float:
    """Bytes per gradient element of a ZeRO 0-2 bucket reduction on the wire: ``dp.reduce_dtype``
    when set (DeepSpeed's ``communication_data_type``: ``engine.py`` ``allreduce_bucket`` and
    ``stage_1_and_2.py`` ``gradient_reduction_w_predivide`` cast the bucket to it), else the
    dtype the gradients accumulate in (:func:`grad_reduce_bytes`)."""
    wire = scenario.dp.reduce_dtype
    if wire is None:
        return grad_reduce_bytes(scenario)
    return 4.0 if wire == "fp32" else 2.0


def reduce_cast_bytes(scenario: Scenario) -> float:
    """HBM bytes per gradient element of casting a bucket to the wire dtype and copying the
    reduced result back (0 when they match): ``tensor.to(communication_data_type)`` reads the
    accumulated gradient and writes the cast, ``tensor.copy_(tensor_to_allreduce)`` reads the
    cast and writes the gradient (DeepSpeed ``engine.py`` ``allreduce_bucket``)."""
    accum, wire = grad_reduce_bytes(scenario), grad_wire_bytes(scenario)
    return 0.0 if accum == wire else 2.0 * (accum + wire)


def flatten_copy_bytes(scenario: Scenario) -> float:
    """HBM bytes per gradient element of flattening a bucket into a new tensor and copying the
    reduced result back into the gradients (``dp.flatten_copies``; 0 without): a read and a
    write of the accumulated dtype each (DeepSpeed ``allreduce_bucket``: ``self.flatten(bucket)``;
    ``allreduce_and_copy``: ``buf.copy_(synced)``)."""
    return 4.0 * grad_reduce_bytes(scenario) if scenario.dp.flatten_copies else 0.0


def cast_buffer_bytes(scenario: Scenario, layout: Layout, params: float) -> float:
    """Bytes of the copies a bucket of ``params`` gradients is reduced through, held from their
    making until the copy back: its flat copy (``dp.flatten_copies``, in the accumulated dtype)
    and its cast (``dp.reduce_dtype`` other than the accumulated dtype): DeepSpeed's
    ``self.flatten(bucket)`` and ``tensor.to(communication_data_type)`` are new tensors of the
    whole bucket, and the BF16_Optimizer's bucket is a whole flat fp32 group
    (``allreduce_no_retain`` never splits a tensor). 0 without a data-parallel group (no
    reduction)."""
    if layout.dp * layout.cp <= 1:
        return 0.0
    flat = params * grad_reduce_bytes(scenario) if scenario.dp.flatten_copies else 0.0
    cast = params * grad_wire_bytes(scenario) if reduce_cast_bytes(scenario) > 0 else 0.0
    return flat + cast


def param_bytes(scenario: Scenario) -> float:
    """Bytes per gathered parameter element (the compute copy), which is also the dtype of
    its ``.grad``: fp32 in fp32 training and under autocast, whose fp32 parameters are
    gathered whole and cast op by op (as the static memory keeps them, 4 B), except in PyTorch
    FSDP, whose MixedPrecision gathers 16-bit copies of its fp32 shards."""
    tr = scenario.training
    return 4.0 if tr.precision == "fp32" or (tr.autocast and not scenario.torch_fsdp) else 2.0


#: an FP8 parameter on the wire: 1 B under every recipe. The scales never travel: Megatron-Core's
#: parameter buffers (its distributed optimizer's and Megatron FSDP's) hold only the raw FP8 data,
#: and TransformerEngine's ``cast_master_weights_to_fp8`` gives every rank each weight's full
#: scales (an amax all-reduce over the data-parallel group, then the cast of the local shard)
FP8_PARAM_BYTES = {"delayed": 1.0, "current": 1.0, "block": 1.0}


def gather_bytes(scenario: Scenario, params: float, layer_params: float, fp8_on_wire: bool = True) -> float:
    """Bytes of a parameter all-gather's output for ``params`` parameters, ``layer_params`` of
    them transformer-layer weights: those in FP8 with ``training.fp8_param_gather`` (Megatron-Core
    keeps them as TransformerEngine FP8 tensors and its distributed optimizer gathers those)
    unless ``fp8_on_wire`` is False (MXFP8 parameters, gathered in 16 bits:
    ``fp8_weights.requantises_mxfp8_parameters``), everything else at :func:`param_bytes`."""
    tr = scenario.training
    per = param_bytes(scenario)
    layer = FP8_PARAM_BYTES[tr.fp8_recipe] if tr.fp8_param_gather and fp8_on_wire else per
    return layer_params * layer + (params - layer_params) * per


def zero3_working_bytes(
    scenario: Scenario, model: ModelSpec, layout: Layout, chunks: list[Chunk]
) -> tuple[float, float]:
    """(parameter, gradient) bytes ZeRO-3 holds on a GPU beyond its shards while the stage
    runs, sized by the stage's largest unit (a layer, the embedding or the LM head): the
    gathered parameters of the unit being computed and of the one prefetched (FSDP's prefetch of
    one unit; none beyond the gathers already counted when a layer keeps its gather for the
    backward), the unit's unsharded 16-bit gradients before their reduce-scatter and, where one
    reduce-scatter stays in flight (FSDP2: ``dp.wait_reduction``), its input buffer in the
    reduce dtype, kept until the next unit's post-backward. PyTorch FSDP1 (``zero3.buffers:
    flat``) keeps its root unit (embedding, final norm and LM head: what the auto-wrap policy
    leaves to the root FlatParameter) gathered from the forward to the backward
    (``_runtime_utils.py`` ``_post_forward_reshard``: ``not state._is_root``) and its unsharded
    gradient until the backward's end; without the rate limiter (``zero3.limit_all_gathers``
    false) every unit of the forward may be gathered at once. A lower bound: FSDP2's copy-out
    keeps the all-gather output a little longer. DeepSpeed's coordinator (``zero3.
    prefetch_bucket_size`` set) holds what ``zero3_coordinator.working_bytes`` says. Under a
    pipeline (``zero3_pipelined``) the stage's parameters and gradients stay unsharded, which
    the static memory already counts."""
    if layout.zero != 3 or layout.zero3_pipelined:
        return 0.0, 0.0
    # DeepSpeed's coordinator holds a window, not whole units (it builds on this module's
    # unit helpers, hence imported here)
    from simcluster.parallelism import zero3_coordinator

    if zero3_coordinator.coordinated(scenario) and not layout.zero3_keep_for_backward:
        return zero3_coordinator.working_bytes(scenario, model, layout, chunks)
    largest = root = every = 0.0
    for ch in chunks:
        layers = [*ch.layer_indices, *([-1] if ch.embedding else []), *([-2] if ch.head else [])]
        for layer in layers:
            size = sum(unit_params(model, layout, ch, layer))
            if layout.fsdp1_root and layer < 0:
                root += size
            else:
                largest = max(largest, size)
                every += size
    # FSDP2's reshard_after_backward false: the static memory holds every gathered layer
    kept = layout.zero3_keep_for_backward or layout.zero3_keep_after_backward
    gathered = 0 if kept else (2 if scenario.zero3.prefetch else 1)
    units = gathered * largest
    if layout.fsdp1_root and not scenario.zero3.limit_all_gathers and not layout.zero3_keep_for_backward:
        units = every  # no rate limiter: a GPU-bound forward's every gather in flight
    # a gather kept for the backward is in the static memory already, the root's included
    params = (units + (0.0 if layout.zero3_keep_for_backward else root)) * param_bytes(scenario)
    params += zero3_coordinator.persistent_bytes(scenario, model, layout, chunks)
    # FSDP1's root FlatParameter gets its gradient only once the embedding's backward is done:
    # the LM head's part waits in autograd's buffer until then, the whole root reduced last
    grads = (largest + root) * param_bytes(scenario)
    widened = layout.fsdp1_root and grad_reduce_bytes(scenario) != param_bytes(scenario)
    if scenario.wait_reduction or widened:
        # the reduce-scatter's input in the reduce dtype: FSDP2's copy-in buffer, or FSDP1's
        # cast of the unsharded gradient (_post_backward_hook), kept until the collective ends
        # beside the 16-bit one (record_stream); the root's is cast last, and with a large
        # vocabulary it is the largest (Llama 3 8B untied: 1.05e9 parameters to a block's 2.2e8)
        grads += max(largest, root) * grad_reduce_bytes(scenario)
    return params, grads


def bucket_buffer_bytes(scenario: Scenario, layout: Layout, params: float) -> float:
    """Gradient bytes a GPU holds in its reduction buckets beside ``.grad`` when the framework
    copies gradients into them (``dp.bucket_copies``), for ``params`` local parameters. PyTorch
    DDP without ``gradient_as_bucket_view`` allocates buckets for every gradient, a second copy
    of them in the gradients' dtype (its documentation: the view "can reduce peak memory usage,
    where the saved memory size will be equal to the total gradients size"; nanotron's ZeRO-0,
    Megatron-LM 2021's torch DDP). ZeRO-2 keeps no whole gradient: DeepSpeed copies into one ipg
    buffer of the bucket size, two with ``overlap_comm`` (stage_1_and_2.py ``setup_buckets``:
    "double buffers to avoid data access conflict"). Without a data-parallel group there is no
    reduction and no bucket (nanotron wraps the model in DDP only when dp > 1)."""
    if not scenario.dp.bucket_copies or params <= 0 or layout.dp * layout.cp <= 1:
        return 0.0
    # the buckets take the gradients' dtype: the parameters' (fp32 under autocast)
    whole = params * param_bytes(scenario)
    if layout.zero < 2:
        return whole
    buffers = 2 if scenario.overlap.dp_grad_reduce else 1
    bucket = scenario.dp.bucket_mb if isinstance(scenario.dp.bucket_mb, float) else math.inf
    return buffers * min(whole, bucket * 1e6)


def reduction_working_bytes(
    scenario: Scenario, model: ModelSpec, layout: Layout, chunks: list[Chunk], params: float
) -> tuple[float, float]:
    """(parameter, gradient) bytes a stage's GPU holds beside its sharded state for gathering
    and reducing (:func:`zero3_working_bytes` and :func:`bucket_buffer_bytes`, ``params`` local
    parameters): what the engine's timeline and ``simcluster memory`` both add."""
    work_p, work_g = zero3_working_bytes(scenario, model, layout, chunks)
    return work_p, work_g + bucket_buffer_bytes(scenario, layout, params)


def fsdp2_copy_bytes(scenario: Scenario) -> tuple[float, float]:
    """HBM bytes per parameter of FSDP2's copies (``zero3.buffers: copies``): (after each
    all-gather, before each reduce-scatter).

    PyTorch FSDP2 (torch.distributed.fsdp fully_shard) all-gathers a layer into one flat
    buffer, then ``foreach_all_gather_copy_out`` copies it into per-parameter tensors
    (``split_with_sizes_copy``) on the compute stream: the gathered bytes read and written
    again. Before reducing, ``foreach_reduce`` copies the 16-bit gradients into the
    reduce-scatter buffer in the reduce dtype (``chunk_cat``; on the compute stream since torch
    2.5, after waiting for the previous reduce-scatter, ``engine/dp_ops.py``; on the
    reduce-scatter stream before, and where ``dp.wait_reduction`` is off): read at the
    parameter's width, written at the reduce width."""
    p = param_bytes(scenario)
    return 2.0 * p, p + grad_reduce_bytes(scenario)


def unit_params(model: ModelSpec, layout: Layout, chunk: Chunk, layer: int) -> tuple[float, float]:
    """(dense, expert) parameters per GPU of a layer (-1 = embedding, -2 = LM head)."""
    t = layout.tp
    if layer == -1:  # frozen in a LoRA run
        return (0.0 if layout.lora is not None else model.embedding_params() / t), 0.0
    if layer == -2:  # the LM head, with the MTP modules and the embedding copy they need
        return head_unit_params(model, layout, chunk)
    return layer_split(model, layout, layer)


def chunk_units(chunk: Chunk) -> list[int]:
    """Parameter units of a chunk in backward order."""
    units = [-2] if chunk.head else []
    units += list(reversed(chunk.layer_indices))
    return units + ([-1] if chunk.embedding else [])


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor's parameters per GPU (dense or routed-expert) and whether it is
    an MLP weight (its gradient is ready before the layer's attention backward)."""

    dense: float
    expert: float = 0.0
    mlp: bool = False


def unit_tensors(model: ModelSpec, layout: Layout, chunk: Chunk, layer: int) -> list[Tensor]:
    """The parameter tensors of a unit, in the order their gradients become ready in backward
    (the MLP's output projection first, the fused QKV last). Bucketing frameworks never split a
    tensor: torch DDP and Megatron-Core assign whole parameters to buckets in this order. Norms
    and biases ride with their block's largest tensor; routed experts are one tensor of their
    own group. The parts add up to ``unit_params``."""
    dense, expert = unit_params(model, layout, chunk, layer)
    if layer < 0:
        return [Tensor(dense, expert)]
    if layout.lora is not None:
        return adapter_tensors(model, layout)
    t, h = layout.tp, model.hidden
    if model.mla is not None:
        out = model.heads * model.mla.v_head_dim * h
    else:
        out = model.heads * model.d_head * h
    parts: list[Tensor] = []
    if model.is_moe_layer(layer):
        parts.append(Tensor(0.0, expert, mlp=True))
        mlp = dense * t - model.attention_params()  # shared experts, router and the MLP norm
        parts.append(Tensor(mlp / t, mlp=True))
    else:
        ffn = model.ffn
        parts.append(Tensor(h * ffn / t, mlp=True))  # the down projection
        up = dense * t - model.attention_params() - h * ffn  # gate/up, biases, the MLP norm
        parts.append(Tensor(up / t, mlp=True))
    parts.append(Tensor(out / t))
    parts.append(Tensor(dense - sum(p.dense for p in parts)))  # QKV, its biases, the input norm
    return [p for p in parts if p.dense > 0 or p.expert > 0]


def adapter_tensors(model: ModelSpec, layout: Layout) -> list[Tensor]:
    """A LoRA layer's trained tensors, in the order their gradients become ready: each
    adapter's B then A, the MLP's adapters before the attention's."""
    lora = layout.lora
    assert lora is not None
    out = []
    for target in BACKWARD_ORDER:
        if target in lora.targets:
            a, b = adapter_gemms(model, lora, target, layout.tp)
            out += [Tensor(b.k * b.n, mlp=BLOCK[target] == "mlp"), Tensor(a.k * a.n, mlp=BLOCK[target] == "mlp")]
    return out


def build_buckets(
    model: ModelSpec,
    layout: Layout,
    chunks: list[Chunk],
    cap_params: float,
    whole: list[bool] | None = None,
) -> list[Bucket]:
    """Buckets of each chunk in backward order (dense and expert gradients bucketed apart).

    Parameter tensors are added in the order their gradients become ready and a bucket is
    closed once it holds ``cap_params`` parameters or more (torch DDP's and Megatron-Core's
    rule), so a large layer spans several buckets and a bucket may hold the end of one layer
    and the start of the next. ``whole[c]``: chunk ``c`` is one bucket per group (Megatron-Core
    on every pipeline stage but the first and every model chunk after the first)."""
    out: list[Bucket] = []
    for c, chunk in enumerate(chunks):
        cap = math.inf if whole is not None and whole[c] else cap_params
        for group, pick in (("dp", 0), ("edp", 1)):
            layers: list[int] = []
            size = in_layers = 0.0
            for unit in chunk_units(chunk):
                for tensor in unit_tensors(model, layout, chunk, unit):
                    n = tensor.expert if pick else tensor.dense
                    if n <= 0:
                        continue
                    if not layers or layers[-1] != unit:
                        layers.append(unit)
                    size += n
                    in_layers += n if unit >= 0 else 0.0
                    if size >= cap:
                        out.append(Bucket(c, group, tuple(layers), size, in_layers, early=tensor.mlp))
                        layers, size, in_layers = [], 0.0, 0.0
            if layers:
                out.append(Bucket(c, group, tuple(layers), size, in_layers))
    return out


#: parameters per gradient bucket under NeMo 2's MegatronCommOverlapCallback and Megatron-Bridge's
#: CommOverlapConfig with the distributed optimizer and dp > 1 (``bucket_size = 128 * 1024 * 1024``)
COMM_OVERLAP_BUCKET = 128 * 1024 * 1024


def bucket_cap_params(scenario: Scenario, layout: Layout) -> float:
    """Parameters per gradient bucket: ``dp.bucket_mb`` MB of gradients on the wire, or
    Megatron-Core's default (``megatron-core``: max(40M, 1M x dp) parameters) or NeMo 2's and
    Megatron-Bridge's (``comm-overlap``: 128 Mi parameters), either one bucket when the
    reduction is not overlapped, as Megatron-Core's DistributedDataParallel sets bucket_size."""
    bucket_mb = scenario.dp.bucket_mb
    if isinstance(bucket_mb, float):
        return bucket_mb * 1e6 / grad_reduce_bytes(scenario)
    if not scenario.overlap.dp_grad_reduce:
        return math.inf
    if bucket_mb == "comm-overlap":
        return float(COMM_OVERLAP_BUCKET)
    return float(max(40_000_000, 1_000_000 * layout.dp))


def optimizer_bytes_per_param(scenario: Scenario) -> float:
    """HBM traffic of one optimizer update per parameter (read + write of each state).

    Every term is a pass the frameworks run: the gradient norm for clipping reads the fp32
    gradients (Megatron ``clip_grad_norm_fp32``); fp16's dynamic loss scaling first unscales
    them in place and checks for inf/NaN (``_amp_foreach_non_finite_check_and_unscale_``: a read
    and a write); the update reads the gradient and reads and writes the master weight and each
    moment (apex/TE FusedAdam); the 16-bit compute copy is then refreshed from the master by a
    separate copy, which reads it again (Megatron ``_copy_main_params_to_model_params``,
    DeepSpeed ``update_lp_params``, nanotron's accumulator step: ``copy_``). Gradients kept in 16
    bits (``training.fp32_grad_accum: false``) are first copied into fp32 for the update (Megatron
    ``_copy_model_grads_to_main_grads``: ``main_param.grad = model_param.main_grad.float()``, a
    16-bit read and an fp32 write). PyTorch FSDP2 (``zero3.buffers: copies``) has neither: it
    steps its fp32 shards in place, keeps fp32 gradient shards whatever it reduces in, and casts
    each shard to 16 bits at every all-gather, on its copy-in stream beside the compute
    (``FSDPParam.all_gather_inputs``)."""
    tr = scenario.training
    moment = 2 * moment_bytes(tr)  # read + write of one moment
    # fp32 master read, 16-bit param write; none where the optimizer steps fp32 parameters
    # in place (PyTorch FSDP, autocast) or its fused step writes the bf16 weight whose
    # remainder it keeps (apex's, reading and writing both: the 8 B of an fp32 master's r/w)
    low = 0 if tr.precision == "fp32" or scenario.torch_fsdp or tr.autocast or keeps_remainders(tr, scenario.torch_fsdp) else 4 + 2
    unscale = 8.0 if tr.precision == "fp16" else 0.0
    widen = 2 + 4 if tr.precision != "fp32" and not tr.fp32_grad_accum and not (scenario.torch_fsdp or tr.autocast) else 0
    # fp32 master r/w, fp32 grad read, grad-norm read (over the shard: Megatron's clipping;
    # nanotron's runs over every local gradient, clip_bytes_per_local_param)
    norm = CLIP_NORM_BYTES if tr.grad_clip == "shard" else 0.0
    if tr.grad_clip == "deepspeed":
        norm, unscale = deepspeed_step_bytes(tr.precision)
    common = 8 + 4 + norm + low + unscale + widen
    return common + OPTIMIZER_MOMENTS[tr.optimizer] * moment


def deepspeed_step_bytes(precision: str) -> tuple[float, float]:
    """(norm, unscale) bytes per shard element of DeepSpeed's ZeRO-1/2 step beside the update
    (``training.grad_clip: deepspeed``; ``runtime/zero/stage_1_and_2.py``, read in the 0.12.4
    PyPI sdist). The norm: ``get_grad_norm_direct`` runs ``g.data.double().norm(2)`` on each
    16-bit gradient of the shard, an fp64 copy written and read (2 + 8 + 8). Then ``step``
    flattens the shard's gradients into one new 16-bit tensor before ``.to(fp32)`` (2 + 2; the
    cast is the 16-bit widening) and ``unscale_and_clip_grads`` multiplies the fp32 shard by
    one combined factor every step, whatever the precision (``grad.data.mul_``: 4 + 4). fp16
    first checks the shard for inf/NaN (``_has_inf_or_nan``: ``x.float().sum()``, 2 + 4 + 4).
    The per-tensor ``.item()`` host syncs of the norm and the check are not timed."""
    norm = 2 + 8 + 8
    unscale = (2 + 2) + (4 + 4) + ((2 + 4 + 4) if precision == "fp16" else 0)
    return float(norm), float(unscale)


#: the gradient norm's read of an fp32 gradient
CLIP_NORM_BYTES = 4.0


def clip_bytes_per_local_param(scenario: Scenario) -> float:
    """HBM bytes per local parameter (not per optimizer-shard parameter) of a clipping pass
    that covers every gradient the rank holds: nanotron's ``clip_grad_norm`` with its fp32
    gradient accumulator reads each buffer for the norm and multiplies each by the clamped
    coefficient (``mul_``, always, to avoid a host sync on ``clip_coef < 1``): 4 + 8 bytes,
    ZeRO-1 included (its accumulator keeps the full buffers). Zero for Megatron's clipping,
    whose norm reads the shard (in :func:`optimizer_bytes_per_param`)."""
    if scenario.training.grad_clip != "local_scale":
        return 0.0
    return CLIP_NORM_BYTES + 2 * CLIP_NORM_BYTES
