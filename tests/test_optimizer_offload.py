"""An optimizer held and stepped on the host (training.optimizer_offload; parallelism/offload.py).

By hand, for a bf16 run with fp32 main gradients and Adam: the offloaded parameters' fp32
gradients (4 B each) cross the host link, the CPU streams 28 B per parameter through host DRAM
(gradient read 4, master read + write 8, two moments read + write 16: DeepSpeed's CPU-Adam /
Megatron's HybridDeviceOptimizer update, ZeRO-Offload, Ren et al. 2021), and the 16-bit weights
(2 B) come back; the GPU keeps 12 B per parameter less (fp32 master 4 + moments 8).
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.hardware import load_profile
from simcluster.memory_report import memory_summary
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario

DP = 8


def _scenario(share: float, **overlap):
    return scenario_from_dict(
        make_scenario(
            parallel={"tp": 1, "pp": 1, "zero": 1},
            training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "optimizer_offload": share},
            overlap=overlap,
        )
    )


def _local_params(scenario) -> float:
    # one stage holding the whole model, its optimizer sharded over the 8 data-parallel GPUs
    return build_context(scenario).model.params_total() / DP


def _offload_event(result) -> float:
    ev = result.events
    rows = ev[ev["name"] == "optimizer_offload"]
    return float((rows["end_s"] - rows["start_s"]).iloc[0]) if len(rows) else 0.0


def test_the_host_step_is_the_two_copies_and_the_cpu_update():
    sc = _scenario(1.0)
    node = load_profile("dgx-h100").node
    params = _local_params(sc)
    link, dram = node.host_link_GBps * 1e9, node.host_memory_GBps * 1e9 / node.gpus_per_node
    to_host, update, to_gpu = params * 4 / link, params * 28 / dram, params * 2 / link
    assert _offload_event(simulate(sc)) == pytest.approx(to_host + update + to_gpu, rel=1e-9)
    # pipelined group by group: the slowest of the three (the CPU update here)
    pipelined = simulate(_scenario(1.0, optimizer_offload=True))
    assert _offload_event(pipelined) == pytest.approx(max(to_host, update, to_gpu), rel=1e-9)
    # half of it offloaded: half of each
    assert _offload_event(simulate(_scenario(0.5))) == pytest.approx((to_host + update + to_gpu) / 2, rel=1e-9)


def test_the_gpu_keeps_the_rest_of_the_optimizer_and_the_host_holds_the_share():
    whole = memory_summary(build_context(_scenario(0.0)))
    half = memory_summary(build_context(_scenario(0.5)))
    params = _local_params(_scenario(0.0))
    assert whole["optimizer_bytes"] == pytest.approx(params * 12)  # fp32 master + two moments
    assert half["optimizer_bytes"] == pytest.approx(params * 6)
    assert half["host_optimizer_bytes"] == pytest.approx(params * 6)
    assert whole["host_optimizer_bytes"] == 0
    assert half["total_bytes"] == pytest.approx(whole["total_bytes"] - params * 6)


def test_no_offload_is_the_step_as_before():
    base = simulate(scenario_from_dict(make_scenario(parallel={"tp": 1, "pp": 1, "zero": 1})))
    none = simulate(_scenario(0.0))
    assert none.summary["step_time_s"] == base.summary["step_time_s"]
    assert _offload_event(none) == 0.0


def test_a_profile_without_host_figures_names_what_is_missing():
    data = make_scenario(
        cluster={"hardware": "amd-mi300x", "gpus": 8},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "optimizer_offload": 1.0},
    )
    with pytest.raises(UserError, match="no node.host_link_GBps or node.host_memory_GBps") as err:
        simulate(scenario_from_dict(data))
    assert err.value.field == "training.optimizer_offload"


def test_the_share_is_a_fraction(cli):
    res = cli("run", "llama3-8b-8xh100", "--set", "training.optimizer_offload=1.5")
    assert res.code == 2 and "training.optimizer_offload" in res.err
