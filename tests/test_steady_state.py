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
from simcluster.steady_state import first_counts, on_one_line, step_summary
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
# its data-parallel ends still shrink from 8 to 12 microbatches: it settles at the fourth shorter
# step, 4 + 8 + 12 + 16 = 40 of its 64 microbatches (more than half, within MAX_SHARE)
LATE = make_scenario(
    parallel={"tp": 1, "pp": 4, "vpp": 2, "schedule": "interleaved", "zero": 1},
    training={"seq_len": 2048, "micro_batch": 1, "global_batch": 2 * 64},
    overlap={"dp_grad_reduce": True, "param_gather": True},
)
DATA_PARALLEL = make_scenario(
    parallel={"tp": 1, "pp": 1},
    training={"seq_len": 2048, "micro_batch": 2, "global_batch": 8 * 2 * 64},
)


def _built(raw):
    scenario = scenario_from_dict(raw)
    return scenario, build_context(scenario)


def _leaves(value, path=""):
    """(path, value) of every number, string and flag in a summary."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    else:
        yield path, value


@pytest.mark.parametrize(
    ("raw", "group", "rest"),
    [
        # 93 microbatches over groups of pp = 4: k groups plus 93 mod 4
        (PIPELINED, 4, 1),
        (INTERLEAVED, 2, 0),
        (LATE, 4, 0),
        (DATA_PARALLEL, 1, 0),
    ],
)
def test_a_long_step_extrapolated_is_the_step_simulated_whole(raw, group, rest):
    scenario, ctx = _built(raw)
    assert first_counts(ctx) == (group, rest, 1)
    folded = step_summary(scenario, ctx)
    whole = step_summary(scenario, ctx, extrapolate=False)
    counts = folded.pop("extrapolated_from_microbatches")
    assert len(counts) >= 3 and counts == [k * group + rest for k in range(1, len(counts) + 1)]
    assert "extrapolated_from_microbatches" not in whole
    mine = dict(_leaves(folded))
    assert mine.keys() == dict(_leaves(whole)).keys()
    step = whole["step_time_s"]
    for path, value in _leaves(whole):
        if path == ".sim_wall_s":
            continue
        if isinstance(value, float):
            # a part that is 0 whole may come out as float residue of the step
            assert mine[path] == pytest.approx(value, rel=1e-9, abs=1e-12 * step), path
        else:
            assert mine[path] == value, path


@pytest.mark.parametrize(
    "raw",
    [
        # steps of 8, 16 and 24 microbatches (pp 8) are more than half of 64
        make_scenario(parallel={"tp": 1, "pp": 8}, training={"seq_len": 2048, "global_batch": 64}),
        # fewer than MIN_MICROBATCHES
        make_scenario(training={"seq_len": 2048, "global_batch": 8 * 32}),
        # GPipe holds all 64 microbatches' activations: its memory grows with the step
        make_scenario(parallel={"tp": 1, "pp": 2, "schedule": "afab"}, training={"seq_len": 2048, "global_batch": 4 * 64}),
    ],
)
def test_a_short_step_or_one_holding_every_microbatch_is_simulated_whole(raw):
    scenario, ctx = _built(raw)
    assert first_counts(ctx) is None
    assert "extrapolated_from_microbatches" not in step_summary(scenario, ctx)


def test_points_off_one_line_fall_back_to_the_whole_step(monkeypatch):
    scenario, ctx = _built(DATA_PARALLEL)
    whole = step_summary(scenario, ctx, extrapolate=False)
    monkeypatch.setattr(steady_state, "REL_TOL", -1.0)  # no three points are on one line now
    summary = step_summary(scenario, ctx)
    assert "extrapolated_from_microbatches" not in summary
    assert summary["step_time_s"] == whole["step_time_s"]


def test_the_shorter_steps_stop_at_two_thirds_of_the_step(monkeypatch):
    """Never settled: steps of 1, 2, ... 8 microbatches (36 of 64) are simulated, a ninth would
    pass 2/3 of the step (45 > 42.7), and the step is simulated whole."""
    scenario, ctx = _built(DATA_PARALLEL)
    counts = []
    real = steady_state._shorter

    def shorter(scenario, ctx, microbatches, hardware):
        counts.append(microbatches)
        return real(scenario, ctx, microbatches, hardware)

    monkeypatch.setattr(steady_state, "_shorter", shorter)
    monkeypatch.setattr(steady_state, "_settled", lambda points: None)
    assert steady_state.from_shorter_steps(scenario, ctx) is None
    assert counts == list(range(1, 9))
    assert steady_state.MAX_SHARE * 64 < sum(counts) + 9


def test_late_settling_is_past_half_the_step():
    scenario, ctx = _built(LATE)
    counts = steady_state.from_shorter_steps(scenario, ctx)["extrapolated_from_microbatches"]
    assert counts == [4, 8, 12, 16] and 2 * sum(counts) > 64


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
    # the table marks the prediction read off shorter steps, as sweep's does
    table = cli("validate", str(path), "--jobs", "1").out
    assert next(line for line in table.splitlines() if "│ long" in line).count("*") == 1
    assert "*: read off shorter steps" in table
    assert "*: read off" not in cli("validate", str(path), "--jobs", "1", "--every-microbatch").out


def test_run_reads_a_long_step_off_shorter_ones_unless_it_draws_it(cli, tmp_path):
    """``run`` without ``--out`` (no timeline to draw) reads a long step off shorter ones: its
    whole summary agrees with the whole step's to 1e-9, and the table's simulation row says
    which steps were simulated; ``--out`` and ``--every-microbatch`` simulate every microbatch."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(PIPELINED))
    folded = json.loads(cli("run", str(path), "--json").out)
    whole = json.loads(cli("run", str(path), "--json", "--every-microbatch").out)
    assert folded["extrapolated_from_microbatches"] == [5, 9, 13] and "extrapolated_from_microbatches" not in whole
    for key in ("step_time_s", "tokens_per_s", "mfu", "hfu", "bubble_fraction"):
        assert folded[key] == pytest.approx(whole[key], rel=1e-9), key
    assert folded["peak_memory_bytes"] == whole["peak_memory_bytes"]
    for mine, theirs in zip(folded["time_breakdown_s"]["per_stage"], whole["time_breakdown_s"]["per_stage"], strict=True):
        assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-12)
    row = [line for line in cli("run", str(path)).out.splitlines() if "│" in line]
    row = row[next(i for i, line in enumerate(row) if "simulation" in line) :]  # and its wrapped lines
    text = " ".join(" ".join(line.strip("│ ").split("│")[-1].split()) for line in row)
    assert "read off steps of 5, 9 and 13 of its 93 microbatches" in text, text
    out = tmp_path / "out"
    assert cli("run", str(path), "--out", str(out)).code == 0
    drawn = json.loads((out / "summary.json").read_text())
    assert "extrapolated_from_microbatches" not in drawn and drawn["step_time_s"] == whole["step_time_s"]


def test_run_all_ranks_reads_a_long_step_off_shorter_ones_too(cli, tmp_path):
    """``--all-ranks`` is ``simulation.all_ranks``: every GPU of the shorter steps simulated,
    the step on their line as for one GPU per stage."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(PIPELINED))
    folded = json.loads(cli("run", str(path), "--json", "--all-ranks").out)
    whole = json.loads(cli("run", str(path), "--json", "--all-ranks", "--every-microbatch").out)
    assert folded["extrapolated_from_microbatches"] == [5, 9, 13] and folded["all_ranks"] and whole["all_ranks"]
    for key in ("step_time_s", "tokens_per_s", "bubble_fraction"):
        assert folded[key] == pytest.approx(whole[key], rel=1e-9), key
    assert folded["peak_memory_bytes"] == whole["peak_memory_bytes"]


def test_a_sweep_ranks_long_steps_as_if_simulated_whole():
    from simcluster.sweep import candidates, run_sweep

    # 384 sequences on 8 GPUs: 96 microbatches at dp 4 x pp 2, 192 at dp 2 x pp 4
    base = {**PIPELINED, "training": {**PIPELINED["training"], "global_batch": 384}}
    cands = candidates(base, {"pp": [2, 4]})
    folded_rows = run_sweep(cands, jobs=1)
    whole_rows = run_sweep(cands, jobs=1, extrapolate=False)
    folded = {r.candidate.label: r.summary for r in folded_rows}
    whole = {r.candidate.label: r.summary for r in whole_rows}
    assert all("extrapolated_from_microbatches" in s for s in folded.values())
    # the CSV/JSON row says which steps it was read off, and that the others were simulated whole
    for row in folded_rows:
        assert row.to_dict()["extrapolated_from_microbatches"] == row.summary["extrapolated_from_microbatches"]
    assert all(r.to_dict()["extrapolated_from_microbatches"] is None for r in whole_rows)
    for label, summary in whole.items():
        for key in ("tokens_per_s_per_gpu", "mfu", "bubble_fraction"):
            assert folded[label][key] == pytest.approx(summary[key], rel=1e-9), (label, key)


def test_the_sweep_table_marks_the_steps_read_off_shorter_ones(cli, tmp_path):
    # 192 microbatches at pp 4 (read off shorter steps), 24 at pp 2 (too short: simulated whole)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({**PIPELINED, "training": {**PIPELINED["training"], "global_batch": 384}}))
    res = cli("sweep", str(path), "--pp", "4", "--jobs", "1")
    assert res.code == 0, res.err
    (row,) = [line for line in res.out.splitlines() if line.startswith("│") and " 4 │" in line]
    assert "ms*" in row or " s*" in row, row
    assert "*: read off shorter steps" in res.out
    whole = cli("sweep", str(path), "--pp", "4", "--jobs", "1", "--every-microbatch").out
    assert "*: read off" not in whole and "*" not in next(x for x in whole.splitlines() if " 4 │" in x)


def _point(count, step, idle, peak=1.0):
    stages = [{"gemm": 0.1 * count, "idle": idle}, {"gemm": 0.1 * count, "idle": step - 0.1 * count}]
    return count, {"step_time_s": step, "peak_memory_bytes": {"max": peak}, "time_breakdown_s": {"per_stage": stages}}


def test_settled_wants_one_line_one_peak_and_no_part_shrinking():
    """A part that shrinks as the step grows is slack the warm-up left (the host's lead, a
    stage's wait) that runs out at a longer step, where the slope changes: a drift, given up."""
    steady = [_point(m, 1.0 + 0.2 * m, 0.5) for m in (8, 12, 16)]
    assert steady_state._settled(steady) is True
    assert steady_state._settled(steady[1:]) is None  # two points make any line
    assert steady_state._settled([*steady[:2], _point(16, 1.0 + 0.2 * 16 + 1e-6, 0.5)]) is None
    assert steady_state._settled([*steady[:2], _point(16, 1.0 + 0.2 * 16, 0.5, peak=2.0)]) is None
    # the step on its line, stage 0's idle falling by 1 ms a microbatch
    assert steady_state._settled([_point(m, 1.0 + 0.2 * m, 0.5 - 1e-3 * m) for m in (8, 12, 16)]) is False


def test_shorter_steps_start_past_the_wgrad_deferral_limit():
    """Megatron's --wgrad-deferral-limit L: the first L microbatches' LM-head weight gradients
    wait for the flush, so a step of fewer than L is another step (MLPerf v5.0 405B, L = 50)."""
    raw = make_scenario(
        parallel={"tp": 1, "pp": 4, "defer_head_wgrad": True, "head_wgrad_deferral_limit": 10},
        training={"seq_len": 2048, "global_batch": 2 * 96, "grad_accum_fusion": True},
    )
    scenario, ctx = _built(raw)
    assert first_counts(ctx) == (4, 0, 3)  # steps of 12, 16, 20 ... microbatches
    folded = step_summary(scenario, ctx)
    assert folded["extrapolated_from_microbatches"][0] == 12
    whole = step_summary(scenario, ctx, extrapolate=False)
    assert folded["step_time_s"] == pytest.approx(whole["step_time_s"], rel=1e-9)
    assert folded["peak_memory_bytes"] == whole["peak_memory_bytes"]
    unlimited = make_scenario(parallel={"tp": 1, "pp": 4, "defer_head_wgrad": True}, training=raw["training"])
    assert first_counts(_built(unlimited)[1]) is None  # every microbatch's head inputs kept


def test_compare_reads_long_steps_off_shorter_ones(cli, tmp_path):
    """compare's rows (busiest stage's breakdown included) are the whole steps' to 1e-9 and say
    which shorter steps they came from."""
    paths = []
    for name, raw in (("pipelined", PIPELINED), ("interleaved", INTERLEAVED)):
        paths.append(str(tmp_path / f"{name}.yaml"))
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(raw))
    folded = json.loads(cli("compare", *paths, "--json").out)["scenarios"]
    whole = json.loads(cli("compare", *paths, "--json", "--every-microbatch").out)["scenarios"]
    assert all(row["extrapolated_from_microbatches"] for row in folded)
    assert all(row["extrapolated_from_microbatches"] is None for row in whole)
    for mine, theirs in zip(folded, whole, strict=True):
        for key in ("step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "peak_memory_bytes"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-9), key
        assert mine["busiest_stage"] == theirs["busiest_stage"]
        for part, seconds in theirs["breakdown_s"].items():
            assert mine["breakdown_s"][part] == pytest.approx(seconds, rel=1e-9, abs=1e-12), part
    # the table says so too: the shorter steps of each scenario, of its own step's microbatches
    table = cli("compare", *paths).out
    row = next(line for line in table.splitlines() if "microbatches simulated" in line)
    for rec in folded:
        counts = ", ".join(map(str, rec["extrapolated_from_microbatches"]))
        assert counts in row, (counts, row)
    assert "--every-microbatch simulates it whole" in " ".join(table.split())
    assert "microbatches simulated" not in cli("compare", *paths, "--every-microbatch").out
