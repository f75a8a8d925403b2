"""nanotron's ZeRO-1 parameter gather unpacked tensor by tensor in Python (``dp.param_unpack``).

Source: huggingface/nanotron ``src/nanotron/optim/zero.py`` ``_all_gather_params`` (a slice of
every parameter for every DP rank, built in a list comprehension) and
``src/nanotron/distributed.py`` ``all_gather_coalesced`` (after the all-gather, one ``copy_``
per rank per parameter). Its Llama decoder layer holds six tensors (``models/llama.py``:
input_layernorm, qkv_proj, o_proj, post_attention_layernorm, gate_up_proj, down_proj).
"""

from __future__ import annotations

from typing import Any

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.model import ModelSpec
from simcluster.parallelism.unpack import layer_tensors, stage_tensors, unpack_seconds
from simcluster.scenario import scenario_from_dict

LLAMA_1B = {
    "layers": 16,
    "hidden": 2048,
    "heads": 32,
    "kv_heads": 32,
    "ffn": 8192,
    "vocab": 131072,
    "mlp": "swiglu",
    "norm": "rmsnorm",
    "position": "rope",
    "tied_embeddings": True,
}


def _scenario(dp: int, pp: int = 1, unpack: str = "per_tensor", **parallel: Any) -> dict:
    return {
        "name": "unpack",
        "model": dict(LLAMA_1B),
        "cluster": {"hardware": "aws-p5", "gpus": dp * pp},
        "parallel": {"dp": dp, "tp": 1, "pp": pp, "zero": 1, **parallel},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 2 * dp, "precision": "bf16"},
        "dp": {"grad_collective": "all_reduce", "bucket_mb": 1.0e6, "param_unpack": unpack},
        "overlap": {"dp_grad_reduce": False, "param_gather": False, "pp_comm": False, "pp_p2p": "serial"},
    }


def test_a_llama_layer_is_six_tensors_and_a_gpt_layer_twelve() -> None:
    llama = ModelSpec(name="l", **LLAMA_1B)
    assert layer_tensors(llama, 0) == 6
    # LayerNorm weight + bias twice, QKV and projection with biases, fc1 and fc2 with biases
    gpt = ModelSpec(name="g", layers=2, hidden=64, heads=4, kv_heads=4, ffn=256, vocab=8,
                    mlp="gelu", norm="layernorm", bias=True)  # fmt: skip
    assert layer_tensors(gpt, 0) == 12


def test_tied_head_is_the_embedding_on_one_stage_and_a_copy_across_two() -> None:
    ctx = build_context(scenario_from_dict(_scenario(dp=2)))
    # embedding + 16 layers x 6 + final norm; the tied LM head is the embedding tensor itself
    assert stage_tensors(ctx.model, ctx.chunks[0]) == 1 + 16 * 6 + 1
    two = build_context(scenario_from_dict(_scenario(dp=2, pp=2, partition="nanotron")))
    first, last = (stage_tensors(two.model, c) for c in two.chunks)
    layers = [sum(c.layers for c in chunks) for chunks in two.chunks]
    assert layers == [11, 5]  # nanotron's cost-balanced split of the 1.34B model (test_partition)
    assert first == 1 + 11 * 6 and last == 5 * 6 + 1 + 1  # the last stage holds the head's copy


def test_host_time_is_two_ops_per_tensor_per_rank() -> None:
    assert unpack_seconds(170, 128, 4e-6) == pytest.approx(2 * 170 * 128 * 4e-6)  # 0.174 s
    assert unpack_seconds(170, 1, 4e-6) == 0.0  # nanotron returns before gathering


@pytest.mark.parametrize("dp", [4, 16])
def test_the_step_waits_for_the_unpack_after_the_gather(dp: int) -> None:
    per_tensor = simulate(scenario_from_dict(_scenario(dp)))
    flat = simulate(scenario_from_dict(_scenario(dp, unpack="flat")))
    launch = build_context(scenario_from_dict(_scenario(dp))).profile.efficiency.kernel_launch_us
    expected = 2 * 98 * dp * launch * 1e-6
    gained = per_tensor.summary["step_time_s"] - flat.summary["step_time_s"]
    assert gained == pytest.approx(expected, rel=1e-9)
    events = per_tensor.events
    unpack = events[events["name"] == "param_unpack"]
    assert len(unpack) == 1 and unpack["kind"].iloc[0] == "host" and unpack["stream"].iloc[0] == "compute"
    gathers = events[(events["kind"] == "all_gather") & (events["group"] == "dp")]
    assert float(unpack["start_s"].iloc[0]) >= float(gathers["end_s"].max())
    assert per_tensor.summary["time_breakdown_s"]["per_stage"][0]["host"] == pytest.approx(expected, rel=1e-9)


def test_nanotron_framework_unpacks_per_tensor_only_with_zero1() -> None:
    raw = _scenario(4)
    del raw["dp"], raw["overlap"]
    sc = scenario_from_dict({**raw, "framework": "nanotron"})
    assert sc.dp.param_unpack == "per_tensor"
    zero0 = {**raw, "framework": "nanotron", "parallel": {**raw["parallel"], "zero": 0}}
    assert scenario_from_dict(zero0).dp.param_unpack == "flat"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"parallel": {"dp": 4, "tp": 1, "pp": 1, "zero": 0}, "dp": {"param_unpack": "per_tensor"}}, "zero=0"),
        ({"overlap": {"param_gather": True}}, "overlap.param_gather"),
    ],
)
def test_per_tensor_without_a_blocking_zero_gather_is_an_error(change: dict, words: str) -> None:
    raw = _scenario(4)
    raw.update(change)
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(raw))
    assert err.value.field == "dp.param_unpack" and words in str(err.value)
