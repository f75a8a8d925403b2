"""TransformerEngine's quantised weight copies (``parallelism/fp8_weights.py``).

Sources: TransformerEngine ``module/base.py`` ``get_weight_workspace`` (a weight cast is cached
under ``cache_name`` and refreshed only when ``is_first_microbatch``), ``Float8Tensor`` (``_data``
and, where ``nvte_is_non_tn_fp8_gemm_supported`` is false, as on Hopper, ``_transpose``: 1 B
per element each), ``MXFP8Tensor`` (row- and column-wise data with one E8M0 scale per 32
values each); Megatron-Core ``TELinear.forward`` (passes ``is_first_microbatch`` unless
``disable_parameter_transpose_cache``) and its uint8 parameter buffer for FP8 parameters.
"""

from __future__ import annotations

import pytest
from engine_helpers import compute_seconds, layer_builder, pipeline_scenario

from simcluster.context import build_context
from simcluster.memory_report import memory_by_stage
from simcluster.scenario import scenario_from_dict

M = 4  # microbatches a step


def _data(hardware: str = "dgx-h100", **training) -> dict:
    data = pipeline_scenario(1, M, "1f1b", layers=2)
    data["cluster"]["hardware"] = hardware
    data["training"].update(precision="fp8", **training)
    data["parallel"]["zero"] = 1  # Megatron keeps FP8 parameters only beside the distributed optimizer
    return data


def _params_and_weights(data: dict) -> tuple[float, float]:
    """(the GPU's parameter bytes, its transformer layers' weight elements)."""
    ctx = build_context(scenario_from_dict(data))
    layers = sum(ctx.model.layer_params(i) for i in range(ctx.model.layers))
    return memory_by_stage(ctx)[0].params_bytes, layers


@pytest.mark.parametrize(
    ("hardware", "recipe", "per_weight"),
    [
        ("dgx-h100", "delayed", 2.0),  # FP8 data + its transpose (Hopper takes K-major only)
        ("dgx-h100", "current", 2.0),
        ("dgx-b200", "current", 1.0),  # Blackwell reads one copy in any layout
        ("dgx-b200", "block", 2.0 + 2 / 32),  # MXFP8: both directions, a scale per 32 each
    ],
)
def test_the_cached_copy_costs_its_bytes_per_weight(hardware, recipe, per_weight):
    cached, weights = _params_and_weights(_data(hardware, fp8_recipe=recipe))
    uncached, _ = _params_and_weights(_data(hardware, fp8_recipe=recipe, fp8_weight_cache=False))
    assert cached - uncached == pytest.approx(per_weight * weights, rel=1e-12)


def test_fp8_parameters_take_one_byte_and_hopper_keeps_their_transpose():
    """Megatron-Core's buffer holds FP8 parameters as uint8 (1 B where bf16 takes 2); Hopper
    adds the transpose (1 B), Blackwell under a per-tensor scale nothing."""
    plain, weights = _params_and_weights(_data("dgx-h100", fp8_weight_cache=False))
    fp8, _ = _params_and_weights(_data("dgx-h100", fp8_param_gather=True))
    assert fp8 == pytest.approx(plain, rel=1e-12)
    plain, weights = _params_and_weights(_data("dgx-b200", fp8_recipe="current", fp8_weight_cache=False))
    fp8, _ = _params_and_weights(_data("dgx-b200", fp8_recipe="current", fp8_param_gather=True))
    assert plain - fp8 == pytest.approx(weights, rel=1e-12)


def test_bf16_has_no_copy():
    bf16 = _data()
    bf16["training"]["precision"] = "bf16"
    with_flag = _data(fp8_weight_cache=False)
    with_flag["training"]["precision"] = "bf16"
    assert _params_and_weights(bf16)[0] == _params_and_weights(with_flag)[0]


def _forward(data: dict) -> float:
    b = layer_builder(data)
    return compute_seconds(b.layer(0, "F"))


def test_a_cached_cast_is_charged_once_per_step():
    """Uncached, every forward casts the layer's four weights (QKV, proj, fc1, fc2 of a GPT
    block, hidden 4096, ffn 16384): a cast-transpose each, 2 + 1 + 1 B per element and one
    kernel under delayed scaling on Hopper. Cached, the first microbatch's cast is 1/M of it."""
    cached, uncached = _forward(_data()), _forward(_data(fp8_weight_cache=False))
    km = layer_builder(_data()).km
    h = 4096
    weights = [h * 3 * h, h * h, h * 4 * h, 4 * h * h]
    cast = sum(4.0 * n / km.hbm_bytes_per_s + km.launch_s for n in weights)
    assert uncached - cached == pytest.approx(cast * (1 - 1 / M), rel=1e-9)


def test_fp8_parameters_on_blackwell_cast_nothing_and_hopper_transposes():
    """FP8 parameters are used as they are; Hopper makes their transpose (read 1 B, write 1 B)
    once a step."""
    b200 = _data("dgx-b200", fp8_recipe="current", fp8_param_gather=True)
    assert _forward(b200) == _forward({**b200, "training": {**b200["training"], "fp8_weight_cache": False}})
    h100 = _data(fp8_param_gather=True)
    km = layer_builder(h100).km
    h = 4096
    weights = [h * 3 * h, h * h, h * 4 * h, 4 * h * h]
    transpose = sum(2.0 * n / km.hbm_bytes_per_s + km.launch_s for n in weights)
    uncached = _forward({**h100, "training": {**h100["training"], "fp8_weight_cache": False}})
    assert uncached - _forward(h100) == pytest.approx(transpose * (1 - 1 / M), rel=1e-9)


def test_frameworks_without_megatron_cores_te_layers_cast_every_microbatch():
    """torchao's float8 linears (torchtitan) and a TE module called without is_first_microbatch
    recast the weight in each forward; a scenario that says otherwise is kept."""
    data = _data()
    data["framework"] = "pytorch-ddp"
    data["parallel"]["zero"] = 0
    assert build_context(scenario_from_dict(data)).scenario.training.fp8_weight_cache is False
    data["training"]["fp8_weight_cache"] = True
    assert build_context(scenario_from_dict(data)).scenario.training.fp8_weight_cache is True
    assert build_context(scenario_from_dict(_data())).scenario.training.fp8_weight_cache is True


def test_the_memory_report_names_the_copies(capsys):
    """``simcluster memory --json`` carries them (of params_bytes); the table says what they are."""
    from simcluster.cli import main
    from simcluster.memory_report import memory_summary

    data = _data()
    ctx = build_context(scenario_from_dict(data))
    weights = sum(ctx.model.layer_params(i) for i in range(ctx.model.layers))
    assert memory_summary(ctx)["fp8_weight_bytes"] == pytest.approx(2.0 * weights, rel=1e-12)
    b200 = build_context(scenario_from_dict(_data("dgx-b200", fp8_recipe="current", fp8_param_gather=True)))
    assert memory_summary(b200)["fp8_weight_bytes"] == pytest.approx(-weights, rel=1e-12)
    assert main(["memory", "llama3-8b-8xh100", "--set", "training.precision=fp8"]) == 0
    assert "quantised weight copies: 13.00 GiB" in capsys.readouterr().out


def test_mxfp8_parameters_are_quantised_again_once_a_step():
    """Megatron-Core gathers MXFP8 parameters in 16 bits and every rank quantises each weight
    from them in both directions after the gather (DistributedDataParallel.start_param_sync:
    "The parameters are cast from bf16 to MXFP8 during copy"; Megatron-LM pull request 4987):
    once a step, 2 + 1 + 1 B per element and one kernel each, 1/M of it per microbatch, as a
    cached cast of 16-bit weights is, and whatever the transpose cache says."""
    mx = _data("dgx-b200", fp8_recipe="block", fp8_param_gather=True)
    cached_16bit = _data("dgx-b200", fp8_recipe="block")
    assert _forward(mx) == pytest.approx(_forward(cached_16bit), rel=1e-12)
    uncached = {**mx, "training": {**mx["training"], "fp8_weight_cache": False}}
    assert _forward(uncached) == pytest.approx(_forward(mx), rel=1e-12)
    # their memory: both directions (1 B each) and a scale per 32 each in place of the 2 B
    # 16-bit weight, with the cache or without
    both, weights = _params_and_weights(mx)
    one, _ = _params_and_weights(uncached)
    plain, _ = _params_and_weights(_data("dgx-b200", fp8_recipe="block", fp8_weight_cache=False))
    assert both == one and both - plain == pytest.approx(2 / 32 * weights, rel=1e-12)


def _backward(data: dict) -> float:
    b = layer_builder(data)
    return compute_seconds(b.layer(0, "B"))


def _fsdp(hardware: str = "dgx-h100", framework: str | None = None, **training) -> dict:
    data = _data(hardware, **training)
    data["parallel"]["zero"] = 3
    if framework:
        data["framework"] = framework
    return data


def test_megatron_fsdp_transposes_its_gathered_fp8_parameters_in_each_backward_on_hopper():
    """Megatron FSDP gathers FP8 parameters as their rowwise data, again for each backward, and
    on Hopper TransformerEngine makes the input-gradient GEMM's transpose after that gather
    (megatron_fsdp ``fp8_create_transpose_cache`` -> ``post_all_gather_processing`` ->
    ``Float8Tensor._create_transpose`` where ``is_non_tn_fp8_gemm_supported()`` is false): a
    read and a write of each byte, one kernel per weight, in every microbatch's backward."""
    h = 4096
    weights = [h * 3 * h, h * h, h * 4 * h, 4 * h * h]
    for recipe in ("delayed", "current", "block"):
        fp8 = _fsdp(fp8_recipe=recipe, fp8_param_gather=True)
        km = layer_builder(fp8).km
        transpose = sum(2.0 * n / km.hbm_bytes_per_s + km.launch_s for n in weights)
        assert _backward(fp8) - _backward(_fsdp(fp8_recipe=recipe)) == pytest.approx(transpose, rel=1e-9), recipe
    # none where FP8 GEMMs take either layout (Blackwell, per-tensor) or an MXFP8 weight's
    # backward gathers its columnwise plane; none under PyTorch's FSDP or ZeRO-1 (TransformerEngine's
    # linears there: torchao's recast its 16-bit weights without the FP8 gather, test_torchao_float8.py)
    for data in (
        _fsdp("dgx-b200", fp8_recipe="current", fp8_param_gather=True),
        _fsdp("dgx-b200", fp8_recipe="block", fp8_param_gather=True),
        _fsdp("dgx-h100", "torchtitan", fp8_param_gather=True, fp8_library="te"),
        _data(fp8_param_gather=True),
    ):
        plain = {**data, "training": {k: v for k, v in data["training"].items() if k != "fp8_param_gather"}}
        assert _backward(data) == pytest.approx(_backward(plain), rel=1e-12), data


def test_a_pipeline_keeping_its_gathered_fp8_parameters_transposes_them_once_a_step():
    """Under a pipeline ZeRO-3 gathers a stage's parameters once a step and keeps them
    (``Layout.zero3_pipelined``): the transpose made in the first backward stays valid, so a
    microbatch's backward carries 1/m of it."""
    h = 4096
    weights = [h * 3 * h, h * h, h * 4 * h, 4 * h * h]
    piped = pipeline_scenario(2, M, "1f1b", layers=2)
    piped["training"].update(precision="fp8", fp8_recipe="current")
    piped["parallel"]["zero"] = 3
    plain = _backward(piped)
    piped["training"]["fp8_param_gather"] = True
    km = layer_builder(piped).km
    transpose = sum(2.0 * n / km.hbm_bytes_per_s + km.launch_s for n in weights)
    assert _backward(piped) - plain == pytest.approx(transpose / M, rel=1e-9)


def test_megatron_fsdp_with_16_bit_parameters_casts_and_caches_as_zero_1_does():
    """Megatron FSDP leaves TransformerEngine's weight workspace on (Megatron-Core's TELinear
    passes is_first_microbatch; TE drops the cache only where it detects PyTorch's FSDP2): the
    gathered 16-bit weights are quantised on a step's first microbatch (1/M of the cast per
    microbatch) and each layer's whole copy is kept beside the sharded state, 2 B per weight
    element on Hopper. PyTorch's FSDP (torchtitan) is left out."""
    fsdp, zero1 = _fsdp(), _data()
    assert _forward(fsdp) - _forward(_fsdp(fp8_weight_cache=False)) == pytest.approx(
        _forward(zero1) - _forward(_data(fp8_weight_cache=False)), rel=1e-9
    )
    ctx = build_context(scenario_from_dict(fsdp))
    weights = sum(ctx.model.layer_params(i) for i in range(ctx.model.layers))
    from simcluster.memory_report import memory_summary

    assert memory_summary(ctx)["fp8_weight_bytes"] == pytest.approx(2.0 * weights, rel=1e-12)
    torch_fsdp = build_context(scenario_from_dict(_fsdp(framework="torchtitan")))
    assert memory_summary(torch_fsdp)["fp8_weight_bytes"] == 0.0
