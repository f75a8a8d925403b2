"""`simcluster run`: JSON fields, symmetry shortcut vs every rank, bad input, fit warnings (issue 4)."""

import json
import re

import pytest

from tests.engine_helpers import pipeline_scenario, run

REQUIRED = (
    "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu",
    "bubble_fraction", "exposed_comm_s", "peak_memory_bytes", "fits_in_memory",
    "compute_per_microbatch_s", "events", "sim_wall_s",
)


def test_run_json_fields(cli):
    res = cli("run", "llama3-8b-8xh100", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    for key in REQUIRED:
        assert key in doc, key
    assert set(doc["compute_per_microbatch_s"]) == {"forward", "backward_input", "backward_weight"}
    assert set(doc["peak_memory_bytes"]) == {"per_stage", "max", "loss_transient"}
    # tokens/s = global_batch * seq_len / step time
    assert doc["tokens_per_s"] == pytest.approx(64 * 8192 / doc["step_time_s"])
    # MFU = model FLOPs / (step * gpus * peak); 989.4 TFLOP/s bf16 dense H100 (datasheet)
    assert doc["mfu"] == pytest.approx(doc["model_tflops_per_gpu"] / 989.4)


def test_symmetry_shortcut_matches_all_ranks():
    """One GPU per stage with all peers' traffic on the network = every GPU simulated."""
    data = pipeline_scenario(2, 4, "1f1b")
    data["cluster"].update({"gpus": 16, "gpus_per_node": 8, "network": "simulated"})
    data["parallel"].update({"tp": 2, "sequence_parallel": True, "zero": 1})
    data["training"]["global_batch"] = 16
    sym_run, every_run = run(data), run(data, all_ranks=True)
    sym, every = sym_run.summary, every_run.summary
    assert every["all_ranks"] and not sym["all_ranks"]
    assert every["step_time_s"] == pytest.approx(sym["step_time_s"], rel=1e-6)
    assert every["bubble_fraction"] == pytest.approx(sym["bubble_fraction"], rel=1e-6, abs=1e-9)
    # one memory timeline per stage (its representative rank's), not every rank's interleaved
    cols = ["stage", "activations", "total"]
    assert every_run.memory[cols].equals(sym_run.memory[cols])


def test_cost_grows_with_stages_not_gpus():
    """Same pipeline on 8x more data-parallel GPUs: same number of simulated events."""
    small = pipeline_scenario(2, 4, "1f1b")
    small["cluster"].update({"gpus": 16, "gpus_per_node": 8, "network": "simulated"})
    small["training"]["global_batch"] = 32
    big = json.loads(json.dumps(small))
    big["cluster"]["gpus"] = 128
    big["training"]["global_batch"] = 256
    assert run(big).summary["events"] == run(small).summary["events"]


def test_does_not_fit_still_simulates(cli):
    res = cli("run", "llama3-8b-8xh100", "--set", "parallel.zero=0", "--set", "training.micro_batch=2",
              "--set", "training.global_batch=128")
    assert res.code == 0, res.err
    assert "DOES NOT FIT" in res.out
    # the table's own memory row says it too, not only the line under the table
    assert "does not fit" in _row(res.out, "peak memory per GPU")
    # the bubble row counts the microbatches in words: 128 sequences over dp 8 at 2 each = 8
    assert "(8 microbatches)" in _row(res.out, "pipeline bubble")
    # the per-microbatch compute in the timeline legend's words, each figure as the summary has it
    per = _row(res.out, "compute per microbatch")
    assert "forward (F) " in per and "backward input (B) " in per and "backward weight (W) " in per
    # the simulator's own cost is labelled as such, not as a figure of the step
    assert re.search(r"[\d,]+ events in [\d.]+ s", _row(res.out, "simulation"))


def _row(out: str, label: str) -> str:
    """The text of the run table's row ``label`` with the console's wrapping undone: a narrow
    console (CI's) wraps a long cell over several lines, the label on the first only."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"│ {label} "))
    cells = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("│ ") or line.split("│")[1].strip():
            break  # the next row's label, or the table's border
        cells.append(line)
    return " ".join(" ".join(line.replace("│", " ").split()) for line in cells)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["parallel.schedule=1f1bb"], "did you mean '1f1b'"),
        (["parallel.pp=2", "parallel.schedule=dualpipe", "cluster.gpus=6", "parallel.pp=3"], "parallel.pp"),
        (["parallel.pp=8", "parallel.schedule=interleaved", "parallel.vpp=2", "training.global_batch=4"], "training.global_batch"),  # m=4 < p=8
        (["parallel.pp=2", "parallel.layers_per_stage=[10,10]"], "parallel.layers_per_stage"),
        (["parallel.pp=4", "parallel.layers_per_stage=[16,0,8,8]"], "parallel.layers_per_stage"),
    ],
)
def test_bad_pipeline_input(cli, overrides, field):
    argv = ["run", "llama3-8b-8xh100", "--set", "parallel.zero=1"]
    for o in overrides:
        argv += ["--set", o]
    res = cli(*argv)
    assert res.code == 2, (res.out, res.err)
    assert len(res.err.strip().splitlines()) == 1 and field in res.err and "Traceback" not in res.err


def test_uneven_layers_405b(cli):
    # Llama 3 405B: 126 layers on 16 stages = 7, 8 x 14, 7 (first/last hold embedding and head)
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    data = {
        "model": {"preset": "llama3.1-405b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 2048},
        "parallel": {"tp": 8, "pp": 16, "schedule": "interleaved", "vpp": 1},
        "training": {"seq_len": 8192, "global_batch": 256},
    }
    data["parallel"]["schedule"] = "1f1b"
    ctx = build_context(scenario_from_dict(data))
    assert [c[0].layers for c in ctx.chunks] == [7] + [8] * 14 + [7]


def test_out_unwritable(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = cli("run", "llama3-8b-8xh100", "--out", str(blocker / "out"))
    assert res.code == 2 and "--out" in res.err
    assert not (blocker.parent / "out").exists()


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "zb-h2", "dualpipe"])
def test_memory_command_agrees_with_the_simulated_peak(schedule):
    """`simcluster memory` walks the schedule order; `run` tracks the stash along the timeline."""
    from simcluster.context import build_context
    from simcluster.engine import simulate
    from simcluster.memory_report import memory_summary
    from simcluster.scenario import load_scenario

    sc = load_scenario("llama3-70b-64xh100", [("training.global_batch", 32), ("parallel.schedule", schedule)])
    static = [s["total_bytes"] for s in memory_summary(build_context(sc))["per_stage"]]
    simulated = simulate(sc).summary["peak_memory_bytes"]["per_stage"]
    assert simulated == pytest.approx(static, rel=1e-9)


@pytest.mark.parametrize(
    "parallel",
    [
        # sequence parallelism with tp, as Megatron runs a mixture of experts beside TP
        {"tp": 2, "cp": 2, "ep": 4, "zero": 1, "schedule": "1f1b", "sequence_parallel": True},
        {"tp": 1, "pp": 2, "ep": 2, "zero": 1, "schedule": "dualpipe"},
        {"tp": 2, "cp": 2, "zero": 3, "sequence_parallel": True},
    ],
)
def test_symmetry_matches_all_ranks_with_ep_cp_zero3(parallel):
    """The shortcut (one GPU per stage, peers' traffic on the links) = every GPU simulated."""
    from simcluster.engine import simulate
    from simcluster.scenario import scenario_from_dict

    gpus = parallel.get("tp", 1) * parallel.get("pp", 1) * parallel.get("cp", 1) * 2
    data = {
        "model": {"layers": 6, "hidden": 1024, "heads": 16, "kv_heads": 4, "ffn": 2816, "vocab": 4096,
                  "experts": 8, "top_k": 2, "expert_ffn": 1024, "dense_layers": 1},
        "cluster": {"hardware": "dgx-h100", "gpus": gpus, "gpus_per_node": min(gpus, 8)},
        "parallel": parallel,
        "training": {"seq_len": 1024, "global_batch": 8},
    }
    sym = simulate(scenario_from_dict(data)).summary
    every = simulate(scenario_from_dict(data), all_ranks=True).summary
    assert every["step_time_s"] == pytest.approx(sym["step_time_s"], rel=1e-9)
    assert every["exposed_comm_s"] == pytest.approx(sym["exposed_comm_s"], rel=1e-9, abs=1e-12)


def test_run_says_when_no_framework_is_named(cli):
    # the unset framework settings are the ones that move a cut-down case most (docs/accuracy.md)
    assert "names no framework" in cli("run", "llama3-8b-8xh100").out
    assert "names no framework" not in cli("run", "llama3-8b-8xh100", "--set", "framework=nemo").out


@pytest.mark.parametrize("window", ["abc", "0.3,0.1", "1,2,3", "nan,1", "-1,2"])
def test_a_bad_timeline_window_is_one_line_before_simulating(cli, tmp_path, window):
    res = cli("run", "llama3-8b-8xh100", "--out", str(tmp_path / "o"), "--window", window)
    assert res.code == 2 and res.err.count("\n") == 1 and "--window" in res.err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("words", [("--window", "-1,0.5"), ("--window=-1,0.5",)])
def test_a_window_before_the_step_is_refused_alike_in_both_spellings(cli, tmp_path, words):
    # argparse took '-1,0.5' after a space for an unknown option ("expected one argument");
    # cli._joined_dash_values hands it to run's own check, which names the field and the range
    res = cli("run", "llama3-8b-8xh100", "--out", str(tmp_path / "o"), *words)
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert res.err.startswith("error: --window: '-1,0.5' starts before the step (0 s)") and "0 <= START < END" in res.err
    assert not (tmp_path / "o").exists()


def test_a_negative_value_after_a_space_reaches_the_option_and_nothing_else():
    from simcluster.cli import _joined_dash_values, build_parser

    parser = build_parser(only="run")
    words = ["run", "x.yaml", "--window", "-1,0.5", "--svg", "--out", "o", "--", "--window", "-2,1"]
    assert _joined_dash_values(words, parser) == [
        "run", "x.yaml", "--window=-1,0.5", "--svg", "--out", "o", "--", "--window", "-2,1"
    ]
    # a flag (no value) and a word that is not a number are left for argparse to refuse
    assert _joined_dash_values(["run", "--svg", "-1,2", "--window", "-x"], parser) == ["run", "--svg", "-1,2", "--window", "-x"]


def test_a_window_after_the_step_is_one_line_and_writes_nothing(cli, tmp_path):
    # the step is 6.4 s: a window from 100 s would draw an empty chart
    res = cli("run", "llama3-8b-8xh100", "--out", str(tmp_path / "o"), "--window", "100,200")
    assert res.code == 2 and res.err.count("\n") == 1 and "after the simulated step ends" in res.err
    assert not (tmp_path / "o").exists()


def test_svg_without_out_is_one_line(cli):
    res = cli("run", "llama3-8b-8xh100", "--svg")
    assert res.code == 2 and res.err.strip() == (
        "error: --svg: writes timeline.svg beside the files --out writes; add --out DIR"
    )


def test_gzip_trace_without_out_is_one_line(cli):
    res = cli("run", "llama3-8b-8xh100", "--gzip-trace")
    assert res.code == 2 and res.err.strip() == (
        "error: --gzip-trace: compresses the trace that --out writes; add --out DIR"
    )


def test_all_ranks_on_hundreds_of_gpus_is_announced_before_it_starts(cli, monkeypatch):
    """Every GPU simulated grows time and memory with the GPU count (64 GPUs of Llama 3 70B:
    1.9 GB): from 256 GPUs run says so before it starts; the symmetric default stays quiet."""
    from simcluster.commands import run as run_command
    from simcluster.errors import UserError

    def stop(*_args, **_kwargs):
        raise UserError("stop", "simulation not wanted here")

    monkeypatch.setattr(run_command, "simulate", stop)
    args = ("run", "llama3-8b-8xh100", "--set", "cluster.gpus=512", "--set", "training.global_batch=512")
    quiet, loud = cli(*args), cli(*args, "--all-ranks")
    assert quiet.code == loud.code == 2 and "error: stop" in loud.err
    assert "one by one" not in quiet.err
    assert "simulating all 512 GPUs one by one" in loud.err


def test_the_timeline_window_zooms_only_the_timeline(cli, tmp_path):
    whole, zoomed = tmp_path / "whole", tmp_path / "zoomed"
    assert cli("run", "llama3-8b-8xh100", "--out", str(whole)).code == 0
    res = cli("run", "llama3-8b-8xh100", "--out", str(zoomed), "--window", "0.05,0.06")
    assert res.code == 0, res.err
    assert (zoomed / "timeline.png").read_bytes() != (whole / "timeline.png").read_bytes()
    # the step itself is the same, byte for byte (the files leave out the wall-clock time)
    for name in ("events.csv", "summary.json", "trace.json", "memory.png", "breakdown.png"):
        assert (zoomed / name).read_bytes() == (whole / name).read_bytes(), name
    assert cli("run", "llama3-8b-8xh100", "--window", "0.05,0.06").code == 2  # nothing to zoom without --out
