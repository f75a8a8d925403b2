"""DeepEP's and HybridEP's dispatch inside an NVLink domain: its copies and its measured rate.

On an NVL72 rack the EP group's 4-GPU trays are one node to these kernels.

HybridEP (deepseek-ai/DeepEP's hybrid-ep backend, Megatron-Core's flex dispatcher on GB200)
names an NVLink domain a node: deepseek-ai/DeepEP issue 596 (2026-04-16, a maintainer: "the
term 'nodes' here (in num_of_nodes) actually refers to NVL domains"; sending over RDMA what
NVLink reaches "would increase communication time"). Inside one domain a token goes once to
each GPU holding any of its experts, so the copies are distinct GPUs, N (1 - C(E - E/N, k) /
C(E, k)) for uniform routing; across domains, distinct domains.

Their rate on NVLink 5 is set by the SMs that copy, not the links: deepseek-ai/DeepEP
docs/README_Hybrid-EP.md tables (4,096 tokens a rank, hidden 7,168, top-8, Torch API timing),
counted as tests/test_hybrid_ep.py counts it: the distinct tokens a rank receives, its own
included, times hidden x 2 B, over the call's time. The profiles keep the mean of the BF16
dispatch and the combine (efficiency.hybridep_nvlink at 16 SMs, deepep_nvlink at 20).
"""

from __future__ import annotations

import math

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.parallelism import expert
from simcluster.parallelism.segments import Comm
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import layer_builder, run

TOKENS = 4096
HIDDEN = 2048


def _scenario(hardware: str, gpus: int, dispatcher: str = "deepep") -> dict:
    return {
        "model": {
            "name": "qwen3-30b-like", "layers": 1, "hidden": HIDDEN, "heads": 32, "kv_heads": 4,
            "head_dim": 128, "ffn": 6144, "vocab": 1024, "experts": 128, "top_k": 8,
            "expert_ffn": 768,
        },
        "cluster": {"hardware": hardware, "gpus": gpus},
        "parallel": {"ep": gpus, "etp": 1},
        "training": {"seq_len": TOKENS, "micro_batch": 1, "global_batch": gpus, "precision": "bf16"},
        "moe": {"dispatcher": dispatcher},
    }  # fmt: skip


def _holders(experts: int, top_k: int, holders: int) -> float:
    per = experts // holders
    return holders * (1 - math.comb(experts - per, top_k) / math.comb(experts, top_k))


def _copies(hardware: str, gpus: int) -> float:
    events = run(_scenario(hardware, gpus)).events
    ev = events[(events["name"] == "ep_dispatch") & (events["rank"] == 0)]
    return float(ev["bytes"].iloc[0]) / (TOKENS * HIDDEN * 2)


def test_ep16_on_gb200_sends_one_copy_per_distinct_gpu():
    """16 GB200 are four trays of one NVL72 domain: 16 (1 - C(120, 8) / C(128, 8)) = 6.59
    copies a token (the trays' count, 3.63, sent 45% too few bytes over NVLink)."""
    assert _copies("gb200-nvl72", 16) == pytest.approx(_holders(128, 8, 16), rel=1e-9)
    assert _holders(128, 8, 16) == pytest.approx(6.59, abs=0.01)


def test_ep16_over_two_h100_nodes_sends_one_copy_per_distinct_node():
    """Two 8-GPU nodes, two NVLink domains: a token crosses once to each node holding its
    experts, 2 (1 - C(64, 8) / C(128, 8)) = 1.99."""
    assert _copies("dgx-h100", 16) == pytest.approx(_holders(128, 8, 2), rel=1e-9)


def _benchmark(hardware: str, gpus: int, dispatcher: str) -> dict:
    """The tables' setting: hidden 7,168, top-8, 8 local experts a rank, 4,096 tokens."""
    sc = _scenario(hardware, gpus, dispatcher)
    sc["model"].update(hidden=7168, heads=56, kv_heads=8, experts=8 * gpus, expert_ffn=2048, ffn=18432)
    return sc


def _rate_gbps(hardware: str, gpus: int, dispatcher: str, name: str = "ep_dispatch") -> float:
    events = run(_benchmark(hardware, gpus, dispatcher)).events
    row = events[(events["name"] == name) & (events["rank"] == 0)].iloc[0]
    return row["bytes"] / (row["end_s"] - row["start_s"]) / 1e9


@pytest.mark.parametrize(
    ("hardware", "gpus", "dispatcher", "gbps"),
    [
        # GB200, HybridEP at 16 SMs: 16 ranks (472.84 + 474.48) / 2, 8 ranks (550.10 + 538.44) / 2
        ("gb200-nvl72", 16, "hybridep", (472.84 + 474.48) / 2),
        ("gb200-nvl72", 8, "hybridep", (550.10 + 538.44) / 2),
        # B200 (one 8-GPU node): HybridEP at 16 SMs (535.94 + 530.86) / 2; DeepEP's normal kernels
        # at 20 SMs, between its 16-SM (348 + 302) / 2 and 24-SM (494 + 420) / 2 rows
        ("dgx-b200", 8, "hybridep", (535.94 + 530.86) / 2),
        ("dgx-b200", 8, "deepep", ((348 + 302) / 2 + (494 + 420) / 2) / 2),
        # H200 (one p5en, NVLink4): DeepEP at 24 SMs, default chunks, BF16 (305.72 + 319.88) / 2
        # (aws-samples/awsome-distributed-training deepep-benchmark README, DeepEP e02e4d2)
        ("dgx-h200", 8, "deepep", (305.72 + 319.88) / 2),
    ],
)
def test_dispatch_and_combine_run_at_the_measured_kernel_rate(hardware, gpus, dispatcher, gbps):
    """Within 2% of the table (the call's hop latencies aside), where the links alone
    (900 GB/s x efficiency.nvlink) gave 680-738 GB/s."""
    assert _rate_gbps(hardware, gpus, dispatcher) == pytest.approx(gbps, rel=0.02)
    assert _rate_gbps(hardware, gpus, dispatcher, "ep_combine") == pytest.approx(gbps, rel=0.02)


def test_ranks_between_measured_sizes_interpolate():
    """EP 12 on GB200 lies halfway between the 8- and 16-rank rows."""
    half = ((550.10 + 538.44) / 2 + (472.84 + 474.48) / 2) / 2
    assert _rate_gbps("gb200-nvl72", 12, "hybridep") == pytest.approx(half, rel=0.01)


def test_an_unmeasured_profile_keeps_the_link_rate():
    """dgx-h100 has no HybridEP table (HybridEP's README measures Hopper over InfiniBand only):
    HybridEP moves at the links' 450 GB/s x 0.82 there, while DeepEP takes the H200's measured
    312.8 GB/s (the same NVLink4 NVSwitch baseboard), as DeepEP's own test counts it."""
    assert _rate_gbps("dgx-h100", 8, "hybridep") == pytest.approx(450 * 0.82, rel=0.01)
    assert _rate_gbps("dgx-h100", 8, "deepep") == pytest.approx((305.72 + 319.88) / 2, rel=0.02)


@pytest.mark.parametrize(("dispatcher", "sms"), [("alltoall", 0), ("deepep", 20), ("hybridep", 16)])
def test_the_all_to_alls_hold_the_dispatchers_sms(dispatcher, sms):
    """Beside compute (EP overlap, shared experts) DeepEP's kernels hold Megatron-Core's 20 SMs
    (moe_deepep_num_sms; DeepSeek-V3's report, Sec. 3.2.2: 20 SMs suffice) and HybridEP's its
    16 (moe_hybridep_num_sms); NCCL's all-to-all its channels (0 here: the profile's
    collective_sms, engine/interference.py)."""
    b = layer_builder(_scenario("dgx-h100", 8, dispatcher))
    for phase in ("F", "B"):
        comms = [s for s in expert.moe_block(b.shapes, b.km, b.scenario.moe, phase, 0) if isinstance(s, Comm)]
        assert len(comms) == 2 and {c.sms for c in comms} == {sms}


@pytest.mark.parametrize("hardware", ["dgx-a100", "amd-mi300x"])
def test_hybridep_is_refused_without_tma(hardware):
    """HybridEP's copies are TMA instructions (DeepEP docs/README_Hybrid-EP.md), which NVIDIA
    GPUs have from Hopper on: an A100 or an AMD GPU is a one-line error naming the field."""
    with pytest.raises(UserError, match="TMA copies") as err:
        build_context(scenario_from_dict(_scenario(hardware, 8, "hybridep")))
    assert err.value.field == "moe.dispatcher" and "use deepep or alltoall" in err.value.message
    build_context(scenario_from_dict(_scenario(hardware, 8, "deepep")))
