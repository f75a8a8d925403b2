"""Memory-bound layer work fused or as PyTorch eager runs it (``training.elementwise``), and full
recomputation of only some layers (``training.recompute_num_layers``)."""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder

from simcluster.compute import KernelModel
from simcluster.context import build_context
from simcluster.engine.plan import build_plans
from simcluster.errors import UserError
from simcluster.memory import (
    chunk_activation_bytes,
    embedding_activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
)
from simcluster.parallelism.elementwise import STYLES, Elementwise
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario

LLAMA = {
    "name": "llama-like",
    "layers": 4,
    "hidden": 1024,
    "heads": 16,
    "kv_heads": 4,
    "ffn": 2816,
    "vocab": 1024,
    "mlp": "swiglu",
    "norm": "rmsnorm",
    "position": "rope",
    "tied_embeddings": False,
}


def _ops(eager: bool, **model) -> Elementwise:
    ctx = build_context(scenario_from_dict(make_scenario(model={**LLAMA, **model})))
    return Elementwise(ctx.model, ctx.layout, 2.0, STYLES["eager" if eager else "fused"])


def test_eager_rmsnorm_moves_36_bytes_per_element():
    # Llama reference RMSNorm in bf16: x.float() 2+4, pow 4+4, mean 4, x*rsqrt 4+4,
    # type_as 4+2, *weight 2+2 (bytes read + written per element)
    assert _ops(True).norm().bytes_per_token == 36 * 1024
    assert _ops(False).norm().bytes_per_token == 4 * 1024  # one fused read + write


def test_eager_layernorm_is_one_native_kernel():
    # torch.nn.functional.layer_norm is a single CUDA kernel in eager mode too
    eager, fused = _ops(True, norm="layernorm").norm(), _ops(False, norm="layernorm").norm()
    assert eager == fused


def test_eager_rotary_and_gqa_copies():
    # rope on Q (1024) and K (256): cast 2+4, complex multiply 4+4, cast back 4+2 = 20 B each;
    # repeat_kv writes K and V at the query width: 2 x (read 256 + write 1024) x 2 B
    q, kv = 1024, 256
    assert _ops(True).attention_inputs().bytes_per_token == 20 * (q + kv) + 2 * 2 * (kv + q)
    # fused: read + write of Q, K, V once
    assert _ops(False).attention_inputs().bytes_per_token == 2 * 2 * (q + 2 * kv)


def test_fused_rotary_only_with_rope_and_the_fa2_copy():
    """Fused (Megatron-Core + TransformerEngine): learned or ALiBi positions leave nothing
    between the QKV GEMM and the attention kernel; TE's FlashAttention backend copies Q, K, V
    from sequence-first to batch-first (``x.transpose(0, 1).contiguous()``), cuDNN does not."""
    q, kv = 1024, 256
    ctx = build_context(scenario_from_dict(make_scenario(model={**LLAMA, "position": "learned",
                                                                "max_positions": 2048})))

    def traffic(kernel, position_ctx=ctx):
        ops = Elementwise(position_ctx.model, position_ctx.layout, 2.0, STYLES["fused"], 1, kernel)
        return ops.attention_inputs().bytes_per_token

    copy = 2 * 2 * (q + 2 * kv)  # read + write of Q, K, V in bf16
    assert traffic("cudnn") == 0
    assert traffic("fa2") == copy
    rope = build_context(scenario_from_dict(make_scenario(model=LLAMA)))
    assert traffic("cudnn", rope) == copy  # the rotary pass alone
    assert traffic("fa2", rope) == 2 * copy


def test_the_profiles_default_kernel_decides_the_fa2_copy():
    """Without training.attention_kernel the kernel in use is the profile's: FlashAttention-2 on
    A100 (TE prefers it below Hopper), so TE's batch-first copy is paid; cuDNN on H100, no copy."""
    kernels = {}
    for hw in ("dgx-a100", "dgx-h100"):
        data = make_scenario(model=LLAMA)
        data["cluster"]["hardware"] = hw
        kernels[hw] = layer_builder(data).ops.attention_kernel
    assert kernels == {"dgx-a100": "fa2", "dgx-h100": "cudnn"}


def test_eager_swiglu_is_silu_then_product():
    width = 2816
    assert _ops(True).activation(width).bytes_per_token == (2 + 2) * width + (2 + 2 + 2) * width
    assert _ops(False).activation(width).bytes_per_token == 2 * (2 * width + width)


def test_eager_layer_is_slower_and_fused_is_the_default():
    fused = make_scenario(model=LLAMA)
    eager = make_scenario(model=LLAMA, training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8,
                                                "elementwise": "eager"})
    t = {k: sum(s.seconds for s in layer_builder(d).layer(0, "F") if hasattr(s, "seconds"))
         for k, d in (("fused", fused), ("eager", eager))}
    assert t["eager"] > t["fused"]
    assert scenario_from_dict(fused).training.elementwise == "fused"


def _partial(n: int | None, recompute: str = "full") -> dict:
    training = {"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "recompute": recompute}
    if n is not None:
        training["recompute_num_layers"] = n
    return make_scenario(model=LLAMA, training=training)


def test_partial_full_recompute_stores_the_other_layers():
    # the first n layers of the chunk keep only their input (2 B x s x h); the rest keep all
    ctx = build_context(scenario_from_dict(_partial(2)))
    chunk = ctx.chunks[0][0]
    tr = ctx.scenario.training
    stored = layer_activation_bytes(ctx.model, ctx.layout, tr.model_copy(update={"recompute": "none"}), 0)
    expected = 2 * (2 * 2048 * 1024) + 2 * stored + head_activation_bytes(ctx.model, ctx.layout, tr)
    expected += embedding_activation_bytes(ctx.model, ctx.layout, tr)  # the merged model has dropout
    assert chunk_activation_bytes(ctx.model, ctx.layout, tr, chunk) == pytest.approx(expected)


def _recompute_seconds(data) -> float:
    ctx = build_context(scenario_from_dict(data))
    plan = build_plans(ctx, KernelModel.of_training(ctx.profile, ctx.scenario.training))[0]
    units = plan.chunks[0].phases["B"]
    return sum(s.seconds for u in units for s in u.segments if getattr(s, "kind", "") == "recompute")


def test_partial_full_recompute_reruns_only_those_layers():
    every = _recompute_seconds(_partial(None))
    assert every > 0
    assert _recompute_seconds(_partial(2)) == pytest.approx(every / 2, rel=0.02)
    assert _recompute_seconds(_partial(0)) == 0.0


def test_recompute_num_layers_needs_full_recompute():
    with pytest.raises(UserError, match="training.recompute_num_layers"):
        build_context(scenario_from_dict(_partial(2, recompute="selective")))


# --- nanotron's style (huggingface/nanotron src/nanotron/models/llama.py, training path) ------
MHA = {**LLAMA, "kv_heads": 16}  # nanotron's benchmark models are multi-head (kv heads = heads)


def _nanotron(micro_batch: int = 1) -> Elementwise:
    ctx = build_context(scenario_from_dict(make_scenario(model=MHA)))
    return Elementwise(ctx.model, ctx.layout, 2.0, STYLES["nanotron"], micro_batch)


def test_nanotron_norms_are_triton_kernels_like_fused():
    fused = Elementwise(_nanotron().model, _nanotron().layout, 2.0, STYLES["fused"])
    assert _nanotron().norm() == fused.norm()  # TritonRMSNorm: one read + one write
    assert _nanotron().residual() == fused.residual()


def test_nanotron_relayout_copies_around_flash_rotary():
    q = kv = 1024
    # qkv.view(...).permute(2, 1, 0, 3, 4).contiguous(): Q, K, V read and written once (2 B each);
    # torch.cat([k, v]) and .permute(1, 2, 0, 3, 4).contiguous(): K and V copied twice more;
    # flash_rotary_embedding(q, kv=...): reads Q and writes a new Q, rotates K in place
    expected = 2 * 2 * (q + 2 * kv) + 2 * (2 * 2 * 2 * kv) + 2 * 2 * (q + kv)
    assert _nanotron().attention_inputs().bytes_per_token == expected


def test_nanotron_swiglu_is_two_kernels_and_the_output_copy_needs_several_sequences():
    width = 2816
    # GLUActivation: act(gate) 2+2 per element, then the product 2+2+2
    assert _nanotron().activation(width).bytes_per_token == (2 + 2) * width + (2 + 2 + 2) * width
    # attention output transposed to sequence-first: a copy only when b > 1 (matmul reshapes it)
    assert _nanotron(1).attention_output().bytes_per_token == 0
    assert _nanotron(2).attention_output().bytes_per_token == 2 * 2 * 1024


def test_every_style_is_a_scenario_choice():
    import typing

    from simcluster.scenario import TrainingSection

    choices = typing.get_args(TrainingSection.model_fields["elementwise"].annotation)
    assert set(choices) == set(STYLES)


@pytest.mark.parametrize("style", ["eager", "nanotron"])
def test_unfused_swiglu_keeps_the_gate_activation(style):
    # act(gate) * up as two kernels: the product's backward needs act(gate), one more f-wide
    # tensor per token than the fused kernel keeps (Korthikanti Table 2 counts the fused one)
    training = {"seq_len": 2048, "micro_batch": 1, "global_batch": 8}
    fused = scenario_from_dict(make_scenario(model=LLAMA, training=training))
    other = scenario_from_dict(make_scenario(model=LLAMA, training={**training, "elementwise": style}))
    ctx = build_context(fused)
    extra = layer_activation_bytes(ctx.model, ctx.layout, other.training, 0) - layer_activation_bytes(
        ctx.model, ctx.layout, fused.training, 0
    )
    assert extra == 2 * 2048 * 2816  # bf16 x tokens x ffn (tp 1)


def test_list_names_the_styles(capsys):
    from simcluster.cli import main

    assert main(["list", "elementwise"]) == 0
    assert capsys.readouterr().out.strip() == "elementwise: " + ", ".join(STYLES)


def test_compiled_blocks_time_as_fused_and_hold_the_eager_loss():
    """torchtitan's ``[training] compile`` (late 2024 to mid-2025) compiled each TransformerBlock
    (``apply_compile``) and called ``cross_entropy(pred.flatten(0, 1).float(), ...)`` uncompiled
    (train.py, then torchtitan/components/loss.py: "TODO: compiling loss function causes CUDA
    errors, turning off for now"): the step is the fused one, the loss's copies PyTorch eager's."""
    from simcluster.engine import simulate
    from simcluster.memory import loss_transient_bytes

    training = {"seq_len": 2048, "micro_batch": 1, "global_batch": 8}
    scenarios = {
        style: scenario_from_dict(make_scenario(model=LLAMA, training={**training, "elementwise": style}))
        for style in ("fused", "compiled-blocks", "eager")
    }
    runs = {style: simulate(sc) for style, sc in scenarios.items()}
    assert runs["compiled-blocks"].summary["step_time_s"] == runs["fused"].summary["step_time_s"]
    assert runs["eager"].summary["step_time_s"] > runs["fused"].summary["step_time_s"]
    ctx = build_context(scenarios["fused"])
    loss = {style: loss_transient_bytes(ctx.model, ctx.layout, sc.training) for style, sc in scenarios.items()}
    # s x V logits: 2 B of bf16 logits beside the fp32 copy (fused), 8 B of PyTorch's backward
    assert loss["fused"] == 2048 * 1024 * 2
    assert loss["compiled-blocks"] == loss["eager"] == 2048 * 1024 * 8
    peak = {style: r.summary["peak_memory_bytes"]["max"] for style, r in runs.items()}
    assert peak["compiled-blocks"] > peak["fused"]
