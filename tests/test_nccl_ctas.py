"""NCCL's per-communicator CTA limits (``cluster.nccl_communicators`` and the NCCL_*_CTAS /
NCCL_*_NCHANNELS environment): the channel count NCCL's source gives, the SMs a limited group
holds, and the bandwidth its CTAs reach against a published measurement."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_launch_blocking import _imported, _script

from simcluster.engine.interference import SmShare
from simcluster.errors import UserError
from simcluster.hardware import load_profile
from simcluster.nccl_ctas import CtaLimit, NcclEnv, cap_GBps, channels, group_channels
from simcluster.network.ops import bandwidths
from simcluster.network.planner import make_recipe, recipe_time_alone
from simcluster.scenario import scenario_from_dict
from simcluster.topology import build_cluster
from tests.engine_helpers import run

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20


# --- the channel count: NVIDIA/nccl src/graph/connect.cc ncclTopoPostset and src/init.cc
# envConfigOverride ------------------------------------------------------------------------------
def test_max_ctas_clamps_the_search_and_min_ctas_raises_it():
    # nChannels = max(minCTAs, min(search, maxCTAs))
    assert channels(24, CtaLimit(max_ctas=8)) == 8
    assert channels(24, CtaLimit(min_ctas=1, max_ctas=1)) == 1
    assert channels(24, CtaLimit(max_ctas=32)) == 24
    assert channels(4, CtaLimit(min_ctas=16)) == 16  # copies of the search's rings


def test_the_environment_replaces_each_limit_it_sets():
    # envConfigOverride: NCCL_MAX_CTAS replaces maxCTAs, NCCL_MIN_CTAS minCTAs, one by one
    assert channels(24, CtaLimit(max_ctas=1), NcclEnv(max_ctas=32)) == 24
    assert channels(24, CtaLimit(max_ctas=8), NcclEnv(min_ctas=16, max_ctas=32)) == 24
    # a minimum above the maximum: "minCTAs %d is larger than maxCTAs %d, set both to %d"
    assert channels(24, CtaLimit(max_ctas=1), NcclEnv(min_ctas=16)) == 1


def test_min_nchannels_wins_over_a_smaller_max_ctas():
    # minChannels = max(NCCL_MIN_NCHANNELS, minCTAs); nChannels = max(minChannels, min(n, max))
    assert channels(24, CtaLimit(min_ctas=1, max_ctas=1), NcclEnv(min_nchannels=4)) == 4
    assert channels(24, CtaLimit(), NcclEnv(max_nchannels=16)) == 16


def test_megatron_names_map_to_the_simulated_groups():
    limits = {"dp_cp": CtaLimit(1, 8), "cp": CtaLimit(1, 1), "mp": CtaLimit(1, 2), "tp": CtaLimit(1, 32)}
    # the dense gradients run on dp_cp (Megatron's DDP buffers); mp carries no simulated call;
    # tp at 32 keeps the search's 24 and is left out
    assert group_channels(24, limits) == {"cp": 1, "dp": 8}
    assert group_channels(0, limits) == {}  # the search's count unknown: nothing changes
    env = group_channels(24, {}, NcclEnv(max_ctas=4), ("dp", "tp"))
    assert env == {"dp": 4, "tp": 4}


def test_cap_follows_the_measured_curve():
    curve = [(1, 37.51), (2, 74.11), (4, 133.54), (8, 234.15)]
    assert cap_GBps(curve, 1) == 37.51
    assert cap_GBps(curve, 3) == pytest.approx((74.11 + 133.54) / 2)
    assert cap_GBps(curve, 16) == pytest.approx(2 * 234.15)
    assert cap_GBps([], 1) == float("inf") and cap_GBps(curve, 0) == float("inf")


# --- bandwidth: jiajun-c/AI-infra-LearningNote comm/CCL/NCCL/config/README.md (commit cb02d22),
# a 128 MB ncclAllReduce on one node of 8 H200 with the communicator's maxCTAs = minCTAs = n -----
@pytest.mark.parametrize(("ctas", "measured_ms"), [(1, 6.262), (2, 3.169), (4, 1.759), (8, 1.003)])
def test_a_limited_all_reduce_takes_the_measured_time(ctas, measured_ms):
    cluster = build_cluster(load_profile("dgx-h200", overrides={"nvls": False}), 8, 8)
    recipe = make_recipe(cluster, "all_reduce", [list(range(8))], 128 * MiB, channels=ctas)
    t = recipe_time_alone(cluster, recipe)
    assert t * 1e3 == pytest.approx(measured_ms, rel=0.06)
    # the profile's curve is that measurement: above 8 channels the link, not the CTAs, binds
    free = recipe_time_alone(cluster, make_recipe(cluster, "all_reduce", [list(range(8))], 128 * MiB))
    assert free < t


def test_a_one_cta_send_moves_what_one_cta_moves():
    cluster = build_cluster(load_profile("dgx-h100"), 8, 8)
    recipe = make_recipe(cluster, "send_recv", [(0, 1)], 64 * MiB, channels=1)
    busbw = bandwidths("send_recv", 64 * MiB, 2, recipe_time_alone(cluster, recipe))[1] / 1e9
    assert busbw <= 37.51 and busbw > 0.95 * 37.51


def test_a_limited_group_holds_its_channels_in_sms():
    import simpy

    share = SmShare(simpy.Environment(), 132, 24, group_sms={"dp": 8, "cp": 1})
    assert (share.held_by("dp"), share.held_by("cp"), share.held_by("edp")) == (8, 1, 24)
    assert share.held_by("tp") == 0  # a blocking TP call holds none, limited or not


# --- end to end ---------------------------------------------------------------------------------
def _eight_h100(**cluster) -> dict:
    data = yaml.safe_load((ROOT / "scenarios" / "llama3-8b-8xh100.yaml").read_text())
    data["cluster"].update(cluster)
    return data


def test_limited_data_parallel_calls_stay_under_their_ctas_rate():
    res = run(_eight_h100(nccl_communicators={"dp_cp": {"max_ctas": 2}}))
    base = run(_eight_h100())
    dp = res.events[(res.events.group == "dp") & (res.events.bytes > 64 * MiB)]
    assert len(dp)
    for row in dp.itertuples():
        busbw = bandwidths(row.kind, row.bytes, 8, row.end_s - row.start_s)[1] / 1e9
        assert busbw <= 74.11 * 1.0001  # two CTAs' measured bus bandwidth
    # the trade the limit makes: longer calls, more of them exposed, but the overlapped compute
    # loses 2 SMs of 132 to them instead of 24
    assert res.summary["exposed_comm_s"]["dp"] > base.summary["exposed_comm_s"]["dp"]

    def compute_s(r) -> float:
        c = r.events[r.events.stream == "compute"]
        return float((c.end_s - c.start_s).sum())

    assert compute_s(res) < compute_s(base)


def test_unknown_communicator_is_refused_with_its_name():
    with pytest.raises(UserError) as info:
        scenario_from_dict(_eight_h100(nccl_communicators={"dpcp": {"max_ctas": 8}}))
    assert "nccl_communicators" in str(info.value) and "dp_cp" in str(info.value)
    with pytest.raises(UserError) as info:
        scenario_from_dict(_eight_h100(nccl_communicators={"cp": {"max_cta": 1}}))
    assert "max_ctas" in str(info.value)


def _tp8(tp_comm: bool, **cluster) -> dict:
    data = _eight_h100(**cluster)
    data["model"]["layers"] = 2
    data["parallel"] = {"tp": 8, "sequence_parallel": True}
    data["training"]["global_batch"] = 4
    data["overlap"] = {"tp_comm": tp_comm}
    return data


def _tp_layer_comm_s(res) -> float:
    e = res.events
    tp = e[(e.group == "tp") & (e.layer >= 0)]
    return float((tp.end_s - tp.start_s).sum())


def test_userbuffers_exchanges_are_not_nccl_calls():
    # TransformerEngine's userbuffers move the overlapped TP gathers and scatters themselves:
    # the tp communicator's maxCTAs does not reach them (only NCCL calls on that group)
    limited = {"nccl_communicators": {"tp": {"max_ctas": 1}}}
    # (the same durations; the head's NCCL gathers, limited, shift when they start)
    assert _tp_layer_comm_s(run(_tp8(True, **limited))) == pytest.approx(_tp_layer_comm_s(run(_tp8(True))), rel=1e-9)
    assert _tp_layer_comm_s(run(_tp8(False, **limited))) > 2 * _tp_layer_comm_s(run(_tp8(False)))


def test_a_launch_script_s_channel_variables_import_as_cluster_fields(tmp_path):
    # the MLPerf v5.1 NeMo configs' environment (config_common.sh): NCCL_MIN_CTAS=16,
    # NCCL_MAX_CTAS=32, NCCL_MIN_NCHANNELS=4; Megatron's YAML path is named, not read
    env = "export NCCL_MIN_CTAS=16\nexport NCCL_MAX_CTAS=32\nexport NCCL_MIN_NCHANNELS=4\nexport NCCL_MAX_NCHANNELS=x\n"
    out = _imported(tmp_path / "run.sh", _script(env, " --nccl-communicator-config-path /w/cta.yaml"))
    cluster = out.scenario["cluster"]
    assert (cluster["nccl_min_ctas"], cluster["nccl_max_ctas"], cluster["nccl_min_nchannels"]) == (16, 32, 4)
    assert "nccl_max_nchannels" not in cluster and any("NCCL_MAX_NCHANNELS='x' left out" in n for n in out.notes)
    assert any("--nccl-communicator-config-path" in s and "cluster.nccl_communicators" in s for s in out.skipped)


# --- NVLS: NVIDIA/nccl src/transport/nvls.cc, NVLS_NCHANNELS 16 on Hopper (2.17-2.28); maintainer
# sjeaugey in NVIDIA/nccl issue 1649: "the default number of SMs is 16" ------------------------
def test_an_nvls_collective_holds_the_nvls_ctas():
    import simpy

    share = SmShare(simpy.Environment(), 132, 24, group_sms={"dp": 8}, nvls_sms=16)
    assert share.held_by("dp", nvls=True) == 8  # nvlsChannels = min(maxCTAs, NVLS_NCHANNELS)
    assert share.held_by("edp", nvls=True) == 16 and share.held_by("edp") == 24
    assert share.counts_nvls("edp", False, 0) and not share.counts_nvls("tp", False, 0)
    assert load_profile("dgx-h100").efficiency.nvls_sms == 16


def test_a_data_parallel_nvls_all_reduce_takes_16_sms_from_compute():
    # 8 H100s all-reducing their gradients with sum: NCCL's NVLS (ring without NVLS, redop avg)
    data = _eight_h100()
    data["parallel"]["zero"] = 0
    data["dp"] = {"reduce_op": "sum"}
    nvls, ring = run(data), run({**data, "cluster": {**data["cluster"], "nvls": False}})
    for r in (nvls, ring):
        assert len(r.events[(r.events.group == "dp") & (r.events.kind == "all_reduce")])

    def compute_s(r) -> float:
        c = r.events[r.events.stream == "compute"]
        return float((c.end_s - c.start_s).sum())

    # same compute work; under NVLS the overlapped part loses 16 SMs, under the ring 24
    assert compute_s(nvls) < compute_s(ring)
    # every rank simulated (each asks which algorithm its call runs): the same step
    every = run({**data, "simulation": {"all_ranks": True}})
    assert every.summary["step_time_s"] == pytest.approx(nvls.summary["step_time_s"], rel=1e-9)


def test_run_notes_what_the_limits_come_to(cli):
    res = cli(
        "run", "llama3-8b-8xb200", "--set", "cluster.nccl_communicators.cp.max_ctas=1",
        "--set", "cluster.nccl_communicators.dp_cp.max_ctas=8", "--set", "cluster.nccl_min_nchannels=4",
    )  # fmt: skip
    assert res.code == 0, res.err
    # NCCL_MIN_NCHANNELS=4 wins over cp's max_ctas 1 (ncclTopoPostset)
    assert "NCCL channels (cluster.nccl_*): cp 4, dp 8" in res.out + res.err
    assert "'dgx-b200' has no efficiency.channel_busbw" in res.out + res.err
    quiet = cli("run", "llama3-8b-8xb200")
    assert "NCCL channels" not in quiet.out + quiet.err


def test_the_collective_command_takes_a_cta_limit(cli):
    import json

    args = ("collective", "all_reduce", "128MiB", "--gpus", "8", "--hardware", "dgx-h200", "--set", "cluster.nvls=false")
    res = cli(*args, "--max-ctas", "1", "--json")
    assert res.code == 0, res.err
    # the measured one-CTA bus bandwidth, 37.51 GB/s, less the call's latency
    assert json.loads(res.out)["busbw_GBps"] == pytest.approx(37.51, rel=0.02)
    assert json.loads(cli(*args, "--max-ctas", "32", "--json").out) == json.loads(cli(*args, "--json").out)
    bad = cli(*args, "--max-ctas", "0")
    assert bad.code == 2 and "--max-ctas: must be 1..64" in bad.err


def test_the_planned_pipeline_transfer_runs_on_the_pp_communicators_channels():
    # a stage per H100 node: its transfer crosses the NIC (50 GB/s); one CTA moves 37.51 GB/s
    from simcluster.context import build_context
    from simcluster.engine.plan import build_cluster, pipeline_p2p_seconds

    data = _eight_h100()
    data["cluster"]["gpus"] = 16
    data["parallel"] = {"tp": 8, "pp": 2, "sequence_parallel": True}
    free = build_context(scenario_from_dict(data))
    data["cluster"]["nccl_communicators"] = {"pp": {"max_ctas": 1}}
    limited = build_context(scenario_from_dict(data))
    cluster = build_cluster(free.profile, 16, 8)
    assert pipeline_p2p_seconds(limited, cluster) > pipeline_p2p_seconds(free, cluster)


# MLPerf v5.0's conf/nccl/custom_communicator_cta.yaml (prishajain1/training_results_v5.0 @0fdc28f,
# eos-dfw_n64_ngc25.01_nemo), three of its groups as written there
CTA_FILE = """\
dp_cp:
  cga_cluster_size: 4
  min_ctas: 1
  max_ctas: 8
cp:
  cga_cluster_size: 1
  min_ctas: 1
  max_ctas: 1
pp:
  cga_cluster_size: 2
  min_ctas: 1
  max_ctas: 2
"""


def test_a_communicator_file_beside_the_script_imports_as_cluster_fields(tmp_path):
    (tmp_path / "cta.yaml").write_text(CTA_FILE)
    out = _imported(tmp_path / "run.sh", _script("", " --nccl-communicator-config-path cta.yaml"))
    assert out.scenario["cluster"]["nccl_communicators"] == {
        "dp_cp": {"min_ctas": 1, "max_ctas": 8}, "cp": {"min_ctas": 1, "max_ctas": 1},
        "pp": {"min_ctas": 1, "max_ctas": 2},
    }  # fmt: skip
    assert any("cga_cluster_size not modelled" in n for n in out.notes)
    assert not any("--nccl-communicator-config-path" in s for s in out.skipped)
    scenario_from_dict(out.scenario)  # what it wrote is a valid scenario


def test_a_bad_communicator_file_is_a_one_line_error(tmp_path):
    (tmp_path / "cta.yaml").write_text("cp: {max_ctas: 0}\n")
    with pytest.raises(UserError, match="cp.max_ctas must be a whole number 1..64"):
        _imported(tmp_path / "run.sh", _script("", " --nccl-communicator-config-path cta.yaml"))
