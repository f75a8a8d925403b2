"""Host time of unpacking ZeRO's gathered parameters tensor by tensor (``dp.param_unpack``).

Megatron's distributed optimizer and DeepSpeed all-gather the updated parameters straight
into the contiguous buffer the model's tensors are views of: one collective, nothing to copy.
nanotron's ZeRO-1 does not (``optim/zero.py`` ``_all_gather_params`` and
``distributed.py`` ``all_gather_coalesced``): it builds, in Python, the slice of every
parameter tensor that each DP rank owns, flattens each rank's slices into a buffer, all-gathers
the buffers, and copies every rank's piece of every tensor back with one ``copy_`` each. The
GPU work per piece is tiny; what costs is the host issuing two eager ops per (tensor, rank)
pair, so the step waits ``2 x tensors x dp`` op-issue times after the all-gather. At dp 128 on
a stage of 170 tensors that is 43,520 ops, about 0.17 s at 4 us each; at dp 8, 11 ms.

The op-issue time is the profile's ``efficiency.kernel_launch_us``, which ``calibrate``
measures as a one-element add issued from Python (host dispatch and launch included). The two
C++ passes (``_flatten_dense_tensors``/``_unflatten_dense_tensors``: a view per piece) are left
out; on CPU tensors here they cost one to two microseconds per piece with the copying they do,
so the model errs low. The whole loop on CPU tensors took 6-7 us per (tensor, rank) pair here,
before any CUDA launch.
"""

from __future__ import annotations

from simcluster.model import ModelSpec
from simcluster.placement import Chunk

#: eager ops the host issues per (parameter tensor, DP rank) pair: zero.py's slice of the
#: tensor for that rank, and all_gather_coalesced's copy_ of the gathered piece back into it
OPS_PER_PIECE = 2


def attention_linears(model: ModelSpec) -> int:
    """Weight matrices of one layer's attention: the fused QKV and the output projection, or
    MLA's q (q_a and q_b with a query LoRA rank), kv_a, kv_b and the output projection."""
    if model.mla is not None:
        return (2 if model.mla.q_lora_rank else 1) + 3
    return 2


def mlp_tensors(model: ModelSpec) -> int:
    """Parameter tensors of one MLP (or one expert): fc1 (gate and up fused for SwiGLU) and fc2,
    and their biases."""
    return 2 * (2 if model.has_bias("mlp") else 1)


def layer_tensors(model: ModelSpec, index: int) -> int:
    """Parameter tensors of one transformer layer as the frameworks hold them (QKV and the
    gated MLP's gate/up fused into one weight each, as nanotron, Megatron and HF Llama-style
    fused implementations do; a LayerNorm is a weight and a bias; Gemma's output norms,
    ``post_norms``, two more)."""
    norm = model.norm_tensors * (2 if model.post_norms else 1)
    if model.mla is not None:
        # the linears, kv_a's norm and q_a's (with a query LoRA rank)
        attention = attention_linears(model) + (2 if model.mla.q_lora_rank else 1)
    else:
        # fused QKV, output projection, and their biases (Qwen2's on the QKV alone)
        attention = attention_linears(model) + sum(1 for part in ("qkv", "attn_out") if model.has_bias(part))
    # q_norm and k_norm (a weight each; and a bias each with a biased LayerNorm, shared)
    attention += model.qk_norm_params() // model.d_head if model.qk_norm == "shared" else (2 if model.qk_norm_params() else 0)
    mlp = mlp_tensors(model)
    if model.is_moe_layer(index):
        # router, shared experts (and Qwen2-MoE's gate), routed experts as one stacked fc1/fc2
        # pair (Megatron's legacy GroupedMLP; Megatron-Core's per-expert tensors are
        # step_tail.stage_tensor_split's)
        mlp = 1 + model.shared_experts * mlp + mlp + (1 if model.shared_expert_gate else 0)
    return 2 * norm + attention + mlp


def chunk_tensors(model: ModelSpec, chunk: Chunk, embedding_on_stage: bool) -> int:
    """Parameter tensors a chunk holds; a tied LM head is the embedding's own tensor when the
    embedding sits on the same stage, its separate copy otherwise."""
    count = sum(layer_tensors(model, i) for i in chunk.layer_indices)
    if chunk.embedding:
        count += 1 + (1 if model.position == "learned" else 0) + (model.norm_tensors if model.embedding_norm else 0)
    if chunk.head:
        count += model.norm_tensors + (1 if model.has_bias("lm_head") else 0)  # final norm, head bias
        if not (model.tied_embeddings and embedding_on_stage):
            count += 1
    return count


def stage_tensors(model: ModelSpec, chunks: list[Chunk]) -> int:
    """Parameter tensors one pipeline stage holds over all its chunks."""
    embedding_here = any(c.embedding for c in chunks)
    return sum(chunk_tensors(model, c, embedding_here) for c in chunks)


def unpack_seconds(tensors: int, group: int, op_seconds: float) -> float:
    """Host seconds of unpacking a gather of ``tensors`` tensors over ``group`` ranks."""
    if group <= 1:
        return 0.0  # nanotron returns early: nothing to gather
    return OPS_PER_PIECE * tensors * group * op_seconds
