"""Bytes and widths of the activations a layer keeps: per element by precision, and per token
of the attention's Q, K, V and output (used by :mod:`simcluster.memory` and
:mod:`simcluster.module_offload`)."""

from __future__ import annotations

from simcluster.model import ModelSpec


def act_bytes(precision: str) -> int:
    """Bytes per stored activation element (fp8 training keeps bf16 activations)."""
    return 4 if precision == "fp32" else 2


def gemm_input_bytes(precision: str) -> float:
    """Bytes per stored element of a linear layer's input, kept for its weight gradient.

    FP8 training (TransformerEngine) keeps the FP8 copy it cast for the forward GEMM (the
    transposed one the weight-gradient GEMM reads), 1 byte, instead of the 16-bit input;
    NVFP4 its columnwise NVFP4 copy, 4 bits plus an E4M3 scale per 16 values.
    """
    if precision == "fp8":
        return 1.0
    if precision == "nvfp4":
        return 0.5 + 1 / 16
    return act_bytes(precision)


def attention_widths(model: ModelSpec) -> tuple[int, int, int, int]:
    """Widths per token (all heads) of the Q, K and V the attention kernel reads and of its
    output, the output projection's input. GQA's K and V have kv_heads heads; MLA's are
    decompressed to every head, its keys with the shared rotary part broadcast
    (``qk_nope_head_dim + qk_rope_head_dim`` each, as its queries) and its values
    ``v_head_dim`` wide. The output is heads x the value head width, which need not be the
    hidden size (Qwen3, Llama 4, DeepSeek's MLA)."""
    if model.mla is not None:
        m = model.mla
        qk = model.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        v = model.heads * m.v_head_dim
        return qk, qk, v, v
    kv = model.kv_heads * model.d_head
    return model.heads * model.d_head, kv, kv, model.heads * model.d_head
