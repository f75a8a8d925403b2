"""FP8 delayed scaling's amax all-reduce (TransformerEngine ``reduce_and_update_fp8_tensors``,
blocking, over Megatron-Core's amax reduction group: the stage's tp x cp x dp ranks), once at
the end of each model chunk's forward and once in its backward, per microbatch."""

from __future__ import annotations

import pytest
from engine_helpers import pipeline_scenario, run
from test_launch_blocking import _imported, _script

from simcluster.context import build_context
from simcluster.parallelism.fp8_amax import AMAXES_PER_GEMM
from simcluster.scenario import scenario_from_dict

M, PP, VPP = 4, 2, 2


def _scenario(recipe: str = "delayed", precision: str = "fp8", framework: str | None = None, dp: int = 2) -> dict:
    data = pipeline_scenario(
        PP, M * dp, "interleaved", v=VPP,
        cluster={"gpus": PP * dp, "gpus_per_node": 8},
        training={"precision": precision, "fp8_recipe": recipe},
    )  # fmt: skip
    if framework is not None:
        data["framework"] = framework
    return data


def _amax_events(data: dict):
    events = run(data, all_ranks=True).events
    return events[events["name"].str.startswith("fp8_amax")]


def test_each_chunk_reduces_its_amaxes_once_forward_and_once_backward():
    """2 x microbatches x chunks per rank: M = 4 microbatches per replica, vpp 2 chunks."""
    events = _amax_events(_scenario())
    assert set(events["stream"]) == {"comm_amax"} and set(events["kind"]) == {"all_reduce"}
    per_rank = events.groupby("rank").size()
    assert len(per_rank) == PP * 2 and set(per_rank) == {2 * M * VPP}
    fwd = events[events["name"] == "fp8_amax_fwd"]
    # a chunk of 2 dense layers, 4 TE GEMMs each: 3 forward amaxes per GEMM, fp32
    assert set(fwd["bytes"]) == {4.0 * AMAXES_PER_GEMM["F"] * 4 * 2}
    assert set(events[events["name"] == "fp8_amax_bwd"]["bytes"]) == {4.0 * AMAXES_PER_GEMM["B"] * 4 * 2}


@pytest.mark.parametrize(
    ("recipe", "precision", "framework", "dp"),
    [
        ("current", "fp8", None, 2),  # current scaling keeps no history to agree on
        ("block", "fp8", None, 2),
        ("delayed", "bf16", None, 2),
        ("delayed", "fp8", "torchtitan", 2),  # torchao's float8, not TE's autocast
        ("delayed", "fp8", None, 1),  # a stage of one rank has no one to agree with
    ],
)
def test_no_amax_reduction_without_delayed_scaling_in_te_autocast(recipe, precision, framework, dp):
    data = _scenario(recipe, precision, framework, dp)
    if framework == "torchtitan":
        data["parallel"].update(schedule="1f1b", vpp=1, zero=3)
    assert _amax_events(data).empty


def test_the_group_is_every_rank_of_the_stage():
    """get_amax_reduction_group(with_context_parallel=True): tensor x data parallel with CP."""
    data = pipeline_scenario(2, 8, "1f1b", cluster={"gpus": 16}, parallel={"tp": 2, "cp": 2})
    lay = build_context(scenario_from_dict(data)).layout
    assert (lay.dp, lay.world) == (2, 16)
    for rank in range(16):
        stage = lay.coords(rank)["pp"]
        assert lay.group("stage", rank) == lay.stage_ranks(stage)
        assert len(lay.stage_ranks(stage)) == 8


def test_tp_only_amax_reduction_spans_the_tp_and_cp_ranks():
    """Megatron-Core's --tp-only-amax-red: get_amax_reduction_group(with_context_parallel=True,
    tp_only_amax_red=True) is the tp-cp group; each data-parallel replica keeps its own scales.
    Same count of reductions, over tp x cp ranks; none where that group is one rank."""
    data = _scenario()
    data["training"]["tp_only_amax_red"] = True
    data["parallel"]["tp"] = 2
    data["cluster"]["gpus"] = PP * 2 * 2
    events = _amax_events(data)
    assert set(events["stream"]) == {"comm_amax"} and set(events["group"]) == {"tp"}
    assert set(events.groupby("rank").size()) == {2 * M * VPP}
    lay = build_context(scenario_from_dict(data)).layout
    for rank in range(lay.world):
        c = lay.coords(rank)
        assert lay.group("tpcp", rank) == sorted(lay.rank(tp, cp, c["dp"], c["pp"]) for tp in range(2) for cp in range(1))
    alone = _scenario()
    alone["training"]["tp_only_amax_red"] = True
    assert _amax_events(alone).empty  # tp 1, cp 1: every rank its own group



def test_te_up_to_1_5_async_reduction_keeps_the_compute_stream_running():
    """TransformerEngine <= 1.5 with NVTE_ASYNC_AMAX_REDUCTION=1 (module/base.py: the all-reduce
    issued with async_op=True, its handle waited on by the next autocast region's first module;
    dropped by pull request 575 in 1.6): the same reductions, none holding up the compute stream,
    so a slow network's all-reduce latency no longer lengthens the step by itself (the NCCL
    kernels still hold their SMs while in flight, engine/interference.py)."""
    def step(async_: bool) -> tuple[float, float, int]:
        data = _scenario(dp=4)
        data["cluster"].update(gpus=PP * 4, gpus_per_node=1, nic_latency_us=200.0)
        data["cluster"].pop("network")  # a real network: the reductions take their latency
        data["training"]["fp8_amax_async"] = async_
        result = run(data, all_ranks=True)
        amax = result.events[result.events["name"].str.startswith("fp8_amax")]
        per_rank = (amax["end_s"] - amax["start_s"]).sum() / amax["rank"].nunique()
        return result.summary["step_time_s"], per_rank, len(amax)

    (blocking, busy, n_blocking), (overlapped, busy_async, n_overlapped) = step(False), step(True)
    assert n_blocking == n_overlapped > 0 and busy == pytest.approx(busy_async, rel=1e-6)
    # 2 x M x VPP = 16 reductions a rank, each over 4 ranks on 4 nodes at 200 us a hop: 13 ms
    # a rank in flight; blocking, the stream waits them out, async, only their SMs are lost
    assert busy > 10e-3 and blocking - overlapped > 0.25 * busy


def test_import_notes_the_amax_variables_only_old_transformer_engines_read(tmp_path):
    """A Megatron launch script exporting NVTE_ASYNC_AMAX_REDUCTION=1 and
    NVTE_DP_AMAX_REDUCE_INTERVAL=0 (NVIDIA's MLPerf v3.1 GPT-3 config_common.sh): TransformerEngine
    up to 1.5 reads them, 1.6 dropped them (pull request 575), and the script does not say which TE
    runs, so the import names the fields to write and sets neither."""
    env = "export NVTE_ASYNC_AMAX_REDUCTION=1\nexport NVTE_DP_AMAX_REDUCE_INTERVAL=0\n"
    path = tmp_path / "run.sh"
    out = _imported(path, _script(env, " --fp8-format hybrid"))
    tr = out.scenario["training"]
    assert "fp8_amax_async" not in tr and "tp_only_amax_red" not in tr
    assert any("training.fp8_amax_async: true" in n for n in out.notes)
    assert any("training.tp_only_amax_red: true" in n for n in out.notes)
    assert not any("amax" in n for n in _imported(path, _script("", " --fp8-format hybrid")).notes)
