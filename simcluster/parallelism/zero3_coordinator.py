"""DeepSpeed ZeRO-3's parameter coordinator and gradient bucket, at the engine's unit granularity.

DeepSpeed fetches parameters per submodule as its hooks reach them and prefetches along the
module trace it recorded in the first step (``deepspeed/runtime/zero/
partitioned_param_coordinator.py``, ``PartitionedParameterCoordinator.fetch_sub_module``): the
submodule's own parameters, then up to ``stage3_prefetch_bucket_size`` elements ahead (whole
parameters, at least one), cut to what keeps at most ``stage3_max_live_parameters`` gathered.
After a submodule runs, its parameters are released unless the trace uses them again within
``stage3_max_reuse_distance`` elements (``__params_to_release``), which keeps the last layers of
the forward gathered for their backward. Parameters of at most
``stage3_param_persistence_threshold`` elements are never partitioned for compute
(``parameter_offload.py`` ``mark_persistent_parameters``: ``ds_numel <= threshold``): gathered
once, held whole beside their shard. Gradients are copied into one contiguous buffer of
``reduce_bucket_size`` elements, allocated whole for the run (``stage3.py``:
``torch.empty(reduce_bucket_size)`` with ``contiguous_gradients``, its default), and
reduce-scattered when the next gradient would overflow it (``__add_grad_to_ipg_bucket``).

The engine gathers a layer at a time (a unit), so the sliding window is modelled as its timing
allows: a unit is gathered in the coordinator's calls (``gather_calls``: whole tensors coalesced
until a call holds the window, one collective each, in order), the next unit's issued with the
current one's when the window and the live limit leave room for any of it (a prefetch of 5e7
elements reaches into the next layer as the current one's last submodules run), while the
memory counts what DeepSpeed holds: the largest tensor being computed and the window, not two
whole layers (``working_bytes``). NOT MODELLED: the host's Python time of each submodule's
fetch and release hooks.
"""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.parallelism.data import param_bytes, unit_params, unit_tensors
from simcluster.parallelism.zeropp import secondary_bytes
from simcluster.placement import Chunk
from simcluster.scenario import Scenario


def knob(value: int | str | None) -> int | None:
    """A ZeRO-3 size as the model reads it: ``auto`` is filled in by ``context.build_context``
    before any plan is made."""
    if isinstance(value, str):
        raise UserError("zero3", f"'{value}' is resolved with the model; build the scenario's context first")
    return value


def coordinated(scenario: Scenario) -> bool:
    """Whether ZeRO-3 runs DeepSpeed's coordinator (its prefetch window is set: ``framework:
    deepspeed`` sets DeepSpeed's defaults) rather than FSDP's one-unit prefetch."""
    return scenario.parallel.zero == 3 and scenario.zero3.prefetch_bucket_size is not None


def check(scenario: Scenario) -> None:
    """One-line errors for ZeRO-3 settings of two different engines written together:
    DeepSpeed's coordinator (``zero3.prefetch_bucket_size`` set, as ``framework: deepspeed``
    does) keeps its parameters as views of its own flat buffers, so PyTorch FSDP's buffer modes
    (``zero3.buffers`` copies or flat) do not exist beside it; and FSDP1's HYBRID_SHARD has no
    ``set_requires_all_reduce`` (FSDP2's ``FSDPModule`` API): its ``no_sync`` skips the
    reduce-scatter too, so its replicas all-reduce at every synchronised microbatch."""
    z = scenario.zero3
    if coordinated(scenario) and z.buffers != "views":
        raise UserError(
            "zero3.buffers",
            f"'{z.buffers}' is PyTorch FSDP's, but DeepSpeed's ZeRO-3 coordinator is set "
            "(zero3.prefetch_bucket_size, framework: deepspeed); drop zero3.buffers, or the "
            "coordinator's settings for FSDP",
        )
    if scenario.parallel.zero == 3 and z.buffers == "flat" and z.replica_all_reduce == "last_microbatch":
        raise UserError(
            "zero3.replica_all_reduce",
            "last_microbatch is FSDP2's set_requires_all_reduce(False), which FSDP1 (zero3.buffers: "
            "flat) does not have; drop it (every_microbatch) or use FSDP2 (zero3.buffers: copies)",
        )


def small_tensors(model: ModelSpec, layout: Layout, layer: int) -> list[float]:
    """Elements on one GPU of each small parameter tensor of a unit (-1 embedding, -2 LM head):
    the norms' weights and biases (each ``hidden`` wide, whole on every TP rank), per-head query
    and key norms, MLA's latent norms, the linears' biases (column-parallel ones split over tp,
    the row-parallel output biases whole: Megatron's ``RowParallelLinear`` adds its bias after
    the reduction), a router and its bias, Qwen2-MoE's shared-expert gate (one h-wide row), the
    layer's ``model.bias`` parts (Qwen2's Q/K/V biases alone counted as one fused tensor, as
    Megatron's ``linear_qkv`` holds them), ``model.post_norms`` (Gemma 2's output norm after
    each block) and ``model.attention_sinks`` (gpt-oss's per-head logits); BLOOM's embedding
    norm and an LM head's bias (vocab-parallel) with the embedding and the head. Everything
    else is a matrix far above any threshold; the parts add up to the layer's parameters less
    its matrices."""
    h, t = model.hidden, layout.tp
    norm = [float(h)] * model.norm_tensors
    if layer == -1:
        return list(norm) if model.embedding_norm else []
    if layer == -2:
        return list(norm) + ([model.vocab / t] if model.has_bias("lm_head") else [])
    return _layer_norms(model, t, norm) + _layer_biases(model, t, layer)


def _layer_norms(model: ModelSpec, t: int, norm: list[float]) -> list[float]:
    """A layer's norm weights (and biases), its attention sinks among them, in module order."""
    out = list(norm)  # the attention's input norm
    if model.post_norms:
        out += norm  # its output norm (model.post_norm_params)
    if model.mla is not None:
        out += [float(model.mla.kv_lora_rank)] + ([float(model.mla.q_lora_rank)] if model.mla.q_lora_rank else [])
    if model.qk_norm == "shared":  # q_norm's and k_norm's head_dim weights (and biases)
        out += [float(model.d_head)] * (model.qk_norm_params() // model.d_head)
    elif model.qk_norm_params():  # a weight per channel of Q and of K, split with the heads
        out += [model.heads * model.d_head / t, model.kv_heads * model.d_head / t]
    if model.attention_sinks:
        out.append(model.heads / t)  # gpt-oss's sinks, one per query head, split with the heads
    if not model.shared_norm:
        out += norm + (norm if model.post_norms else [])  # the MLP's, and its output norm
    return out


def _layer_biases(model: ModelSpec, t: int, layer: int) -> list[float]:
    """A layer's linear biases and its router (``small_tensors``), in module order."""
    h = model.hidden
    out: list[float] = []
    if model.has_bias("qkv") and model.mla is None:
        out.append((model.heads + 2 * model.kv_heads) * model.d_head / t)  # the fused QKV's
    if model.has_bias("attn_out") and model.mla is None:
        out.append(float(h))  # the output projection's, whole after its reduction
    if model.is_moe_layer(layer):
        out.append(float(h * model.experts))  # the router's weight
        if model.has_bias("mlp"):
            out.append(float(model.experts))  # and its bias (gpt-oss's GptOssTopKRouter.bias)
        if model.shared_expert_gate:
            out.append(float(h))  # Qwen2-MoE's shared_expert_gate
    elif model.has_bias("mlp"):
        out += [model.up_width(model.ffn) / t, float(h)]  # fc1 (gate and up), fc2
    return out


def persistent_params(model: ModelSpec, layout: Layout, layer: int, threshold: int) -> float:
    """Elements of a unit's tensors that DeepSpeed keeps whole (``ds_numel <= threshold``)."""
    if threshold <= 0:
        return 0.0
    return sum(n for n in small_tensors(model, layout, layer) if n <= threshold)


def gather_calls(
    model: ModelSpec, layout: Layout, chunk: Chunk, covered: list[int], window: int, forward: bool
) -> tuple[float, ...]:
    """Dense elements of each ``all_gather_coalesced`` that gathers a unit: its tensors in the
    order ``covered`` runs them, grouped as the coordinator's prefetch takes them (whole
    parameters until a call holds ``window`` elements or more; with no window, one call per
    submodule's tensor). ``covered``: the unit's layers in execution order; a forward runs each
    layer's tensors from the QKV projection on, a backward from the MLP's output on."""
    calls: list[float] = []
    current = 0.0
    for layer in covered:
        tensors = [t.dense for t in unit_tensors(model, layout, chunk, layer) if t.dense > 0]
        for size in reversed(tensors) if forward else tensors:
            current += size
            if current >= window:
                calls.append(current)
                current = 0.0
    if current > 0:
        calls.append(current)
    return tuple(calls)


def persistent_bytes(scenario: Scenario, model: ModelSpec, layout: Layout, chunks: list[Chunk]) -> float:
    """Bytes of a stage's persistent tensors held whole beside their shards (DeepSpeed keeps
    ``param.data`` gathered and its ``ds_tensor`` partition both)."""
    threshold = knob(scenario.zero3.param_persistence_threshold) or 0
    if layout.zero != 3 or layout.zero3_pipelined or threshold <= 0:
        return 0.0
    total = sum(
        persistent_params(model, layout, layer, threshold) for ch in chunks for unit in ch.unit_layers() for layer in unit
    )
    return total * param_bytes(scenario)


def kept_units(sizes: list[float], max_reuse: int | None) -> int:
    """How many of the forward's last units stay gathered for their backward, ``sizes`` being
    each unit's parameters in forward order. A unit's next use is its backward, after the
    forward and the backward of every unit behind it: 2 x their parameters of trace later.
    ``__params_to_release`` walks the trace from the next module and keeps a parameter it meets
    before the walk has covered ``max_reuse`` elements. Unset: FSDP's rule, only the last
    unit (its backward follows at once)."""
    if max_reuse is None:
        return 1
    kept, behind = 0, 0.0
    for size in reversed(sizes):
        if 2 * behind >= max_reuse:
            break
        kept += 1
        behind += size
    return kept


def prefetch_window(scenario: Scenario, current: float) -> float:
    """Elements prefetched beside ``current`` gathered ones: whole parameters are taken while
    fewer than min(``max_live_parameters`` - ``current``, ``prefetch_bucket_size``) are in
    flight, so up to the limit plus one parameter (at most the largest tensor,
    ``current`` standing in for it); none when the limit leaves no room."""
    sc = scenario.zero3
    limit = float(knob(sc.prefetch_bucket_size) or 0)
    if sc.max_live_parameters is not None:
        limit = min(limit, sc.max_live_parameters - current)
    return limit + current if limit > 0 else 0.0


def working_bytes(scenario: Scenario, model: ModelSpec, layout: Layout, chunks: list[Chunk]) -> tuple[float, float]:
    """(parameter, gradient) bytes DeepSpeed's ZeRO-3 holds on a GPU beyond its shards.

    Parameters: the persistent tensors whole; the largest tensor being computed and the
    prefetch window beside it (:func:`prefetch_window`); at the turn from forward to backward
    the units kept for their backward (``kept_units``) instead of the one computed; ZeRO++
    hpZ's secondary partition (``zeropp.secondary_bytes``).
    Gradients: the contiguous bucket (``reduce_bucket_size`` elements in the compute dtype, or
    the largest unit without one) and the largest tensor's gradient as autograd writes it,
    before its copy into the bucket."""
    sc = scenario.zero3
    width = param_bytes(scenario)
    largest_tensor = 0.0
    kept = 0.0
    largest_unit = 0.0
    for ch in chunks:
        sizes = []
        for unit in ch.unit_layers():
            size = 0.0
            for layer in unit:
                size += sum(unit_params(model, layout, ch, layer))
                largest_tensor = max(
                    largest_tensor, *(max(x.dense, x.expert) for x in unit_tensors(model, layout, ch, layer))
                )
            sizes.append(size)
            largest_unit = max(largest_unit, size)
        n = kept_units(sizes, sc.max_reuse_distance)
        kept = max(kept, sum(sizes[len(sizes) - n :]))
    # zero3.prefetch false fetches nothing ahead (the engine's _zero3_gather), as a window of 0
    window = prefetch_window(scenario, largest_tensor) if scenario.zero3.prefetch else 0.0
    gathered = max(largest_tensor, kept) + window
    persistent = persistent_bytes(scenario, model, layout, chunks)
    params = persistent + gathered * width + secondary_bytes(scenario, model, layout, chunks, persistent)
    # beside FSDP2's one reduction in flight (dp.wait_reduction) the engine reduces each unit
    # on its own and the bucket is never filled (dp_ops._zero3_post_backward, the inert note)
    cap = None if scenario.wait_reduction else knob(sc.reduce_bucket_size)
    bucket = largest_unit if cap is None else float(cap)
    grads = (bucket + largest_tensor) * width
    return params, grads
