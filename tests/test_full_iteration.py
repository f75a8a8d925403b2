"""Full-iteration CUDA graphs (``training.cuda_graphs: [full_iteration]``).

Sources: Megatron-Core ``megatron/core/full_cuda_graph.py`` (``FullCudaGraphWrapper`` wraps the
pipeline schedule's ``forward_backward_func``) and ``TransformerConfig`` (``cuda_graph_impl``
full_iteration: "1 CUDA graph for the whole forward-backward path excluding the optimizer
step"; ``cuda_graph_modules`` must be empty with it; full recomputation only with it; CPU
offloading refused for every impl but it); Megatron-Bridge ``docs/training/cuda-graphs.md``
(full-iteration capture "requires disabling NaN checks") and its cuda-graphs skill card
(Hopper's dropless MoE keeps a host synchronization on its dynamic token counts).
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import layer_builder, run
from test_host import MOE

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.parallelism.segments import Compute
from simcluster.scenario import scenario_from_dict


def _moe(graphs: list[str], host_op_us: float = 300.0) -> dict:
    return make_scenario(
        model=MOE,
        cluster={"hardware": "dgx-h100", "gpus": 8, "profile": {"efficiency": {"host_op_us": host_op_us}}},
        parallel={"tp": 1, "pp": 1, "ep": 8},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 16, "fused_cross_entropy": True,
                  "cuda_graphs": graphs, "step_tail": "none"},
        moe={"host_sync": False},
    )  # fmt: skip


def _refusal(data: dict) -> UserError:
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    return err.value


def test_no_op_of_the_forward_or_backward_is_issued_by_the_host():
    builder = layer_builder(_moe(["full_iteration"]))
    for phase in ("F", "B"):
        segments = builder.layer(0, phase)
        assert [s.host for s in segments if s.host] == [], phase
    eager = layer_builder(_moe([]))
    assert sum(s.host for s in eager.layer(0, "F")) > 0  # the same layer issued op by op


def test_the_graphed_step_does_not_wait_on_the_host():
    # with no sync and no eager tail, the price of a Python op or of a C++ launch on the host
    # no longer reaches the step: the same simulation, bit for bit (the GPU's own gap between
    # kernels, efficiency.kernel_launch_us on the stream, is kept either way)
    graphed = run(_moe(["full_iteration"])).summary["step_time_s"]
    assert run(_moe(["full_iteration"], host_op_us=0.0)).summary["step_time_s"] == graphed
    assert run(_moe(["full_iteration"], host_op_us=3000.0)).summary["step_time_s"] == graphed
    eager = run(_moe([])).summary["step_time_s"]
    assert graphed < eager  # at 300 us an op this small MoE step is host-bound eagerly
    assert run(_moe([], host_op_us=0.0)).summary["step_time_s"] < eager


def test_the_per_layer_scopes_are_not_written_beside_it():
    err = _refusal(_moe(["full_iteration", "attn"]))
    assert err.field == "training.cuda_graphs" and "[full_iteration] alone" in str(err)


def test_a_dropless_dispatcher_host_sync_cannot_be_captured():
    data = _moe(["full_iteration"])
    data["moe"]["host_sync"] = True
    err = _refusal(data)
    assert err.field == "moe.host_sync" and "host_sync: false" in str(err)
    del data["moe"]["host_sync"]  # unset: a dropless dispatcher reads its counts
    assert _refusal(data).field == "moe.host_sync"
    # Megatron-Core's drop-and-pad path has fixed counts and no read-back
    data["moe"].update(capacity_factor=1.5, pad_to_capacity=True)
    build_context(scenario_from_dict(data))


def test_the_nan_checks_read_the_host_and_are_refused():
    data = _moe(["full_iteration"])
    data["dp"] = {"nan_check": True}
    err = _refusal(data)
    assert err.field == "dp.nan_check" and "nan_check: false" in str(err)


def test_a_dense_model_captures_the_whole_iteration_too():
    data = make_scenario(
        training={"seq_len": 2048, "global_batch": 8, "cuda_graphs": ["full_iteration"]}
    )
    summary = run(data).summary
    assert summary["step_time_s"] > 0


def test_megatron_allows_full_recompute_and_cpu_offloading_only_with_it():
    def megatron(graphs: list[str], **training) -> dict:
        data = make_scenario(framework="megatron-core", dp={"nan_check": False})
        data["training"].update(cuda_graphs=graphs, **training)
        return data

    build_context(scenario_from_dict(megatron(["full_iteration"], recompute="full")))
    assert _refusal(megatron(["attn"], recompute="full")).field == "training.cuda_graphs"
    build_context(scenario_from_dict(megatron(["full_iteration"], activation_offload_layers=1)))
    assert (
        _refusal(megatron(["attn"], activation_offload_layers=1)).field
        == "training.activation_offload_layers"
    )


@pytest.mark.parametrize(
    "flags",
    [
        "--cuda-graph-impl full_iteration",
        "--cuda-graph-impl local --cuda-graph-scope full_iteration",
        "--enable-cuda-graph --cuda-graph-scope full_iteration",
    ],
)
def test_megatron_import_reads_the_full_iteration_graph(tmp_path, flags):
    from test_import_megatron_flags import _import

    scenario, skipped, _ = _import(tmp_path, flags)
    assert scenario["training"]["cuda_graphs"] == ["full_iteration"]
    assert not [x for x in skipped if "cuda-graph" in x]


def test_megatron_import_reads_the_static_rank_capacity_as_sync_free(tmp_path):
    from test_import_megatron_flags import MOE as MOE_FLAGS
    from test_import_megatron_flags import _import

    flex = MOE_FLAGS + "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep "
    capped, _, _ = _import(
        tmp_path, flex + "--moe-expert-rank-capacity-factor 1.5 --moe-paged-stash"
    )
    assert capped["moe"]["host_sync"] is False
    dropless, _, _ = _import(tmp_path, flex)
    assert "host_sync" not in dropless["moe"]


def test_layer_builder_keeps_the_router_without_a_sync():
    builder = layer_builder(_moe(["full_iteration"]))
    assert not [s.name for s in builder.layer(0, "F") if isinstance(s, Compute) and s.sync]


def test_mlperf_v51_llama_rows_capture_the_whole_iteration():
    # their logs print enable_cuda_graph 1 with cuda_graph_scope full_iteration (HPE's XD670 H200
    # and Dell's XE9680L B200 runs; config_common_cg.sh: FULL_CUDA_GRAPH=1, MCORE_CUDA_GRAPH=1)
    from simcluster.validate import load_cases

    nvidia = ("mlperf-training-h100", "mlperf-training-blackwell")  # AMD's MI355X row runs Primus
    rows = [c for c in load_cases() if c.name.startswith("mlperf-v5.1/llama31-") and c.family in nvidia]
    assert len(rows) == 14
    for case in rows:
        assert case.scenario["training"]["cuda_graphs"] == ["full_iteration"], case.name
        assert "full_iteration" in case.source, case.name
