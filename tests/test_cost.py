"""What a million tokens cost (``--price`` of sweep and compare): dollars per GPU-hour x GPUs /
3600 / (tokens/s) x 1e6 — the GPU-hours a token takes, priced."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from engine_helpers import pipeline_scenario, run

from simcluster.cost import Prices, parse_prices, usd_per_million_tokens
from simcluster.errors import UserError
from simcluster.hardware import _data_dir


def test_prices_are_one_for_all_or_per_profile():
    assert parse_prices(None) is None
    assert parse_prices("2.5") == Prices(default=2.5)
    per = parse_prices("dgx-h100=2.5, dgx-a100=1.2")
    assert per.of("dgx-h100") == 2.5 and per.of("dgx-a100") == 1.2 and per.of("dgx-b200") is None


@pytest.mark.parametrize("text", ["abc", "0", "-1", "nan", "dgx-h100", "=2", "dgx-h100=", "dgx-h100=x"])
def test_bad_prices_name_the_flag(text):
    with pytest.raises(UserError) as err:
        parse_prices(text)
    assert err.value.field == "--price"


def test_dollars_per_million_tokens_is_gpu_hours_per_token_priced():
    s = {"hardware": "dgx-h100", "gpus": 8, "tokens_per_s": 80_000.0}
    # 8 GPUs for 1e6 / 8e4 = 12.5 s = 8 * 12.5 / 3600 GPU-hours at $2.5
    assert usd_per_million_tokens(s, Prices(default=2.5)) == pytest.approx(2.5 * 8 * 12.5 / 3600)
    assert usd_per_million_tokens(s, Prices(by_hardware={"dgx-a100": 1.0})) is None


@pytest.fixture
def pipe_file(tmp_path):
    path = tmp_path / "pipe.yaml"
    path.write_text(yaml.safe_dump(pipeline_scenario(4, 8, "1f1b")))
    return str(path)


def test_sweep_and_compare_price_their_rows(cli, pipe_file, tmp_path):
    out = tmp_path / "sw"
    r = cli("sweep", pipe_file, "--schedule", "1f1b,zb-h1", "--price", "2", "--jobs", "1", "--out", str(out))
    assert r.code == 0, r.err
    frame = pd.read_csv(out / "sweep.csv")
    summary = run(pipeline_scenario(4, 8, "zb-h1")).summary
    row = frame[frame["schedule"] == "zb-h1"].iloc[0]
    assert row["usd_per_million_tokens"] == pytest.approx(2 * summary["gpus"] / 3600 / summary["tokens_per_s"] * 1e6)
    assert row["usd_per_gpu_hour"] == 2  # the price each row's cost was taken at, kept in the file
    c = cli("compare", pipe_file, f"{pipe_file}@parallel.schedule=zb-h1", "--price", "2", "--json")
    assert c.code == 0, c.err
    rec = json.loads(c.out)["scenarios"][1]
    assert rec["usd_per_million_tokens"] == pytest.approx(row["usd_per_million_tokens"])


def test_bad_price_on_the_command_line_is_one_line(cli, pipe_file):
    r = cli("compare", pipe_file, pipe_file, "--price", "dgx-h100")
    assert r.code == 2 and "--price" in r.err and len(r.err.strip().splitlines()) == 1


def test_priced_sweeps_rank_by_cost_per_token():
    from simcluster.sweep import Candidate, SweepRow, rank

    def row(label, hardware, tps_gpu, fits=True):
        s = {"hardware": hardware, "gpus": 8, "tokens_per_s": 8 * tps_gpu,
             "tokens_per_s_per_gpu": tps_gpu, "fits_in_memory": fits}  # fmt: skip
        return SweepRow(Candidate((("hardware", label),), {}), s)

    fast = row("h100", "dgx-h100", 10_000.0)
    cheap = row("a100", "dgx-a100", 4_000.0)
    over = row("b200", "dgx-b200", 30_000.0, fits=False)
    # by throughput the H100 row leads; at $4 vs $1.2 per GPU-hour the A100 token is cheaper
    assert [r.candidate.label for r in rank([cheap, over, fast])] == ["hardware=h100", "hardware=a100", "hardware=b200"]
    prices = parse_prices("dgx-h100=4,dgx-a100=1.2,dgx-b200=1")
    assert [r.candidate.label for r in rank([fast, over, cheap], prices)] == [
        "hardware=a100", "hardware=h100", "hardware=b200",  # layouts that fit still come first
    ]


def test_sweep_refuses_an_unpriced_or_unknown_profile_like_compare(cli, pipe_file):
    r = cli("sweep", pipe_file, "--hardware", "dgx-h100,dgx-a100", "--price", "dgx-h100=4", "--jobs", "1")
    assert r.code == 2 and "no price for hardware 'dgx-a100'" in r.err and len(r.err.strip().splitlines()) == 1
    r = cli("sweep", pipe_file, "--price", "dgx-h10=4", "--jobs", "1")
    assert r.code == 2 and "'dgx-h10' is not a hardware profile" in r.err


def test_a_profile_given_by_path_is_priced_by_its_name(cli, pipe_file, tmp_path):
    # Prices are per profile name, as each row's summary names its hardware (compare does the same).
    raw = yaml.safe_load((_data_dir() / "dgx-h100.yaml").read_text())
    raw["name"] = "my-cluster"
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(raw))
    out = tmp_path / "sw"
    r = cli("sweep", pipe_file, "--hardware", f"{mine},dgx-h100", "--price", "my-cluster=2,dgx-h100=3",
            "--jobs", "1", "--out", str(out))  # fmt: skip
    assert r.code == 0, r.err
    frame = pd.read_csv(out / "sweep.csv")
    assert frame["usd_per_million_tokens"].notna().all()
    by_price = frame.set_index("usd_per_million_tokens")["tokens_per_s"]
    assert len(by_price) == 2


def test_a_cost_cell_keeps_three_significant_digits():
    # cents alone showed $0.06 for two rows the ranking told apart (0.0634 vs 0.0571)
    from simcluster.cost import Prices, format_usd

    prices = Prices(default=2.5)
    # $2.5 per GPU-hour on 8 GPUs at 100,000 tokens/s: 20 / 3600 / 1e5 x 1e6 = $0.0556 per 1M tokens
    summary = {"hardware": "dgx-h100", "gpus": 8, "tokens_per_s": 1e5}
    assert format_usd(summary, prices) == "$0.0556"
    assert format_usd({**summary, "tokens_per_s": 1e4}, prices) == "$0.556"
    assert format_usd({**summary, "tokens_per_s": 1e3}, prices) == "$5.56"
    assert format_usd({**summary, "tokens_per_s": 10.0}, prices) == "$555.56"
    assert format_usd(summary, None) == "—"
