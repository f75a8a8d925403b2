"""Kernel work of the LM head's cross-entropy and of unfused attention, counted from the code of
the frameworks they model (Megatron-LM / nanotron ``vocab_parallel_cross_entropy``; Megatron's
``CoreAttention`` with baddbmm + scale-mask-softmax + dropout + bmm)."""

from __future__ import annotations

import pytest
from engine_helpers import compute_seconds, layer_builder

from simcluster.parallelism.layer import LayerBuilder

GPT = {
    "name": "gpt-test", "layers": 4, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 51200,
    "mlp": "gelu", "norm": "layernorm", "bias": True, "position": "learned", "max_positions": 2048,
}


def _builder(tp: int = 1, **training) -> LayerBuilder:
    return layer_builder(
        {
            "model": GPT,
            "cluster": {"hardware": "dgx-a100", "gpus": tp},
            "parallel": {"tp": tp},
            "training": {"seq_len": 2048, "micro_batch": 2, "global_batch": 2, "precision": "fp16", **training},
        }
    )


@pytest.mark.parametrize("tp", [1, 4])
def test_cross_entropy_traffic_is_megatron_passes_over_fp32_logits(tp):
    b = _builder(tp=tp)
    logits_fp32 = 2 * 2048 * 51200 / tp * 4  # tokens x vocab shard x 4 B
    # forward: cast 1.5 + max 1 + sub_ 2 + exp 2 + sum 1 + div_ 2; backward: mul_ 2 + cast 1.5
    assert b._cross_entropy_bytes("F") == pytest.approx(9.5 * logits_fp32)
    assert b._cross_entropy_bytes("B") == pytest.approx(3.5 * logits_fp32)


def test_fused_cross_entropy_reads_and_writes_16_bit_logits_once():
    b = _builder(fused_cross_entropy=True)
    assert b._cross_entropy_bytes("F") == pytest.approx(2 * 2048 * 51200 * 2)
    unfused = _builder()
    assert compute_seconds(b.head("F")) < compute_seconds(unfused.head("F"))


def test_unfused_attention_computes_the_full_square_of_scores():
    """Unfused attention multiplies the whole s x s score matrix (the causal mask is applied in
    the softmax), so its batched GEMMs do 2x the FLOPs of a causal flash kernel: forward
    2 x (2 b a s^2 d) on this GPU's heads."""
    b = _builder(flash_attention=False)
    km = b.km
    n, s, d = 2 * 16, 2048, 128
    gemms = km.gemm(s, s, d, count=n) + km.gemm(s, d, s, count=n)
    scores = km.memory(5 * n * s * s * 2)
    assert b.attention_core("F") == pytest.approx(gemms + scores)
    # four batched GEMMs backward (dP, dV, dQ, dK), scores traffic twice
    bwd = 2 * km.gemm(s, d, s, count=n) + 2 * km.gemm(s, d, s, count=n) + km.memory(2 * 5 * n * s * s * 2)
    assert b.attention_core("B") == pytest.approx(bwd)
    assert b.attention_core("W") == 0.0


def test_unfused_attention_is_slower_than_flash():
    assert _builder(flash_attention=False).attention_core("F") > _builder().attention_core("F")


@pytest.mark.parametrize("flash", [False, True])
def test_selective_recompute_reruns_the_core_attention_forward_before_its_backward(flash):
    """Korthikanti et al. 2022 (arXiv 2205.05198) Sec. 5: selective recomputation checkpoints
    only the core attention; its forward reruns in backward (Megatron-Core checkpoints the fused
    kernel too). The backward of a layer gains exactly one core-attention forward, right before
    the core's backward, and nothing else changes."""
    sel = _builder(recompute="selective", flash_attention=flash)
    none = _builder(recompute="none", flash_attention=flash)
    names = [s.name for s in sel.layer(0, "B")]
    assert names.index("recompute_attn_core") == names.index("attn_core") - 1
    redo = next(s for s in sel.layer(0, "B") if s.name == "recompute_attn_core")
    assert redo.kind == "recompute"
    assert redo.seconds == pytest.approx(sel.attention_core("F"))
    assert compute_seconds(sel.layer(0, "B")) == pytest.approx(
        compute_seconds(none.layer(0, "B")) + none.attention_core("F")
    )
    assert compute_seconds(sel.layer(0, "F")) == pytest.approx(compute_seconds(none.layer(0, "F")))
