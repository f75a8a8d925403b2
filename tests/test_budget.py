"""A training run of a token budget (``--tokens`` of run, compare and sweep): ceil(tokens / tokens
per step) whole steps of the simulated step time; GPU-hours = wall-clock hours x GPUs; dollars =
GPU-hours x the GPU-hour price. Worked by hand below, as a planner would on paper."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml
from engine_helpers import pipeline_scenario

from simcluster.budget import (
    budget_text,
    format_count,
    format_duration,
    parse_tokens,
    tokens_per_step,
    training_budget,
)
from simcluster.cost import parse_prices
from simcluster.errors import UserError


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("15T", 15e12), ("1.4t", 1.4e12), ("300B", 300e9), ("2e12", 2e12), ("1,000,000", 1e6), ("500k", 5e5), ("2.5M", 2.5e6)],
)
def test_token_counts_read_as_written(text, tokens):
    # Llama 3's 15T, Chinchilla's 1.4T: decimal suffixes, as budgets are published
    assert parse_tokens(text) == pytest.approx(tokens, rel=1e-15)


@pytest.mark.parametrize("text", ["", "many", "15X", "0", "-5T", "0.5", "1e400", "nan"])
def test_bad_token_counts_name_the_flag(text):
    with pytest.raises(UserError) as err:
        parse_tokens(text)
    assert err.value.field == "--tokens"


def _summary(step_s: float, per_step: int, gpus: int) -> dict:
    return {"step_time_s": step_s, "tokens_per_s": per_step / step_s, "gpus": gpus, "hardware": "dgx-h100"}


def test_a_run_is_whole_steps_of_the_simulated_step():
    # global batch 256 x 4,096 tokens = 1,048,576 a step; 2T tokens: 2e12 / 1,048,576 =
    # 1,907,348.6 -> 1,907,349 steps; at 17 s each on 64 GPUs: 32,424,933 s = 375.3 days,
    # 576,443 GPU-hours, $1,441,108 at $2.50 per GPU-hour
    s = _summary(17.0, 1_048_576, 64)
    budget = training_budget(s, 2e12, parse_prices("2.5"))
    assert tokens_per_step(s) == 1_048_576
    assert budget.steps == 1_907_349
    assert budget.wall_s == pytest.approx(1_907_349 * 17.0, rel=1e-12)
    assert budget.days == pytest.approx(375.288, abs=1e-3)
    assert budget.gpu_hours == pytest.approx(1_907_349 * 17.0 / 3600 * 64, rel=1e-12)
    assert budget.usd == pytest.approx(budget.gpu_hours * 2.5, rel=1e-12)
    assert budget_text(budget, 64) == "2T tokens: 375.3 days on 64 GPUs (1,907,349 steps), 576k GPU-hours, $1.44M"


def test_a_budget_of_whole_steps_takes_exactly_those_steps():
    # the rate is tokens / step, so tokens per step comes back as the integer it was (no ceil of
    # 10.000000000000002): ten steps' tokens take ten steps
    s = _summary(0.1 * 3, 4096 * 7, 8)
    assert training_budget(s, 10 * 4096 * 7).steps == 10
    assert training_budget(s, 10 * 4096 * 7 + 1).steps == 11


def test_unpriced_runs_and_profiles_have_no_cost():
    s = _summary(1.0, 1000, 8)
    assert training_budget(s, 1e6).usd is None
    assert training_budget(s, 1e6, parse_prices("dgx-a100=2")).usd is None


def test_durations_in_the_unit_a_plan_is_made_in():
    assert format_duration(90) == "1.5 minutes"
    assert format_duration(5400) == "1.5 hours"
    assert format_duration(3 * 86400) == "3.0 days"
    assert format_count(15e12) == "15T" and format_count(3e11) == "300B" and format_count(1234) == "1,234"


@pytest.fixture
def pipe_file(tmp_path):
    path = tmp_path / "pipe.yaml"
    path.write_text(yaml.safe_dump(pipeline_scenario(4, 8, "1f1b")))
    return str(path)


def test_run_reports_the_training_run(cli, pipe_file):
    r = cli("run", pipe_file, "--tokens", "300B", "--price", "2", "--json")
    assert r.code == 0, r.err
    s = json.loads(r.out)
    run = s["training_run"]
    per_step = round(s["tokens_per_s"] * s["step_time_s"])
    assert run["steps"] == math.ceil(300e9 / per_step)
    assert run["wall_s"] == pytest.approx(run["steps"] * s["step_time_s"], rel=1e-12)
    assert run["gpu_hours"] == pytest.approx(run["wall_s"] / 3600 * s["gpus"], rel=1e-12)
    assert run["usd"] == pytest.approx(run["gpu_hours"] * 2, rel=1e-12)
    assert s["usd_per_gpu_hour"] == 2
    assert s["usd_per_million_tokens"] == pytest.approx(2 * s["gpus"] / 3600 / s["tokens_per_s"] * 1e6, rel=1e-12)
    table = cli("run", pipe_file, "--tokens", "300B")
    assert "training run" in table.out and "300B tokens:" in table.out and "cost per 1M" not in table.out


def test_bad_budget_or_price_on_run_is_one_line(cli, pipe_file):
    for argv in (("--tokens", "lots"), ("--price", "dgx-a100=2")):
        r = cli("run", pipe_file, *argv)
        assert r.code == 2 and argv[0] in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_compare_and_sweep_give_each_layout_its_run(cli, pipe_file, tmp_path):
    c = cli("compare", pipe_file, f"{pipe_file}@parallel.schedule=zb-h1", "--tokens", "1T", "--json")
    assert c.code == 0, c.err
    runs = [rec["training_run"] for rec in json.loads(c.out)["scenarios"]]
    steps = [rec["step_time_s"] for rec in json.loads(c.out)["scenarios"]]
    # the same tokens per step on both: the faster schedule's run is shorter by its step's ratio
    assert runs[0]["steps"] == runs[1]["steps"]
    assert runs[1]["wall_s"] / runs[0]["wall_s"] == pytest.approx(steps[1] / steps[0], rel=1e-12)
    table = cli("compare", pipe_file, f"{pipe_file}@parallel.schedule=zb-h1", "--tokens", "1T", "--price", "2")
    assert "1T tokens take" in table.out and "1T tokens cost" in table.out
    out = tmp_path / "sweep"
    r = cli("sweep", pipe_file, "--schedule", "1f1b,zb-h1", "--tokens", "1T", "--jobs", "1", "--out", str(out))
    assert r.code == 0, r.err
    frame = pd.read_csv(out / "sweep.csv")
    for _, row in frame.iterrows():
        # the CSV keeps nine significant digits
        assert row["run_wall_s"] == pytest.approx(row["run_steps"] * row["step_time_s"], rel=1e-8)
    assert "1T tok" in r.out
