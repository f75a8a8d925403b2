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


@pytest.mark.parametrize(
    "fused, expected",
    [
        # Megatron's _VocabParallelCrossEntropy.forward: all_reduce(logits_max, MAX), then
        # all_reduce(predicted_logits), then all_reduce(sum_exp_logits), one fp32 per token each
        (False, {"loss_tp_max": 1, "loss_tp_target": 1, "loss_tp_sum_exp": 1}),
        # Megatron-Core fused_vocab_parallel_cross_entropy: the max, then the two sums concatenated
        (True, {"loss_tp_max": 1, "loss_tp_sums": 2}),
    ],
)
def test_vocab_parallel_loss_all_reduces_one_fp32_per_token(fused, expected):
    tokens = 2 * 2048
    comms = [s for s in _builder(tp=4, fused_cross_entropy=fused).head("F") if s.name.startswith("loss_tp")]
    assert {c.name: c.nbytes / (4 * tokens) for c in comms} == expected
    assert all(c.group == "tp" and c.op == "all_reduce" and not c.overlap for c in comms)
    # blocking, after the logits exist: nothing to reduce before the LM head's GEMM
    names = [s.name for s in _builder(tp=4, fused_cross_entropy=fused).head("F")]
    assert names.index("lm_head") < names.index("loss_tp_max")


def test_native_and_te_cross_entropy_traffic_and_collectives():
    """Megatron-Core's native fused loss compiled whole: the fp32 upcast with the max (1.5 L),
    subtract-exp-sum materialised in a fresh buffer and copied back (4 L), the in-place divide
    (2 L), backward the scatter and scale materialised and copied back with the 16-bit cast
    (4.5 L) (megatron/core/fusions/fused_cross_entropy.py; its later rewrite's note: "a full
    logits-sized transient allocation plus an extra read/write pass"). TransformerEngine's
    parallel_cross_entropy: the online softmax reads the 16-bit logits, the loss kernel reads
    them again and writes the gradient over them, backward scales it in place; its all-gather
    carries each rank's (max, sum, target logit), three fp32 per token."""
    tokens = 2 * 2048
    logits_fp32 = tokens * 51200 / 4 * 4
    native = _builder(tp=4, fused_cross_entropy="native")
    assert (native._cross_entropy_bytes("F"), native._cross_entropy_bytes("B")) == pytest.approx(
        (7.5 * logits_fp32, 4.5 * logits_fp32)
    )
    te = _builder(tp=4, fused_cross_entropy="te")
    logits_16 = tokens * 51200 / 4 * 2
    assert (te._cross_entropy_bytes("F"), te._cross_entropy_bytes("B")) == pytest.approx((3 * logits_16, 2 * logits_16))
    [gather] = [s for s in te.head("F") if s.name.startswith("loss_tp")]
    assert (gather.op, gather.nbytes, gather.overlap) == ("all_gather", 3 * 4 * tokens * 4, False)
    assert [s.name for s in native.head("F") if s.name.startswith("loss_tp")] == ["loss_tp_max", "loss_tp_sums"]
    # the loss's share of the head: unfused > native > te > one kernel
    builders = [_builder(tp=4, fused_cross_entropy=m) for m in (False, "native", "te", True)]
    costs = [compute_seconds(b.head("F") + b.head("B")) for b in builders]
    assert costs == sorted(costs, reverse=True) and len(set(costs)) == 4


def test_loss_reduces_nothing_without_tp_or_in_backward():
    assert not [s for s in _builder(tp=1).head("F") if s.name.startswith("loss_tp")]
    tp4 = _builder(tp=4)
    for phase in ("B", "W"):
        assert not [s for s in tp4.head(phase) if s.name.startswith("loss_tp")]


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


def test_alibi_adds_the_bias_copy_and_its_read_to_the_unfused_forward():
    """Megatron-DeepSpeed's ALiBi (bigscience-workshop/Megatron-DeepSpeed transformer.py:
    ``torch.baddbmm(alibi[...], q, k^T, beta=1.0, ...)`` on the [b*np, 1, sk] bias): PyTorch
    copies the broadcast bias into the [b*np, sq, sk] scores before the GEMM (ATen
    ``common_checks_baddbmm_bmm``: ``result.copy_(self)`` when beta != 0) and the GEMM reads
    them as C: 2 + 2 bytes per fp16 score, here 32 x 2048^2 x 4 B = 536.9 MB, one more kernel;
    the backward is unchanged (the bias takes no gradient)."""
    from simcluster.parallelism.attention_time import ALIBI_BIAS_PASSES

    assert ALIBI_BIAS_PASSES == 2
    learned = _builder(flash_attention=False)
    alibi = layer_builder(
        {
            "model": {**GPT, "position": "alibi", "max_positions": None},
            "cluster": {"hardware": "dgx-a100", "gpus": 1},
            "training": {"seq_len": 2048, "micro_batch": 2, "global_batch": 2, "precision": "fp16", "flash_attention": False},
        }
    )
    n, s = 2 * 16, 2048
    assert n * s * s * 4 == 536_870_912
    added = alibi.attention_core("F") - learned.attention_core("F")
    assert added == pytest.approx(learned.km.memory(536_870_912))
    assert alibi.attention_core("B") == pytest.approx(learned.attention_core("B"))
    # a fused kernel takes the bias inside: nothing added
    flash = layer_builder(
        {
            "model": {**GPT, "position": "alibi", "max_positions": None},
            "cluster": {"hardware": "dgx-a100", "gpus": 1},
            "training": {"seq_len": 2048, "micro_batch": 2, "global_batch": 2, "precision": "fp16"},
        }
    )
    assert flash.attention_core("F") == pytest.approx(_builder().attention_core("F"))


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


@pytest.mark.parametrize("tp", [1, 4])
def test_weight_gradients_are_added_into_fp32_main_grads_every_microbatch(tp):
    """Megatron's gradient_accumulation_fusion (apex wgrad_gemm_accum_fp32: beta = 1 on the fp32
    main_grad) reads and writes the fp32 gradient in the GEMM's epilogue instead of writing 16
    bits: 4 + 4 - 2 = 6 B per parameter per microbatch beyond the GEMM's own write; an in-place
    add (main_grad.add_(grad), nanotron's fp32 accumulator) reads the 16-bit gradient and the
    fp32 one and writes the fp32 one: 2 + 4 + 4 = 10 B. A 16-bit accumulated gradient costs 6 B
    unfused (autograd's add reads both 16-bit gradients and writes one) and 2 B fused (the
    epilogue reads the gradient it writes). A GPT layer holds 4h^2 (attention) + 2*h*ffn (MLP)
    weights, split over tp."""
    with_main = _builder(tp=tp)
    without = _builder(tp=tp, fp32_grad_accum=False)
    fused16 = _builder(tp=tp, fp32_grad_accum=False, grad_accum_fusion=True)
    fused32 = _builder(tp=tp, grad_accum_fusion=True)
    h, ffn = 2048, 8192
    params = (4 * h * h + 2 * h * ffn) / tp
    hbm = 2.039e12 * 0.85  # dgx-a100: datasheet HBM x efficiency.hbm
    extra = compute_seconds(with_main.layer(0, "W")) - compute_seconds(without.layer(0, "W"))
    assert extra == pytest.approx(params * (10 - 6) / hbm)
    saved = compute_seconds(without.layer(0, "W")) - compute_seconds(fused16.layer(0, "W"))
    assert saved == pytest.approx(params * (6 - 2) / hbm)
    fused_extra = compute_seconds(fused32.layer(0, "W")) - compute_seconds(fused16.layer(0, "W"))
    assert fused_extra == pytest.approx(params * (6 - 2) / hbm)
    # the forward and input-gradient passes do not touch the main gradients
    for phase in ("F", "B"):
        assert compute_seconds(with_main.layer(0, phase)) == compute_seconds(without.layer(0, phase))
    # the LM head's weight (vocab/tp x h) accumulates the same way
    head = compute_seconds(with_main.head("W")) - compute_seconds(without.head("W"))
    assert head == pytest.approx(51200 / tp * h * (10 - 6) / hbm)


@pytest.mark.parametrize("tp", [1, 4])
def test_embedding_gradient_is_added_in_place_even_with_gemm_fusion(tp):
    """The token embedding's backward scatters its token gradients into a dense 16-bit
    (vocab/tp x h) gradient; no GEMM produces it, so gradient_accumulation_fusion cannot fold it
    into main_grad and Megatron-Core's backward hook adds it in place
    (main_grad.add_(param.grad)): 10 B per table entry into fp32 main gradients (the 16-bit and
    fp32 gradients read, the fp32 one written), 6 B into 16-bit ones (two 16-bit reads, one
    write), fused or not."""
    table = 51200 / tp * 2048  # the GPT test model's vocab/tp x hidden
    hbm = 2.039e12 * 0.85  # dgx-a100: datasheet HBM x efficiency.hbm

    def accumulate(**training) -> float:
        (seg,) = _builder(tp=tp, **training).embedding("W")
        return dict(seg.work.parts)["grad_accum"]

    for fused in (False, True):
        assert accumulate(grad_accum_fusion=fused) == pytest.approx(table * 10 / hbm)
        assert accumulate(grad_accum_fusion=fused, fp32_grad_accum=False) == pytest.approx(table * 6 / hbm)
    # DeepSpeed's BF16_Optimizer casts it before adding, like every other gradient
    assert accumulate(grad_accum_cast=True) == pytest.approx(table * 18 / hbm)


def test_deepspeed_bf16_optimizer_casts_then_adds_every_microbatch():
    """DeepSpeed's BF16_Optimizer.update_hp_grads runs hp_grad.add_(lp.grad.to(fp32)) after each
    microbatch's backward: the cast reads 2 B and writes a 4 B temporary, the add reads 4 + 4 B
    and writes 4 B: 18 B per parameter, 8 more than an in-place add (10 B)."""
    h, ffn = 2048, 8192
    params = 4 * h * h + 2 * h * ffn
    hbm = 2.039e12 * 0.85
    cast = _builder(grad_accum_cast=True)
    plain = _builder()
    extra = compute_seconds(cast.layer(0, "W")) - compute_seconds(plain.layer(0, "W"))
    assert extra == pytest.approx(params * (18 - 10) / hbm)
    # a fused epilogue has no 16-bit gradient to cast
    fused = _builder(grad_accum_cast=True, grad_accum_fusion=True)
    assert compute_seconds(fused.layer(0, "W")) == compute_seconds(_builder(grad_accum_fusion=True).layer(0, "W"))


def test_fp32_training_has_no_separate_main_grad():
    fp32 = _builder(precision="fp32")
    off = _builder(precision="fp32", fp32_grad_accum=False)
    assert compute_seconds(fp32.layer(0, "W")) == compute_seconds(off.layer(0, "W"))


def test_expert_weight_gradients_accumulate_for_the_local_experts():
    """Mixtral 8x7B (h 4096, expert ffn 14336, SwiGLU, 8 experts, router 4096 x 8) with ep 8: one
    local expert's 3 x h x ffn weights plus the router are added into fp32 per microbatch (10 B
    per parameter in place against 6 B for an unfused 16-bit add)."""
    def builder(**training):
        return layer_builder(
            {
                "model": {"preset": "mixtral-8x7b"},
                "cluster": {"hardware": "dgx-h100", "gpus": 8},
                "parallel": {"ep": 8, "dp": 8},
                "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 8, **training},
            }
        )

    with_main, without = builder(), builder(fp32_grad_accum=False)
    h, ffn = 4096, 14336
    params = 3 * h * ffn + h * 8
    hbm = 3.35e12 * 0.85  # dgx-h100
    mlp = [s for s in with_main.layer(0, "W") if s.name == "experts"]
    mlp_off = [s for s in without.layer(0, "W") if s.name == "experts"]
    assert compute_seconds(mlp) - compute_seconds(mlp_off) == pytest.approx(params * (10 - 6) / hbm)
