"""What `run` says about where a step loses time (``simcluster/speed_hints.py``): the pipeline
bubble hint against Narayanan et al. 2021's analytic bubbles, and the commands the hints give."""

from __future__ import annotations

import shlex

import pytest

from simcluster.speed_hints import BUBBLE_HINT, analytic_bubble


@pytest.mark.parametrize(
    ("pp", "m", "vpp", "expected"),
    [
        (4, 8, 1, 3 / 11),  # 1F1B: (p - 1) / (m + p - 1)
        (4, 8, 2, 3 / 19),  # interleaved: (p - 1) / (v m + p - 1), sec. 2.2.2
        (8, 8, 1, 7 / 15),
        (8, 64, 4, 7 / 263),
        (2, 1, 1, 1 / 2),
    ],
)
def test_analytic_bubble_is_narayanan_2021s(pp, m, vpp, expected):
    assert analytic_bubble(pp, m, vpp) == pytest.approx(expected)


def _hint(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(start))


def test_a_pipeline_bubble_names_interleaving_with_its_analytic_shares(cli):
    """Llama 3 70B, tp 8 x pp 4 1F1B on 64 H100, a global batch of 16 (8 microbatches a
    pipeline): 3/11 of a step idles, as the simulation finds; 80 layers split into 2 or 4 chunks
    per stage (vpp 3 does not divide 20 layers a stage), 3/19 and 3/35."""
    res = cli("run", "llama3-70b-64xh100", "--set", "training.global_batch=16")
    assert res.code == 0, res.err
    line = _hint(res.out, "pipeline bubble")
    simulated = float(line.split()[2].rstrip("%")) / 100
    assert simulated == pytest.approx(3 / 11, abs=0.02)
    assert "8 microbatches over 4 stages; analytic (p-1)/(v*m+p-1) = 27%" in line
    assert "vpp 2 16%, vpp 4 9%" in line and "vpp 3" not in line
    command = line.split("(compare: ")[1].rstrip(")")
    assert shlex.split(command) == [
        "simcluster", "sweep", "llama3-70b-64xh100", "--vpp", "1,2,4", "--set", "training.global_batch=16",
    ]  # fmt: skip


def test_the_bubble_hint_names_the_scenario_file_and_its_options(cli, tmp_path):
    """The compare command re-runs what was run: a file by its path, with --hardware and --set."""
    import yaml

    from simcluster.scenario.loading import resolve_scenario_path

    path = tmp_path / "my 70b.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(resolve_scenario_path("llama3-70b-64xh100").read_text())))
    res = cli("run", str(path), "--hardware", "dgx-h100", "--set", "training.global_batch=16")
    assert res.code == 0, res.err
    command = _hint(res.out, "pipeline bubble").split("(compare: ")[1].rstrip(")")
    assert shlex.split(command) == [
        "simcluster", "sweep", str(path), "--vpp", "1,2,4", "--hardware", "dgx-h100", "--set", "training.global_batch=16",
    ]  # fmt: skip


def test_no_bubble_hint_without_a_pipeline_or_below_the_threshold(cli):
    """The shipped 70B layout runs 64 microbatches a pipeline: 3/67 = 4.5% idle, under
    BUBBLE_HINT; without pp there is no bubble at all."""
    assert analytic_bubble(4, 64) < BUBBLE_HINT
    for extra in ((), ("--set", "parallel.pp=1", "--set", "parallel.tp=8", "--set", "parallel.zero=3")):
        res = cli("run", "llama3-70b-64xh100", *extra)
        assert res.code == 0, res.err
        assert "pipeline bubble" not in " ".join(line for line in res.out.splitlines() if not line.startswith("│"))


def test_interleavings_are_the_degrees_that_divide_a_stages_layers():
    """GPT-3 175B's 96 layers over pp 16 are 6 a stage: 2, 3 or 6 chunks of them, not 4 or 8."""
    from simcluster.context import build_context
    from simcluster.scenario import load_scenario
    from simcluster.speed_hints import interleavings

    one_chunk = [("parallel.pp", 16), ("parallel.vpp", 1), ("parallel.schedule", "1f1b")]
    assert interleavings(build_context(load_scenario("gpt3-175b-1024xa100", one_chunk))) == [2, 3, 6]


def test_without_an_interleaving_that_divides_the_layers_more_microbatches_are_named(cli):
    """Llama 3 70B's 80 layers over pp 16 are 5 a stage, which no vpp of 2-4 divides; 32
    microbatches over 16 stages idle 15/47 of an even pipeline."""
    res = cli("run", "llama3-70b-64xh100", "--set", "parallel.pp=16", "--set", "parallel.tp=4", "--set", "training.global_batch=32")
    assert res.code == 0, res.err
    line = _hint(res.out, "pipeline bubble")
    assert "32 microbatches over 16 stages; analytic (p-1)/(v*m+p-1) = 32%" in line
    assert "more microbatches a step" in line and "vpp" not in line


def test_exposed_dp_with_megatrons_gradient_overlap_off_names_it(cli):
    """Llama 3 8B on 8 H100 under ZeRO-2 with the gradient reduce-scatter after the backward:
    0.71 s of a 6.96 s step exposed, against 0.01 s with Megatron's --overlap-grad-reduce. Under
    DeepSpeed's engine, which has no such flag, the hint stays silent."""
    res = cli("run", "llama3-8b-8xh100", "--set", "overlap.dp_grad_reduce=false")
    assert res.code == 0, res.err
    line = _hint(res.out, "exposed DP communication")
    assert "overlap.dp_grad_reduce: true" in line and "--overlap-grad-reduce" in line
    share = float(line.split()[4].rstrip("%")) / 100
    assert 0.05 <= share <= 0.15
    res = cli("run", "llama3-8b-8xh100", "--set", "overlap.dp_grad_reduce=false", "--set", "framework=deepspeed")
    assert res.code == 0, res.err
    assert "exposed DP communication" not in res.out
    assert "exposed DP communication" not in cli("run", "llama3-8b-8xh100").out


def test_an_interleaved_pipelines_bubble_names_more_chunks(cli):
    """GPT-3 175B, pp 8 with 2 chunks a stage, at 8 microbatches: 7/23 = 30% analytic; its 12
    layers a stage also split into 3, 4 or 6 chunks: 7/31, 7/39, 7/55."""
    res = cli("run", "gpt3-175b-1024xa100", "--set", "training.global_batch=128")
    assert res.code == 0, res.err
    line = _hint(res.out, "pipeline bubble")
    assert "8 microbatches over 8 stages, 2 chunks each; analytic (p-1)/(v*m+p-1) = 30%" in line
    assert "vpp 3 23%, vpp 4 18%, vpp 6 13%" in line and "--vpp 2,3,4,6" in line


def test_exposed_all_to_alls_name_megatron_cores_ep_overlap(cli):
    """Qwen3-30B-A3B on 16 H100 (ep 8, pp 2 interleaved under Megatron-Bridge): its all-to-alls
    leave 1.98 s of an 11.9 s step exposed; with one microbatch's forward beside another's
    backward (overlap.ep_comm) the simulated step is 10.8 s. Once on, nothing is said."""
    res = cli("run", "qwen3-30b-a3b-16xh100")
    assert res.code == 0, res.err
    line = _hint(res.out, "exposed EP communication")
    assert "overlap.ep_comm: true" in line and "--ep-comm false,true" in line
    assert float(line.split()[4].rstrip("%")) >= 100 * 0.05
    res = cli("run", "qwen3-30b-a3b-16xh100", "--set", "overlap.ep_comm=true")
    assert res.code == 0, res.err
    assert "overlap.ep_comm: true" not in res.out


def test_the_hints_are_in_the_json_and_summary_json(cli, tmp_path):
    import json

    res = cli("run", "llama3-70b-64xh100", "--set", "training.global_batch=16", "--json")
    assert res.code == 0, res.err
    hints = json.loads(res.out)["speed_hints"]
    assert any(h.startswith("pipeline bubble 27% of the step") for h in hints)
    res = cli("run", "llama3-8b-8xh100", "--out", str(tmp_path / "o"))
    assert res.code == 0, res.err
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["speed_hints"] == []
