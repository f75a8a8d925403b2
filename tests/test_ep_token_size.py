"""DeepEP-family kernels at token sizes other than their measurements' (``efficiency.
deepep_token_sm_ns`` / ``hybridep_token_sm_ns``; ``ep_kernel_rates.token_size_ratio``).

Sources: deepseek-ai/DeepEP docs/README_Hybrid-EP.md (commit 41cad94), whose tables time FP8
dispatch (7,392 bytes a token: tests/test_hybrid_ep.py ``fp8_factor = (1 + 4 / 128) / 2``) beside
BF16 dispatch (14,336 bytes) at each SM count: B200, DeepEP, 8 ranks, Torch API, 24 SMs: FP8 349,
BF16 494, combine 420 GB/s. pytorch/torchtitan scripts/deepep/torchtitan_deepep_tune/
TUNING_RESULTS_SUMMARY.md (commit 018740b): B200, DeepEP at 24 SMs, EP 4, hidden 2,048 in BF16,
best dispatch 218.18 GB/s.
"""

from __future__ import annotations

import pytest

from simcluster.ep_kernel_rates import MEASURED_TOKEN_BYTES, token_size_ratio
from simcluster.errors import UserError
from simcluster.hardware import load_profile, profile_from_dict
from tests.engine_helpers import run
from tests.test_deepep_nvl_domain import _benchmark

B200_DEEPEP = load_profile("dgx-b200").efficiency.deepep_token_sm_ns
FP8_TOKEN = MEASURED_TOKEN_BYTES * (1 + 4 / 128) / 2


def test_the_measured_token_keeps_the_measured_rate():
    assert token_size_ratio(494, B200_DEEPEP, 24, MEASURED_TOKEN_BYTES) == pytest.approx(1.0, abs=1e-12)


def test_the_fp8_dispatch_of_the_same_table_is_reproduced():
    """The per-token work was read from the FP8/BF16 pair: carried back it gives FP8's 349 GB/s
    from BF16's 494 (within the rounding of the stored 308 SM-ns)."""
    assert 494 * token_size_ratio(494, B200_DEEPEP, 24, FP8_TOKEN) == pytest.approx(349, rel=0.005)


def test_hidden_2048_on_b200_near_torchtitans_tuned_dispatch():
    """A BF16 token of hidden 2,048 on 24 SMs: 0.475 x 494 = 235 GB/s, against torchtitan's tuned
    218 at EP 4 (another machine and EP size: within 10%)."""
    rate = 494 * token_size_ratio(494, B200_DEEPEP, 24, 2048 * 2)
    assert rate == pytest.approx(235, rel=0.01)
    assert rate == pytest.approx(218.18, rel=0.10)


def test_without_per_token_work_the_rate_is_held():
    assert token_size_ratio(494, None, 24, 4096) == 1.0
    assert token_size_ratio(305.72, {24: 0.0}, 24, 4096) == pytest.approx(1.0)


def test_smaller_tokens_slow_and_more_sms_help_them_more():
    small, large = 2048 * 2, 4096 * 2
    assert token_size_ratio(494, B200_DEEPEP, 24, small) < token_size_ratio(494, B200_DEEPEP, 24, large) < 1.0
    # the fixed work per token is spread over the SMs: at 48 (188 SM-ns) a small token loses less
    assert token_size_ratio(646, B200_DEEPEP, 48, small) > token_size_ratio(494, B200_DEEPEP, 24, small)


def _dispatch_gbps(sc: dict, name: str = "ep_dispatch") -> float:
    events = run(sc).events
    row = events[(events["name"] == name) & (events["rank"] == 0)].iloc[0]
    return row["bytes"] / (row["end_s"] - row["start_s"]) / 1e9


def _b200_deepep_24(hidden: int = 7168, fp8: bool = False) -> dict:
    sc = _benchmark("dgx-b200", 8, "deepep")
    sc["moe"].update(dispatch_sms=24, fp8_dispatch=fp8)
    if hidden != 7168:
        sc["model"].update(hidden=hidden, heads=hidden // 128, kv_heads=4)
    return sc


def test_the_engine_moves_small_tokens_at_the_carried_rate():
    """The simulated dispatch of hidden-2,048 rows runs at the ratio of the measured one's rate
    (the profile's 24-SM table: (494 + 420) / 2), within 3% (the hops' latencies)."""
    measured = (494 + 420) / 2
    expected = measured * token_size_ratio(measured, B200_DEEPEP, 24, 2048 * 2)
    assert _dispatch_gbps(_b200_deepep_24(2048)) == pytest.approx(expected, rel=0.03)
    assert _dispatch_gbps(_b200_deepep_24(2048), "ep_combine") == pytest.approx(expected, rel=0.03)


def test_an_fp8_dispatch_runs_at_the_measured_fp8_share():
    """FP8 dispatch over BF16 dispatch, both simulated: 349 / 494 = 0.707 measured, within 3%;
    the combine stays BF16 at its own rate."""
    fp8, bf16 = _dispatch_gbps(_b200_deepep_24(fp8=True)), _dispatch_gbps(_b200_deepep_24())
    assert fp8 / bf16 == pytest.approx(349 / 494, rel=0.03)
    assert _dispatch_gbps(_b200_deepep_24(fp8=True), "ep_combine") == pytest.approx(bf16, rel=1e-9)


def test_per_token_work_without_its_rate_table_is_refused():
    raw = load_profile("dgx-h100").model_dump()
    raw["efficiency"].pop("deepep_nvlink")
    with pytest.raises(UserError, match="deepep_token_sm_ns needs deepep_nvlink") as err:
        profile_from_dict(raw)
    assert len(err.value.message) < 300


def _notes(hardware: str, hidden: int) -> tuple[str, ...]:
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    sc = _benchmark(hardware, 8, "deepep")
    if hidden != 7168:
        sc["model"].update(hidden=hidden, heads=hidden // 128, kv_heads=4)
    return build_context(scenario_from_dict(sc)).notes


def test_rows_of_another_size_at_a_held_rate_are_said():
    """hgx-h800 rates DeepEP from its README's hidden-7,168 rows and has no per-token work: a
    hidden-2,048 model's rows run at that rate, and a note says so; not at hidden 7,168, nor on
    profiles with the work (dgx-b200) or with none measured (dgx-h200's 0)."""
    held = "deepep's rows are 4,096 bytes where 'hgx-h800' measured its kernels with hidden-7,168 tokens"
    assert any(n.startswith(held) for n in _notes("hgx-h800", 2048))
    assert not any("rows are" in n for n in _notes("hgx-h800", 7168))
    assert not any("rows are" in n for n in _notes("dgx-b200", 2048))
    assert not any("rows are" in n for n in _notes("dgx-h200", 2048))
