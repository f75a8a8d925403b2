"""LoRA fine-tuning (``lora:``): adapters on a frozen model.

Counts checked against the LoRA paper's parameterisation (Hu et al. 2021, arXiv 2106.09685: an
adapter on W (k x n) is A (k x r) and B (r x n)) and Llama 2 70B's shape (Touvron et al. 2023:
hidden 8192, 64 heads, 8 KV heads of 128, 80 layers): with rank 16 on the fused QKV
(8192 -> 10240) and the output projection (8192 -> 8192), as MLPerf Training's llama2_70b_lora
places them, 16 x (8192 + 10240) + 16 x (8192 + 8192) = 557,056 per layer, 44,564,480 in all.
"""

from __future__ import annotations

import pytest
from engine_helpers import compute_seconds, layer_builder, run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.flops import token_flops
from simcluster.lora import Adapters, layer_adapter_params
from simcluster.memory import layer_activation_bytes, stage_params
from simcluster.memory_report import memory_by_stage
from simcluster.model import build_model
from simcluster.parallelism.data import build_buckets
from simcluster.scenario import scenario_from_dict

MLPERF_LAYER = 16 * (8192 + 10240) + 16 * (8192 + 8192)


def lora_doc(tp: int = 1, rank: int = 16, **training) -> dict:
    """Llama 2 70B on one 8-GPU B200 node, MBS 1 at 8192 tokens, rank-``rank`` adapters on QKV
    and the output projection."""
    return {
        "name": "lora",
        "model": {"preset": "llama2-70b"},
        "cluster": {"hardware": "dgx-b200", "gpus": 8},
        "parallel": {"tp": tp, "sequence_parallel": tp > 1, "zero": 1},
        "training": {"seq_len": 8192, "micro_batch": 1, "global_batch": 8 // tp, "precision": "bf16", **training},
        "lora": {"rank": rank, "dropout": 0.1},
    }


def test_adapter_parameters_follow_the_papers_count():
    model = build_model(scenario_from_dict(lora_doc()).model)
    adapters = Adapters(rank=16, targets=("qkv", "proj"))
    assert layer_adapter_params(model, adapters, 1) == MLPERF_LAYER
    assert 80 * MLPERF_LAYER == 44_564_480
    # split over tensor parallelism: every adapter r (k + n) / t per GPU
    assert layer_adapter_params(model, adapters, 4) == MLPERF_LAYER / 4


def test_stage_trains_the_adapters_and_holds_the_frozen_model():
    ctx = build_context(scenario_from_dict(lora_doc()))
    params = stage_params(ctx.model, ctx.layout, ctx.chunks[0])
    assert params.total == 80 * MLPERF_LAYER
    assert params.frozen == pytest.approx(ctx.model.params_total())


def test_gradient_buckets_hold_only_adapters():
    ctx = build_context(scenario_from_dict(lora_doc()))
    buckets = build_buckets(ctx.model, ctx.layout, ctx.chunks[0], float("inf"))
    assert sum(b.params for b in buckets) == 80 * MLPERF_LAYER


def test_memory_keeps_no_gradients_or_optimizer_for_frozen_weights():
    """bf16 mixed precision with fp32 gradients beside the kept 16-bit ones and Adam (2 + 6 +
    12 B per trained parameter, the optimizer's over 8 ZeRO-1 ranks; the Ultra-Scale Playbook's
    counts) on the adapters alone; the frozen weights at 2 B each."""
    doc = lora_doc(fp32_grad_accum=True, grad_accum_fusion=False, grad_16bit_freed="step")
    ctx = build_context(scenario_from_dict(doc))
    stage = memory_by_stage(ctx)[0]
    trained = 80 * MLPERF_LAYER
    frozen = stage.frozen_params_per_gpu
    assert stage.params_bytes == pytest.approx(2 * (trained + frozen))
    assert stage.grads_bytes == pytest.approx(6 * trained)
    assert stage.optimizer_bytes == pytest.approx(12 / 8 * trained)


def test_weight_pass_is_the_adapters_alone():
    """A frozen layer's W runs only the adapters' weight gradients: rank-16 GEMMs, far below the
    base's (the same FLOPs as the base's input gradient, here in B)."""
    full = layer_builder({**lora_doc(), "lora": {"rank": 0}})
    lora = layer_builder(lora_doc())
    w_full = compute_seconds(full.layer(0, "W"))
    w_lora = compute_seconds(lora.layer(0, "W"))
    assert 0 < w_lora < 0.02 * w_full
    assert [s.name for s in lora.layer(0, "W")] == ["attn_lora_wgrad"]
    # the adapters' forward GEMMs and passes make F slower than the frozen base's alone
    assert compute_seconds(lora.layer(0, "F")) > compute_seconds(full.layer(0, "F"))
    assert lora.embedding("W") == [] and lora.head("W") == []


def test_token_flops_drop_the_frozen_weight_gradients():
    """MLPerf's llama2_70b_lora counts forward and input gradient (NVIDIA's
    MODEL_TFLOP_PER_SAMPLE): with LoRA the weight-gradient FLOPs are the adapters' 2 x params."""
    model = build_model(scenario_from_dict(lora_doc()).model)
    adapters = Adapters(rank=16, targets=("qkv", "proj"))
    base, lora = token_flops(model, 8192), token_flops(model, 8192, adapters)
    extra = 2.0 * 80 * MLPERF_LAYER
    assert lora.backward_weight == extra
    assert lora.forward == base.forward + extra
    assert lora.backward_input == base.backward_input + extra


def test_lora_step_is_faster_and_reduces_little():
    full = run({**lora_doc(), "lora": {"rank": 0}})
    lora = run(lora_doc())
    assert lora.summary["step_time_s"] < 0.8 * full.summary["step_time_s"]
    assert lora.summary["exposed_comm_s"]["dp"] < 0.01 * lora.summary["step_time_s"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": {"preset": "mixtral-8x7b"}}, "lora.rank"),
        ({"parallel": {"zero": 3}}, "lora.rank"),
    ],
)
def test_unmodelled_combinations_are_refused(change, field):
    doc = lora_doc()
    for section, values in change.items():
        doc[section] = {**doc[section], **values}
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(doc))
    assert err.value.field == field


def test_shipped_lora_scenario_is_amds_mlperf_case():
    """scenarios/llama2-70b-lora-8xmi355x.yaml is validation/mlperf-lora-70b.yaml's MI355X row
    (AMD's MLPerf v5.1 llama2_70b_lora run), the same step bit for bit."""
    from simcluster.engine import simulate
    from simcluster.scenario import load_scenario
    from simcluster.validate import load_cases

    (case,) = [c for c in load_cases() if c.family == "mlperf-lora-70b" and "mi355x" in c.name]
    shipped = simulate(load_scenario("llama2-70b-lora-8xmi355x")).summary["step_time_s"]
    assert shipped == simulate(scenario_from_dict(case.scenario)).summary["step_time_s"]


def test_more_adapter_work_never_makes_a_step_faster_or_smaller():
    """Monotone in the adapters: a larger rank or more targets adds GEMMs, passes and kept
    bytes, never removes any (Llama 3 8B on 8 H100, one microbatch per rank)."""
    doc = {
        "name": "mono",
        "model": {"preset": "llama3-8b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"tp": 1, "zero": 1},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 8, "precision": "bf16"},
    }
    steps, peaks = [], []
    for lora in ({"rank": 8, "targets": ["qkv"]}, {"rank": 64, "targets": ["qkv"]},
                 {"rank": 64, "targets": ["qkv", "proj", "fc1", "fc2"]},
                 {"rank": 64, "targets": ["qkv", "proj", "fc1", "fc2"], "dropout": 0.1}):  # fmt: skip
        summary = run({**doc, "lora": lora}).summary
        steps.append(summary["step_time_s"])
        peaks.append(summary["peak_memory_bytes"]["max"])
    assert steps == sorted(steps) and peaks == sorted(peaks)


def _tp_comms(builder, phase: str) -> list[tuple[str, str, float]]:
    from simcluster.parallelism.segments import Comm

    return [(s.name, s.op, s.nbytes) for s in builder.layer(0, phase) if isinstance(s, Comm) and s.name.startswith("lora_")]


@pytest.mark.parametrize(("sp", "a2a"), [(True, False), (True, True), (False, False)])
def test_adapters_add_nemos_tensor_parallel_collectives(sp, a2a):
    """NeMo's ParallelLinearAdapter at tp 4 (its linears without sequence parallelism): beside the
    column-parallel QKV, A's r-wide output all-gathered forward and B's input gradient
    all-reduced backward (without SP also A's s x h input gradient); beside the row-parallel
    projection, A's partial output all-reduced and B's hidden-split output all-gathered whole
    (backward: with SP the shard's gradient gathered, then B's input gradient all-reduced), or
    with a2a_experimental one all-to-all of each rank's s x h / t each way. Llama 2 70B, 8192
    tokens, rank 16, bf16: s x r = 8192 x 16 x 2 B = 256 KiB; s x h = 128 MiB."""
    doc = lora_doc(tp=4)
    doc["parallel"]["sequence_parallel"] = sp
    doc["lora"] = {"rank": 16, "a2a": a2a}
    b = layer_builder(doc)
    narrow, wide = 8192 * 16 * 2, 8192 * 8192 * 2
    forward, backward = _tp_comms(b, "F"), _tp_comms(b, "B")
    if sp and a2a:
        assert forward == [("lora_qkv_ag", "all_gather", narrow), ("lora_proj_ar", "all_reduce", narrow),
                           ("lora_proj_a2a", "all_to_all", wide / 4)]  # fmt: skip
        assert backward == [("lora_proj_a2a", "all_to_all", wide / 4), ("lora_proj_ar", "all_reduce", narrow),
                            ("lora_qkv_ar", "all_reduce", narrow)]  # fmt: skip
    elif sp:
        assert forward == [("lora_qkv_ag", "all_gather", narrow), ("lora_proj_ar", "all_reduce", narrow),
                           ("lora_proj_ag", "all_gather", wide)]  # fmt: skip
        assert backward == [("lora_proj_ag", "all_gather", wide), ("lora_proj_ar", "all_reduce", narrow),
                            ("lora_qkv_ar", "all_reduce", narrow)]  # fmt: skip
    else:
        assert forward == [("lora_qkv_ag", "all_gather", narrow), ("lora_proj_ar", "all_reduce", narrow),
                           ("lora_proj_ag", "all_gather", wide)]  # fmt: skip
        assert backward == [("lora_proj_ar", "all_reduce", narrow), ("lora_qkv_ar", "all_reduce", narrow),
                            ("lora_qkv_ar_input", "all_reduce", wide)]  # fmt: skip


def test_frozen_linears_gather_no_input_again_under_sequence_parallelism():
    """Megatron/TE re-gather a column-parallel linear's input in backward only for its weight
    gradient (TransformerEngine: ``if ctx.requires_wgrad``): a LoRA layer's frozen linears skip
    it, so its backward has no ``*_tp_ag_input``."""
    from simcluster.parallelism.segments import Comm

    names = {s.name for s in layer_builder(lora_doc(tp=4)).layer(0, "BW") if isinstance(s, Comm)}
    full = {s.name for s in layer_builder({**lora_doc(tp=4), "lora": {"rank": 0}}).layer(0, "BW") if isinstance(s, Comm)}
    assert {"attn_tp_ag_input", "mlp_tp_ag_input"} <= full
    assert not {n for n in names if n.endswith("_ag_input")}


def test_frozen_linears_quantise_only_the_rowwise_copy():
    """TransformerEngine quantises a linear's input with ``set_usage(rowwise=True,
    columnwise=backward_needs_input)``, ``backward_needs_input = is_grad_enabled and
    weight.requires_grad``: a frozen linear writes no transpose (Hopper FP8: read 2, write 1 B
    instead of 1 + 1) and no Hadamard-transformed columnwise NVFP4 copy (amax read 2 B, then read 2
    and write 4 bits + 1/16 B scale, 4.5625 B instead of 7.125)."""
    from simcluster.compute import NVFP4_ROWWISE_QUANTISE_BYTES

    assert NVFP4_ROWWISE_QUANTISE_BYTES == pytest.approx(4.5625)
    elements = 8192 * 8192
    nvfp4 = layer_builder({**lora_doc(precision="nvfp4"), "cluster": {"hardware": "gb200-nvl72", "gpus": 8}}).km
    rowwise = nvfp4.quantise(elements, columnwise=False) - nvfp4.launch_s
    assert rowwise == pytest.approx(4.5625 * elements / nvfp4.hbm_bytes_per_s)
    assert nvfp4.quantise(elements) - nvfp4.launch_s == pytest.approx(7.125 * elements / nvfp4.hbm_bytes_per_s)
    h100 = {**lora_doc(precision="fp8", fp8_recipe="delayed"), "cluster": {"hardware": "dgx-h100", "gpus": 8}}
    fp8 = layer_builder(h100).km
    assert fp8.quantise(elements, columnwise=False) - fp8.launch_s == pytest.approx(3 * elements / fp8.hbm_bytes_per_s)
    assert fp8.quantise(elements) - fp8.launch_s == pytest.approx(4 * elements / fp8.hbm_bytes_per_s)


def test_frozen_lora_forward_pays_rowwise_casts_of_its_inputs(monkeypatch):
    """The same layer's forward is shorter by exactly the columnwise half of its four frozen
    linears' input casts (qkv, proj and fc1 read h-wide inputs, fc2 an ffn-wide one)."""
    from simcluster.parallelism.layer import LayerBuilder

    doc = {**lora_doc(precision="nvfp4", nvfp4_hadamard=False), "cluster": {"hardware": "gb200-nvl72", "gpus": 8}}
    builder = layer_builder(doc)
    km = builder.km
    elements = 8192 * (3 * 8192 + 28672)
    saved = (5.125 - 4.5625) * elements / km.hbm_bytes_per_s
    rowwise = compute_seconds(builder.layer(0, "F"))
    monkeypatch.setattr(LayerBuilder, "wgrads_inputs", property(lambda self: True))  # as if the base were trained
    both = compute_seconds(layer_builder(doc).layer(0, "F"))
    assert both - rowwise == pytest.approx(saved, rel=1e-9)


def test_op_fused_frozen_linears_quantise_only_the_rowwise_output_gradient(monkeypatch):
    """TransformerEngine's op fuser (``te.ops.BasicLinear``) asks its grad-output quantizer for
    ``set_usage(rowwise=True, columnwise=weight_requires_grad)``: under ``lora.op_fuser`` the
    backward of a frozen layer casts each output gradient rowwise only: its four linears' output
    widths per token (qkv 10240, proj 8192, fc1 57344, fc2 8192) save the columnwise copy's bytes
    at the stochastic-rounding rate. TE's ``Linear`` module cast both copies for a frozen weight
    (TransformerEngine issue 1693, April 2025), so without the fuser both stay."""
    from simcluster.compute import NVFP4_SR_SLOWDOWN
    from simcluster.parallelism.layer import LayerBuilder

    doc = {**lora_doc(precision="nvfp4", nvfp4_hadamard=False), "cluster": {"hardware": "gb200-nvl72", "gpus": 8}}
    fused = {**doc, "lora": {**doc["lora"], "op_fuser": True}}
    km = layer_builder(fused).km
    elements = 8192 * (10240 + 8192 + 2 * 28672 + 8192)
    saved = (5.125 - 4.5625) * elements * NVFP4_SR_SLOWDOWN / km.hbm_bytes_per_s
    rowwise = compute_seconds(layer_builder(fused).layer(0, "B"))
    monkeypatch.setattr(LayerBuilder, "wgrads_grads", property(lambda self: True))  # as TE's Linear module
    both = compute_seconds(layer_builder(fused).layer(0, "B"))
    assert both - rowwise == pytest.approx(saved, rel=1e-9)
    monkeypatch.undo()
    assert layer_builder(doc).wgrads_grads and not layer_builder(fused).wgrads_grads


def nvfp4_lora_doc(**training) -> dict:
    """NVIDIA's MLPerf v5.1 llama2_70b_lora layout on 8 GB300: NVFP4 with the frozen weights
    quantised once (config_common_fp4.sh: PRE_QUANTIZED_MODEL=True)."""
    doc = lora_doc(precision="nvfp4", fused_cross_entropy=False, **training)
    return {**doc, "cluster": {"hardware": "gb300-nvl72", "gpus": 8}}


def test_nvfp4_parameters_hold_both_directions_and_are_never_cast():
    """``training.fp4_param``: each frozen weight an NVFP4 tensor with rowwise and columnwise
    data, 2 x (4 bits + an E4M3 scale per 16) = 1.125 B in place of the 16-bit 2 B and TE's
    cached copy; no forward weight cast."""
    cast = build_context(scenario_from_dict(nvfp4_lora_doc()))
    stored = build_context(scenario_from_dict(nvfp4_lora_doc(fp4_param=True)))
    frozen = memory_by_stage(cast)[0].frozen_params_per_gpu
    layer_weights = 80 * (8192 * (8192 + 2 * 1024) + 8192 * 8192 + 3 * 8192 * 28672)
    cached = memory_by_stage(cast)[0].params_bytes - memory_by_stage(stored)[0].params_bytes
    # the 16-bit weight (2 B) goes; its cached NVFP4 copy (1.125 B) stays as the parameter itself
    # (memory.fp8_weight_bytes counts the two norms' 8192 weights a layer with the linears)
    assert cached == pytest.approx(2.0 * (layer_weights + 80 * 2 * 8192))
    assert frozen == memory_by_stage(stored)[0].frozen_params_per_gpu
    with_casts = compute_seconds(layer_builder(nvfp4_lora_doc()).layer(0, "F"))
    without = compute_seconds(layer_builder(nvfp4_lora_doc(fp4_param=True)).layer(0, "F"))
    km = layer_builder(nvfp4_lora_doc()).km
    weights = layer_weights / 80
    # four casts (qkv, proj, fc1, fc2), each its own kernel: one amax read, one read writing both copies
    assert with_casts - without == pytest.approx(km.quantise(weights, weight=True) + 3 * km.launch_s, rel=1e-9)


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({**lora_doc(precision="fp8", fp4_param=True), "cluster": {"hardware": "gb300-nvl72", "gpus": 8}},
         "set training.precision nvfp4"),
        ({**nvfp4_lora_doc(fp4_param=True), "lora": {"rank": 0}}, "add lora: or drop it"),
    ],
)
def test_nvfp4_parameters_outside_a_frozen_nvfp4_run_are_refused(doc, fragment):
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(doc))
    assert err.value.field == "training.fp4_param"
    assert fragment in str(err.value)


def test_weight_cache_setting_is_inert_beside_nvfp4_parameters():
    """NVFP4 parameters are never cast, so ``fp8_weight_cache: false`` (cast every microbatch)
    changes nothing and is named as inert."""
    from simcluster.inert import inert_settings

    ctx = build_context(scenario_from_dict(nvfp4_lora_doc(fp4_param=True, fp8_weight_cache=False)))
    notes = {n.setting: n for n in inert_settings(ctx)}
    assert notes["training.fp8_weight_cache"].where == "with training.fp4_param"
    both = [run(nvfp4_lora_doc(fp4_param=True, fp8_weight_cache=c)).summary["step_time_s"] for c in (True, False)]
    assert both[0] == both[1]


def test_op_fuser_runs_the_adapters_scale_and_adds_inside_the_gemms():
    """TransformerEngine's op fuser (NeMo's TEFusedLoRALinear): ForwardLinearScaleAdd makes the
    scale and the add into the base output the B GEMM's epilogue (10 B per output element become
    the one extra read of its C, 2 B); BackwardLinearScale takes the scale as the B dgrad's alpha
    (4 B gone); BackwardLinearAdd accumulates the adapter's input gradient in the base dgrad
    (6 B become 2); its Dropout op runs TransformerEngine's fused kernel, a 1-bit mask where
    PyTorch's is a 1-byte bool (7/8 B less written forward and read backward per input element).
    qkv and proj: outputs 10240 + 8192, inputs 8192 + 8192 wide."""
    plain = layer_builder(lora_doc())
    fused = layer_builder({**lora_doc(), "lora": {"rank": 16, "dropout": 0.1, "op_fuser": True}})
    km, tokens = plain.km, 8192
    n, k = 10240 + 8192, 8192 + 8192
    forward = compute_seconds(plain.layer(0, "F")) - compute_seconds(fused.layer(0, "F"))
    assert forward == pytest.approx(tokens * (n * (10 - 2) + k * 7 / 8) / km.hbm_bytes_per_s, rel=1e-9)
    backward = compute_seconds(plain.layer(0, "B")) - compute_seconds(fused.layer(0, "B"))
    assert backward == pytest.approx(tokens * (4 * n + 4 * k + k * 7 / 8) / km.hbm_bytes_per_s, rel=1e-9)
    # NeMo builds the fused adapter at tp 1 only: at tp 2 the setting changes nothing
    tp2 = {**lora_doc(tp=2), "lora": {"rank": 16, "dropout": 0.1, "op_fuser": True}}
    assert compute_seconds(layer_builder(tp2).layer(0, "F")) == compute_seconds(layer_builder(lora_doc(tp=2)).layer(0, "F"))


def test_op_fused_dropout_keeps_a_one_bit_mask():
    """TransformerEngine's fused dropout (te.ops.Dropout on a 16-bit input of a multiple of 16
    elements: tex.dropout_fwd allocates numel / 8 bytes of mask) keeps 1/8 B per adapter input
    element where PyTorch's native_dropout keeps a 1-byte bool: qkv's and proj's inputs, 8192 +
    8192 wide, over 8192 tokens: 7/8 x 16384 x 8192 B less per layer and microbatch."""
    def kept(op_fuser):
        ctx = build_context(scenario_from_dict(
            {**lora_doc(), "lora": {"rank": 16, "dropout": 0.1, "op_fuser": op_fuser}}))
        return layer_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training, 0)

    assert kept(False) - kept(True) == pytest.approx(7 / 8 * (8192 + 8192) * 8192, rel=1e-12)
