"""Megatron-Core's fine-grained activation offloading (``training.offload_modules``): which bytes
of a layer's stash each named module sends to host memory.

Read by a research helper (session 97) in NVIDIA/Megatron-LM
``megatron/core/pipeline_parallel/fine_grained_activation_offload.py`` and its call sites
(``transformer_layer.py``, ``attention.py``, ``moe/experts.py``; pull requests 1912/1913, 3219,
3697): each named module's forward runs under autograd's ``saved_tensors_hooks``, and what it
saves for its backward (tensors of at least ``min_offloaded_tensor_size`` elements,
``training.offload_min_elements``, 1 Mi by default, each tensor counted on its own, e.g. Q, K
and V apart; in the dtype saved: an FP8 cast stays FP8) is copied to pinned host memory on one
device-to-host stream once the module's forward is done; the compute stream does not wait for the copy. In the backward each group's
copy back runs on one host-to-device stream one group ahead, and the group's backward waits for
its own. The last layer of the chunk whose backward comes next stays on the GPU ("to make sure
the reloading won't block the main stream"); the model keeps every chunk's last layer.

What each name moves, in the terms :func:`simcluster.memory.layer_activation_bytes` counts:

- ``expert_fc1``: the routed experts' input (the permuted tokens, ``linear_fc1``'s saved input);
- ``moe_act``: the routed experts' activation input (``fc1_output``, also under its recomputation);
- ``core_attn``: the attention kernel's Q, K and V (not its output); nothing where it is recomputed;
- ``attn_proj``: the output projection's input, the attention output (Megatron-Core asserts
  ``core_attn`` with it: that tensor is the attention's output too);
- ``mlp_norm``: a MoE layer's pre-MLP norm input (a dense layer's norm is fused into its first
  linear in TransformerEngine's spec: an ``IdentityOp``, nothing to move);
- ``attn_norm``: the input norm's input where the norm is a module of its own (multi-latent
  attention, whose two down projections share it), else nothing;
- ``qkv_linear``: the QKV linear's saved tensors: its fused norm's input (not with multi-latent
  attention) and its own GEMM input.

Shared experts, whose inputs no upstream name covers, stay; so do fully recomputed layers and
torchtitan's op-level checkpoints, whose modules save nothing of their own. The memory counts one
layer's moved bytes in flight, as for the whole-layer offload: where the copy stream falls behind
a forward (a warm-up of many microbatches over a slow link) the tensors waiting for it are still
on the GPU (``record_stream``), which Megatron-Core can bound with
``fine_grained_offloading_max_inflight_offloads`` (``training.offload_max_inflight``: the compute
then waits for older copies; its default, None, never waits). The memory walk does not count that
backlog (it follows the copies' timing); the engine measures it (:mod:`simcluster.engine.offload`)
and ``run`` reports it.
"""

from __future__ import annotations

from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.scenario import TrainingSection
from simcluster.stash_basis import StashBasis


def layer_module_bytes(
    model: ModelSpec, layout: Layout, training: TrainingSection, layer: int, position: int, routed_rows: float = 1.0
) -> dict[str, float]:
    """Bytes of one microbatch's stash for ``layer`` (at ``position`` in its chunk) that each of
    ``training.offload_modules`` moves to the host (0 where the module saves nothing there): its
    saved tensors of at least ``training.offload_min_elements`` elements (Megatron-Core's
    ``tensor_need_offloading_checker``: ``tensor.numel() < min_offloaded_tensor_size`` stays)."""
    names = training.offload_modules
    if not names or training.fully_recomputed(position) or training.recompute == "op":
        return {}
    floor = training.offload_min_elements
    tensors = _saved_tensors(model, layout, training, layer, routed_rows)
    return {name: sum(n * width for n, width in tensors[name] if n >= floor) for name in names}


def _saved_tensors(
    model: ModelSpec, layout: Layout, training: TrainingSection, layer: int, routed_rows: float
) -> dict[str, list[tuple[float, float]]]:
    """Each module's saved tensors in ``layer`` as (elements, bytes per element); none where it
    saves nothing there."""
    base = StashBasis.of(model, layout, training)
    s, b, sbh, t, e, g, rep = base.s, base.b, base.sbh, base.t, base.e, base.g, base.rep
    q_dim, k_dim, v_dim, out_dim = base.widths
    mla = model.mla is not None
    moe = model.is_moe_layer(layer)
    attention_rerun = "core_attn" in base.redo or not training.flash_attention
    attn = 1.0 if training.fp8_attention and not attention_rerun else e  # FP8 attention keeps 1-byte copies
    rows = s * model.top_k * routed_rows * b
    norm_in: list[tuple[float, float]] = [(sbh / rep, float(e))]
    return {
        "attn_norm": norm_in if mla else [],
        # the fused norm's input (not with multi-latent attention) and the QKV GEMM's own input
        "qkv_linear": ([] if mla else norm_in) + [(base.kg * sbh / rep, base.norm_out)],
        "core_attn": [] if attention_rerun else [(s * b * w / t, attn) for w in (q_dim, k_dim, v_dim)],
        "attn_proj": [] if attention_rerun else [(s * b * out_dim / t, attn)],
        "mlp_norm": norm_in if moe else [],
        "expert_fc1": [(rows * layout.etp * model.hidden / rep, g)] if moe else [],
        "moe_act": [(rows * model.up_width(model.expert_ffn) / t, base.act_in)] if moe else [],
    }


def offloaded_bytes(
    model: ModelSpec,
    layout: Layout,
    training: TrainingSection,
    layer_indices: list[int],
    routed_rows: float = 1.0,
) -> dict[int, float]:
    """Layer index -> bytes of one microbatch's stash the named modules move to the host, for a
    chunk's layers in order (its last one stays on the GPU); layers moving nothing are left out."""
    out = {}
    for pos, layer in enumerate(layer_indices[:-1]):
        moved = sum(layer_module_bytes(model, layout, training, layer, pos, routed_rows).values())
        if moved > 0:
            out[layer] = moved
    return out
