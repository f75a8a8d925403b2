"""``simcluster compare``: scenarios and variants side by side.

Reference for the verdict: ZB-H1 keeps 1F1B's memory and shrinks its bubble from
(p-1)(F+B+W) to (p-1)(F+B-W) (Qi et al. 2023, Zero Bubble Pipeline Parallelism, Sec. 3), so
against 1F1B the part of the step that changes most is the idle (bubble) time.
"""

from __future__ import annotations

import json

import pytest
import yaml
from engine_helpers import pipeline_scenario, run

from simcluster.commands.compare import shared_overrides, short_labels, split_variant
from simcluster.units import format_bytes, format_time


@pytest.fixture
def pipe_file(tmp_path):
    path = tmp_path / "pipe.yaml"
    path.write_text(yaml.safe_dump(pipeline_scenario(4, 8, "1f1b")))
    return str(path)


def test_variants_are_split_and_labelled_by_their_overrides():
    assert split_variant("a.yaml@parallel.tp=2@training.micro_batch=2") == (
        "a.yaml", ["parallel.tp=2", "training.micro_batch=2"]
    )
    assert short_labels(["s", "s@parallel.tp=2", "t@parallel.tp=2"]) == ["s", "parallel.tp=2", "t@parallel.tp=2"]
    # overrides every variant shares are left out of the labels
    assert short_labels(["s@a=1@b=2", "s@a=1@b=3", "s@a=1"]) == ["b=2", "b=3", "s"]
    assert shared_overrides(["s@a=1@b=2", "s@a=1@b=3", "s@a=1"]) == ["a=1"]
    assert shared_overrides(["s@a=1", "t@a=1"]) == []


def test_each_column_is_the_run_of_its_scenario(cli, pipe_file):
    r = cli("compare", pipe_file, f"{pipe_file}@parallel.schedule=zb-h1", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    plain, zb = doc["scenarios"]
    assert zb["label"] == "parallel.schedule=zb-h1"
    expected = run(pipeline_scenario(4, 8, "zb-h1")).summary
    assert zb["step_time_s"] == expected["step_time_s"]
    assert zb["breakdown_s"] == expected["time_breakdown_s"]["per_stage"][expected["time_breakdown_s"]["stage"]]
    for rec in (plain, zb):
        assert sum(rec["breakdown_s"].values()) == pytest.approx(rec["step_time_s"], rel=1e-9)
    assert zb["tokens_per_s_per_gpu"] > plain["tokens_per_s_per_gpu"]


def test_table_names_the_part_that_moved_most(cli, pipe_file):
    r = cli("compare", pipe_file, f"{pipe_file}@parallel.schedule=zb-h1")
    assert r.code == 0, r.err
    assert "largest change is idle (bubble, waits)" in " ".join(r.out.split())


def test_out_writes_the_three_files(cli, pipe_file, tmp_path):
    out = tmp_path / "cmp"
    r = cli("compare", pipe_file, f"{pipe_file}@training.micro_batch=2", "--out", str(out))
    assert r.code == 0, r.err
    rows = (out / "compare.csv").read_text().splitlines()
    assert len(rows) == 3 and "gemm_s" in rows[0] and "idle_s" in rows[0]
    assert json.loads((out / "compare.json").read_text())["scenarios"][1]["label"] == "training.micro_batch=2"
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_out_with_a_trailing_slash_names_the_files_once(cli, pipe_file, tmp_path):
    """README writes `--out val/`: the 'wrote' line names DIR/compare.csv, not DIR//compare.csv."""
    r = cli("compare", pipe_file, f"{pipe_file}@training.micro_batch=2", "--out", f"{tmp_path / 'cmp'}/")
    assert r.code == 0, r.err
    assert f"wrote {tmp_path / 'cmp'}/compare.csv, compare.json, compare.png" in r.out
    assert "//" not in r.out


@pytest.mark.parametrize(
    "args, needle",
    [
        ((), "at least two"),
        (("@parallel.tp=2",), "no scenario before"),
        (("{f}@parallel.tp=3",), "parallel"),
        (("{f}@parallel.nonsense=1",), "parallel.nonsense"),
    ],
)
def test_bad_input_is_one_line_with_status_2(cli, pipe_file, args, needle):
    r = cli("compare", pipe_file, *(a.format(f=pipe_file) for a in args))
    assert r.code == 2
    assert needle in r.err and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "variant, needle",
    [
        ("{f}@", "'{f}@' has an empty override after '@'; write NAME@key=value, e.g. {f}@parallel.tp=2"),
        ("{f}@@parallel.tp=2", "has an empty override after '@'"),
        ("{f}@tp", "'{f}@tp': 'tp' is not key=value; write NAME@key=value"),
        ("{f}@=2", "'=2' is not key=value"),
        ("{f}@parallel..tp=2", "the key 'parallel..tp' has an empty part; write NAME@key=value"),
        # the last would win silently, and the column be labelled with both values
        ("{f}@parallel.tp=2@parallel.tp=4", "sets parallel.tp twice ('parallel.tp=2' and 'parallel.tp=4'); keep one"),
        ("{f}@training.mbs=2@training.micro_batch=4", "sets training.micro_batch twice"),  # an alias
    ],
)
def test_a_bad_variant_is_explained_in_its_own_syntax(cli, pipe_file, variant, needle):
    r = cli("compare", pipe_file, variant.format(f=pipe_file))
    assert r.code == 2
    assert r.err.startswith("error: SCENARIO: ")
    assert needle.format(f=pipe_file) in r.err and "--set" not in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_the_error_of_one_of_several_variants_names_it(cli, pipe_file):
    r = cli("compare", pipe_file, f"{pipe_file}@training.micro_batch=2", f"{pipe_file}@parallel.pp=3")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert r.err.startswith("error: parallel") and r.err.strip().endswith(f"(in SCENARIO {pipe_file}@parallel.pp=3)")


def test_a_key_set_in_two_variants_is_no_repetition(cli, pipe_file):
    r = cli("compare", f"{pipe_file}@training.micro_batch=2", f"{pipe_file}@training.micro_batch=4", "--json")
    assert r.code == 0, r.err


def test_set_overrides_are_said_once_above_the_table(cli, pipe_file):
    """--set changes every scenario, as an @override they all share does; the table's columns
    do not show it (the README's context-parallel example sets cp and the sequence so), so the
    line above the table and the JSON name it as they name the shared @override."""
    r = cli("compare", f"{pipe_file}@parallel.schedule=1f1b", f"{pipe_file}@parallel.schedule=zb-h1",
            "--set", "training.micro_batch=2")  # fmt: skip
    assert r.code == 0, r.err
    assert "every scenario: training.micro_batch=2" in r.out.splitlines()
    doc = json.loads(cli("compare", pipe_file, f"{pipe_file}@parallel.schedule=zb-h1", "--set", "training.micro_batch=2", "--json").out)
    assert doc["shared_overrides"] == ["training.micro_batch=2"]


def _bar_texts(figure) -> list[list[str]]:
    """The share labels drawn on each bar of a draw_bars figure, top bar first (not the text
    after a bar's end, _bar_ends)."""
    from matplotlib.text import Annotation

    ax = figure.axes[0]
    rows: dict[int, list[tuple[float, str]]] = {}
    for text in ax.texts:
        if isinstance(text, Annotation):
            continue
        x, y = text.get_position()
        rows.setdefault(round(y), []).append((x, text.get_text()))
    return [[t for _, t in sorted(rows.get(i, []))] for i in range(len(ax.get_yticklabels()))]


def test_plot_shares_are_of_each_bars_own_step():
    from simcluster.output.breakdown_plot import Bar, draw_bars

    # a 10 s step of 5 s GEMMs + 5 s idle, and a 5 s step of 4 s GEMMs + 1 s idle: each bar's
    # GEMMs are 50% and 80% of its own step (dividing by the longest step gave 50% and 40%)
    figure = draw_bars(
        [Bar("long", {"gemm": 5.0, "idle": 5.0}, 10.0), Bar("short", {"gemm": 4.0, "idle": 1.0}, 5.0)],
        "t",
    )
    assert _bar_texts(figure) == [["50%", "50%"], ["80%", "20%"]]
    assert figure.axes[0].get_xlim() == (0.0, 10.0)  # one axis: the longest step


def test_compare_png_shares_match_the_table(cli, pipe_file):
    from simcluster.commands.compare import figure_of

    r = cli("compare", pipe_file, f"{pipe_file}@training.global_batch=2", "--json")
    assert r.code == 0, r.err
    recs = json.loads(r.out)["scenarios"]
    assert recs[0]["step_time_s"] > 2 * recs[1]["step_time_s"]  # steps of different lengths
    summaries = [(rec["label"], {**rec, "time_breakdown_s": {"stage": 0, "per_stage": [rec["breakdown_s"]]}})
                 for rec in recs]  # fmt: skip
    texts = _bar_texts(figure_of(summaries, []))
    for rec, drawn in zip(recs, texts, strict=True):
        gemm = f"{100 * rec['breakdown_s']['gemm'] / rec['step_time_s']:.0f}%"
        assert drawn[0] == gemm  # the GEMMs come first, as in the table's rows


def test_run_breakdown_png_shares_are_of_the_step():
    from simcluster.output.breakdown_plot import draw_breakdown

    summary = {"step_time_s": 4.0, "time_breakdown_s": {"stage": 0, "per_stage": [
        {"gemm": 3.0, "idle": 1.0}, {"gemm": 1.0, "comm_pp": 1.0, "idle": 2.0}]}}  # fmt: skip
    assert _bar_texts(draw_breakdown(summary)) == [["75%", "25%"], ["25%", "25%", "50%"]]


def test_a_variant_over_its_memory_is_said_plainly(cli, pipe_file, tmp_path):
    # 128 layers of 4h^2 + 2*h*4h = 201M parameters (h = 4096) over 4 stages: 6.44e9 on each
    # GPU, and at >= 16 bytes a parameter (bf16 weights, fp32 gradients, Adam's fp32 states)
    # 103 GB, over the H100's 81559 MiB (CUDA's total on an H100 SXM5 80GB: dgx-h100's provenance)
    big = f"{pipe_file}@model.layers=128"
    doc = json.loads(cli("compare", pipe_file, big, "--json").out)
    plain, over = doc["scenarios"]
    assert over["capacity_bytes"] == 81559 * 2**20
    assert over["peak_memory_bytes"] >= 32 * 201_326_592 * 16 > over["capacity_bytes"]
    assert plain["fits_in_memory"] and not over["fits_in_memory"]
    out = tmp_path / "cmp"
    r = cli("compare", pipe_file, big, "--out", str(out))
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    assert "✗ does not fit in GPU memory (simulated anyway)" in text  # the ✗'s legend
    peak = format_bytes(over["peak_memory_bytes"])
    # 16 times the layers on as many GPUs: 1/16 the tokens/s, -93.7%
    assert (f"model.layers=128: -93.7% tokens/s per GPU against {pipe_file}, but does not fit "
            f"({peak} of 79.65 GiB);") in text  # fmt: skip


def test_the_plot_marks_a_layout_that_does_not_fit():
    from simcluster.commands.compare import figure_of
    from simcluster.output.breakdown_plot import FLAG_COLOR

    def summary(fits: bool) -> dict:
        return {"step_time_s": 1.0, "fits_in_memory": fits, "gpus": 1, "tokens_per_s": 1024.0,
                "time_breakdown_s": {"stage": 0, "per_stage": [{"gemm": 1.0}]}}  # fmt: skip

    ticks = figure_of([("a", summary(True)), ("b", summary(False))], []).axes[0].get_yticklabels()
    assert [t.get_text() for t in ticks] == ["a", "b ✗ does not fit"]
    assert ticks[1].get_color() == FLAG_COLOR and ticks[0].get_color() != FLAG_COLOR


def test_a_first_scenario_over_its_memory_is_said_too(cli, pipe_file):
    r = cli("compare", f"{pipe_file}@model.layers=128", pipe_file)
    assert r.code == 0, r.err
    assert "model.layers=128 (the baseline) does not fit (" in " ".join(r.out.split())


def _per_mtok(rec: dict, key: str) -> float:
    """GPU seconds per million tokens of one part of a compare.json row."""
    return rec["breakdown_s"][key] * rec["gpus"] / rec["tokens_per_step"] * 1e6


def _row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"│ {name} "))


def test_steps_of_different_token_counts_are_compared_per_token(cli, pipe_file):
    # global_batch 2 instead of 8, of 1024 tokens: 2,048 tokens a step against 8,192. 1F1B's
    # bubble is (p-1)(F+B) a step whatever the microbatch count, so per token it is 4 times as
    # large: idle is what grew, whereas per step every compute part shrank (GEMMs the most)
    small = f"{pipe_file}@training.global_batch=2"
    doc = json.loads(cli("compare", pipe_file, small, "--json").out)
    assert doc["compared_per"] == "gpu_s_per_million_tokens"
    big, few = doc["scenarios"]
    assert (big["tokens_per_step"], few["tokens_per_step"]) == (8192, 2048)
    assert few["breakdown_s"]["gemm"] < big["breakdown_s"]["gemm"] / 3  # per step GEMMs moved most
    grown = _per_mtok(few, "idle") - _per_mtok(big, "idle")
    r = cli("compare", pipe_file, small)
    assert r.code == 0, r.err
    assert (f"its step is 2,048 tokens against 8,192, so per token the largest change is idle (bubble, "
            f"waits) (+{format_time(grown)} of GPU time per 1M tokens)") in " ".join(r.out.split())  # fmt: skip
    # the rows are per token: GPU time per 1M tokens is 1e6 / (tokens/s per GPU), GEMMs a part of it
    total = _row(r.out, "GPU time per 1M tokens")
    assert all(format_time(1e6 / rec["tokens_per_s_per_gpu"]) in total for rec in (big, few))
    gemm = _row(r.out, "GEMMs")
    for rec in (big, few):
        assert f"{format_time(_per_mtok(rec, 'gemm'))} ({100 * rec['breakdown_s']['gemm'] / rec['step_time_s']:.0f}%)" in gemm


def test_steps_on_different_gpu_counts_are_compared_per_token(cli, pipe_file):
    # the same 8,192 tokens a step on twice the GPUs (dp 2): a step's parts halve, per GPU they do not
    r = cli("compare", pipe_file, f"{pipe_file}@cluster.gpus=8@cluster.gpus_per_node=8", "--json")
    assert json.loads(r.out)["compared_per"] == "gpu_s_per_million_tokens"
    r = cli("compare", pipe_file, f"{pipe_file}@cluster.gpus=8@cluster.gpus_per_node=8")
    assert "it runs on 8 GPUs against 4, so per token the largest change is" in " ".join(r.out.split())


def test_equal_steps_are_compared_per_step_with_the_clis_signs(cli, pipe_file):
    zb = f"{pipe_file}@parallel.schedule=zb-h1"
    doc = json.loads(cli("compare", pipe_file, zb, "--json").out)
    assert doc["compared_per"] == "s_per_step"
    plain, rec = doc["scenarios"]
    shrunk = rec["breakdown_s"]["idle"] - plain["breakdown_s"]["idle"]
    ratio = rec["tokens_per_s_per_gpu"] / plain["tokens_per_s_per_gpu"] - 1
    r = cli("compare", pipe_file, zb)
    text = " ".join(r.out.split())
    # ASCII signs, as run, sweep and validate print them (`:+`), for the percentage and the time
    assert (f"parallel.schedule=zb-h1: {100 * ratio:+.1f}% tokens/s per GPU against {pipe_file}; the "
            f"largest change is idle (bubble, waits) (-{format_time(-shrunk)} per step)") in text  # fmt: skip
    assert "−" not in r.out


def test_a_scenario_against_itself_has_no_difference(cli, pipe_file):
    r = cli("compare", pipe_file, pipe_file)
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    assert (f"{pipe_file}: no difference from {pipe_file}: the same tokens/s per GPU and the same time in "
            "every part of the step") in text  # fmt: skip
    assert "largest change" not in text


def test_rounding_residue_gets_no_row():
    # idle is the step less the other parts: 1.1e-13 s of it (as mixtral-8x7b-32xh100 has) is
    # float rounding, shown before as a row "idle 0.0 us (0%)" next to a "—"
    from simcluster.commands.compare import _keys
    from simcluster.commands.compare_parts import Basis

    def summary(idle: float) -> dict:
        return {"step_time_s": 5.0, "gpus": 8, "tokens_per_s": 1000.0,
                "time_breakdown_s": {"stage": 0, "per_stage": [{"gemm": 5.0, "idle": idle}]}}  # fmt: skip

    summaries = [("a", summary(1.1e-13)), ("b", summary(0.0))]
    assert _keys(summaries, Basis.of(summaries)) == ["gemm"]
    assert _keys([("a", summary(0.5)), ("b", summary(0.0))], Basis(False)) == ["gemm", "idle"]


def test_the_plot_of_one_scenarios_variants_names_it():
    """Variants are labelled by their overrides alone ("parallel.schedule=zb-h1"): the title
    names the scenario they vary; scenarios of their own keep the plain title."""
    from simcluster.commands.compare import figure_of

    def summary(name: str) -> dict:
        return {"scenario": name, "step_time_s": 1.0, "fits_in_memory": True, "gpus": 1, "tokens_per_s": 1024.0,
                "time_breakdown_s": {"stage": 0, "per_stage": [{"gemm": 1.0}]}}  # fmt: skip

    variants = figure_of([("s", summary("s")), ("parallel.tp=2", summary("s"))], []).axes[0].get_title()
    assert variants == "s: where each variant's step goes (busiest stage)"
    apart = figure_of([("a", summary("a")), ("b", summary("b"))], []).axes[0].get_title()
    assert apart == "where each scenario's step goes (busiest stage)"


def test_compare_png_names_each_layout_and_writes_each_bars_total_inside_the_figure(cli, pipe_file):
    """Each bar's label has a second line with the layout it ran and its GPUs, as the table's
    header and compare.json's layout give it, and after the bar its length on the axis and its
    tokens/s per GPU (the table's step time and throughput), inside the figure; the axis says
    what it measures and its unit."""
    from matplotlib.text import Annotation

    from simcluster.commands.compare import figure_of

    r = cli("compare", pipe_file, f"{pipe_file}@parallel.schedule=zb-h1", "--json")
    assert r.code == 0, r.err
    recs = json.loads(r.out)["scenarios"]
    summaries = [(rec["label"], {**rec, "time_breakdown_s": {"stage": 0, "per_stage": [rec["breakdown_s"]]}})
                 for rec in recs]  # fmt: skip
    figure = figure_of(summaries, [])
    ax = figure.axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks == [f"{rec['label']}\n{rec['layout']}, {rec['gpus']} x {rec['hardware']}" for rec in recs]
    assert "zb-h1" in ticks[1].splitlines()[1]
    ends = [t for t in ax.texts if isinstance(t, Annotation)]
    assert [t.get_text() for t in ends] == [
        f"{format_time(rec['step_time_s'])}, {rec['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU" for rec in recs
    ]
    assert ax.get_xlabel() == "time per training step (ms)"  # steps of tens of ms
    figure.canvas.draw()
    width = figure.bbox.width
    assert all(0 < t.get_window_extent().x1 <= width for t in ends)  # not cut at the figure's edge


def test_a_list_override_keeps_its_value_in_the_column_and_the_verdict(cli):
    """``@training.cuda_graphs=[attn,mlp]``: the brackets are the value, not Rich markup (which
    would have dropped them and left ``training.cuda_graphs=``)."""
    res = cli("compare", "llama3-8b-8xh100", "llama3-8b-8xh100@training.cuda_graphs=[attn,mlp]")
    assert res.code == 0, res.err
    assert "training.cuda_graphs=[attn,mlp]" in res.out
    # the verdict, however the console's width wraps it
    assert "training.cuda_graphs=[attn,mlp]: no difference from llama3-8b-8xh100" in " ".join(res.out.split())
