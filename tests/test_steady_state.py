"""A long step extrapolated from three shorter ones (steady_state.py) is the whole step's
simulation: a pipeline's steady state adds the same time per microbatch group, so the step is
affine in the microbatch count beyond the warm-up (checked here against simulating it whole)."""

from __future__ import annotations

import json

import pytest
import yaml

from simcluster import steady_state
from simcluster.context import build_context
from simcluster.scenario import scenario_from_dict
from simcluster.steady_state import first_counts, on_one_line, step_figures
from tests.conftest import make_scenario

# dp 2 x pp 4 on 8 GPUs, ZeRO-1 with the gradient reduce and parameter gather overlapped: the
# step's ends (the first forward's gathers, the last backward's reduce) are in every point
PIPELINED = make_scenario(
    parallel={"tp": 1, "pp": 4, "zero": 1},
    training={"seq_len": 2048, "micro_batch": 1, "global_batch": 2 * 93},
    overlap={"dp_grad_reduce": True, "param_gather": True},
)
INTERLEAVED = make_scenario(
    parallel={"tp": 2, "pp": 2, "vpp": 2, "schedule": "interleaved"},
    training={"seq_len": 2048, "micro_batch": 1, "global_batch": 2 * 64},
)
DATA_PARALLEL = make_scenario(
    parallel={"tp": 1, "pp": 1},
    training={"seq_len": 2048, "micro_batch": 2, "global_batch": 8 * 2 * 64},
)


def _built(raw):
    scenario = scenario_from_dict(raw)
    return scenario, build_context(scenario)


@pytest.mark.parametrize(
    ("raw", "group", "rest"),
    [
        # 93 microbatches over groups of pp = 4: k groups plus 93 mod 4
        (PIPELINED, 4, 1),
        (INTERLEAVED, 2, 0),
        (DATA_PARALLEL, 1, 0),
    ],
)
def test_a_long_step_extrapolated_is_the_step_simulated_whole(raw, group, rest):
    scenario, ctx = _built(raw)
    assert first_counts(ctx) == (group, rest)
    folded = step_figures(scenario, ctx)
    whole = step_figures(scenario, ctx, extrapolate=False)
    counts = folded.extrapolated_from
    assert len(counts) >= 3 and counts == tuple(k * group + rest for k in range(1, len(counts) + 1))
    assert whole.extrapolated_from == ()
    for metric, value in whole.metrics.items():
        assert folded.metrics[metric] == pytest.approx(value, rel=1e-9), metric
    assert folded.peak_memory_bytes == whole.peak_memory_bytes
    assert folded.fits_in_memory == whole.fits_in_memory
    assert folded.hardware_per_model_flops == pytest.approx(whole.hardware_per_model_flops, rel=1e-12)
    assert folded.largest_after_gemm[0] == whole.largest_after_gemm[0]
    assert folded.largest_after_gemm[1] == pytest.approx(whole.largest_after_gemm[1], rel=1e-9)


@pytest.mark.parametrize(
    "raw",
    [
        # steps of 8, 16 and 24 microbatches (pp 8) are more than half of 64
        make_scenario(parallel={"tp": 1, "pp": 8}, training={"seq_len": 2048, "global_batch": 64}),
        # fewer than MIN_MICROBATCHES
        make_scenario(training={"seq_len": 2048, "global_batch": 8 * 32}),
    ],
)
def test_a_short_step_is_simulated_whole(raw):
    scenario, ctx = _built(raw)
    assert first_counts(ctx) is None
    assert step_figures(scenario, ctx).extrapolated_from == ()


def test_points_off_one_line_fall_back_to_the_whole_step(monkeypatch):
    scenario, ctx = _built(DATA_PARALLEL)
    whole = step_figures(scenario, ctx, extrapolate=False)
    monkeypatch.setattr(steady_state, "REL_TOL", -1.0)  # no three points are on one line now
    figures = step_figures(scenario, ctx)
    assert figures.extrapolated_from == ()
    assert figures.metrics == whole.metrics


def test_on_one_line_allows_rounding_not_curvature():
    line = [(8, 1.0 + 8 * 0.25), (12, 1.0 + 12 * 0.25), (16, 1.0 + 16 * 0.25)]
    assert on_one_line(line)
    assert on_one_line([*line[:2], (16, line[2][1] * (1 + 1e-12))])
    assert not on_one_line([*line[:2], (16, line[2][1] * (1 + 1e-6))])


def test_validate_says_which_steps_it_extrapolated_from(cli, tmp_path):
    case = {"name": "long", "source": "t", "scenario": DATA_PARALLEL, "measured": {"tokens_per_s": 1e5}}
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": [case]}))
    folded = json.loads(cli("validate", str(path), "--json", "--jobs", "1").out)["cases"][0]
    whole = json.loads(cli("validate", str(path), "--json", "--jobs", "1", "--every-microbatch").out)["cases"][0]
    assert folded["extrapolated_from_microbatches"][:3] == [1, 2, 3]
    assert "extrapolated_from_microbatches" not in whole
    assert folded["predicted"] == pytest.approx(whole["predicted"], rel=1e-9)
