"""torch.autocast's weight casts and fp32 gradient accumulation (``training.autocast``,
``parallelism/autocast_casts.py``).

Sources: ``aten/src/ATen/autocast_mode.cpp`` ``cached_cast`` (an fp32 leaf requiring grad is
cast once per autocast region and cached; ``torch.autocast.__exit__`` clears the cache when the
outermost region exits), ``_to_copy``'s derivative (``ToCopyBackward0``: the 16-bit gradient
cast back to the parameter's fp32), ``torch/csrc/autograd/functions/accumulate_grad.h`` (the
first gradient after ``zero_grad(set_to_none=True)`` is taken as ``.grad``, later ones added in
place). Bytes: fp32 read 4 + bf16 written 2 per weight element per forward; bf16 read 2 + fp32
written 4 per gradient element per backward; 4 + 4 read + 4 written per add.
"""

from __future__ import annotations

import pytest
from engine_helpers import gpt_model, run

from simcluster.context import build_context
from simcluster.engine.plan import kernel_model
from simcluster.memory import autocast_cache_bytes, autocast_weight_bytes, chunk_activation_bytes
from simcluster.parallelism import autocast_casts
from simcluster.parallelism.wgrad import ACCUM_FP32_INPLACE, accumulation_bytes
from simcluster.scenario import scenario_from_dict

H, V, LAYERS = 2048, 32000, 2


def _scenario(autocast: bool, m: int = 4, gpus: int = 1, **training: object) -> dict:
    return {
        "name": "autocast",
        "framework": "pytorch-ddp",
        "model": gpt_model(LAYERS, H, V),
        "cluster": {
            "hardware": "dgx-h100",
            "gpus": gpus,
            "profile": {"efficiency": {"collective_sms": 0, "host_op_us": 0.0}, "gpu": {"speed_spread": 0.0}},
        },
        "training": {
            "seq_len": 1024, "micro_batch": 1, "global_batch": m * gpus, "precision": "bf16",
            "autocast": autocast, **training,
        },
    }


def _ctx(data: dict):
    return build_context(scenario_from_dict(data))


@pytest.mark.parametrize("m, per_param", [(1, 6.0), (2, 12.0), (4, 15.0)])
def test_gradient_bytes_are_the_cast_and_all_but_the_first_add(m, per_param):
    # a step of m microbatches: m casts (6 B) and m - 1 adds (12 B), averaged per microbatch
    ctx = _ctx(_scenario(True, m=m))
    assert accumulation_bytes(ctx.scenario.training, ctx.layout) == pytest.approx(per_param)
    # the embedding's fp32 gradient is not cast, only added
    assert accumulation_bytes(ctx.scenario.training, ctx.layout, gemm=False) == pytest.approx(12.0 * (m - 1) / m)


def test_a_16bit_model_keeps_its_in_place_add():
    ctx = _ctx(_scenario(False))
    assert accumulation_bytes(ctx.scenario.training, ctx.layout) == ACCUM_FP32_INPLACE


def test_forward_casts_each_weight_once_per_microbatch():
    """The forward of one microbatch reads every fp32 linear weight and writes its bf16 cast:
    6 B per element, one kernel per weight tensor, and nothing without autocast."""
    ctx = _ctx(_scenario(True))
    km = kernel_model(ctx)
    weights = [H * 3 * H, H * H, H * 4 * H, 4 * H * H]  # GPT: QKV, out, fc1, fc2 (no GQA, no gate)
    expected = sum(km.memory(6.0 * n) for n in weights)
    got = autocast_casts.forward_cast_seconds(km, ctx.scenario.training, ctx.layout, weights)
    assert got == pytest.approx(expected)
    plain = _ctx(_scenario(False))
    assert autocast_casts.forward_cast_seconds(km, plain.scenario.training, plain.layout, weights) == 0.0


def _phase_memory(data: dict, phase: str) -> float:
    ev = run(data).events
    ev = ev[(ev["rank"] == 0) & (ev["kind"] == phase)]
    return float((ev["end_s"] - ev["start_s"]).sum())


def test_the_simulated_forwards_carry_the_casts():
    """Over a step the forwards run m x (every linear weight, LM head included, cast at 6 B per
    element) longer than the same step without autocast; the embedding is not cast."""
    m = 2
    with_casts, without = _scenario(True, m=m), _scenario(False, m=m)
    ctx = _ctx(with_casts)
    km = kernel_model(ctx)
    layer = [H * 3 * H, H * H, H * 4 * H, 4 * H * H]
    casts = LAYERS * sum(km.memory(6.0 * n) for n in layer) + km.memory(6.0 * V * H)
    delta = _phase_memory(with_casts, "forward") - _phase_memory(without, "forward")
    assert delta == pytest.approx(m * casts, rel=1e-6)


def test_fsdp_gathers_16bit_weights_so_nothing_is_cast():
    data = {**_scenario(True, gpus=2), "framework": "torchtitan", "parallel": {"zero": 3}}
    ctx = _ctx(data)
    assert not autocast_casts.casts_weights(ctx.scenario.training, ctx.layout)
    assert accumulation_bytes(ctx.scenario.training, ctx.layout) == 0.0


def test_a_pipeline_caches_each_cast_for_the_whole_step():
    """Under a pipeline the calibrate loop runs schedule.step() inside one autocast region, so
    the cast cache holds one bf16 copy of each of the stage's linear weights (2 B an element)
    from its first forward to the step's end, shared by every microbatch: in the stage's
    static memory once, not in each microbatch's stash."""
    piped = {**_scenario(True, m=4, gpus=2), "parallel": {"pp": 2}}
    ctx = _ctx(piped)
    layers_per_stage = LAYERS // 2
    linear = H * 3 * H + H * H + H * 4 * H + 4 * H * H
    first = autocast_cache_bytes(ctx.model, ctx.layout, ctx.scenario.training, ctx.chunks[0])
    last = autocast_cache_bytes(ctx.model, ctx.layout, ctx.scenario.training, ctx.chunks[1])
    assert first == pytest.approx(2.0 * layers_per_stage * linear, rel=1e-3)  # layer norms' h-wide weights beside
    assert last - first == pytest.approx(2.0 * V * H)  # and the LM head's
    assert autocast_weight_bytes(ctx.model, ctx.layout, ctx.scenario.training, 0) == 0.0
    plain = _ctx({**_scenario(False, m=4, gpus=2), "parallel": {"pp": 2}})
    assert chunk_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training, ctx.chunks[0][0]) == (
        chunk_activation_bytes(plain.model, plain.layout, plain.scenario.training, plain.chunks[0][0])
    )
