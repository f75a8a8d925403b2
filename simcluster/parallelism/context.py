"""Context parallelism: ring attention with load-balanced causal chunks.

Each rank holds 2 of the 2*cp sequence chunks (chunk i and 2cp-1-i), so every rank does the same
causal work. KV blocks travel around the cp ring in cp-1 steps, each overlapped with the
attention of the block already present (Liu et al. 2023 Ring Attention; Megatron-Core CP).
Backward passes KV and dKV (twice the bytes).
"""

from __future__ import annotations

from simcluster.parallelism.segments import Comm, Compute, Segment, Work
from simcluster.parallelism.shapes import Shapes


def kv_bytes(shapes: Shapes) -> float:
    """K and V of this rank's tokens: 2 * tokens * kv_dim * bytes / tp."""
    m = shapes.model
    kv_dim = m.kv_heads * m.d_head
    if m.mla is not None:
        kv_dim = m.mla.kv_lora_rank + m.mla.qk_rope_head_dim  # the compressed latent is exchanged
        return shapes.tokens * kv_dim * shapes.elt
    return 2.0 * shapes.tokens * kv_dim * shapes.elt / shapes.layout.tp


def ring_attention(shapes: Shapes, attention_seconds: float, backward: bool, layer: int) -> list[Segment]:
    """The attention core as cp blocks with cp-1 overlapped KV exchanges."""
    cp = shapes.layout.cp
    if cp == 1:
        return [Compute.of("attn_core", Work.of(attention=attention_seconds), layer)]
    step_bytes = kv_bytes(shapes) * (2 if backward else 1)
    block = Work.of(attention=attention_seconds / cp)
    out: list[Segment] = []
    for _ in range(cp - 1):
        out.append(Comm("cp_kv", "cp", "send_recv", step_bytes, True, layer))
        out.append(Compute.of("attn_core", block, layer))
    out.append(Compute.of("attn_core", block, layer))
    return out
