"""NVFP4 training as TransformerEngine's NVFP4BlockScaling runs it on Blackwell: the transformer
linears' GEMMs on the FP4 tensor cores, each 16-bit operand quantised twice (rowwise, and a
Hadamard-transformed columnwise copy for the weight gradient), attention and the LM head at 16
bits.

Numbers checked against their sources: the dense FP4 peaks (NVIDIA's datasheets: sparse figures
halved), GB200's sustained cuBLASLt FP4 GEMM rates (Azure/AI-benchmarking-guide
ND_GB200_v6_results.md, 10,000 warm-up iterations) and NVFP4's storage, 4 bits per value plus an
E4M3 scale per block of 16.
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import layer_builder

from simcluster.activation_widths import gemm_input_bytes
from simcluster.compute import NVFP4_QUANTISE_BYTES, KernelModel
from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.hardware import load_profile
from simcluster.parallelism.shapes import Shapes
from simcluster.scenario import scenario_from_dict

LLAMA = {
    "name": "llama-test", "layers": 4, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336,
    "vocab": 32000, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
}  # fmt: skip
TOKENS = 8192


def _scenario(precision: str, hardware: str = "gb200-nvl72", **training) -> dict:
    return make_scenario(
        model=dict(LLAMA),
        cluster={"hardware": hardware, "gpus": 4},
        parallel={"tp": 1, "pp": 1},
        training={"seq_len": TOKENS, "micro_batch": 1, "global_batch": 8, "precision": precision, **training},
    )


@pytest.mark.parametrize(
    ("profile", "tflops"),
    [("dgx-b200", 9000), ("gb200-nvl72", 10000), ("gb300-nvl72", 15000)],  # 18, 20, 30 PF sparse
)
def test_dense_fp4_peaks_are_half_the_datasheets_sparse_figures(profile, tflops):
    assert load_profile(profile).peak_flops("nvfp4") == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize("profile", ["dgx-b200", "gb200-nvl72", "gb300-nvl72"])
@pytest.mark.parametrize("side", [8192, 16384])
def test_large_nvfp4_gemms_run_at_te_measured_ratio_over_fp8(profile, side):
    # TransformerEngine's GEMM profiling tutorial (B300, a 5B model's training GEMMs, kernels
    # alone): NVFP4 3.764 ms per layer against FP8 current scaling 6.812 ms, 1.81x
    fp4, fp8 = (KernelModel(load_profile(profile), p) for p in ("nvfp4", "fp8"))
    ratio = (fp8.gemm(side, side, side) - fp8.launch_s) / (fp4.gemm(side, side, side) - fp4.launch_s)
    assert ratio == pytest.approx(6.812 / 3.764, rel=0.01)


@pytest.mark.parametrize(("side", "tflops"), [(1024, 287.2), (2048, 1677.7), (4096, 5177.3)])
def test_small_gb200_nvfp4_gemms_run_at_the_measured_cublaslt_rates(side, tflops):
    # Azure ND GB200 v6, cuBLASLt FP4 after 10,000 warm-ups; at 4096^3 FP4 is 1.83x FP8 (5177.3 /
    # 2834.6), where TE's ratio takes over (rel 3%: the simulator's tile/wave quantisation on
    # 152 SMs applies on top of the curve)
    km = KernelModel(load_profile("gb200-nvl72"), "nvfp4")
    seconds = km.gemm(side, side, side) - km.launch_s
    assert 2 * side**3 / seconds / 1e12 == pytest.approx(tflops, rel=0.03)


def test_quantisation_reads_for_the_amaxes_and_writes_both_nvfp4_copies():
    km = layer_builder(_scenario("nvfp4")).km
    elements = TOKENS * 4096
    # amax read (2 B) + rowwise cast (2 B in, 4 bits + 1/16 B scale out) + columnwise the same
    assert NVFP4_QUANTISE_BYTES == pytest.approx(2 + 2 * (2 + 0.5 + 0.0625))
    assert km.quantise(elements) == pytest.approx(7.125 * elements / km.hbm_bytes_per_s + km.launch_s)
    assert km.quantise(elements, "bf16") == 0.0
    # gradients are rounded stochastically: TE pull request 2412 measures that cast at 4.5 TB/s
    # against 6.4 TB/s rounding to nearest
    sr = km.quantise(elements, gradient=True) - km.launch_s
    assert sr == pytest.approx((km.quantise(elements) - km.launch_s) * 6.4 / 4.5)


def test_weights_and_the_vanilla_recipe_cast_without_the_hadamard_transform():
    # TE recipe.py NVFP4BlockScaling: fp4_quant_fwd_weight takes no random Hadamard transform;
    # NVTE_NVFP4_DISABLE_RHT=1 drops it for every tensor and DISABLE_STOCHASTIC_ROUNDING=1 the
    # gradients' stochastic rounding (NVIDIA's MLPerf v5.1 config_common_fp4.sh sets both).
    # quantize_impl without RHT: an amax read (2 B), then one cast writing both copies
    # (2 B in, 2 x (4 bits + 1/16 B scale) out)
    km = layer_builder(_scenario("nvfp4")).km
    elements = TOKENS * 4096
    plain = 5.125 * elements / km.hbm_bytes_per_s + km.launch_s
    assert km.quantise(elements, weight=True) == pytest.approx(plain)
    vanilla = layer_builder(_scenario("nvfp4", nvfp4_hadamard=False, nvfp4_stochastic_rounding=False)).km
    assert vanilla.quantise(elements) == pytest.approx(plain)
    assert vanilla.quantise(elements, gradient=True) == pytest.approx(plain)
    no_rht = layer_builder(_scenario("nvfp4", nvfp4_hadamard=False)).km
    assert no_rht.quantise(elements, gradient=True) - km.launch_s == pytest.approx((plain - km.launch_s) * 6.4 / 4.5)


def test_the_nvfp4_layer_runs_fp4_gemms_and_pays_its_casts():
    nv, fp8 = layer_builder(_scenario("nvfp4")), layer_builder(_scenario("fp8", fp8_recipe="block"))
    gemms = nv.attention_gemms() + nv.mlp_gemms(LLAMA["ffn"])
    nv_work, fp8_work = dict(nv._gemms(gemms, "F").parts), dict(fp8._gemms(gemms, "F").parts)
    # (the forward casts activations, rounded to nearest; FP8's casts do not depend on the phase)
    assert nv_work["gemm"] < 0.6 * fp8_work["gemm"]  # FP4 GEMMs at 1.81x FP8's rate
    # casts per element: an NVFP4 input 7.125 B, its weight 5.125 B (no Hadamard transform),
    # once a step: half of the weights' casts in each of its 2 microbatches (global batch 8 over
    # dp 4); one kernel per cast, each with its launch gap
    launches = len(gemms) * (1 + 1 / 2) * nv.km.launch_s
    nbytes = sum(7.125 * TOKENS * g.k + 5.125 * g.k * g.n / 2 for g in gemms)
    assert nv_work["memory"] - launches == pytest.approx(nbytes / nv.km.hbm_bytes_per_s, rel=1e-6)
    assert nv_work["memory"] > fp8_work["memory"]  # MXFP8's cast-transpose moves 4 B an element
    assert nv.km.act_dtype == "bf16"  # attention and the LM head stay 16-bit


def test_stored_inputs_and_tp_gathers_are_nvfp4_sized():
    # the weight gradient keeps the columnwise NVFP4 copy: 4 bits + an E4M3 scale per 16 values
    assert gemm_input_bytes("nvfp4") == pytest.approx(0.5625)
    ctx = build_context(scenario_from_dict(_scenario("nvfp4")))
    shapes = Shapes(ctx.model, ctx.layout, ctx.scenario.training)
    assert shapes.tp_gather_bytes == pytest.approx(TOKENS * 4096 * 0.5625)
    assert shapes.hidden_bytes == TOKENS * 4096 * 2  # reduce-scatters and p2p stay 16-bit


def test_nvfp4_runs_faster_than_fp8_on_the_same_layout_and_spells_like_papers():
    nv = simulate(scenario_from_dict(_scenario("NVFP4"))).summary
    fp8 = simulate(scenario_from_dict(_scenario("fp8", fp8_recipe="block"))).summary
    assert nv["step_time_s"] < fp8["step_time_s"]
    assert nv["mfu"] == pytest.approx(nv["model_flops_per_step"] / (nv["step_time_s"] * 4 * 10000e12))
    assert scenario_from_dict(_scenario("fp4")).training.precision == "nvfp4"


@pytest.mark.parametrize("hardware", ["dgx-h100", "dgx-a100"])
def test_gpus_without_fp4_tensor_cores_refuse_nvfp4(hardware):
    with pytest.raises(UserError, match="nvfp4 needs FP4 tensor cores") as err:
        build_context(scenario_from_dict(_scenario("nvfp4", hardware=hardware)))
    assert err.value.field == "training.precision" and "dgx-b200" in str(err.value)


def test_list_precisions_names_every_schema_precision_and_where_it_runs(capsys):
    from typing import get_args

    from simcluster.cli import main
    from simcluster.commands.listing import PRECISIONS
    from simcluster.scenario import TrainingSection

    assert set(PRECISIONS) == set(get_args(TrainingSection.model_fields["precision"].annotation))
    assert main(["list", "precisions"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["nvfp4"].endswith("dgx-b200, dgx-b300, gb200-nvl72, gb300-nvl72")  # the FP4 peaks
    assert "dgx-h100" in lines["fp8"] and "dgx-a100," not in lines["fp8"]
