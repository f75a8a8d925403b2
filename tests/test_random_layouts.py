"""Random layouts (a fixed seed) either simulate to a consistent result or stop with a one-line
UserError: never a traceback.

Each layout draws a small model (dense, GQA, a learned-position GPT, two mixtures of experts, a
sliding-window model), a shipped profile (any of them), a framework, the parallel degrees, a schedule, ZeRO,
precision and recomputation, and now and then two pipeline flushes or an offloaded optimizer
(serial pipeline p2p across flushes deadlocked until 2026-11-29: found by a wider fuzz), and at
ZeRO-3 without a pipeline now and then PyTorch FSDP1 (framework pytorch-fsdp). With a pipeline, now and then the adaptive V
schedule (v-auto) with a drawn activation limit. A run that simulates must report a finite positive step, tokens/s
equal to the global batch's tokens over that step (the definition), a bubble in [0, 1) and a
positive peak memory; a run that cannot must say why in one line naming a field.
"""

from __future__ import annotations

import math
import random

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.hardware import shipped_profiles
from simcluster.memory_report import timeline_fault
from simcluster.scenario import scenario_from_dict

MODELS = [
    {"layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 4, "vocab": 32000},
    {"layers": 4, "hidden": 1024, "heads": 16, "vocab": 50257, "mlp": "gelu", "norm": "layernorm",
     "bias": True, "position": "learned", "max_positions": 4096, "tied_embeddings": True},
    {"layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 8, "vocab": 32000, "experts": 16,
     "top_k": 2, "expert_ffn": 1024},
    {"layers": 4, "hidden": 1024, "heads": 8, "vocab": 32000, "experts": 32, "top_k": 4,
     "expert_ffn": 512, "shared_experts": 1, "dense_layers": 1},
    {"layers": 4, "hidden": 1024, "heads": 16, "vocab": 32000, "sliding_window": 512, "global_every": 2},
]  # fmt: skip
# every shipped profile, so a new one is drawn as soon as it ships
HARDWARE = shipped_profiles()
SCHEDULES = ["1f1b", "afab", "interleaved", "zb-h1", "zb-h2", "zb-1p", "zbv", "v-half", "dualpipev"]
FRAMEWORKS = [None, "megatron-core", "nemo", "deepspeed", "nanotron", "torchtitan", "megatron-lm-2021"]


def _layout(rng: random.Random) -> dict:
    model = dict(rng.choice(MODELS))
    tp, pp, cp, dp = rng.choice([1, 2, 4]), rng.choice([1, 2]), rng.choice([1, 1, 2]), rng.choice([1, 2, 4])
    micro = rng.choice([1, 2])
    parallel = {
        "tp": tp, "pp": pp, "cp": cp, "ep": rng.choice([1, 2]) if "experts" in model else 1,
        "zero": rng.choice([0, 1] if pp > 1 else [0, 1, 2, 3]),
        "sequence_parallel": tp > 1 and rng.random() < 0.5,
        "schedule": rng.choice(SCHEDULES) if pp > 1 else "1f1b",
    }  # fmt: skip
    if parallel["schedule"] == "interleaved":
        parallel["vpp"] = 2
    data = {
        "model": model,
        "cluster": {"hardware": rng.choice(HARDWARE), "gpus": tp * pp * cp * dp},
        "parallel": parallel,
        "training": {
            "seq_len": rng.choice([1024, 2048]), "micro_batch": micro,
            "global_batch": micro * dp * rng.choice([2, 4, 8]),
            "precision": rng.choice(["bf16", "bf16", "fp16", "fp8"]),
            "recompute": rng.choice(["none", "selective", "full"]),
        },
    }  # fmt: skip
    framework = rng.choice(FRAMEWORKS)
    if framework:
        data["framework"] = framework
    # drawn last, so the draws above stay what they were
    if pp > 1 and rng.random() < 0.3:  # gradient accumulation over whole schedules
        data["training"]["pipeline_flushes"] = 2
    if rng.random() < 0.15:
        data["training"]["optimizer_offload"] = True
    par = data["parallel"]
    if "experts" in model and tp > 1:
        par["sequence_parallel"] = True  # Megatron runs a mixture of experts beside TP only so
    if pp == 1 and par["cp"] == par["ep"] == 1 and rng.random() < 0.3:
        # PyTorch FSDP1 where it runs: its root unit, a backward prefetch mode, the rate limiter
        data["framework"], par["zero"] = "pytorch-fsdp", 3
        data["zero3"] = {"backward_prefetch": rng.choice(["pre", "post", "none"]), "limit_all_gathers": rng.random() < 0.5}
    if pp > 1 and rng.random() < 0.3:
        # the adaptive V schedule with a drawn limit (a fraction of 1F1B's activations; 0.3 is
        # below what its blocks need at pp 2, a one-line refusal naming the smallest that fits)
        par.pop("vpp", None)
        par["schedule"], par["activation_limit"] = "v-auto", rng.choice([0.3, 0.75, 1.0])
    return data


@pytest.mark.parametrize("seed", range(40))
def test_a_random_layout_simulates_consistently_or_says_why(seed):
    data = _layout(random.Random(seed))
    try:
        result = simulate(scenario_from_dict(data))
    except UserError as err:
        assert err.field and "\n" not in err.one_line()
        return
    s = result.summary
    step = s["step_time_s"]
    assert math.isfinite(step) and step > 0
    tokens = data["training"]["global_batch"] * data["training"]["seq_len"]
    assert s["tokens_per_s"] == pytest.approx(tokens / step, rel=1e-9)
    assert 0.0 <= s["bubble_fraction"] < 1.0
    assert min(s["peak_memory_bytes"]["per_stage"]) > 0
    # the stash saved layer by layer and freed layer by layer: never below zero, all of it
    # freed by the step's end, and each stage's peak the one `simcluster memory` walks (at
    # most that where F&B pairs interleave)
    ctx = build_context(scenario_from_dict(data))
    assert timeline_fault(ctx, result.memory, s["peak_memory_bytes"]["per_stage"]) is None


def test_most_random_layouts_simulate():
    """The generator is not so strict that every draw is refused (a test that tests nothing).
    About 40% of draws are layouts that run (the others pair a framework with a schedule or ZeRO
    stage it does not run, or a precision with a GPU without it): at least a third must."""
    ran = 0
    for seed in range(100):
        try:
            build_context(scenario_from_dict(_layout(random.Random(seed))))
            ran += 1
        except UserError:
            pass
    assert ran >= 33
