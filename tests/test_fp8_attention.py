"""FP8 attention (``training.fp8_attention``) and the FP8 SwiGLU input store
(``training.activation_fp8_store``): what they keep, cast and refuse.

Sources: TransformerEngine 2.2 ``FusedAttnFunc.forward`` saves ``(q_fp8, k_fp8, v_fp8,
out_fp8)`` and leaves the 16-bit Q, K, V and output unsaved when the backward is FP8
(``NVTE_FP8_DPA_BWD=1``), with two fp32 softmax statistics (M, ZInv: [b, h, s, 1]); it quantises
the packed QKV once and dequantises its FP8 output for the projection (``fp8_mha`` off), and
in the backward quantises dO and dequantises dQKV. Megatron-Core's ``SwiGLUFunction`` with
``fp8_input_store`` saves ``input.to(torch.float8_e4m3fn)`` and casts it back before
``swiglu_back``. Llama 2 70B's shape: hidden 8192, 64 heads, 8 KV heads of 128, ffn 28672.
"""

from __future__ import annotations

import pytest
from engine_helpers import compute_seconds

from simcluster.compute import KernelModel
from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.memory import layer_activation_bytes
from simcluster.parallelism.layer import LayerBuilder
from simcluster.parallelism.shapes import Shapes
from simcluster.scenario import scenario_from_dict

S, H, Q, KV, FFN = 8192, 8192, 64 * 128, 8 * 128, 28672


def doc(precision: str = "fp8", hardware: str = "dgx-b200", **training) -> dict:
    """Llama 2 70B on one 8-GPU node, one 8192-token sequence per GPU (MLPerf's LoRA layout
    without the adapters)."""
    return {
        "name": "fp8-attention",
        "model": {"preset": "llama2-70b"},
        "cluster": {"hardware": hardware, "gpus": 8},
        "parallel": {"tp": 1, "zero": 1},
        "training": {"seq_len": S, "micro_batch": 1, "global_batch": 8, "precision": precision, **training},
    }


def kept(**training) -> float:
    ctx = build_context(scenario_from_dict(doc(**training)))
    return layer_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training, 0)


def test_fp8_attention_keeps_q_k_v_and_output_in_one_byte():
    # 16-bit Q, K, V (2 B) and output (2 B) become FP8 copies (1 B); the softmax statistics
    # double (M and ZInv, fp32, where the 16-bit kernel keeps one log-sum-exp)
    saved = kept() - kept(fp8_attention=True)
    assert saved == S * (Q + KV + KV) + S * Q - 4.0 * 64 * S


def test_fp8_linears_keep_an_fp8_copy_beside_the_attentions_16bit_output():
    # FP8 linears keep the FP8 cast of their input (1 B) where 16-bit ones keep the input
    # itself: the QKV, fc1 and fc2 inputs shrink by a byte each; the output projection keeps
    # its FP8 copy beside the 16-bit output the fused attention keeps for itself (3 B, not 2)
    assert kept() - kept(precision="bf16") == S * (-H - H - FFN + Q)


def test_swiglu_input_in_fp8_saves_a_byte_per_element():
    assert kept() - kept(activation_fp8_store=True) == S * 2 * FFN


def builder(**training) -> LayerBuilder:
    ctx = build_context(scenario_from_dict(doc(**training)))
    km = KernelModel.of_training(ctx.profile, ctx.scenario.training)
    return LayerBuilder(Shapes(ctx.model, ctx.layout, ctx.scenario.training), km, ctx.scenario)


def _casts_seconds(with_flag: dict, phase: str) -> float:
    """The layer's compute time with the flag minus without it, the attention kernel's own
    time taken out (both kernels' curves are the profile's)."""
    on, off = builder(**with_flag), builder()
    diff = compute_seconds(on.layer(0, phase)) - compute_seconds(off.layer(0, phase))
    return diff - (on.attention_core(phase, 0) - off.attention_core(phase, 0))


@pytest.mark.parametrize("phase", ["F", "B"])
def test_casts_move_their_bytes_once_each_way(phase):
    b = builder()
    # bf16 in, FP8 out (3 B) over Q, K, V; FP8 in, bf16 out over the output (forward), and the
    # same over dO and dQ, dK, dV (backward)
    fa8 = b.km.memory(S * 3.0 * (Q + KV + KV + Q))
    assert _casts_seconds({"fp8_attention": True}, phase) == pytest.approx(fa8, rel=1e-9)
    store = b.km.memory(S * 3.0 * 2 * FFN)
    assert _casts_seconds({"activation_fp8_store": True}, phase) == pytest.approx(store, rel=1e-9)


def test_fp8_attention_runs_on_the_profiles_fp8_curves():
    ctx = build_context(scenario_from_dict(doc(fp8_attention=True)))
    assert ctx.scenario.training.attention_kernel == "cudnn-fp8"  # dgx-b200's default cudnn + "-fp8"


@pytest.mark.parametrize(
    ("training", "hardware", "field", "says"),
    [
        ({"fp8_attention": True, "precision": "bf16"}, "dgx-b200", "training.fp8_attention", "precision: fp8"),
        ({"fp8_attention": True, "flash_attention": False}, "dgx-b200", "training.fp8_attention", "fused attention"),
        ({"fp8_attention": True}, "amd-mi300x", "training.fp8_attention", "no FP8 attention curves"),
        ({"attention_kernel": "cudnn-fp8"}, "dgx-b200", "training.attention_kernel", "fp8_attention: true"),
    ],
)
def test_fp8_attention_it_cannot_run_is_one_line(training, hardware, field, says):
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(doc(hardware=hardware, **training)))
    assert err.value.field == field and says in err.value.message


def test_megatron_flag_names_read_as_the_fields():
    sc = scenario_from_dict(doc(fp8_dot_product_attention=True, activation_func_fp8_input_store=True))
    assert sc.training.fp8_attention and sc.training.activation_fp8_store


@pytest.mark.parametrize(
    ("hardware", "fwd", "bwd"),
    # cudnn-frontend sdpa_benchmark_training: the B200 artifact at 0b1577c (cuDNN 9.13.1, batch 1,
    # 128/8 heads, 8K causal 1.464 ms forward = 1502.1 TFLOP/s, 4.382 ms backward = 1254.7);
    # GB300's llama3.1 run at 60e572b (cuDNN 9.22, batch 2, 64/8 heads: top_left fp8 8K 0.759 ms
    # forward = 2897, 3.087 ms backward = 1781 at 4*b*s^2*h*d/2 FLOPs, backward 2.5x)
    [("dgx-b200", 1502.1, 1254.7), ("gb300-nvl72", 2897, 1781)],
)
def test_fp8_curves_are_the_benchmarks_rows(hardware, fwd, bwd):
    from simcluster.attention_kernels import kernel_tflops
    from simcluster.hardware import load_profile

    profile = load_profile(hardware)
    curves = profile.attention_kernels["cudnn-fp8"]
    assert kernel_tflops(curves, 128, 8192, causal=True, backward=False) == pytest.approx(fwd)
    assert kernel_tflops(curves, 128, 8192, causal=True, backward=True) == pytest.approx(bwd)
    # faster than the same GPU's 16-bit kernel at the same length, both ways
    bf16 = profile.attention_kernels["cudnn"]
    assert kernel_tflops(bf16, 128, 8192, causal=True, backward=False) < fwd
    assert kernel_tflops(bf16, 128, 8192, causal=True, backward=True) < bwd


def test_b300_fp8_curves_are_gb300s_at_the_measured_b300_share():
    # cudnn-frontend's auto_regressive_dit runs, cudnn fp8, 9 heads, d 128, 62,208 keys: B300
    # 2,947 / 2,974 TFLOP/s at 4,096 / 8,192 queries against GB300's 3,044 / 3,053 (0.968, 0.974):
    # 0.97 of gb300-nvl72's llama3.1 fp8 rows, forward and (ASSUMED) backward, every length and mask
    from simcluster.attention_kernels import kernel_tflops
    from simcluster.hardware import load_profile

    b300, gb300 = (load_profile(h).attention_kernels["cudnn-fp8"] for h in ("dgx-b300", "gb300-nvl72"))
    assert round((2947 / 3044 + 2974 / 3053) / 2, 2) == 0.97
    for seq in (2048, 8192, 32768):
        for causal in (True, False):
            for backward in (False, True):
                mine = kernel_tflops(b300, 128, seq, causal=causal, backward=backward)
                assert mine == pytest.approx(0.97 * kernel_tflops(gb300, 128, seq, causal=causal, backward=backward),
                                             abs=0.05)
    assert kernel_tflops(b300, 128, 8192, causal=True, backward=False) == pytest.approx(2810.1)


@pytest.mark.parametrize("hardware", ["dgx-h100", "dgx-h200", "aws-p5", "hgx-h800"])
def test_hopper_fp8_curves_carry_one_cudnn_runs_ratio(hardware):
    # cudnn-frontend's H200 llama3.1 run (df73764, cuDNN 9.19, batch 1, 64/8 heads, 8K): causal
    # forward FP8 964 against BF16 644 TFLOP/s; the causal backward takes the unmasked one's
    # 636 / 594, not the causal 430 / 541 (2024's cuDNN ran FP8 attention faster than BF16 on
    # Hopper: cuDNN 9.1's sample 418 / 351 backward; NVIDIA's cuDNN 9 blog, LoRA 70B on 8 H200
    # 1.15x against BF16's 1.11x)
    from simcluster.attention_kernels import kernel_tflops
    from simcluster.hardware import load_profile

    kernels = load_profile(hardware).attention_kernels
    for backward, ratio in ((False, 964 / 644), (True, 636 / 594)):
        fp8 = kernel_tflops(kernels["cudnn-fp8"], 128, 8192, causal=True, backward=backward)
        bf16 = kernel_tflops(kernels["cudnn"], 128, 8192, causal=True, backward=backward)
        assert fp8 == pytest.approx(bf16 * ratio, abs=0.06)


def test_memory_says_what_the_fp8_copies_save(tmp_path):
    # per layer and microbatch: S (Q + 2 KV) + S Q bytes of Q, K, V and the output, less the
    # doubled softmax statistics (4 B x 64 heads x S), plus S x 2 FFN of the SwiGLU input:
    # 8192 x 75,520 B = 590.00 MiB
    import yaml

    from simcluster.cli import main
    from tests.conftest import in_process

    path = tmp_path / "fp8.yaml"
    path.write_text(yaml.safe_dump(doc(fp8_attention=True, activation_fp8_store=True)))
    res = in_process(main)("memory", str(path))
    assert res.code == 0
    assert "Q, K, V, the attention output and the SwiGLU input kept in FP8" in " ".join(res.out.split())
    assert "590.00 MiB less per layer and microbatch" in " ".join(res.out.split())


def test_recomputed_core_attention_keeps_its_16bit_inputs():
    # Megatron-Core's selective recomputation checkpoints the core attention on its 16-bit
    # inputs (the FP8 casts happen inside it and rerun): FP8 attention keeps nothing less there
    sel = {"recompute": "selective"}
    assert kept(fp8_attention=True, **sel) == kept(**sel)


def test_experts_keep_their_swiglu_input_in_fp8_too():
    # Megatron-Core's experts call weighted_bias_swiglu_impl with the same fp8_input_store: the
    # routed experts' fc1 output (rows x top_k x 2 x expert_ffn) and the shared experts' keep
    # 1 byte per element; Mixtral 8x7B (top 2 of 8 experts of 14336, no shared expert) at tp 2
    from simcluster.scenario import load_scenario

    def layer(*extra: tuple[str, object]) -> float:
        ctx = build_context(load_scenario("mixtral-8x7b-32xh100", list(extra)))
        return layer_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training, 0)

    ctx = build_context(load_scenario("mixtral-8x7b-32xh100", []))
    rows = ctx.scenario.training.seq_len / ctx.layout.cp * ctx.scenario.training.micro_batch * 2
    per_rank = rows * 2 * 14336 / ctx.layout.tp
    assert layer() - layer(("training.activation_fp8_store", True)) == pytest.approx(per_rank)


def test_a_stack_caching_the_attention_output_once_keeps_one_copy():
    # DeepSeek-V3 (Sec 3.3.2): the attention output, the output projection's input, is cached
    # once in E5M6 for both backward passes: 1.5 B per element where TransformerEngine keeps
    # its 16-bit output beside the FP8 linear's 1-byte copy (3 B)
    assert kept() - kept(attention_output_bytes=1.5) == S * Q * (3 - 1.5)
