"""Sequence parallelism that keeps the all-gathered input (parallel.sp_regather false).

Megatron (Korthikanti et al. 2022, Sec. 4.2.2) saves the column-parallel linear's 1/t input
shard and all-gathers it again in the backward; PyTorch's DTensor tensor parallelism
(torchtitan's PrepareModuleInput Shard(1) -> Replicate, then ColwiseParallel's ``mm``) saves
the gathered tensor autograd gets from the redistribute, and PyTorch's async TP
(``torch/_inductor/fx_passes/micro_pipeline_tp.py``) returns that gathered A from
``fused_all_gather_matmul`` and points the gather's other users (the saved input) at it. So
the backward gathers nothing again and the stash holds t times the shard."""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder, pipeline_scenario

from simcluster.context import build_context
from simcluster.memory import layer_activation_bytes
from simcluster.parallelism.segments import Comm
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario

S, B, H, A, T = 2048, 2, 1024, 16, 4
SBH = S * B * H


def _act(**parallel) -> float:
    data = make_scenario(
        parallel={"tp": T, "sequence_parallel": True, **parallel},
        training={"seq_len": S, "micro_batch": B, "global_batch": 4, "flash_attention": False},
    )
    ctx = build_context(scenario_from_dict(data))
    return layer_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training, 0)


def test_a_kept_gather_stores_the_two_linear_inputs_whole():
    # Korthikanti Table 2 with TP + SP: sbh (34/t + 5as/(ht)); of the 34, the QKV and the first
    # MLP linear's 16-bit inputs are 2 + 2 (each 2sbh/t). Kept gathered, each is 2sbh.
    regather = _act(sp_regather=True)
    kept = _act(sp_regather=False)
    assert regather == pytest.approx(SBH * (34 / T + 5 * A * S / (H * T)))
    assert kept - regather == pytest.approx(SBH * 4 * (1 - 1 / T))


def test_without_sequence_parallelism_nothing_is_gathered_or_kept():
    data = make_scenario(
        parallel={"tp": T, "sp_regather": False},
        training={"seq_len": S, "micro_batch": B, "global_batch": 4, "flash_attention": False},
    )
    ctx = build_context(scenario_from_dict(data))
    assert not ctx.layout.sp_keeps_gather
    assert layer_activation_bytes(ctx.model, ctx.layout, ctx.scenario.training, 0) == pytest.approx(
        SBH * (10 + 24 / T + 5 * A * S / (H * T))
    )


def _tp_data(framework: str | None = None, **overlap) -> dict:
    data = pipeline_scenario(1, 1, "1f1b", layers=2)
    data["cluster"].update({"hardware": "dgx-h100", "gpus": 8, "gpus_per_node": 8, "network": "simulated"})
    data["parallel"].update({"tp": 8, "sequence_parallel": True})
    data["overlap"].update(overlap)
    if framework:
        data["framework"] = framework
        data["parallel"]["zero"] = 3
    return data


def _regathers(data: dict) -> list[str]:
    b = layer_builder(data)
    return [s.name for s in b.layer(0, "B") + b.layer(0, "BW") if isinstance(s, Comm) and "ag_input" in s.name]


def test_megatron_regathers_and_torchtitan_does_not():
    assert _regathers(_tp_data()) == ["mlp_tp_ag_input", "attn_tp_ag_input"] * 2
    assert _regathers(_tp_data("torchtitan")) == []
    # its async TP (PyTorch's, tp_comm_cfg pytorch-async-tp, on compiled blocks) keeps the fused
    # op's gathered A too
    compiled = _tp_data("torchtitan", tp_comm=True)
    compiled["training"]["elementwise"] = "compiled-blocks"
    assert _regathers(compiled) == []


def test_pytorch_async_tp_keeps_the_gather_without_a_framework_unless_told():
    data = _tp_data(tp_comm=True, tp_comm_cfg="pytorch-async-tp")
    assert scenario_from_dict(data).sp_regather is False
    assert _regathers(data) == []
    data["parallel"]["sp_regather"] = True
    assert len(_regathers(data)) == 4


def test_op_level_checkpointing_reruns_the_gather():
    # torchtitan's selective op checkpointing saves only its _save_list ops' outputs (mm, SDPA,
    # reduce_scatter_tensor), so the recomputed forward all-gathers again before the backward
    data = _tp_data("torchtitan")
    data["training"]["recompute"] = "op"
    assert not build_context(scenario_from_dict(data)).layout.sp_keeps_gather
    assert len(_regathers(data)) == 4


def test_kept_gather_moves_fewer_bytes_and_is_faster():
    from engine_helpers import run

    megatron, titan = _tp_data(), _tp_data()
    titan["parallel"]["sp_regather"] = False
    a, b = run(megatron), run(titan)
    ag = {name: r.events[r.events["kind"] == "all_gather"] for name, r in (("regather", a), ("kept", b))}
    size = layer_builder(megatron).shapes.tp_gather_bytes
    # one input all-gather fewer per block (attention, MLP) of each of the 2 layers, on every rank
    per_rank = {name: frame[frame["rank"] == 0] for name, frame in ag.items()}
    assert len(per_rank["regather"]) - len(per_rank["kept"]) == 4
    assert float(per_rank["regather"]["bytes"].sum() - per_rank["kept"]["bytes"].sum()) == pytest.approx(4 * size)
    assert b.summary["step_time_s"] < a.summary["step_time_s"]


def test_sp_regather_is_inert_without_sequence_parallelism():
    from simcluster.inert import inert_settings

    data = _tp_data()
    data["parallel"].update({"sequence_parallel": False, "sp_regather": False})
    notes = [n.text for n in inert_settings(build_context(scenario_from_dict(data)))]
    assert any(t.startswith("parallel.sp_regather has no effect without parallel.sequence_parallel") for t in notes)
    data["parallel"]["sequence_parallel"] = True
    assert not any("sp_regather" in n.text for n in inert_settings(build_context(scenario_from_dict(data))))
