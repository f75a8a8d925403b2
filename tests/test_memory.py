"""Per-GPU memory formulas: Ultra-Scale Playbook / ZeRO paper bytes per parameter and
Korthikanti et al. 2022 (Table 2) activation bytes per layer."""

import re

import pytest

from simcluster.context import build_context
from simcluster.memory import (
    bytes_per_param,
    layer_activation_bytes,
    sharded,
    stage_params,
    static_memory,
)
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario

P = 1e9


def total(bpp):
    return bpp.params + bpp.grads + bpp.optimizer


def test_fp32_adam_16_bytes_per_param():
    # Playbook: 4P params + 4P grads + 8P Adam moments = 16 GB for 1B params.
    assert total(bytes_per_param("fp32", "adam", False)) * P == 16e9


@pytest.mark.parametrize(
    "zero, expected_gb",
    [(1, 8 + 8 / 4), (2, 4 + 12 / 4), (3, 16 / 4)],  # seed notes: 8P+8P/N, 4P+12P/N, 16P/N
)
def test_zero_stages_fp32(zero, expected_gb):
    bpp = sharded(bytes_per_param("fp32", "adam", False), zero, 4)
    assert total(bpp) * P == pytest.approx(expected_gb * 1e9)


def test_zero1_n4_is_10gb():
    assert total(sharded(bytes_per_param("fp32", "adam", False), 1, 4)) * P == pytest.approx(10e9)


def test_bf16_mixed_precision():
    # Playbook: 2P bf16 params + 2P bf16 grads + 4P fp32 grads + 12P fp32 master+moments = 20P
    assert total(bytes_per_param("bf16", "adam", True)) == 20
    assert total(bytes_per_param("bf16", "adam", False)) == 16


def test_fused_gradient_accumulation_keeps_no_16_bit_gradient():
    # Megatron gradient_accumulation_fusion / TE fuse_wgrad_accumulation: the weight-gradient
    # GEMM adds into the fp32 main_grad, so 2P bf16 params + 4P fp32 grads + 12P = 18P
    assert total(bytes_per_param("bf16", "adam", True, grad_accum_fusion=True)) == 18
    assert bytes_per_param("bf16", "adam", False, grad_accum_fusion=True).grads == 2


def test_ademamix_keeps_a_third_moment():
    """AdEMAMix (Pagliardini et al. 2024, Algorithm 1): a fast and a slow exponential average of
    the gradient and the second moment, so 4P fp32 master + 3 x 4P moments = 16P of optimizer
    state (Adam's 12P), and the update reads and writes one more fp32 moment (8 B)."""
    from simcluster.parallelism.data import optimizer_bytes_per_param

    assert bytes_per_param("bf16", "ademamix", True).optimizer == 16
    assert bytes_per_param("bf16", "adam", True).optimizer == 12
    adam = scenario_from_dict(make_scenario())
    mix = scenario_from_dict(make_scenario(training={
        "seq_len": 2048, "micro_batch": 1, "global_batch": 8, "optimizer": "ademamix"}))  # fmt: skip
    assert optimizer_bytes_per_param(mix) - optimizer_bytes_per_param(adam) == 2 * 4


def test_bf16_moments_halve_the_adam_states():
    """DeepSeek-V3 report Sec 3.3.3: AdamW's first and second moments in BF16, the master
    weights in FP32: 4P fp32 master + 2 x 2P moments = 8P of optimizer state instead of 12P;
    the update reads and writes each moment at 2 B instead of 4 B."""
    from simcluster.parallelism.data import optimizer_bytes_per_param

    assert bytes_per_param("bf16", "adam", True, moment_bytes=2.0).optimizer == 8
    fp32 = scenario_from_dict(make_scenario())
    bf16 = scenario_from_dict(make_scenario(training={
        "seq_len": 2048, "micro_batch": 1, "global_batch": 8, "optimizer_moments": "bf16"}))
    assert optimizer_bytes_per_param(fp32) - optimizer_bytes_per_param(bf16) == 2 * 2 * 2
    c32 = build_context(fp32)
    c16 = build_context(bf16)
    p = stage_params(c32.model, c32.layout, c32.chunks[0]).total
    o32 = static_memory(c32.model, c32.layout, fp32.training, stage_params(c32.model, c32.layout, c32.chunks[0]))[2]
    o16 = static_memory(c16.model, c16.layout, bf16.training, stage_params(c16.model, c16.layout, c16.chunks[0]))[2]
    assert o32 - o16 == pytest.approx(4 * p)


def _ctx(**kw):
    return build_context(scenario_from_dict(make_scenario(**kw)))


def _act(ctx):
    return layer_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training, 0)


S, B, H, A = 2048, 2, 1024, 16
SBH = S * B * H


def test_korthikanti_no_parallelism():
    ctx = _ctx(
        training={"seq_len": S, "micro_batch": B, "global_batch": 16, "flash_attention": False}
    )
    assert _act(ctx) == pytest.approx(SBH * (34 + 5 * A * S / H))


def test_korthikanti_tensor_parallel_without_sp():
    t = 4
    ctx = _ctx(
        parallel={"tp": t},
        training={"seq_len": S, "micro_batch": B, "global_batch": 4, "flash_attention": False},
    )
    assert _act(ctx) == pytest.approx(SBH * (10 + 24 / t + 5 * A * S / (H * t)))


def test_korthikanti_tp_sp():
    t = 4
    ctx = _ctx(
        parallel={"tp": t, "sequence_parallel": True},
        training={"seq_len": S, "micro_batch": B, "global_batch": 4, "flash_attention": False},
    )
    assert _act(ctx) == pytest.approx(SBH * (34 / t + 5 * A * S / (H * t)))


def test_korthikanti_tp_sp_selective():
    t = 4
    ctx = _ctx(
        parallel={"tp": t, "sequence_parallel": True},
        training={
            "seq_len": S,
            "micro_batch": B,
            "global_batch": 4,
            "recompute": "selective",
            "flash_attention": False,
        },
    )
    # 34/t sbh plus the fp32 log-sum-exp the fused kernel keeps (4*a*s*b/t bytes)
    assert _act(ctx) == pytest.approx(SBH * 34 / t + 4 * A * S * B / t)


def test_korthikanti_full_recompute():
    ctx = _ctx(training={"seq_len": S, "micro_batch": B, "global_batch": 16, "recompute": "full"})
    assert _act(ctx) == pytest.approx(2 * SBH)


def test_context_parallel_divides_sequence():
    base = _act(_ctx(training={"seq_len": S, "micro_batch": B, "global_batch": 16}))
    cp = _act(
        _ctx(parallel={"cp": 2}, training={"seq_len": S, "micro_batch": B, "global_batch": 8})
    )
    assert cp == pytest.approx(base / 2)


def test_memory_json_fields(cli):
    import json

    res = cli("memory", "llama3-8b-8xh100", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    for key in (
        "params_total",
        "params_per_gpu",
        "params_bytes",
        "grads_bytes",
        "optimizer_bytes",
        "activations_bytes",
        "total_bytes",
        "capacity_bytes",
        "fits",
        "per_stage",
    ):
        assert key in doc
    # Llama-3-8B, dp 8 ZeRO-2, bf16 mixed with fp32 grad accumulation: 2P + 4P/8 + 12P/8 (each
    # 16-bit gradient freed once added, training.grad_16bit_freed add: Megatron's DDP hook)
    p = doc["params_total"]
    assert doc["params_bytes"] == pytest.approx(2 * p)
    assert doc["grads_bytes"] == pytest.approx(4 * p / 8)
    assert doc["optimizer_bytes"] == pytest.approx(12 * p / 8)


def test_pipeline_memory_per_stage(cli):
    import json

    res = cli("memory", "llama3-70b-64xh100", "--json")
    doc = json.loads(res.out)
    assert len(doc["per_stage"]) == 4
    # 1F1B: stage 0 stashes p microbatches, the last stage one (Narayanan et al. 2021)
    acts = [s["activations_bytes"] for s in doc["per_stage"]]
    assert acts[0] > acts[1] > acts[2]


def test_the_memory_table_title_names_the_units_its_cells_are_in(cli):
    """The cells are simcluster.units.format_bytes's binary units ('4.48 GiB', '287.00 MiB'),
    not bytes: the title said '(bytes per GPU)' above cells in GiB."""
    res = cli("memory", "llama3-8b-8xh100")
    assert res.code == 0, res.err
    text = " ".join(res.out.split())  # the title wraps on a narrow terminal
    assert "bytes per GPU" not in text
    assert "(per GPU, binary units: 1 GiB = 2^30 bytes)" in text
    assert re.search(r"\d+\.\d\d GiB", res.out)  # the cells the title describes


def test_fp8_keeps_linear_inputs_as_one_byte_copies():
    """TransformerEngine keeps the FP8 copy of each linear layer's input for the weight
    gradient: 1 byte instead of 2 for the QKV, fc1 and fc2 inputs (Korthikanti's 2sbh + 2sbh +
    8sbh of a 4h GeLU MLP, halved); the rest stays 16-bit. The output projection's FP8 copy
    sits beside the 16-bit output the fused attention keeps for its own backward (TE 2.2
    FusedAttnFunc saves out_save among qkvo_tensors in 16-bit attention), one tensor in bf16
    training: 1 + 2 bytes where bf16 keeps 2."""
    training = {"seq_len": S, "micro_batch": B, "global_batch": 16}
    bf16 = _act(_ctx(training={**training, "precision": "bf16"}))
    fp8 = _act(_ctx(training={**training, "precision": "fp8"}))
    assert bf16 - fp8 == pytest.approx(SBH * (1 + 1 + 4 - 1))


# --- the loss's transient logit copies (last stage) ---------------------------------------
@pytest.mark.parametrize(
    "style, extra",
    # compiled-blocks: torchtitan's compiled blocks, its loss still eager PyTorch (train.py's
    # "TODO: compiling loss function causes CUDA errors"), so PyTorch's copies
    [("fused", 2), ("eager", 4 + 4), ("nanotron", 2 + 4), ("compiled-blocks", 4 + 4)],
)
def test_loss_holds_the_16_bit_logits_and_out_of_place_copies(style, extra):
    """Megatron's vocab_parallel_cross_entropy: .float() while the bf16 logits live, then the max
    subtracted in place (2 B per logit beyond the kept fp32 copy); nanotron's _ShardedCrossEntropy
    (sharded_logits - logits_max) writes one more fp32 tensor (+4 B) and computes its gradient
    in place in the saved softmax. PyTorch's cross_entropy: log_softmax's new fp32 output in the
    forward (2 + 4 B), and in the backward nll_loss_backward's dense fp32 gradient and
    _log_softmax_backward_data's (4 + 4 B) beside the saved output, the 16-bit logits freed
    (torchtitan's ``del pred`` before ``loss.backward()``): the backward's 8 B are the larger.
    A fused loss keeps none."""
    from simcluster.memory import loss_transient_bytes

    ctx = _ctx(parallel={"tp": 2}, training={"seq_len": S, "micro_batch": B, "global_batch": 16,
                                             "elementwise": style})  # fmt: skip
    elements = S * B * ctx.model.vocab / 2
    assert loss_transient_bytes(ctx.model, ctx.layout, ctx.scenario.training) == elements * extra
    fused = _ctx(parallel={"tp": 2}, training={"seq_len": S, "micro_batch": B, "global_batch": 16,
                                               "fused_cross_entropy": True})  # fmt: skip
    assert loss_transient_bytes(fused.model, fused.layout, fused.scenario.training) == 0.0


def test_native_fused_loss_holds_its_materialised_buffer_and_te_holds_nothing():
    """Megatron-Core's native loss compiled whole materialises each in-place update of its fp32
    logits in a fresh buffer (its rewrite's note: "a full logits-sized transient allocation"):
    beside the 16-bit logits, 4 more bytes per logit. TransformerEngine's writes the gradient
    over the 16-bit logits: nothing transient."""
    from simcluster.memory import loss_transient_bytes

    def transient(mode):
        ctx = _ctx(parallel={"tp": 2}, training={"seq_len": S, "micro_batch": B, "global_batch": 16,
                                                 "fused_cross_entropy": mode})  # fmt: skip
        return loss_transient_bytes(ctx.model, ctx.layout, ctx.scenario.training), S * B * ctx.model.vocab / 2

    native, elements = transient("native")
    assert native == elements * (2 + 4)
    assert transient("te")[0] == 0.0

    # kept for the backward: the native loss's fp32 softmax, TransformerEngine's gradient
    # written over the 16-bit logits (cross_entropy_kernel stores it in the input)
    from simcluster.memory import head_activation_bytes

    def head(mode):
        ctx = _ctx(parallel={"tp": 2}, training={"seq_len": S, "micro_batch": B, "global_batch": 16,
                                                 "fused_cross_entropy": mode})  # fmt: skip
        return head_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training)

    assert head("native") - head("te") == elements * (4 - 2)
    assert head("native") == head(False) and head("te") == head(True)


def test_the_loss_transient_is_on_the_simulated_and_the_walked_peak():
    from simcluster.engine import simulate
    from simcluster.memory import logit_elements, loss_transient_bytes
    from simcluster.memory_report import memory_summary

    # 16-bit gradients kept all step: at 1,024 tokens the LM head's gradient (V x h, 2 B),
    # freed once added under Megatron's hook, would outgrow the loss's copies (s x V, 6 B)
    training = {"seq_len": 1024, "micro_batch": 1, "global_batch": 8, "grad_16bit_freed": "step"}
    unfused = scenario_from_dict(make_scenario(training=training))
    fused = scenario_from_dict(make_scenario(training={**training, "fused_cross_entropy": True}))
    ctx = build_context(unfused)
    transient = loss_transient_bytes(ctx.model, ctx.layout, unfused.training)
    assert transient > 0
    peak = {k: simulate(sc).summary["peak_memory_bytes"]["max"] for k, sc in (("u", unfused), ("f", fused))}
    # one stage, one microbatch in flight: the loss moment is the peak, by exactly the transient
    # and what the losses keep for their backward (the fp32 softmax against the 16-bit logits a
    # fused kernel overwrites with the gradient: 4 - 2 bytes a logit)
    kept = 2.0 * logit_elements(ctx.model, ctx.layout, unfused.training)
    assert peak["u"] - peak["f"] == pytest.approx(transient + kept, rel=1e-12)
    assert memory_summary(ctx)["total_bytes"] == pytest.approx(peak["u"], rel=1e-12)
    # the summary says how much of its peak is the loss's copies
    assert simulate(unfused).summary["peak_memory_bytes"]["loss_transient"] == pytest.approx(transient)
    assert simulate(fused).summary["peak_memory_bytes"]["loss_transient"] == 0.0


def test_run_says_when_only_the_loss_does_not_fit(cli, tmp_path):
    import yaml

    from simcluster.engine import simulate
    from simcluster.memory import loss_transient_bytes

    training = {"seq_len": 1024, "micro_batch": 1, "global_batch": 8, "grad_16bit_freed": "step"}
    data = make_scenario(training=training)
    sc = scenario_from_dict(data)
    ctx = build_context(sc)
    peak = simulate(sc).summary["peak_memory_bytes"]["max"]
    transient = loss_transient_bytes(ctx.model, ctx.layout, sc.training)
    # a GPU that holds everything but half of the loss's copies
    data["cluster"]["memory_gib"] = (peak - transient / 2) / 2**30
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(data))
    res = cli("run", str(path))
    assert res.code == 0, res.err
    assert "DOES NOT FIT" in res.out and "the peak is the loss" in res.out
    assert "fused_cross_entropy" in res.out


def test_the_loss_fit_hint_names_the_kernel_the_stack_has():
    """A Megatron-Core stack keeps no fp32 copy of the logits with TransformerEngine's loss
    (--cross-entropy-fusion-impl te); elsewhere the hint is a fused kernel (true). NeMo before
    25.04 runs Megatron-Core's native fused loss, which keeps them: its hint is TE's too. A
    scenario naming no framework runs Megatron-Core's rules (frameworks/stacks.py): TE's."""
    from simcluster.fit_hints import _candidates

    training = {"seq_len": 1024, "micro_batch": 1, "global_batch": 8}
    for framework, loss, hint in (("megatron-core", False, "te"), ("nemo 25.02", "native", "te"), (None, False, "te"), ("pytorch-fsdp", False, True)):
        data = make_scenario(training=training)
        if framework:
            data["framework"] = framework
        sc = scenario_from_dict(data)
        assert sc.training.fused_cross_entropy == loss, framework
        assert dict(_candidates(build_context(sc), 1))["training.fused_cross_entropy"] == hint, framework


def test_optimizer_step_traffic_counts_each_pass_the_frameworks_run():
    """Bytes per parameter of one Adam step with fp32 master weights and moments (apex/TE
    FusedAdam: grad read 4, master r/w 8, m r/w 8, v r/w 8), the clipping norm's read of the
    fp32 gradients (4) and the copy that refreshes the 16-bit weights from the master (read 4,
    write 2; Megatron ``_copy_main_params_to_model_params``): 38. fp16 first unscales the
    gradients in place and checks them for inf/NaN (GradScaler's
    ``_amp_foreach_non_finite_check_and_unscale_``: read 4, write 4): 46. fp32 training has no
    copy: 32. Gradients kept in 16 bits are first widened into fp32 main gradients (Megatron
    ``_copy_model_grads_to_main_grads``: read 2, write 4): 44 in bf16, 52 in fp16."""
    from simcluster.parallelism.data import optimizer_bytes_per_param

    def opt(precision: str, fp32_grads: bool = True) -> float:
        training = {"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "precision": precision,
                    "fp32_grad_accum": fp32_grads}
        return optimizer_bytes_per_param(scenario_from_dict(make_scenario(training=training)))

    assert opt("bf16") == 38
    assert opt("fp16") == 46
    assert opt("fp32") == 32
    assert opt("bf16", fp32_grads=False) == 44
    assert opt("fp16", fp32_grads=False) == 52
    assert opt("fp32", fp32_grads=False) == 32


def test_nanotron_clips_every_local_gradient_and_always_scales_it():
    """nanotron's ``clip_grad_norm`` (optim/clip_grads.py) with its fp32 gradient accumulator
    takes the norm over every local fp32 gradient buffer (read 4) and multiplies every one by
    the clamped coefficient with ``mul_`` (read 4, write 4), every step, under ZeRO-1 too, where
    the accumulator keeps the full buffers; Megatron's norm reads only the optimizer's shard.
    So the step moves 38 - 4 = 34 bytes per shard parameter plus 12 per local parameter."""
    from simcluster.engine.plan import kernel_model
    from simcluster.engine.simulate import simulate
    from simcluster.parallelism.data import clip_bytes_per_local_param, optimizer_bytes_per_param

    def sc(clip: str) -> dict:
        training = {"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "precision": "bf16",
                    "grad_clip": clip}
        return make_scenario(training=training, parallel={"dp": 8, "zero": 1})

    nano, mega = scenario_from_dict(sc("local_scale")), scenario_from_dict(sc("shard"))
    assert optimizer_bytes_per_param(nano) == 34 and clip_bytes_per_local_param(nano) == 12
    assert optimizer_bytes_per_param(mega) == 38 and clip_bytes_per_local_param(mega) == 0
    # no clipping (NeMo AutoModel's benchmarks: "No gradient clipping applied"): no norm read
    none = scenario_from_dict(sc("none"))
    assert optimizer_bytes_per_param(none) == 34 and clip_bytes_per_local_param(none) == 0

    def step(data: dict) -> float:
        ev = simulate(scenario_from_dict(data)).events
        opt = ev[(ev["rank"] == 0) & (ev["name"] == "optimizer_step")]
        return float((opt["end_s"] - opt["start_s"]).sum())

    ctx = build_context(mega)
    local = stage_params(ctx.model, ctx.layout, ctx.chunks[0]).total
    extra = (local * 12 - local / 8 * 4) / kernel_model(ctx).hbm_bytes_per_s
    assert step(sc("local_scale")) - step(sc("shard")) == pytest.approx(extra, rel=1e-6)


def test_megatron_theoretical_activation_memory_counts_the_input_and_output_layers():
    """Korthikanti et al. 2022 Sec. 4.3 and Megatron-LM's ``report_theoretical_memory``
    (megatron/training/theoretical_memory_usage.py, ``compute_activation_memory``: SP with
    selective recompute, pp = 1): besides L x 34sbh/t for the layers (ffn = 4h), the embedding's
    dropout mask sbh/t and the output layer's 4sbh/t (1 + v/h): the final norm's and the LM
    head's inputs (2sbh/t each) and the fp32 logits (4sbv/t). The token ids (8sb/t) are the
    data loader's. The flash-attention log-sum-exp (4as b/t per layer) is simcluster's own."""
    from simcluster.memory import chunk_activation_bytes

    t = 4
    ctx = _ctx(
        parallel={"tp": t, "sequence_parallel": True},
        training={"seq_len": S, "micro_batch": B, "global_batch": 4, "recompute": "selective",
                  "flash_attention": False},  # fmt: skip
    )
    m = ctx.model
    (chunk,) = ctx.chunks[0]
    layers = m.layers * (SBH * 34 / t + 4 * A * S * B / t)
    embedding = SBH / t
    output = 4 * SBH / t * (1 + m.vocab / H)
    got = chunk_activation_bytes(m, ctx.layout, ctx.scenario.training, chunk)
    assert got == pytest.approx(layers + embedding + output)


def test_output_layer_inputs_are_replicated_without_sequence_parallelism():
    """Without SP the final norm's and the LM head's inputs are whole on every TP rank (Korthikanti
    Table 2's replicated 2sbh terms); a model without dropout keeps no embedding mask."""
    from simcluster.memory import embedding_activation_bytes, head_activation_bytes
    from tests.conftest import GPT_LIKE

    t = 4
    ctx = _ctx(
        model={**GPT_LIKE, "dropout": False},
        parallel={"tp": t},
        training={"seq_len": S, "micro_batch": B, "global_batch": 4},
    )
    tr = ctx.scenario.training
    assert head_activation_bytes(ctx.model, ctx.layout, tr) == pytest.approx(4 * SBH + 4 * S * B * 1024 / t)
    assert embedding_activation_bytes(ctx.model, ctx.layout, tr) == 0.0


def test_output_projection_input_is_the_attention_output_width():
    """Korthikanti's 2sbh for the attention's output projection is its input, the attention
    output, heads x d_head wide (Megatron-Core's core attention returns [s, b, heads x
    kv_channels / t]; theoretical_memory_usage.py's TODO notes the query projection need not be
    h). With q = heads x d_head = 2h (as Qwen3's 64 x 128 over 4096), MHA: Q, K, V and the
    projection's input each 2sbq instead of 2sbh, 8sb(q - h) more than sbh(34 + 5as/h)."""
    head_dim = 2 * H // A
    ctx = _ctx(
        model={"head_dim": head_dim},
        training={"seq_len": S, "micro_batch": B, "global_batch": 16, "flash_attention": False},
    )
    q = A * head_dim
    assert _act(ctx) == pytest.approx(SBH * (34 + 5 * A * S / H) + 8 * S * B * (q - H))


def test_unfused_ulysses_keeps_its_heads_scores_over_the_whole_sequence():
    """DeepSpeed-Ulysses (Jacobs et al. 2023, Sec. 3.2) around materialised attention: after the
    all-to-all a rank holds A/cp heads of the whole sequence, so its softmax output, dropout mask
    and dropout output cover (A/cp) x S x S scores, 5 B each in 16 bits (Korthikanti et al.
    2022, Table 2: sbh(34 + 5as/h) per layer at cp = 1); the 34 sbh of the S/cp tokens' tensors
    divide by cp as well, so the whole stash is 1/cp of cp = 1's, where counting the rank's
    (S/cp)^2 scores would have made the scores' part 1/cp^2."""
    cp = 4
    flat = _ctx(training={"seq_len": S, "micro_batch": B, "global_batch": 16, "flash_attention": False})
    ulysses = _ctx(
        parallel={"cp": cp, "cp_comm": "a2a"},
        training={"seq_len": S, "micro_batch": B, "global_batch": 16, "flash_attention": False},
    )
    scores = 5 * A * S * S * B
    assert _act(flat) == pytest.approx(34 * SBH + scores)
    assert _act(ulysses) == pytest.approx(34 * SBH / cp + scores / cp)


def test_mla_stashes_decompressed_keys_with_their_rotary_part():
    """DeepSeek-V2/V3 multi-head latent attention (Megatron-Core ``MLASelfAttention``): the
    kernel reads queries and keys of qk_nope + qk_rope per head (the rotary key shared by the
    heads, broadcast) and values of v_head_dim; the output projection reads heads x v_head_dim.
    A no-dropout GeLU 4h MLP keeps 20sbh; flash attention its fp32 log-sum-exp."""
    mla = {"q_lora_rank": 256, "kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
           "v_head_dim": 64}  # fmt: skip
    ctx = _ctx(
        model={"dropout": False, "head_dim": 96, "mla": mla},
        training={"seq_len": S, "micro_batch": B, "global_batch": 16},
    )
    sb = S * B
    qk, v = A * 96, A * 64
    attention = 2 * SBH + 2 * SBH + 2 * sb * (qk + qk + v) + 2 * sb * (256 + 128) + 2 * sb * v + 4 * A * sb
    assert _act(ctx) == pytest.approx(attention + 20 * SBH)


def test_moe_weight_gradient_inputs_are_the_stashed_gemm_inputs():
    """What a split backward keeps from B to W is every linear's input (Qi et al. 2024), the
    same elements FP8 stores as 1-byte copies: so retained(bf16) - retained(fp8) equals
    stash(bf16) - stash(fp8), but for the output projection's input: in FP8 training the fused
    attention's 16-bit output is kept beside the projection's FP8 copy until B (2 B more on the
    stash, not retained). With expert TP the routed experts' fc1 input is the ETP group's
    all-gathered tokens (Megatron-Core MoEAlltoAllTokenDispatcher: A2A(EP), then AG(expert TP)),
    etp times the rows; a shared expert's inputs are kept as well."""
    from simcluster.memory import wgrad_retained_fraction

    model = {
        "name": "moe", "layers": 2, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn": 2048, "vocab": 1024,
        "experts": 8, "top_k": 2, "expert_ffn": 1024, "shared_experts": 1,
        "bias": False,  # Megatron-Core splits biased experts at etp 1 only
    }  # fmt: skip
    kept, stash = {}, {}
    for precision in ("bf16", "fp8"):
        sc = scenario_from_dict(make_scenario(
            model=model, cluster={"hardware": "dgx-h100", "gpus": 8},
            parallel={"tp": 4, "ep": 2, "etp": 4, "sequence_parallel": True},
            training={"seq_len": 2048, "micro_batch": 1, "global_batch": 2, "precision": precision},
        ))  # fmt: skip
        ctx = build_context(sc)
        stash[precision] = layer_activation_bytes(ctx.model, ctx.layout, sc.training, 0)
        kept[precision] = stash[precision] * wgrad_retained_fraction(ctx.model, ctx.layout, sc.training)
    attention_output = 2 * 2048 * 1024 / 4  # 16-bit, s x heads x head dim / tp
    assert kept["bf16"] - kept["fp8"] == pytest.approx(stash["bf16"] - stash["fp8"] + attention_output)


def test_all_gather_context_parallelism_keeps_its_chunks_outputs_too():
    """TransformerEngine ``AttnFuncWithCPAndKVAllGather.forward`` copies each local chunk's
    output into the tensor it returns (``out[i - 1].copy_(out_per_step[i - 1])``) and saves
    ``*out_per_step`` for its backward: the attention output (2sbh/cp/t in 16 bits here) is
    kept twice per layer. The ring saves the returned output only."""
    cp = 2
    tr = {"seq_len": S, "micro_batch": B, "global_batch": 16}
    ring = _ctx(parallel={"cp": cp, "cp_comm": "p2p"}, training=tr)
    gather = _ctx(parallel={"cp": cp, "cp_comm": "all_gather"}, training=tr)
    assert _act(gather) - _act(ring) == pytest.approx(2 * SBH / cp)
