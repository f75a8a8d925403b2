"""The SMs DeepEP's and HybridEP's kernels run on (``moe.dispatch_sms``; Megatron-Core's
--moe-deepep-num-sms, default 20, and --moe-hybridep-num-sms, default 16).

The rates are deepseek-ai/DeepEP docs/README_Hybrid-EP.md's (commit 41cad94; 4,096 tokens a
rank, hidden 7,168, top-8, 8 local experts, Torch API timing), counted as DeepEP's tests count
them (a rank's received bytes, its own included, over the call), the mean of the BF16 dispatch
and the combine:

- GB200, HybridEP, 16 ranks: 16 SMs (472.84 + 474.48) / 2, 32 SMs (523.48 + 521.55) / 2;
- B200, DeepEP's normal kernels, 8 ranks: 16 SMs (348 + 302) / 2 ... 32 SMs (619 + 524) / 2,
  48 SMs (646 + 586) / 2.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.ep_kernel_rates import kernel_fraction
from simcluster.errors import UserError
from simcluster.hardware import load_profile, profile_from_dict
from simcluster.parallelism import expert
from simcluster.parallelism.segments import Comm
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import layer_builder, run
from tests.test_deepep_nvl_domain import _benchmark, _rate_gbps, _scenario

GB200_HYBRIDEP_16 = (472.84 + 474.48) / 2
GB200_HYBRIDEP_32 = (523.48 + 521.55) / 2


def _rate_at(hardware: str, gpus: int, dispatcher: str, sms: int) -> float:
    sc = _benchmark(hardware, gpus, dispatcher)
    sc["moe"]["dispatch_sms"] = sms
    events = run(sc).events
    row = events[(events["name"] == "ep_dispatch") & (events["rank"] == 0)].iloc[0]
    return row["bytes"] / (row["end_s"] - row["start_s"]) / 1e9


@pytest.mark.parametrize(
    ("hardware", "gpus", "dispatcher", "sms", "gbps"),
    [
        ("gb200-nvl72", 16, "hybridep", 32, GB200_HYBRIDEP_32),
        ("gb200-nvl72", 8, "hybridep", 32, (545.71 + 568.94) / 2),
        ("dgx-b200", 8, "deepep", 16, (348 + 302) / 2),
        ("dgx-b200", 8, "deepep", 32, (619 + 524) / 2),
        ("dgx-b200", 8, "deepep", 48, (646 + 586) / 2),
        # GB200's NVL72 build of DeepEP, 16 ranks at 32 SMs
        ("gb200-nvl72", 16, "deepep", 32, (520.76 + 442.51) / 2),
    ],
)
def test_a_measured_sm_count_runs_at_its_row(hardware, gpus, dispatcher, sms, gbps):
    """Within 2% of the README's row (the call's hop latencies aside)."""
    assert _rate_at(hardware, gpus, dispatcher, sms) == pytest.approx(gbps, rel=0.02)


def test_the_default_count_written_out_is_the_default():
    """moe.dispatch_sms 16 on HybridEP is Megatron-Core's default: bit for bit the same rate."""
    assert _rate_at("gb200-nvl72", 16, "hybridep", 16) == _rate_gbps("gb200-nvl72", 16, "hybridep")


def test_between_held_above_and_proportional_below():
    """Linear in SMs between measured counts (24 SMs: halfway between 16 and 32), held past
    the largest (the links bound it), in proportion to the SMs below the smallest."""
    base = [(16, GB200_HYBRIDEP_16 / 900)]
    by_sms = {32: [(16, GB200_HYBRIDEP_32 / 900)]}
    assert kernel_fraction(base, by_sms, 16, 16, 24) * 900 == pytest.approx((GB200_HYBRIDEP_16 + GB200_HYBRIDEP_32) / 2)
    assert kernel_fraction(base, by_sms, 16, 16, 64) * 900 == pytest.approx(GB200_HYBRIDEP_32)
    assert kernel_fraction(base, by_sms, 16, 16, 8) * 900 == pytest.approx(GB200_HYBRIDEP_16 / 2)
    # no rows at other counts: the default's rate at every count
    assert kernel_fraction(base, None, 16, 16, 32) == base[0][1]


@pytest.mark.parametrize("hardware", ["gb200-nvl72", "dgx-b200"])
def test_deepeps_default_rate_is_the_midpoint_of_its_16_and_24_sm_rows(hardware):
    """The profiles' deepep_nvlink (20 SMs) and their rows at 16 and 24 SMs come from one table:
    the 20-SM rate read through the rows by SM count agrees with it to the rounding."""
    eff = load_profile(hardware).efficiency
    assert eff.deepep_nvlink and eff.deepep_nvlink_by_sms
    for ranks, rate in eff.deepep_nvlink:
        rows = eff.deepep_nvlink_by_sms
        mid = kernel_fraction(rows[16], {24: rows[24]}, 16, ranks, 20)
        assert mid == pytest.approx(rate, abs=1e-4)


@pytest.mark.parametrize(("dispatcher", "sms"), [("deepep", 24), ("hybridep", 32)])
def test_the_all_to_alls_hold_the_sms_asked_for(dispatcher, sms):
    """Beside compute the kernels hold the SMs they are given, not the defaults."""
    sc = _scenario("dgx-h100", 8, dispatcher)
    sc["moe"]["dispatch_sms"] = sms
    b = layer_builder(sc)
    for phase in ("F", "B"):
        comms = [s for s in expert.moe_block(b.shapes, b.km, b.scenario.moe, phase, 0) if isinstance(s, Comm)]
        assert {c.sms for c in comms} == {sms}


def test_the_alltoall_dispatcher_keeps_nccls_channels_whatever_is_written():
    """moe.dispatch_sms is inert under the alltoall dispatcher (its note says so): NCCL's
    all-to-all holds the profile's collective_sms, not the count written."""
    sc = _scenario("dgx-h100", 8, "alltoall")
    sc["moe"]["dispatch_sms"] = 32
    b = layer_builder(sc)
    comms = [s for s in expert.moe_block(b.shapes, b.km, b.scenario.moe, "F", 0) if isinstance(s, Comm)]
    assert {c.sms for c in comms} == {0}


@pytest.mark.parametrize(
    ("hardware", "dispatcher", "sms", "words"),
    [
        # DeepEP's Buffer.set_num_sms: "The SM count must be even"
        ("dgx-h100", "deepep", 21, "even number of SMs"),
        # an H100 SXM has 132 SMs
        ("dgx-h100", "hybridep", 132, "not below the 132 SMs"),
    ],
)
def test_impossible_sm_counts_are_one_line_errors(hardware, dispatcher, sms, words):
    sc = _scenario(hardware, 8, dispatcher)
    sc["moe"]["dispatch_sms"] = sms
    with pytest.raises(UserError, match=words) as err:
        build_context(scenario_from_dict(sc))
    assert err.value.field == "moe.dispatch_sms"


def test_a_count_the_profile_has_no_rate_at_is_said():
    """dgx-h200 has DeepEP's rate at one count (24 SMs, taken as the default 20): another count
    runs at that rate, and a note says so."""
    sc = _scenario("dgx-h200", 8, "deepep")
    sc["moe"]["dispatch_sms"] = 32
    notes = build_context(scenario_from_dict(sc)).notes
    assert any(n.startswith("moe.dispatch_sms 32: 'dgx-h200' rates deepep's kernels at one SM count, the default 20") for n in notes)
    sc["moe"]["dispatch_sms"] = 20
    assert not any("moe.dispatch_sms" in n for n in build_context(scenario_from_dict(sc)).notes)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda e: e.pop("hybridep_nvlink"), "hybridep_nvlink_by_sms needs hybridep_nvlink"),
        (lambda e: e["hybridep_nvlink_by_sms"].update({16: [[8, 0.6]]}), "drop the 16 entry"),
        (lambda e: e["hybridep_nvlink_by_sms"].update({24: [[16, 0.6], [8, 0.6]]}), "the EP ranks must increase"),
    ],
)
def test_a_profiles_rows_by_sm_count_are_checked(change, words):
    raw = load_profile("gb200-nvl72").model_dump()
    change(raw["efficiency"])
    with pytest.raises(UserError, match=words) as err:
        profile_from_dict(raw)
    assert len(err.value.message) < 300
