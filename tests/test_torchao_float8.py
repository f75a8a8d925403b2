"""torchao's Float8Linear casts (``training.fp8_library: torchao``, framework torchtitan's).

Source: pytorch/ao ``torchao/float8/float8_linear.py`` (``matmul_with_hp_or_float8_args`` saves the
16-bit input and casts it again in the backward for the weight gradient) and ``float8_ops.py``
(``preprocess_addmm``: torch._scaled_mm's second operand column-major, so dX = dY @ W copies the
row-major FP8 weight), read at 2d812af / 3e4098f. Byte counts per element: a rowwise current-scaled
cast reads the 16-bit tensor twice (amax, cast) and writes 1 B; the weight copy reads and writes 1 B.
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import layer_builder

from simcluster.context import build_context
from simcluster.parallelism.segments import Compute
from simcluster.scenario import scenario_from_dict


def _data(library: str, hardware: str = "dgx-h100", framework: str | None = None) -> dict:
    data = make_scenario(
        cluster={"hardware": hardware, "gpus": 8},
        parallel={"tp": 1, "pp": 1, "zero": 1},
        training={"precision": "fp8", "fp8_recipe": "current", "fp8_library": library, "seq_len": 2048,
                  "global_batch": 8},
    )  # fmt: skip
    if framework:
        data["framework"] = framework
        del data["training"]["fp8_library"]
        data["parallel"]["zero"] = 3 if framework == "torchtitan" else 1  # FSDP2: zero 0 or 3
    return data


def _memory(data: dict, phase: str) -> float:
    segs = layer_builder(data).layer(0, phase)
    return sum(dict(s.work.parts).get("memory", 0.0) for s in segs if isinstance(s, Compute))


def _linears(data: dict) -> tuple[float, list[tuple[float, float]], float]:
    b = layer_builder(data)
    gemms = b.attention_gemms() + b.mlp_gemms(b.shapes.model.ffn)
    return b.shapes.tokens, [(g.k, g.n) for g in gemms], b.km.hbm_bytes_per_s


def test_torchtitan_runs_torchao_and_megatron_te():
    assert build_context(scenario_from_dict(_data("te", framework="torchtitan"))).scenario.training.fp8_library == "torchao"
    megatron = build_context(scenario_from_dict(_data("te", framework="megatron-core")))
    assert megatron.scenario.training.fp8_library == "te"


def test_forward_cast_writes_the_rowwise_copy_only_on_hopper():
    # TE's cast-transpose writes 1 B more per input element than torchao's rowwise cast, and its
    # weight cast (one microbatch a step here: cast once, whole) its transposed copy, 1 B more per
    # weight element than torchao's rowwise weight cast
    tokens, shapes, hbm = _linears(_data("te"))
    saved = sum(tokens * k + k * n for k, n in shapes) / hbm
    assert _memory(_data("te"), "F") - _memory(_data("torchao"), "F") == pytest.approx(saved, rel=1e-9)


def test_backward_recasts_the_input_and_copies_the_weight_column_major():
    tokens, shapes, hbm = _linears(_data("te"))
    b = layer_builder(_data("torchao"))
    launch = b.km.launch_s
    kernels = b.km.cast_kernels(1, "fp8")  # amax, scale, cast: current scaling's three
    # per linear: (2 amax + 2 read + 1 write) B per input element, then 2 B per weight element
    # copied and the 16-bit weight cast again (5 B per weight element: torchao saved it unscaled)
    recast = sum(5 * k * n / hbm + kernels * launch for k, n in shapes)
    want = sum(5 * tokens * k / hbm + kernels * launch + (2 * k * n / hbm + launch) for k, n in shapes) + recast
    assert _memory(_data("torchao"), "B") - _memory(_data("te"), "B") == pytest.approx(want, rel=1e-9)


def test_blackwell_output_gradient_takes_its_second_layout():
    # under a per-tensor scale TE writes one copy on B200; torchao's weight gradient needs dY's
    # transposed layout too: 1 B more per output-gradient element
    tokens, shapes, hbm = _linears(_data("te", "dgx-b200"))
    b = layer_builder(_data("torchao", "dgx-b200"))
    launch, kernels = b.km.launch_s, b.km.cast_kernels(1, "fp8")
    recast = sum(5 * k * n / hbm + kernels * launch for k, n in shapes)
    want = sum(5 * tokens * k / hbm + kernels * launch + tokens * n / hbm + (2 * k * n / hbm + launch) for k, n in shapes)
    want += recast
    got = _memory(_data("torchao", "dgx-b200"), "B") - _memory(_data("te", "dgx-b200"), "B")
    assert got == pytest.approx(want, rel=1e-9)
    # and the forward casts alike there: both write one rowwise copy, of the input and the weight
    assert _memory(_data("torchao", "dgx-b200"), "F") == pytest.approx(_memory(_data("te", "dgx-b200"), "F"), rel=1e-12)


def test_block_scales_keep_transformer_engines_casts():
    te, torchao = _data("te"), _data("torchao")
    for data in (te, torchao):
        data["training"]["fp8_recipe"] = "block"
    assert _memory(torchao, "B") == _memory(te, "B")


def test_fsdp2_without_fp8_gathers_casts_each_weight_in_every_forward_and_backward():
    """torchtitan's default (enable_fsdp_float8_all_gather off): FSDP2 gathers the 16-bit weight
    and Float8Linear casts it in the forward and, having saved it unscaled, again in the backward
    (an amax read and a rowwise cast, 5 B per weight element and current scaling's three kernels
    each); with the FP8 all-gather the weight arrives cast and neither runs."""
    plain = _data("te", framework="torchtitan")
    gathered = {**plain, "training": {**plain["training"], "fp8_param_gather": True}}
    _, shapes, hbm = _linears(plain)
    b = layer_builder(plain)
    casts = sum(5 * k * n / hbm + b.km.cast_kernels(1, "fp8") * b.km.launch_s for k, n in shapes)
    for phase in ("F", "B"):
        assert _memory(plain, phase) - _memory(gathered, phase) == pytest.approx(casts, rel=1e-9), phase


def test_torchao_keeps_no_quantised_weight_copy():
    """TransformerEngine keeps each weight's FP8 cast (and Hopper's transpose) across
    microbatches, 2 B a weight element here; torchao keeps the 16-bit weight alone."""
    from simcluster.memory import fp8_weight_bytes

    def copies(library: str) -> float:
        ctx = build_context(scenario_from_dict(_data(library)))
        return fp8_weight_bytes(ctx.model, ctx.layout, ctx.scenario.training, ctx.chunks[0],
                                ctx.profile.gpu.compute_capability)

    assert copies("te") > 0
    assert copies("torchao") == 0
