"""Hardware FLOPs (HFU): model FLOPs plus what recomputation reruns.

Narayanan et al. 2021 (arXiv 2104.04473) eq. (3) counts full recomputation's extra forward:
96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) per step against 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h))
without it. Korthikanti et al. 2022 (arXiv 2205.05198) Sec. 5: selective recomputation reruns the
core attention, whose forward matmuls (Q K^T and softmax x V) are 2*s*s*h FLOPs each per
sequence and layer.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.flops import megatron_flops_per_step, recompute_flops_per_token
from simcluster.model import build_model
from simcluster.scenario import scenario_from_dict
from tests.conftest import GPT_LIKE, make_scenario

# Narayanan's formula counts the 12*h^2 weight matrices of a layer and the V*h LM head only
GPT_NO_BIAS = {**GPT_LIKE, "bias": False}


def _summary(**training):
    raw = make_scenario(
        model=GPT_NO_BIAS,
        parallel={"tp": 2, "pp": 2},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8, **training},
    )
    return simulate(build_context(scenario_from_dict(raw))).summary


def test_full_recompute_hardware_flops_are_narayanans_96_formula():
    s = _summary(recompute="full")
    m = GPT_NO_BIAS
    args = (8, 2048, m["layers"], m["hidden"], m["vocab"])
    assert s["model_flops_per_step"] == pytest.approx(megatron_flops_per_step(*args, recompute=False), rel=1e-12)
    assert s["hardware_flops_per_step"] == pytest.approx(megatron_flops_per_step(*args, recompute=True), rel=1e-12)
    assert s["hfu"] / s["mfu"] == pytest.approx(
        s["hardware_flops_per_step"] / s["model_flops_per_step"], rel=1e-12
    )


def test_partial_full_recompute_counts_only_the_recomputed_layers():
    # 8 layers over pp 2: 4 per stage, the first 1 of each recomputed -> 2 of 8 layers rerun
    m = GPT_NO_BIAS
    none, part = _summary(), _summary(recompute="full", recompute_num_layers=1)
    whole = _summary(recompute="full")
    extra_all = whole["hardware_flops_per_step"] - whole["model_flops_per_step"]
    assert part["hardware_flops_per_step"] - part["model_flops_per_step"] == pytest.approx(extra_all * 2 / m["layers"])
    assert none["hardware_flops_per_step"] == none["model_flops_per_step"]
    assert none["hfu"] == none["mfu"]


def test_selective_recompute_adds_the_core_attention_forward():
    s = _summary(recompute="selective")
    m, b, seq = GPT_NO_BIAS, 8, 2048
    core_forward = 2 * (2 * seq * seq * m["hidden"]) * b * m["layers"]
    assert s["hardware_flops_per_step"] - s["model_flops_per_step"] == pytest.approx(core_forward, rel=1e-12)


def test_selective_recompute_of_memory_bound_modules_adds_no_flops():
    raw = make_scenario(training={"seq_len": 2048, "global_batch": 8, "recompute": "selective",
                                  "recompute_modules": ["layernorm"]})
    training = scenario_from_dict(raw).training
    assert recompute_flops_per_token(build_model(raw["model"]), 2048, training, []) == 0.0


def test_op_level_recompute_reruns_half_the_layer_matmuls():
    s = _summary(recompute="op")
    h, f, L = GPT_NO_BIAS["hidden"], GPT_NO_BIAS["ffn"], GPT_NO_BIAS["layers"]
    half_matmuls = 0.5 * 2 * (4 * h * h + 2 * h * f) * L * 8 * 2048
    assert s["hardware_flops_per_step"] - s["model_flops_per_step"] == pytest.approx(half_matmuls, rel=1e-12)


def test_run_table_shows_hfu_only_with_recomputation(cli):
    with_rc = cli("run", "llama3-8b-8xh100", "--set", "training.recompute=full")
    assert with_rc.code == 0 and "HFU" in with_rc.out
    without = cli("run", "llama3-8b-8xh100", "--set", "training.recompute=none")
    assert without.code == 0 and "HFU" not in without.out
