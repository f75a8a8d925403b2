"""FP8 training as TransformerEngine runs it: FP8 GEMMs, each 16-bit operand cast (and
transposed) before them, the LM head outside TE at 16 bits.

Byte counts from TE's cast-transpose (``tex.fp8_cast_transpose_fused``): read 2 B, write the
FP8 value and its transpose, 1 B each, per element (on datacenter Blackwell, per-tensor scales
keep no transpose).
"""

from __future__ import annotations

import pytest
from engine_helpers import compute_seconds, layer_builder

from simcluster.parallelism import wgrad
from simcluster.parallelism.layer import LayerBuilder
from simcluster.parallelism.segments import Work

LLAMA = {
    "name": "llama-test", "layers": 2, "hidden": 4096, "heads": 32, "ffn": 11008, "vocab": 32000,
    "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
}
TOKENS = 4096


def _builder(precision: str) -> LayerBuilder:
    return layer_builder(
        {
            "model": LLAMA,
            "cluster": {"hardware": "dgx-h100", "gpus": 1},
            "training": {"seq_len": TOKENS, "micro_batch": 1, "global_batch": 1, "precision": precision},
        }
    )


def test_quantisation_is_a_cast_transpose_through_hbm():
    km = _builder("fp8").km
    elements = TOKENS * 4096
    assert km.quantise(elements) == pytest.approx(4 * elements / km.hbm_bytes_per_s + km.launch_s)
    assert km.quantise(elements, "bf16") == 0.0
    assert _builder("bf16").km.quantise(elements) == 0.0


@pytest.mark.parametrize("phase, widths", [
    # forward casts each GEMM's input: QKV and fc1 read h, the output projection h, fc2 ffn
    ("F", (4096, 4096, 4096, 11008)),
    # backward casts each GEMM's output gradient: QKV 3h, projection h, fc1 2 ffn, fc2 h
    ("B", (3 * 4096, 4096, 2 * 11008, 4096)),
])
def test_fp8_layer_pays_one_cast_per_gemm_operand(phase, widths):
    fp8 = _builder("fp8")
    km = fp8.km
    casts = sum(km.quantise(TOKENS * w) for w in widths)
    gemms = fp8.attention_gemms() + fp8.mlp_gemms(LLAMA["ffn"])
    uncast = sum(
        km.gemm(TOKENS, g.n, g.k) if phase == "F" else km.gemm(TOKENS, g.k, g.n) for g in gemms
    )
    if phase == "F":
        # and each weight's cast-transpose, once a step: one microbatch here (fp8_weights.py)
        casts += sum(km.quantise(g.k * g.n) for g in gemms)
    work = dict(fp8._gemms(gemms, phase).parts)
    assert work["gemm"] == pytest.approx(uncast)
    assert work["memory"] == pytest.approx(casts)  # the casts are memory-bound kernels
    # the weight-gradient GEMMs reuse the transposed copies: nothing more to cast
    params = sum(g.k * g.n for g in gemms)
    accumulate = wgrad.accumulation_seconds(km, fp8.scenario.training, fp8.shapes.layout, params)
    assert fp8._gemms(gemms, "W") == Work.of(
        gemm=sum(km.gemm(g.k, g.n, TOKENS) for g in gemms), grad_accum=accumulate
    )


def test_lm_head_runs_at_16_bits_in_fp8_training():
    fp8, bf16 = _builder("fp8"), _builder("bf16")
    for phase in ("F", "B", "W"):
        assert compute_seconds(fp8.head(phase)) == pytest.approx(compute_seconds(bf16.head(phase)))
    # while the layers' GEMMs are faster in FP8 despite the casts
    assert compute_seconds(fp8.layer(0, "F")) < compute_seconds(bf16.layer(0, "F"))


def test_fp8_gemms_follow_the_profiles_fp8_curve():
    """H100-class profiles carry Azure's cuBLASLt FP8 table of an H100 SXM timed after 10,000
    warm-up iterations (Azure/AI-benchmarking-guide ND_H100_v5_results.md): 4096^3 at 1216.9
    TFLOP/s = 0.615 of the 1978.9 TFLOP/s FP8 peak, used as measured (efficiency.sustained_fp8
    1.0), while the BF16 curve, XLA's burst table (4096^3 at 0.79 of its peak), takes the
    sustained share 755 / 794.5 (efficiency.sustained); a profile without ``gemm_fp8`` uses
    the BF16 curve at the BF16 share."""
    km = _builder("fp8").km
    eff = km.profile.efficiency
    assert eff.sustained == pytest.approx(755 / 794.5, abs=1e-3)
    assert eff.sustained_fp8 == 1.0
    flops = 2 * 4096 * 4096 * 4096
    shape = km.gemm_breakdown(4096, 4096, 4096, "fp8").shape_factor
    assert km.gemm_efficiency(flops, "fp8") * shape == pytest.approx(1216.9 / 1978.9, abs=0.002)
    assert km.gemm_efficiency(flops, "bf16") == pytest.approx(0.79 * eff.sustained, abs=0.005)
    # the plateau that caps quantised shapes is the FP8 curve's own: 32768^3 at 1382.2 TFLOP/s
    t = km.gemm(8192, 8192, 8192, "fp8") - km.launch_s
    assert 2 * 8192**3 / t / 1e12 <= 1382.2 + 1e-6
    plain = km.profile.model_copy(
        update={"efficiency": eff.model_copy(update={"gemm_fp8": None})}
    )
    from simcluster.compute import KernelModel

    assert KernelModel(plain, "fp8").gemm_efficiency(flops, "fp8") == pytest.approx(
        km.gemm_efficiency(flops, "bf16")
    )


def test_fp8_expert_gemms_pay_the_same_casts():
    """Routed experts quantise like dense layers: forward fc1 and fc2 inputs (h and expert_ffn
    per routed token), backward their output gradients (h and 2 x expert_ffn for SwiGLU)."""
    from simcluster.parallelism import expert

    b = layer_builder(
        {
            "model": {**LLAMA, "experts": 8, "top_k": 2, "expert_ffn": 2048},
            "cluster": {"hardware": "dgx-h100", "gpus": 8},
            "parallel": {"ep": 8},
            "training": {"seq_len": TOKENS, "micro_batch": 1, "global_batch": 8, "precision": "fp8"},
        }
    )
    km, moe = b.km, b.scenario.moe
    rows = TOKENS * 2  # tokens x top_k routed copies arrive at this rank (8 of 8 experts spread)
    # dropless: each phase also pads and unpads the experts' rows (expert.padding_seconds)
    pad = expert.padding_seconds(b.shapes, km, moe, rows)
    casts_f = km.quantise(rows * 4096) + km.quantise(rows * 2048) + pad
    # and the local expert's fc1 and fc2 weights, once a step (one microbatch here)
    casts_f += km.quantise(4096 * 2 * 2048) + km.quantise(2048 * 4096)
    casts_b = km.quantise(rows * 4096) + km.quantise(rows * 2 * 2048) + pad
    act = expert.activation_seconds(b.shapes, km, 1.0)
    gemm_f = km.gemm(rows, 2 * 2048, 4096, count=1) + km.gemm(rows, 4096, 2048, count=1)
    gemm_b = km.gemm(rows, 4096, 2 * 2048, count=1) + km.gemm(rows, 2048, 4096, count=1)
    assert expert.expert_seconds(b.shapes, km, moe, "F") == pytest.approx(gemm_f + casts_f + act)
    assert expert.expert_seconds(b.shapes, km, moe, "B") == pytest.approx(gemm_b + casts_b + 2 * act)


def test_dropless_fp8_experts_copy_their_rows_to_align_them():
    """Megatron-Core TEGroupedMLP pads the experts' input and probabilities (TE Fp8Padding) and
    unpads fc2's output (Fp8Unpadding) in FP8; Fp8Padding returns its input as it is when every
    split is aligned (drop-and-pad capacities) and otherwise copies all of it: per phase two
    hidden-wide copies (read + write, 2 B a value) and one of the fp32 probabilities."""
    from simcluster.parallelism import expert

    def builder(precision: str, moe: dict) -> object:
        return layer_builder(
            {
                "model": {**LLAMA, "experts": 8, "top_k": 2, "expert_ffn": 2048},
                "cluster": {"hardware": "dgx-h100", "gpus": 8},
                "parallel": {"ep": 8},
                "training": {"seq_len": TOKENS, "micro_batch": 1, "global_batch": 8, "precision": precision},
                "moe": moe,
            }
        )

    rows = TOKENS * 2
    b = builder("fp8", {})
    km = b.km
    want = 2 * (2 * rows * 4096 * 2 / km.hbm_bytes_per_s + km.launch_s) + (2 * rows * 4 / km.hbm_bytes_per_s + km.launch_s)
    assert expert.padding_seconds(b.shapes, km, b.scenario.moe, rows) == pytest.approx(want)
    padded = builder("fp8", {"capacity_factor": 1.0, "pad_to_capacity": True})
    assert expert.padding_seconds(padded.shapes, padded.km, padded.scenario.moe, rows) == 0.0
    # dropping without padding leaves arbitrary counts: still copied
    dropped = builder("fp8", {"capacity_factor": 1.0})
    assert expert.padding_seconds(dropped.shapes, dropped.km, dropped.scenario.moe, rows) == pytest.approx(want)
    bf16 = builder("bf16", {})
    assert expert.padding_seconds(bf16.shapes, bf16.km, bf16.scenario.moe, rows) == 0.0
    # Megatron-Core's flex dispatcher copies too: core_r0.12.0-0.16.1 fused_a2a.py
    # FusedDispatch.forward calls DeepEP's Buffer.dispatch without expert_alignment (default 1),
    # and experts.py TEGroupedMLP.forward pads whenever config.fp8 whatever the dispatcher
    deepep = builder("fp8", {"dispatcher": "deepep"})
    assert expert.padding_seconds(deepep.shapes, deepep.km, deepep.scenario.moe, rows) == pytest.approx(want)
    # counts aligned by the dispatch (DeepEP's expert_alignment, Megatron-Core 0.16's hybridep
    # pad_multiple) or the routing map (moe_router_padding_for_fp8): Fp8Padding copies nothing
    for moe in ({"aligned_dispatch": True}, {"dispatcher": "deepep", "aligned_dispatch": True}):
        aligned = builder("fp8", moe)
        assert expert.padding_seconds(aligned.shapes, aligned.km, aligned.scenario.moe, rows) == 0.0


def test_drop_and_pad_copies_unless_the_capacity_is_aligned():
    """Megatron-Core's capacity is ceil(tokens x top_k / experts x capacity_factor) per source
    rank (moe_utils.get_capacity, called by topk_softmax_with_capacity with num_tokens * topk),
    not rounded to the FP8 alignment; each local expert then runs capacity x ep x etp rows (the
    alltoall dispatcher's drop-and-pad num_tokens_per_local_expert) and TEGroupedMLP's
    Fp8Padding copies them whenever that is not a multiple of 16 (Megatron-Core
    get_fp8_align_size: 16 outside MXFP8). 4,096 tokens x top-2 / 8 experts = 1,024 per source
    rank: capacity factor 1.0 -> 1,024 x 8 = 8,192 rows (aligned), 1.25 -> 1,280 x 8 (aligned),
    1.1 -> ceil(1,126.4) = 1,127 x 8 = 9,016 = 8 mod 16 (copied)."""
    from simcluster.parallelism import expert

    def builder(cf: float, precision: str = "fp8") -> object:
        return layer_builder(
            {
                "model": {**LLAMA, "experts": 8, "top_k": 2, "expert_ffn": 2048},
                "cluster": {"hardware": "dgx-h100", "gpus": 8},
                "parallel": {"ep": 8},
                "training": {"seq_len": TOKENS, "micro_batch": 1, "global_batch": 8, "precision": precision},
                "moe": {"capacity_factor": cf, "pad_to_capacity": True},
            }
        )

    rows = TOKENS * 2
    for cf, want_rows, copied in ((1.0, 8192, False), (1.25, 10240, False), (1.1, 9016, True)):
        b = builder(cf)
        moe = b.scenario.moe
        assert expert.padded_expert_rows(b.shapes.moe_tokens, b.shapes.model, b.shapes.layout, moe) == want_rows
        assert expert.quantisation_alignment(b.shapes.training, b.km.profile) == 16
        km = b.km
        want = 2 * (2 * rows * 4096 * 2 / km.hbm_bytes_per_s + km.launch_s) + (2 * rows * 4 / km.hbm_bytes_per_s + km.launch_s)
        assert expert.padding_seconds(b.shapes, km, moe, rows) == (pytest.approx(want) if copied else 0.0)
    # bf16 never pads
    bf16 = builder(1.1, "bf16")
    assert expert.padding_seconds(bf16.shapes, bf16.km, bf16.scenario.moe, rows) == 0.0
    # MXFP8 (the block recipe on Blackwell) aligns to 32 (get_fp8_align_size), DeepSeek's
    # blockwise FP8 on Hopper to 16, NVFP4 to 128 (Megatron-LM main's get_fp4_align_size)
    for hardware, precision, recipe, want_align in (
        ("dgx-b200", "fp8", "block", 32), ("dgx-h100", "fp8", "block", 16), ("dgx-b200", "nvfp4", "delayed", 128)
    ):
        aligned = layer_builder(
            {
                "model": {**LLAMA, "experts": 8, "top_k": 2, "expert_ffn": 2048},
                "cluster": {"hardware": hardware, "gpus": 8},
                "parallel": {"ep": 8},
                "training": {"seq_len": TOKENS, "micro_batch": 1, "global_batch": 8, "precision": precision,
                             "fp8_recipe": recipe},
            }
        )
        assert expert.quantisation_alignment(aligned.shapes.training, aligned.km.profile) == want_align


def test_current_scaling_reads_each_tensor_once_more_for_its_amax():
    """TE Float8CurrentScaling reduces the tensor's amax before casting: 2 more bytes per
    element than delayed or block scaling (whose scales come from history or the cast itself),
    and two more kernels (TE quantizer.cpp, Float8CurrentScalingQuantizer::quantize_impl:
    nvte_compute_amax, nvte_compute_scale_from_amax, then nvte_quantize_v2)."""
    from simcluster.compute import KernelModel

    profile = _builder("fp8").km.profile
    elements = TOKENS * 4096
    km = KernelModel(profile, "fp8")
    current = KernelModel(profile, "fp8", fp8_recipe="current").quantise(elements)
    for recipe in ("delayed", "block"):
        other = KernelModel(profile, "fp8", fp8_recipe=recipe).quantise(elements)
        assert current - other == pytest.approx(2 * elements / km.hbm_bytes_per_s + 2 * km.launch_s)


@pytest.mark.parametrize(
    ("hardware", "recipe", "nbytes"),
    [
        # Hopper's FP8 tensor cores take only TN operands: the cast writes the copy and its transpose
        ("dgx-h100", "delayed", 2 + 1 + 1),
        ("dgx-h100", "current", 2 + 2 + 1 + 1),
        ("dgx-h100", "block", 2 + 1 + 1),
        # datacenter Blackwell runs per-tensor-scaled FP8 GEMMs in any layout: one FP8 copy
        ("dgx-b200", "delayed", 2 + 1),
        ("gb200-nvl72", "current", 2 + 2 + 1),
        ("gb300-nvl72", "current", 2 + 2 + 1),
        # MXFP8 keeps a copy scaled along each direction
        ("gb200-nvl72", "block", 2 + 1 + 1),
    ],
)
def test_blackwell_keeps_no_fp8_transpose_for_per_tensor_scales(hardware, recipe, nbytes):
    """TransformerEngine's Float8Quantizer and Float8CurrentScalingQuantizer create a transposed
    copy only where ``nvte_is_non_tn_fp8_gemm_supported()`` is false (compute capability below
    10.0 or 12.x): on B200, GB200 and GB300 the 16-bit operand is read (2 B, twice under current
    scaling's amax pass) and one FP8 copy written."""
    from simcluster.compute import KernelModel
    from simcluster.hardware import load_profile

    km = KernelModel(load_profile(hardware), "fp8", fp8_recipe=recipe)
    elements = TOKENS * 4096
    kernels = km.cast_kernels(1)
    assert km.quantise(elements) == pytest.approx(nbytes * elements / km.hbm_bytes_per_s + kernels * km.launch_s)


def test_only_datacenter_blackwell_and_later_run_non_tn_fp8_gemms():
    """``nvte_is_non_tn_fp8_gemm_supported``: compute capability in [10.0, 12.0) or from 13.0."""
    from simcluster.compute import non_tn_fp8_gemms

    assert [non_tn_fp8_gemms(cc) for cc in (8.9, 9.0, 10.0, 10.3, 12.0, 12.1, 13.0, None)] == [
        False, False, True, True, False, False, True, False,
    ]  # fmt: skip


@pytest.mark.parametrize(("recipe", "kernels"), [("delayed", 1), ("current", 3 * 16), ("block", 16)])
def test_a_grouped_operand_is_quantised_per_expert_unless_delayed(recipe, kernels):
    """TE GroupedLinear quantises its input with tex.split_quantize; cast.cpp's
    multi_tensor_quantize_impl has one fused kernel for all splits only under delayed scaling
    (nvte_multi_cast_transpose) and otherwise quantises split by split: 16 local experts under
    current scaling are 16 x (amax, scale, cast) kernels, each with its launch gap, over the same
    bytes as one cast of the whole operand."""
    from simcluster.compute import KernelModel

    km = KernelModel(_builder("fp8").km.profile, "fp8", fp8_recipe=recipe)
    elements = 16 * 4096 * 2048
    assert km.cast_kernels(16) == kernels
    extra = km.quantise(elements, splits=16) - km.quantise(elements)
    assert extra == pytest.approx((kernels - km.cast_kernels(1)) * km.launch_s)
    assert KernelModel(km.profile, "bf16").cast_kernels(16) == 0


def test_blackwell_casts_grouped_operands_per_expert_under_delayed_scaling_too():
    """The fused multi-cast writes a transposed copy of every split; on datacenter Blackwell the
    quantizers ask for none (no column-wise data), so TE's fused_multi_quantize falls back to
    one cast per split: 16 local experts, 16 kernels."""
    from simcluster.compute import KernelModel
    from simcluster.hardware import load_profile

    for hardware in ("dgx-b200", "gb200-nvl72", "gb300-nvl72"):
        assert KernelModel(load_profile(hardware), "fp8", fp8_recipe="delayed").cast_kernels(16) == 16


@pytest.mark.parametrize("tp_comm", [False, True])
def test_tp_all_gathers_move_fp8_and_reduce_scatters_16_bit(tp_comm):
    """TransformerEngine gathers the FP8 operand: a column-parallel input is quantised before its
    all-gather (LayerNormLinear), a row-parallel output gradient before its backward gather, and
    userbuffers keep FP8 buffers for every all-gather overlap under an FP8 recipe (initialize_ub:
    qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad, qkv_dgrad, fc1_dgrad). Reduce-scatters sum
    16-bit partials; the LM head runs outside TE at 16 bits. At tp 4, 4096 tokens, h 4096:
    an FP8 gather is 4096 * 4096 * 1 B = 16 MiB, a reduce-scatter 32 MiB."""
    from simcluster.parallelism.segments import Comm

    def comms(precision: str, phase: str) -> dict[str, float]:
        b = layer_builder(
            {
                "model": LLAMA,
                "cluster": {"hardware": "dgx-h100", "gpus": 4},
                "parallel": {"tp": 4, "sequence_parallel": True},
                "overlap": {"tp_comm": tp_comm},
                "training": {"seq_len": TOKENS, "micro_batch": 1, "global_batch": 1, "precision": precision},
            }
        )
        segs = b.layer(0, phase) + b.head(phase)
        return {s.name: s.nbytes for s in segs if isinstance(s, Comm)}

    fp8_gather, half_rs = TOKENS * 4096 * 1, TOKENS * 4096 * 2
    fwd, bwd = comms("fp8", "F"), comms("fp8", "B")
    for block in ("attn", "mlp"):
        assert fwd[f"{block}_tp_ag"] == bwd[f"{block}_tp_ag"] == bwd[f"{block}_tp_ag_input"] == fp8_gather
        rs = fwd[f"{block}_tp_rs"] + fwd.get(f"{block}_tp_rs_tail", 0.0)
        assert rs == bwd[f"{block}_tp_rs"] == half_rs
    assert fwd["lm_head_tp"] == bwd["lm_head_tp"] == half_rs
    bf16 = comms("bf16", "F")
    assert bf16["attn_tp_ag"] == bf16["lm_head_tp"] == half_rs
