"""Layout sweeps (`simcluster sweep`): axis parsing, candidate generation, skipping, ranking,
and the simulated rows against the analytic 1F1B bubble (p-1)/(m+p-1) (Narayanan et al. 2021,
Sec. 2.2.1) and against `simulate` of the same scenario."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from simcluster.cli import main
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict
from simcluster.sweep import SweepRow, candidates, check, parse_axis, rank, run_sweep, skip_reasons
from tests.engine_helpers import pipeline_scenario

GPUS, M = 4, 16


def _base() -> dict:
    """Four GPUs, 16 sequences per step, a balanced 8-layer model on an ideal network."""
    return pipeline_scenario(GPUS, M, "1f1b", layers=8)


# --- axes -------------------------------------------------------------------------------
def test_parse_axis_lists_keep_order_and_drop_duplicates():
    assert parse_axis("tp", "2, 1,2,4", 8) == [2, 1, 4]
    assert parse_axis("zero", "0,1,3", 8) == [0, 1, 3]
    assert parse_axis("schedule", "1f1b,zb-h1", 8) == ["1f1b", "zb-h1"]
    assert parse_axis("sequence_parallel", "true,no", 8) == [True, False]
    assert parse_axis("optimizer_offload", "0, 0.5,1", 8) == [0.0, 0.5, 1.0]
    assert parse_axis("activation_offload_layers", "0,8,16", 8) == [0, 8, 16]


def test_zero_shard_axis_takes_node_as_the_scenario_field_does():
    # parallel.zero_shard accepts 'node' (FSDP1 HYBRID_SHARD: a node's data-parallel ranks);
    # --zero-shard once refused it as "not a whole number"
    assert parse_axis("zero_shard", "8, node,Node,64", 64) == [8, "node", 64]
    cands = candidates(_base(), {"zero_shard": [2, "node"]})
    assert [c.scenario["parallel"]["zero_shard"] for c in cands] == [2, "node"]


def test_word_values_of_numeric_axes_are_the_scenario_fields_words():
    # sweep.WORDS is the schema's: every Literal word of a numeric axis's scenario field (the
    # int | Literal["node"] of parallel.zero_shard), so a word added to a field reaches its axis
    from typing import Literal, get_args, get_origin

    from simcluster.scenario.document import Scenario
    from simcluster.sweep import AXES, WORDS

    def literals(annotation):
        if get_origin(annotation) is Literal:
            return [a for a in get_args(annotation) if isinstance(a, str)]
        return [w for arg in get_args(annotation) for w in literals(arg)]

    schema = {}
    for axis, (section, field, kind) in AXES.items():
        words = literals(Scenario.model_fields[section].annotation.model_fields[field].annotation)
        if kind in (int, float) and words:
            schema[axis] = tuple(words)
    assert WORDS == schema == {"zero_shard": ("node",)}


def test_a_word_an_axis_does_not_take_names_the_axis_and_its_values():
    with pytest.raises(UserError) as err:
        parse_axis("zero_shard", "8,nodes", 64)
    assert err.value.one_line() == "--zero-shard: 'nodes' is not a whole number or node; give a list like 1,2,4,node"
    with pytest.raises(UserError, match="'node' is not a whole number; give a list like 1,2,4$"):
        parse_axis("tp", "node", 64)


def test_ep_overlap_is_an_axis_and_needs_expert_parallelism():
    assert parse_axis("ep_comm", "true,false", 8) == [True, False]
    cands = candidates(_base(), {"ep_comm": [True, False]})
    assert [c.scenario["overlap"]["ep_comm"] for c in cands] == [True, False]
    # the base is a dense model: the overlap cannot run, and the skip says why as run would
    assert "overlap.ep_comm" in check(cands[0], None) and check(cands[1], None) is None


def test_the_moe_dispatcher_is_an_axis_read_through_its_spellings():
    """--dispatcher compares Megatron's all-to-all with DeepEP and HybridEP (moe.dispatcher);
    the schema's spellings are values (hybrid-ep is hybridep), on a dense base a row that
    cannot run, as run refuses moe settings there."""
    assert parse_axis("dispatcher", "alltoall,hybrid-ep", 8) == ["alltoall", "hybrid-ep"]
    cands = candidates(_base(), {"dispatcher": ["alltoall", "hybridep"]})
    assert [c.scenario["moe"]["dispatcher"] for c in cands] == ["alltoall", "hybridep"]
    assert "moe" in check(cands[1], None)


def test_the_dispatch_kernels_sm_count_is_an_axis():
    """--dispatch-sms trades DeepEP's / HybridEP's rate against the SMs left to the compute they
    overlap (moe.dispatch_sms; Megatron-Core's --moe-deepep-num-sms / --moe-hybridep-num-sms)."""
    assert parse_axis("dispatch_sms", "16,32,16", 8) == [16, 32]
    cands = candidates(_base(), {"dispatch_sms": [16, 32]})
    assert [c.scenario["moe"]["dispatch_sms"] for c in cands] == [16, 32]


def test_parse_axis_auto_is_powers_of_two_up_to_the_gpus():
    assert parse_axis("tp", "auto", 8) == [1, 2, 4, 8]
    assert parse_axis("pp", "auto", 12) == [1, 2, 4, 8]


@pytest.mark.parametrize(
    "axis, text, flag",
    [("tp", "two", "--tp"), ("pp", "0", "--pp"), ("micro_batch", "1,,2", "--micro-batch"),
     ("zero", "auto", "--zero"), ("sequence_parallel", "maybe", "--sequence-parallel"),
     ("optimizer_offload", "all", "--optimizer-offload"), ("optimizer_offload", "1.5", "--optimizer-offload")],
)  # fmt: skip
def test_parse_axis_bad_values_name_the_flag(axis, text, flag):
    with pytest.raises(UserError) as err:
        parse_axis(axis, text, 8)
    assert err.value.field == flag


# --- candidates -------------------------------------------------------------------------
def test_candidates_are_the_product_in_axis_order():
    base = _base()
    base["parallel"].update(dp=1, layers_per_stage=[2, 2, 2, 2])
    cands = candidates(base, {"micro_batch": [1, 2], "pp": [1, 2, 4]})
    assert [c.label for c in cands] == [
        f"pp={p} micro_batch={b}" for p in (1, 2, 4) for b in (1, 2)
    ]
    for c in cands:
        # dp is derived from the GPU count again, and a stage split for one depth is dropped
        assert "dp" not in c.scenario["parallel"]
        assert "layers_per_stage" not in c.scenario["parallel"]
        settings = dict(c.settings)
        assert c.scenario["parallel"]["pp"] == settings["pp"]
        assert c.scenario["training"]["micro_batch"] == settings["micro_batch"]
    assert base["parallel"]["dp"] == 1  # the base mapping is not modified


def test_candidates_need_a_known_axis():
    with pytest.raises(UserError, match="no axis"):
        candidates(_base(), {})
    with pytest.raises(UserError, match="not a sweep axis"):
        candidates(_base(), {"dp": [1]})


def test_precision_is_an_axis_and_nvfp4_needs_fp4_tensor_cores():
    assert parse_axis("precision", "bf16,FP8-MX,nvfp4", 8) == ["bf16", "FP8-MX", "nvfp4"]
    cands = candidates(_base(), {"precision": ["fp8", "nvfp4"]})
    assert [c.scenario["training"]["precision"] for c in cands] == ["fp8", "nvfp4"]
    # the base runs on an H100 profile: FP8 runs, NVFP4 is skipped with run's reason
    assert check(cands[0], None) is None and "nvfp4 needs FP4 tensor cores" in check(cands[1], None)


def test_impossible_layouts_are_skipped_with_the_run_error():
    base = _base()
    base["model"].update(hidden=768, heads=6)
    cands = candidates(base, {"tp": [4, 8], "pp": [1]})
    reasons = [check(c, None) for c in cands]
    for cand, reason in zip(cands, reasons, strict=True):
        with pytest.raises(UserError) as err:  # what `simcluster run` would say
            from simcluster.context import build_context

            build_context(scenario_from_dict(cand.scenario))
        assert reason == err.value.one_line()
    assert "heads" in reasons[0]  # 6 heads are not divisible by tp 4
    assert "cluster.gpus" in reasons[1]  # tp 8 does not divide 4 GPUs


# --- running ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pp_rows():
    return run_sweep(candidates(_base(), {"pp": [1, 2, 4], "tp": [1, 3]}), jobs=1)


def test_sweep_rows_follow_the_analytic_1f1b_bubble(pp_rows):
    ran = {dict(r.candidate.settings)["pp"]: r for r in pp_rows if r.ran}
    assert sorted(ran) == [1, 2, 4]
    for p, row in ran.items():
        m = M // (GPUS // p)  # microbatches per pipeline: global batch / dp
        assert row.summary["microbatches"] == m
        assert row.summary["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1), rel=0.01, abs=1e-9)


def test_sweep_rows_equal_simulate_of_the_same_scenario(pp_rows):
    for row in pp_rows:
        if row.ran:
            expected = simulate(scenario_from_dict(row.candidate.scenario)).summary
            for key in ("step_time_s", "tokens_per_s", "mfu", "peak_memory_bytes", "exposed_comm_s"):
                assert row.summary[key] == expected[key]


def test_sweep_rows_name_the_largest_part_after_gemms(pp_rows):
    # the idle part is the 1F1B bubble (p-1)/(m+p-1): 3/19 of the step at pp 4, none at pp 1
    for row in pp_rows:
        if not row.ran:
            continue
        rec = row.to_dict()
        stage = row.summary["time_breakdown_s"]
        part = stage["per_stage"][stage["stage"]]
        key = max((k for k in part if k != "gemm"), key=part.get)
        assert rec["largest_besides_gemm"] == key
        assert rec["largest_besides_gemm_share"] == pytest.approx(part[key] / row.summary["step_time_s"])
        p = dict(row.candidate.settings)["pp"]
        m = M // (GPUS // p)
        idle = part["idle"] / (row.summary["step_time_s"] - part["optimizer"])
        assert idle == pytest.approx((p - 1) / (m + p - 1), abs=0.01)


def test_sweep_is_ranked_and_reports_skips(pp_rows):
    ran = [r for r in pp_rows if r.ran]
    speeds = [r.summary["tokens_per_s_per_gpu"] for r in ran]
    assert speeds == sorted(speeds, reverse=True)
    assert all(not r.ran for r in pp_rows[len(ran):])  # skipped ones last
    (field, count, first), = skip_reasons(pp_rows)
    assert count == 3 and "does not divide cluster.gpus" in first


def test_skips_are_grouped_by_reason_not_by_field_alone():
    # two reasons under training.global_batch: one example used to stand for both
    from simcluster.sweep import Candidate

    def skipped(text):
        return SweepRow(Candidate((), {}), None, text)

    rows = [
        skipped("training.global_batch: 128 is not divisible by dp*micro_batch = 3*1 = 3"),
        skipped("training.global_batch: 128 is not divisible by dp*micro_batch = 6*1 = 6"),
        skipped("training.global_batch: schedule 'interleaved' needs microbatches divisible by pp=3"),
    ]
    assert [(f, n) for f, n, _ in skip_reasons(rows)] == [("training.global_batch", 2), ("training.global_batch", 1)]
    assert "needs microbatches divisible" in skip_reasons(rows)[1][2]


def test_cli_says_how_many_combinations_were_folded(scenario_file, capsys):
    # 1f1b takes no virtual stages: --vpp 1,2 x --schedule 1f1b,interleaved is 3 layouts, not 4
    assert main(["sweep", str(scenario_file), "--pp", "2", "--vpp", "1,2", "--schedule", "1f1b,interleaved", "-j", "1"]) == 0
    assert "1 combination(s) folded into others" in capsys.readouterr().out


def test_cli_says_why_a_limit_was_folded(scenario_file, capsys):
    # only v-auto reads parallel.activation_limit: 1f1b runs once, v-auto at each limit
    assert main(["sweep", str(scenario_file), "--pp", "2", "--schedule", "1f1b,v-auto",
                 "--activation-limit", "0.75,1", "-j", "1"]) == 0  # fmt: skip
    out = " ".join(capsys.readouterr().out.split())  # the console wraps at its width
    assert "1 combination(s) folded into others: a schedule other than v-auto runs once, without a limit" in out
    assert "virtual stages" not in out


def test_cli_names_the_set_overrides_every_layout_shares(scenario_file, capsys, tmp_path, monkeypatch):
    """The table's title names the swept scenario, which --set may have changed past
    recognition (the README's 405B sweep sets model=llama3.1-405b on llama3-70b-64xh100): the
    overrides are said once above the table and under sweep.png's title."""
    import simcluster.output.sweep_output as sweep_output

    titles = []
    real = sweep_output.write_sweep
    monkeypatch.setattr(sweep_output, "write_sweep", lambda *a, **kw: titles.append(kw["title"]) or real(*a, **kw))
    argv = ["sweep", str(scenario_file), "--pp", "1,2", "--set", "training.micro_batch=2", "-j", "1"]
    assert main([*argv, "--out", str(tmp_path / "sw")]) == 0
    assert "every layout: training.micro_batch=2" in capsys.readouterr().out.splitlines()
    assert len(titles) == 1 and titles[0].endswith(": layout sweep\nevery layout: training.micro_batch=2")
    assert (tmp_path / "sw" / "sweep.png").is_file()


def test_worker_processes_give_the_same_rows(pp_rows):
    parallel = run_sweep(candidates(_base(), {"pp": [1, 2, 4], "tp": [1, 3]}), jobs=2)
    assert [r.to_dict() for r in parallel] == [r.to_dict() for r in pp_rows]


def _row(label: str, speed: float, fits: bool) -> SweepRow:
    from simcluster.sweep import Candidate

    summary = {"tokens_per_s_per_gpu": speed, "fits_in_memory": fits}
    return SweepRow(Candidate((("tp", label),), {}), summary)


def test_rank_puts_layouts_that_fit_first():
    rows = [_row("a", 10.0, False), _row("b", 5.0, True), _row("c", 7.0, True),
            SweepRow(_row("d", 0, True).candidate, None, "x: no")]  # fmt: skip
    assert [dict(r.candidate.settings)["tp"] for r in rank(rows)] == ["c", "b", "a", "d"]


# --- command line -----------------------------------------------------------------------
@pytest.fixture()
def scenario_file(tmp_path):
    path = tmp_path / "pipe.yaml"
    path.write_text(yaml.safe_dump(_base()))
    return path


def test_cli_json_and_out_files(scenario_file, tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(["sweep", str(scenario_file), "--pp", "1,2,4", "--tp", "1,3", "-j", "1",
                 "--json", "--out", str(out)])  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"] == {
        "combinations": 6, "simulated": 3, "fit": 3, "skipped": 3, "best": doc["rows"][0]["label"],
    }  # fmt: skip
    assert doc["axes"] == {"tp": [1, 3], "pp": [1, 2, 4]}
    assert json.loads((out / "sweep.json").read_text()) == doc
    frame = pd.read_csv(out / "sweep.csv")
    assert list(frame["rank"]) == [1, 2, 3, 4, 5, 6]
    assert frame["skipped"].notna().sum() == 3
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, field",
    [([], "sweep"), (["--tp", "x"], "--tp"), (["--pp", "1,2,4", "--max-layouts", "2"], "--max-layouts"),
     (["--tp", "3,5"], "parallel")],
)  # fmt: skip
def test_cli_errors_are_one_line_with_status_2(scenario_file, capsys, args, field):
    assert main(["sweep", str(scenario_file), "-j", "1", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}") and "\n" not in err and "Traceback" not in err


# --- cluster axes: GPU count and hardware ------------------------------------------------
def test_gpus_axis_rederives_dp_and_keeps_the_global_batch():
    base = _base()
    base["parallel"].update(dp=1, pp=4)
    rows = run_sweep(candidates(base, {"gpus": [4, 8, 16]}), jobs=1)
    by_gpus = {dict(r.candidate.settings)["gpus"]: r for r in rows}
    assert all(r.ran for r in rows) and sorted(by_gpus) == [4, 8, 16]
    for gpus, row in by_gpus.items():
        dp = gpus // 4
        assert row.summary["parallel"]["dp"] == dp and f"dp{dp} " in row.summary["layout"]
        assert row.to_dict()["dp"] == dp
        m = M // dp  # the global batch stays: more data parallelism, fewer microbatches each
        assert row.summary["microbatches"] == m
        # the 1F1B bubble (p-1)/(m+p-1) of Narayanan et al. 2021, Sec. 2.2.1, with p = 4
        assert row.summary["bubble_fraction"] == pytest.approx(3 / (m + 3), rel=0.01)
        expected = simulate(scenario_from_dict(row.candidate.scenario)).summary
        assert row.summary["step_time_s"] == expected["step_time_s"]


def test_cli_hardware_list_is_an_axis(scenario_file, capsys):
    code = main(["sweep", str(scenario_file), "--hardware", "dgx-a100,dgx-h100", "--gpus", "4,8",
                 "--pp", "4", "-j", "1", "--json"])  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["axes"] == {"hardware": ["dgx-a100", "dgx-h100"], "gpus": [4, 8], "pp": [4]}
    assert [r["label"].split()[0] for r in doc["rows"][:2]] == ["hardware=dgx-h100"] * 2  # H100 first
    single = main(["sweep", str(scenario_file), "--hardware", "dgx-a100", "--pp", "4", "-j", "1", "--json"])
    assert single == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    a100 = next(r for r in doc["rows"] if r["label"] == "hardware=dgx-a100 gpus=4 pp=4")
    assert row["step_time_s"] == a100["step_time_s"]  # --hardware X equals the axis value X


def test_cli_unknown_hardware_in_a_list_is_an_error_not_a_skip(scenario_file, capsys):
    assert main(["sweep", str(scenario_file), "--hardware", "dgx-h100,dgx-h900", "--pp", "4", "-j", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --hardware") and "dgx-h900" in err and "\n" not in err


@pytest.mark.parametrize(
    ("flag", "values", "hint"),
    [
        ("--schedule", "1f1b,foo", "choose from 1f1b"),
        ("--recompute", "full,selectiv", "did you mean 'selective'?"),
        ("--precision", "bf16,fp9", "did you mean 'fp8'?"),
        ("--dispatcher", "alltoall,deep_epp", "did you mean 'deepep'?"),
    ],
)
def test_cli_misspelt_choice_in_an_axis_is_an_error_before_anything_runs(scenario_file, capsys, flag, values, hint):
    # before: the misspelt value's layouts were listed as 'skipped (cannot run)', exit 0
    assert main(["sweep", str(scenario_file), flag, values, "-j", "1"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith(f"error: {flag}: unknown value") and hint in err and "\n" not in err
    assert "layouts simulated" not in captured.out


def test_axis_choices_are_read_through_the_schemas_spellings():
    # the scenario's spellings are values, not typos: GPipe is afab, FP8-CS is fp8 with its recipe
    assert parse_axis("schedule", "GPipe,ZBVZeroBubble,1F1B", 8) == ["GPipe", "ZBVZeroBubble", "1F1B"]
    assert parse_axis("precision", "FP8-CS,bf16-mixed", 8) == ["FP8-CS", "bf16-mixed"]
    assert parse_axis("recompute", "Full,off", 8) == ["Full", "off"]


def test_rank_labels_of_nearby_points_do_not_overlap():
    """Two of the best layouts at almost the same (memory, tokens/s) get labels on different
    sides; labels far apart keep the default place up and to the right of their marker."""
    from matplotlib.figure import Figure

    from simcluster.output.sweep_output import _LABEL_BOX, label_offsets

    fig = Figure(figsize=(8, 6))
    ax = fig.subplots()
    ax.set_xlim(0, 330)
    ax.set_ylim(0, 1180)
    near = [(74.2, 990.0), (67.1, 976.0), (70.0, 983.0)]
    offsets = label_offsets(ax, near)
    to_points = 72.0 / fig.dpi
    boxes = [
        (ax.transData.transform(p)[0] * to_points + dx, ax.transData.transform(p)[1] * to_points + dy)
        for p, (dx, dy) in zip(near, offsets, strict=True)
    ]
    for i, (x1, y1) in enumerate(boxes):
        for x2, y2 in boxes[i + 1 :]:
            assert abs(x1 - x2) >= _LABEL_BOX[0] or abs(y1 - y2) >= _LABEL_BOX[1]
    assert label_offsets(ax, [(10.0, 100.0), (300.0, 1000.0)]) == [(5, 3), (5, 3)]


def test_a_rank_label_keeps_off_the_markers_of_other_layouts():
    """A label's default place (up and right) over a neighbour's marker hides the point it is
    read against: the label moves to a place clear of it (llama3-70b-64xh100's sweep put "#2"
    on #1's marker); with nothing near, the default stays."""
    from matplotlib.figure import Figure

    from simcluster.output.sweep_output import _LABEL_BOX, _MARKER_PT, _OFFSETS, label_offsets

    fig = Figure(figsize=(8, 6))
    ax = fig.subplots()
    ax.set_xlim(0, 230)
    ax.set_ylim(820, 1240)
    to_points = 72.0 / fig.dpi

    def paper(p):
        return ax.transData.transform(p)[0] * to_points, ax.transData.transform(p)[1] * to_points

    label, neighbour = (64.27, 968.0), (69.98, 972.0)
    (lx, ly), (nx, ny) = paper(label), paper(neighbour)
    dx, dy = _OFFSETS[0]
    # the default place does cover the neighbour's marker here
    assert lx + dx < nx + _MARKER_PT / 2 and nx - _MARKER_PT / 2 < lx + dx + _LABEL_BOX[0]
    assert ly + dy < ny + _MARKER_PT / 2 and ny - _MARKER_PT / 2 < ly + dy + _LABEL_BOX[1]
    (mx, my), = label_offsets(ax, [label], markers=[label, neighbour])
    left, bottom = lx + mx, ly + my
    assert (mx, my) != (dx, dy)
    assert (
        left + _LABEL_BOX[0] <= nx - _MARKER_PT / 2 or nx + _MARKER_PT / 2 <= left
        or bottom + _LABEL_BOX[1] <= ny - _MARKER_PT / 2 or ny + _MARKER_PT / 2 <= bottom
    )
    # its own marker is never in the way of a place round it, and a far marker changes nothing
    assert label_offsets(ax, [label], markers=[label, (200.0, 1200.0)]) == [_OFFSETS[0]]


def test_layouts_drawn_on_one_spot_share_one_label_naming_their_ranks():
    """Schedules swept at pp = 1 give identical (memory, tokens/s) points: one marker, one label
    "#1–3" instead of three labels crowded round it; a label with a gap lists its ranks."""
    from matplotlib.figure import Figure

    from simcluster.output.sweep_output import (
        _LABEL_BOX,
        coincident_groups,
        label_offsets,
        rank_label,
    )

    fig = Figure(figsize=(8, 6))
    ax = fig.subplots()
    ax.set_xlim(0, 80)
    ax.set_ylim(0, 11000)
    anchors = [(72.69, 10271.0), (72.69, 10271.0), (49.26, 9515.0), (72.69, 10271.0), (49.26, 9245.0)]
    groups = coincident_groups(ax, anchors)
    assert groups == [[0, 1, 3], [2], [4]]
    assert [rank_label([i + 1 for i in g]) for g in groups] == ["#1,2,4", "#3", "#5"]
    assert rank_label([1, 2, 3]) == "#1\u20133"
    # a wider label's box is wider: a neighbour right of it moves clear of the whole text
    texts = ["#1\u20133", "#4"]
    near = [(40.0, 5000.0), (42.5, 5000.0)]  # ~14 pt apart: clear of a "#4", not of "#1–3"
    offsets = label_offsets(ax, near, texts)
    to_points = 72.0 / fig.dpi
    x0 = ax.transData.transform(near[0])[0] * to_points + offsets[0][0]
    x1 = ax.transData.transform(near[1])[0] * to_points + offsets[1][0]
    y0, y1 = offsets[0][1], offsets[1][1]
    wide = _LABEL_BOX[0] + 6.0 * (len(texts[0]) - 2)
    assert x0 + wide <= x1 or x1 + _LABEL_BOX[0] <= x0 or abs(y0 - y1) >= _LABEL_BOX[1]


def test_sweeping_vpp_runs_the_interleaved_schedule_where_vpp_means_it():
    # Megatron selects its interleaved 1F1B by the virtual stage count; vpp = 1 is plain 1F1B
    from simcluster.sweep import candidates

    base = {"parallel": {"pp": 4, "schedule": "1F1B"}}
    schedules = {c.scenario["parallel"]["vpp"]: c.scenario["parallel"]["schedule"] for c in candidates(base, {"vpp": [1, 2, 4]})}
    assert schedules == {1: "1F1B", 2: "interleaved", 4: "interleaved"}
    interleaved = {"parallel": {"pp": 4, "vpp": 2, "schedule": "interleaved"}}
    assert candidates(interleaved, {"vpp": [1]})[0].scenario["parallel"]["schedule"] == "1f1b"
    # a swept schedule is the user's: left as given
    both = candidates(base, {"vpp": [2], "schedule": ["looped-bfs"]})
    assert both[0].scenario["parallel"]["schedule"] == "looped-bfs"


def test_a_swept_layout_keeps_the_global_batch_not_the_accumulation_steps():
    # GA = global batch / (dp x micro-batch) changes with the layout; the sweep holds the batch
    from simcluster.sweep import candidates

    base = {"parallel": {"tp": 1}, "training": {"global_batch": 64, "grad_accum": 8, "micro_batch": 1}}
    for cand in candidates(base, {"tp": [1, 2]}):
        assert cand.scenario["training"] == {"global_batch": 64, "micro_batch": 1}


def test_sweeping_schedule_and_vpp_runs_one_chunk_schedules_once_at_vpp_1():
    # --schedule 1f1b,interleaved --vpp 2,4: 1F1B takes no virtual stages (layout.py refuses
    # vpp > 1 for it), so it runs once at vpp 1 instead of being skipped twice
    base = {"parallel": {"pp": 4}}
    rows = candidates(base, {"vpp": [2, 4], "schedule": ["1f1b", "interleaved", "zb-h1"]})
    got = [(c.scenario["parallel"]["schedule"], c.scenario["parallel"]["vpp"]) for c in rows]
    assert got == [("1f1b", 1), ("interleaved", 2), ("zb-h1", 1), ("interleaved", 4)]
    assert rows[0].label == "vpp=1 schedule=1f1b"
    # interleaved at vpp 1 is still the user's to see refused
    assert ("interleaved", 1) in [
        (c.scenario["parallel"]["schedule"], c.scenario["parallel"]["vpp"])
        for c in candidates(base, {"vpp": [1], "schedule": ["interleaved"]})
    ]


def test_pareto_front_keeps_the_fastest_layout_for_each_memory_budget():
    """A point is on the front when no other uses no more memory and runs faster (the sweep
    plot's step line): here (30, 6.8k), (37.5, 8.4k), (49, 9.5k), (73, 10.3k)."""
    from simcluster.output.sweep_output import pareto_front

    points = [(72.7, 10271.0), (73.2, 9854.0), (49.3, 9515.0), (53.5, 8754.0),
              (37.5, 8408.0), (43.7, 7085.0), (31.7, 6777.0), (49.3, 9000.0)]  # fmt: skip
    assert pareto_front(points) == [6, 4, 2, 0]
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [0]


# --- sweep.png: what it draws (artists and their labels, not pixels) ----------------------
def _laid(label: str, hardware: str, mem_gib: float, speed: float, capacity_gib: float, gpus: int = 8) -> SweepRow:
    """A simulated layout as the sweep plot reads it: memory, speed, capacity, its profile."""
    from simcluster.sweep import Candidate
    from simcluster.units import GiB

    summary = {
        "hardware": hardware, "gpus": gpus, "tokens_per_s_per_gpu": speed, "tokens_per_s": speed * gpus,
        "peak_memory_bytes": {"max": mem_gib * GiB}, "capacity_bytes": capacity_gib * GiB,
        "fits_in_memory": mem_gib <= capacity_gib,
    }  # fmt: skip
    return SweepRow(Candidate((("layout", label),), {}), summary)


def _rank_labels(ax) -> dict[str, tuple[float, float]]:
    from matplotlib.text import Annotation

    return {t.get_text(): t.xy for t in ax.texts if isinstance(t, Annotation)}


def test_priced_sweep_plot_draws_the_cost_it_ranks_by():
    """With --price the table ranks by dollars per million tokens; the plot draws that cost
    (lower is better), #1 is the cheapest point and the step line the cheapest for its memory.
    Before, it drew tokens/s with the fastest (and dearest) layout on top."""
    from simcluster.cost import Prices, usd_per_million_tokens
    from simcluster.output.sweep_output import draw_sweep

    prices = Prices(by_hardware={"h100": 2.5, "b200": 10.0})
    rows = rank([_laid("h-a", "h100", 67, 976, 80), _laid("h-b", "h100", 52, 942, 80),
                 _laid("b-a", "b200", 67, 1865, 179), _laid("b-b", "b200", 52, 1828, 179)], prices)  # fmt: skip
    ax = draw_sweep(rows, prices=prices).axes[0]
    assert "$ per 1M tokens" in ax.get_ylabel() and "lower is better" in ax.get_ylabel()
    costs = [usd_per_million_tokens(r.summary, prices) for r in rows]
    assert _rank_labels(ax)["#1"] == pytest.approx((67, min(costs)))  # the cheapest is #1
    fronts = [line for line in ax.lines if line.get_label().endswith("cheapest for its memory")]
    (h100,) = [line for line in fronts if line.get_label().startswith("h100")]
    # the less memory, the dearer: both H100 layouts are on the front, in memory order
    assert list(h100.get_xdata()) == [52, 67] and list(h100.get_ydata()) == sorted(costs[:2], reverse=True)
    assert not any("fastest" in line.get_label() for line in ax.lines)
    # an 8B model's cents: tick labels and the key keep enough digits to tell costs apart
    cheap = rank([_laid("x", "h100", 73, 10271, 80), _laid("y", "h100", 49, 9515, 80),
                  _laid("z", "h100", 38, 8408, 80)], Prices(default=2.5))  # fmt: skip
    fig = draw_sweep(cheap, prices=Prices(default=2.5))
    fig.draw_without_rendering()
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(set(ticks)) == len(ticks) and all(t.startswith("$") for t in ticks)
    (key,) = [t.get_text() for t in fig.texts if t.get_text().startswith("cheapest that fit")]
    assert "$0.0676 per 1M tokens" in key


def test_hardware_sweep_plot_gives_each_profile_a_colour_its_capacity_and_its_front():
    """Two profiles: one legend entry each, naming it and its memory; its capacity line, its
    hollow 'does not fit' markers and its front in its scatter colour, its marker its own."""
    from matplotlib.colors import to_hex

    from simcluster.output.sweep_output import draw_sweep

    rows = rank([_laid("h200-mb2", "dgx-h200", 113, 10990, 140), _laid("h200-mb1", "dgx-h200", 73, 10712, 140),
                 _laid("a100-mb2", "dgx-a100-40gb", 113, 3646, 40), _laid("a100-mb1", "dgx-a100-40gb", 73, 3565, 40),
                 _laid("a100-tp8", "dgx-a100-40gb", 30, 2000, 40), _laid("a100-tp4", "dgx-a100-40gb", 35, 2500, 40)])  # fmt: skip
    ax = draw_sweep(rows).axes[0]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    colours, markers = {}, {}
    for name, capacity in (("dgx-h200", 140), ("dgx-a100-40gb", 40)):
        (entry,) = [t for t in texts if t.startswith(name + " ")]  # one entry per profile
        assert f"{capacity}.00 GiB" in entry
        (dots,) = [c for c in ax.collections if c.get_label() == name]
        colours[name] = to_hex(dots.get_facecolor()[0])
        markers[name] = dots.get_paths()[0].vertices.shape
        (line,) = [ln for ln in ax.lines if ln.get_label() == f"{name}: GPU memory ({capacity}.00 GiB)"]
        assert to_hex(line.get_color()) == colours[name] and list(line.get_xdata()) == [capacity] * 2
        (front,) = [ln for ln in ax.lines if ln.get_label() == f"{name}: fastest for its memory"]
        assert to_hex(front.get_color()) == colours[name]
    assert len(set(colours.values())) == 2 and len(set(markers.values())) == 2
    (hollow,) = [c for c in ax.collections if c.get_label() == "dgx-a100-40gb: does not fit"]
    assert to_hex(hollow.get_edgecolor()[0]) == colours["dgx-a100-40gb"] and len(hollow.get_facecolor()) == 0
    assert "hollow: does not fit" in texts


def test_a_profiles_colour_and_marker_do_not_depend_on_the_other_profiles_or_their_rank():
    """A profile's colour was its place in the ranking: dgx-h200 blue when it led a sweep and
    orange when dgx-a100 did, so two sweep.png side by side swapped colours. It is the
    profile's own now, in the scatter as in the style table."""
    from matplotlib.colors import to_hex

    from simcluster.hardware import shipped_profiles
    from simcluster.output.sweep_output import SHIPPED_PROFILE_COLOURS, draw_sweep, profile_styles

    def colour_of(rows, name):
        ax = draw_sweep(rank(rows)).axes[0]
        (dots,) = [c for c in ax.collections if c.get_label() == name]
        return to_hex(dots.get_facecolor()[0])

    h200_fast = [_laid("h", "dgx-h200", 70, 11000, 140), _laid("a", "dgx-a100", 70, 3000, 80)]
    a100_fast = [_laid("h", "dgx-h200", 70, 3000, 140), _laid("a", "dgx-a100", 70, 11000, 80)]
    three = [*a100_fast, _laid("b", "dgx-b200", 70, 20000, 179)]
    for name in ("dgx-h200", "dgx-a100"):
        assert colour_of(h200_fast, name) == colour_of(a100_fast, name) == colour_of(three, name)
    assert profile_styles(["dgx-h200", "dgx-a100"])["dgx-a100"] == profile_styles(["dgx-a100"])["dgx-a100"]
    # every shipped profile has a colour of its own, so any two of them can share a sweep
    assert set(SHIPPED_PROFILE_COLOURS) == set(shipped_profiles())
    assert len(set(SHIPPED_PROFILE_COLOURS.values())) == len(SHIPPED_PROFILE_COLOURS)
    styles = profile_styles(shipped_profiles())
    assert len(set(styles.values())) == len(styles)
    # profiles of one's own: the same look every time, and none of a shipped one in the sweep
    mine = profile_styles(["my-h100", "my-b200", "dgx-h100"])
    assert mine == profile_styles(["dgx-h100", "my-b200", "my-h100"])
    assert len({colour for colour, _ in mine.values()}) == 3


def test_one_profile_plot_keeps_its_look_and_zooms_only_a_narrow_spread():
    """The y axis starts at 0 while the points span more than a third of their maximum; 942
    to 976 tokens/s would be one band at the top, so it zooms and the label says so."""
    from matplotlib.colors import to_hex

    from simcluster.output.sweep_output import draw_sweep, y_limits

    assert y_limits([300.0, 1000.0]) == (0.0, 1050.0, False)
    low, high, zoomed = y_limits([942.0, 976.0])
    assert zoomed and 0 < low < 942 and high > 976
    assert y_limits([950.0]) == (0.0, pytest.approx(997.5), False)  # one value: nothing to zoom to
    near = [_laid("a", "h100", 67, 976, 80), _laid("b", "h100", 52, 942, 80), _laid("c", "h100", 90, 960, 80)]
    ax = draw_sweep(rank(near)).axes[0]
    assert ax.get_ylim()[0] > 0 and "does not start at 0" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "fits in memory", "does not fit", "GPU memory (80.00 GiB)", "fastest for its memory",
    ]  # fmt: skip
    (over,) = [c for c in ax.collections if c.get_label() == "does not fit"]
    assert to_hex(over.get_edgecolor()[0]) == "#c62828"
    apart = draw_sweep(rank([_laid("a", "h100", 67, 976, 80), _laid("b", "h100", 52, 400, 80)])).axes[0]
    assert apart.get_ylim()[0] == 0 and apart.get_ylabel() == "tokens/s per GPU"


def test_the_capacity_line_is_labelled_with_the_profiles_usable_memory_as_the_tables_print_it():
    """dgx-h100 holds CUDA's device total, 81559 MiB = 79.65 GiB (hardware/dgx-h100.yaml,
    docs/accuracy.md); the line said 'GPU memory (80 GiB)', rounded to the datasheet's figure,
    beside tables (memory, run) that print format_bytes's 79.65 GiB."""
    from simcluster.hardware import load_profile
    from simcluster.output.sweep_output import draw_sweep
    from simcluster.units import GiB, format_bytes

    capacity = load_profile("dgx-h100").memory_bytes
    assert format_bytes(capacity) == "79.65 GiB"
    one = draw_sweep(rank([_laid("a", "dgx-h100", 60, 900, capacity / GiB)])).axes[0]
    assert "GPU memory (79.65 GiB)" in [t.get_text() for t in one.get_legend().get_texts()]
    two = draw_sweep(rank([_laid("a", "dgx-h100", 60, 900, capacity / GiB),
                           _laid("b", "dgx-a100", 60, 500, 80)])).axes[0]  # fmt: skip
    assert [ln.get_label() for ln in two.lines if "GPU memory" in ln.get_label()] == [
        "dgx-h100: GPU memory (79.65 GiB)", "dgx-a100: GPU memory (80.00 GiB)",
    ]  # fmt: skip
    assert "dgx-h100 (79.65 GiB GPU memory)" in [t.get_text() for t in two.get_legend().get_texts()]


@pytest.mark.parametrize("count", [1, 5])
def test_the_key_under_the_plot_is_as_tall_as_its_lines(count):
    """No blank band between the plot's x label and the 'best that fit' key, whether it
    lists one layout or five."""
    from simcluster.output.sweep_output import draw_sweep

    rows = rank([_laid(f"l{i}", "h100", 40 + 5 * i, 900 - 100 * i, 80) for i in range(count)])
    fig = draw_sweep(rows)
    fig.draw_without_rendering()
    renderer = fig._get_renderer()
    (key,) = [t for t in fig.texts if t.get_text().startswith("best that fit")]
    gap = fig.axes[0].get_tightbbox(renderer).y0 - key.get_window_extent(renderer).y1
    assert 0 <= gap * 72.0 / fig.dpi <= 16  # points


def test_fitting_only_leaves_out_exactly_the_layouts_that_do_not_fit():
    """--fitting-only skips, unsimulated, what the memory walk (`simcluster memory`) puts over
    the GPU: the walk is the simulated peak for these schedules, so the layouts left out are
    the ones a full sweep simulates and marks as not fitting, with the same peak, and the
    others' rows are unchanged. 1.6B parameters at 16 B each (ZeRO-0 Adam) are 24 GiB on one
    stage before activations (32 GiB in all), half that on two stages: 20 GiB GPUs fit pp 2
    and 4, not pp 1."""
    from simcluster.sweep import MEMORY_FIELD
    from simcluster.units import format_bytes

    base = _base()
    base["cluster"]["profile"] = {"gpu": {"memory_gib": 20}}
    cands = candidates(base, {"pp": [1, 2, 4]})
    full = run_sweep(cands, jobs=1)
    lean = run_sweep(cands, jobs=1, fitting_only=True)
    unfit = [r for r in full if r.ran and not r.fits]
    assert [dict(r.candidate.settings)["pp"] for r in unfit] == [1]
    skipped = {r.candidate.label: r.skipped for r in lean if not r.ran}
    assert set(skipped) == {r.candidate.label for r in unfit}
    for row in unfit:
        reason = skipped[row.candidate.label]
        assert reason.startswith(f"{MEMORY_FIELD}: peak ")
        assert format_bytes(row.summary["peak_memory_bytes"]["max"]) in reason
    assert [r.to_dict() for r in lean if r.ran] == [r.to_dict() for r in full if r.fits]


def test_cli_fitting_only_says_what_it_left_out(scenario_file, capsys):
    code = main(["sweep", str(scenario_file), "--pp", "1,2", "-j", "1", "--fitting-only",
                 "--set", "cluster.profile.gpu.memory_gib=20"])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "1 layouts simulated" in out
    # which layout it left out, with its peak, not only how many
    text = " ".join(out.split())
    assert "left out 1 layout(s) over the GPU's memory of 20.00 GiB, unsimulated (--fitting-only): pp=1 (peak " in text
    # the 'after GEMMs' column is said in words under the table (its heading alone was cryptic)
    assert "after GEMMs: the largest part of the busiest stage's step besides its GEMMs" in text


def test_cli_without_a_runnable_layout_prints_no_empty_table(scenario_file, capsys):
    """Nor the reason twice: the error gives the first reason and how many layouts it stands
    for; a 'skipped' line said the same above it. Other reasons keep their lines."""
    assert main(["sweep", str(scenario_file), "--tp", "3,5", "-j", "1"]) == 2
    captured = capsys.readouterr()
    assert "layouts simulated" not in captured.out and "skipped" not in captured.out
    assert captured.err == (
        "error: parallel: no layout of the sweep can run: 2 skipped, e.g. tp*pp*cp = 12 does not divide "
        "cluster.gpus=4; change the degrees or the GPU count\n"
    )
    assert main(["sweep", str(scenario_file), "--tp", "3", "-j", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        "error: parallel: no layout of the sweep can run: tp*pp*cp = 12 does not divide cluster.gpus=4; "
        "change the degrees or the GPU count\n"
    )
    # two reasons: the one the error does not give keeps its line
    assert main(["sweep", str(scenario_file), "--tp", "3,1", "--micro-batch", "64", "-j", "1"]) == 2
    captured = capsys.readouterr()
    out = " ".join(captured.out.split())
    assert out.count("skipped") == 1 and "skipped 1 layout(s) that cannot run (training.global_batch)" in out
    assert captured.err.startswith("error: parallel: no layout of the sweep can run: 1 of 2 skipped as tp*pp*cp = 12")


def test_plot_tells_cluster_sizes_apart_and_counts_what_fitting_only_left_out():
    """One profile over several GPU counts: each count gets its own marker and key entry, or the
    points of a --gpus sweep cannot be told apart; a layout left out over memory is counted as
    such in the headline, not as one that cannot run."""
    from simcluster.output.sweep_output import draw_sweep
    from simcluster.sweep import Candidate

    base = _base()
    base["parallel"].update(dp=1, pp=4)
    rows = run_sweep(candidates(base, {"gpus": [4, 8]}), jobs=1)
    left_out = SweepRow(Candidate((("gpus", 16),), {}), None, "memory: peak 90.00 GiB per GPU exceeds 80.00 GiB")
    fig = draw_sweep([*rows, left_out], "sizes")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "4 GPUs: fit" in labels and "8 GPUs: fit" in labels
    markers = {c.get_label(): c.get_paths()[0].vertices.shape for c in ax.collections}
    assert markers["4 GPUs: fit"] != markers["8 GPUs: fit"]  # a circle and a square
    assert "2 layouts simulated, 2 fit, 1 left out (over memory)" in fig._suptitle.get_text()


def test_fitting_only_still_simulates_layouts_with_fb_pairs():
    """With DualPipe's F&B pairs the memory walk is only an upper bound on the simulated peak
    (memory_report.timeline_fault), so --fitting-only must not leave such a layout out on the
    walk's word: it is simulated, and ranked by what the simulation says."""
    base = pipeline_scenario(GPUS, M, "dualpipev", layers=16)
    base["cluster"]["profile"] = {"gpu": {"memory_gib": 1}}
    (row,) = run_sweep(candidates(base, {"pp": [4]}), jobs=1, fitting_only=True)
    assert row.ran and not row.fits


def test_each_layout_runs_with_its_frameworks_preset_for_that_layout(tmp_path, capsys):
    """A framework's defaults depend on the layout (nanotron: torch DDP's overlapped 25 MiB
    buckets at ZeRO-0, one blocking all-reduce of the fp32 buffer on its ZeRO-1 path,
    frameworks/nanotron.py). The sweep's template holds only what the scenario wrote
    (Scenario.as_written), so its ZeRO-1 row is what `run` of that layout gives, not ZeRO-1
    with the ZeRO-0 preset's buckets carried over."""
    from tests.conftest import make_scenario

    def scenario(zero: int) -> dict:
        return make_scenario(framework="nanotron", parallel={"tp": 1, "pp": 1, "zero": zero},
                             training={"seq_len": 256, "global_batch": 16})  # fmt: skip

    path = tmp_path / "nano.yaml"
    path.write_text(yaml.safe_dump(scenario(0)))
    assert main(["sweep", str(path), "--zero", "0,1", "-j", "1", "--json"]) == 0
    rows = {r["label"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    for zero in (0, 1):
        ran = simulate(scenario_from_dict(scenario(zero))).summary
        assert rows[f"zero={zero}"]["step_time_s"] == ran["step_time_s"]
    carried = scenario_from_dict(scenario(0)).model_dump(exclude_unset=True)  # the old template
    carried["parallel"]["zero"] = 1
    assert simulate(scenario_from_dict(carried)).summary["step_time_s"] != rows["zero=1"]["step_time_s"]
