"""How long a parameter's 16-bit gradient lives beside its main gradient (``training.grad_16bit_freed``).

Autograd writes each weight gradient as a 16-bit ``.grad``; a framework that accumulates the
microbatches into a separate main gradient (fp32, or Megatron's 16-bit ``main_grad`` under
fp16) frees that ``.grad`` at a framework-specific moment, which decides whether it is part of
the step's persistent memory or a transient on top of the stash:

- ``add``: right after adding it. Megatron-LM's local DDP (2021: ``_make_param_hook``,
  ``param.main_grad.add_(param.grad.data)`` then "Now we can deallocate grad memory",
  ``param.grad = None``) and Megatron-Core's ``DistributedDataParallel._make_backward_post_hook``
  (the same two lines, skipped for parameters whose weight-gradient GEMM already wrote
  ``main_grad``: ``gradient_accumulation_fusion``). The Zero Bubble fork and NeMo /
  Megatron-Bridge run Megatron-Core's hook. A PyTorch loop on fp32 parameters under autocast
  casts each 16-bit weight gradient back to fp32 into ``.grad`` the same way, one tensor at a
  time. Kept: the main gradient alone; transient: one parameter's 16-bit gradient.
- ``backward``: once the microbatch's whole backward is done. nanotron's
  ``FP32GradientAccumulator.backward`` runs ``loss.backward()`` and only then, for every
  parameter, ``fp32_grad.add_(half_param.grad)`` and ``half_param.grad = None``
  (optim/gradient_accumulator.py; its pipeline engine calls it once per microbatch). Kept: the
  fp32 buffer; transient: the chunk's 16-bit gradients, all alive at its backward's end.
- ``step``: kept across microbatches. DeepSpeed's pipeline engine with the BF16_Optimizer calls
  ``clear_lp_grads()`` (``param.grad = None``) just before each backward and
  ``update_hp_grads(clear_lp_grads=False)`` after it (runtime/pipe/engine.py
  ``_exec_backward_pass``), so the bf16 gradients of the last backward live through the
  following forwards, where the stash peaks, beside the fp32 ``fp32_groups_gradients_flat``;
  ``BF16_Optimizer.backward`` (the last stage, and runs without a pipeline) likewise clears them
  before ``loss.backward()`` and leaves them after. Kept: both, 2 + 4 bytes per parameter.
  (Later DeepSpeed releases can add and free each gradient in a hook instead,
  ``bfloat16_immediate_grad_update``: ``add``; not dated here.)

Where the weight-gradient GEMM accumulates into the main gradient itself
(``training.grad_accum_fusion``) no 16-bit gradient exists for the linear layers; the word
embedding (``VocabParallelEmbedding`` has no fused weight gradient) and the norms still make
one. Norm weights and biases are left out of ``add``'s one-tensor transient (``h`` elements
each; ``backward`` counts every parameter of the chunk).
"""

from __future__ import annotations

from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.placement import Chunk
from simcluster.scenario import TrainingSection

GRAD_16BIT = 2.0  # bytes of a 16-bit gradient element (bf16 / fp16; FP8 GEMMs write bf16 wgrads)


def separate_16bit_grad_kept(layout: Layout, training: TrainingSection) -> bool:
    """Whether a 16-bit ``.grad`` persists beside a separate fp32 main gradient all step (the
    static memory's 2 B more per parameter): ``step``, with fp32 accumulation and no fusion,
    below ZeRO-3 (whose unsharded gradients live only until their reduce-scatter, counted as
    ``zero3_working_bytes``; DeepSpeed's ZeRO-3 frees each ``.grad`` once partitioned)."""
    return (
        layout.zero != 3
        and training.precision != "fp32"
        and training.fp32_grad_accum
        and not training.grad_accum_fusion
        and training.grad_16bit_freed == "step"
    )


def _transient_applies(layout: Layout, training: TrainingSection) -> bool:
    """Whether the 16-bit gradients are transients counted here: not under ZeRO-3 (its unsharded
    gradients before the reduce-scatter are ``zero3_working_bytes``), not in fp32 training, and
    only where a separate accumulator exists (``add`` always has Megatron's ``main_grad``;
    without fp32 accumulation nanotron's and DeepSpeed's ``.grad`` is itself the accumulator)."""
    if layout.zero == 3 or training.precision == "fp32":
        return False
    if training.grad_16bit_freed == "add":
        return True
    return training.grad_16bit_freed == "backward" and training.fp32_grad_accum


def _largest_layer_tensor(model: ModelSpec, layout: Layout, chunk: Chunk) -> float:
    """Elements of the largest weight tensor of the chunk's transformer layers on one GPU:
    the fused QKV (MLA: the Q or KV up-projection), the output projection or the fused fc1
    (gate + up; fc2 is never larger), each over tp; a routed expert's own fc1 over the expert
    TP group (TransformerEngine's GroupedLinear keeps one weight per expert), the shared
    experts' fused fc1 over tp. Sharded as the memory model shards them (``stage_params``:
    every attention weight over tp, MLA's down-projections included, which Megatron-Core's
    TELinear builds ``duplicated``: whole, they stay below each layer's fc1, dense or routed,
    in DeepSeek-V2-Lite and V3 at tp <= 8, so the maximum is the same)."""
    t = layout.tp
    h = model.hidden
    if model.mla is not None:
        m = model.mla
        a = model.heads
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q_in = m.q_lora_rank or h
        attn = max(q_in * a * qk, m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim), a * m.v_head_dim * h) / t
    else:
        q = model.heads * model.d_head
        kv = model.kv_heads * model.d_head
        attn = max(h * (q + 2 * kv), q * h) / t
    largest = attn
    for i in chunk.layer_indices:
        if model.is_moe_layer(i):
            largest = max(largest, h * model.up_width(model.expert_ffn) / layout.etp)
            if model.shared_experts:
                largest = max(largest, h * model.up_width(model.expert_ffn * model.shared_experts) / t)
        else:
            largest = max(largest, h * model.up_width(model.ffn) / t)
    return largest


def grad_transient_bytes(
    model: ModelSpec, layout: Layout, training: TrainingSection, chunk: Chunk, chunk_params: float
) -> tuple[float, float]:
    """(at the start, at the end of the op that computes a microbatch's weight gradients) bytes
    of 16-bit gradients one GPU holds beyond its static memory for ``chunk`` (``chunk_params``
    parameters on the GPU): the start is counted on the whole stash, the end on the stash that
    op has freed.

    ``add``: the LM head's gradient comes first in the backward (on the full stash), the
    embedding's last (once the stash is freed); a layer's largest tensor is counted at the
    start, an upper bound by that layer's freed activations. A head tied to the embedding of
    the same chunk is one parameter, whose gradient autograd adds up before the hook sees it:
    the head's is held all backward. ``backward``: every unfused parameter's gradient of the
    chunk at the end. ``step``: none (counted as static memory).
    """
    if not _transient_applies(layout, training):
        return 0.0, 0.0
    if layout.lora is not None:
        # only the adapters have gradients (the embedding and the head are frozen): under
        # ``backward`` every unfused one at the end; under ``add`` one adapter tensor at a
        # time, a few MB at most, not counted
        if training.grad_16bit_freed == "backward" and not training.grad_accum_fusion:
            return 0.0, GRAD_16BIT * chunk_params
        return 0.0, 0.0
    fused = training.grad_accum_fusion
    embedding = model.embedding_params() / layout.tp if chunk.embedding else 0.0
    if training.grad_16bit_freed == "backward":
        return 0.0, GRAD_16BIT * (embedding if fused else chunk_params)
    if fused:
        return 0.0, GRAD_16BIT * embedding
    head = model.vocab * model.hidden / layout.tp if chunk.head else 0.0
    layer = _largest_layer_tensor(model, layout, chunk) if chunk.layer_indices else 0.0
    if model.tied_embeddings and chunk.head and chunk.embedding:
        # one parameter used twice in one backward: autograd's engine keeps the head's gradient
        # in the weight's input buffer until the embedding's backward delivers the other
        # contribution, and only then runs its AccumulateGrad node (and the hook after it), so
        # the head's gradient is held through the whole backward, beside each layer's tensor
        # and, at the end, beside the embedding's own before the two are summed
        return GRAD_16BIT * (head + layer), GRAD_16BIT * (head + embedding)
    return GRAD_16BIT * max(head, layer), GRAD_16BIT * embedding
