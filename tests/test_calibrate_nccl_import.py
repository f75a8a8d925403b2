"""nccl-tests importer: both text header layouts, -J JSON, malformed input (tests/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from calibrate import nccl_tests_import
from calibrate.cli import main
from calibrate.nccl_tests_import import merge_runs, parse_log
from calibrate.profile_writer import Machine, Measurements, build_profile
from simcluster.cli import main as simcluster_main
from simcluster.errors import UserError
from simcluster.hardware import load_profile

FIX = Path(__file__).parent / "fixtures"
CURRENT = FIX / "nccl_all_reduce_dgx_h100_current.txt"
OLD = FIX / "all_gather_perf_2021.txt"
JSON = FIX / "nccl_reduce_scatter.json"
TWO_RUNS = FIX / "nccl_slurm_two_runs.txt"  # all_reduce_perf then all_gather_perf, one output file
AR64 = FIX / "nccl_all_reduce_64ranks_8nodes.txt"  # synthetic: busbw = algbw x 2*63/64
# a published sendrecv_perf table (8 A100, -g 8): redop 'sum', in-place #wrong 'N/A'
SENDRECV = FIX / "nccl_sendrecv_a100.txt"


def _import(tmp_path, *args):
    """Run the import in-process: (exit code, profile dict or None)."""
    out = tmp_path / "p.yaml"
    code = main(["import-nccl-tests", *map(str, args), "--out", str(out)])
    return code, (yaml.safe_load(out.read_text()) if out.exists() else None)


def _concat(tmp_path, *parts, name="slurm-1234.out"):
    path = tmp_path / name
    path.write_text("".join(p.read_text() if isinstance(p, Path) else p for p in parts))
    return path


def test_current_layout_reads_op_gpus_and_rows():
    [log] = parse_log(CURRENT)
    assert (log.op, log.gpus, log.nodes) == ("all_reduce", 8, 1)
    assert log.device == "NVIDIA H100 80GB HBM3" and log.nccl == "2.19.3"
    assert len(log.rows) == 10
    size, time_s, bus, line = log.rows[5]  # the published 1 GiB row
    assert (size, time_s, bus, line) == (1073741824, pytest.approx(4029.4e-6), 466.33, 23)


def test_2021_layout_without_root_column_and_op_from_file_name():
    [log] = parse_log(OLD)
    assert (log.op, log.gpus, log.nodes) == ("all_gather", 16, 2)
    assert [r[0] for r in log.rows] == [1048576, 4194304, 16777216, 67108864, 268435456]
    assert log.rows[-1][1] == pytest.approx(11890e-6)


@pytest.mark.parametrize(
    "name, op",
    [("all_gather.log", "all_gather"), ("allgather-2nodes.txt", "all_gather"), ("All-Gather.out", "all_gather")],
)
def test_op_from_a_file_named_as_the_readme_names_it(tmp_path, name, op):
    """The README's ``import-nccl-tests all_reduce.log all_gather.log``: a log that does not
    name its binary (nccl-tests before its 'Collective test starting' line) takes its op from
    a file name stating one collective, not only from an ``all_gather_perf`` stem."""
    path = tmp_path / name
    path.write_text(OLD.read_text())
    [log] = parse_log(path)
    assert (log.op, log.op_from) == (op, "its file name")


@pytest.mark.parametrize("name", ["run.log", "all_gather_vs_all_reduce.log", "install_gather.log"])
def test_a_file_name_naming_no_single_op_still_needs_op(tmp_path, name):
    """Two ops in the name, or an op's words inside a longer word (inst-all_gather), tell nothing: --op is asked for."""
    path = tmp_path / name
    path.write_text(OLD.read_text())
    with pytest.raises(UserError, match=r"cannot tell the collective .*; pass --op"):
        parse_log(path)


def test_json_report():
    [log] = parse_log(JSON)
    assert (log.op, log.gpus, log.nodes, log.nccl) == ("reduce_scatter", 8, 1, "2.26.3")
    assert [r[0] for r in log.rows] == [1048576, 16777216, 268435456]


def test_sendrecv_rows_name_the_reduction_they_do_not_run():
    """sendrecv_perf prints the -o reduction in its redop column (sum by default; nccl-tests
    src/sendrecv.cu passes the op name on to TimeTest) though it reduces nothing: the run is
    read with sendrecv's busbw factor 1, not refused as an all_reduce's rows."""
    [log] = parse_log(SENDRECV)
    assert (log.op, log.gpus, log.nodes, log.redop) == ("send_recv", 8, 1, ("sum", 18))
    assert [r[2] for r in log.rows] == [110.81, 188.60, 192.75, 195.10]  # busbw = algbw
    assert log.rows[-1][:2] == (1073741824, pytest.approx(5503.4e-6))


def _reworded(tmp_path, header, row):
    """CURRENT with its table header words and rows changed as nccl-tests' options print them."""
    lines = CURRENT.read_text().splitlines(True)
    out = [header(ln) if ln.startswith("#       size") else row(ln) if ln[:12].strip().isdigit() else ln
           for ln in lines]  # fmt: skip
    path = tmp_path / "all_reduce_perf.log"
    path.write_text("".join(out))
    return path


def _with_iteration_stats(row):
    words = row.split()
    stats = ["190.10", "210.40", "209.80", "2.13"]
    return "  ".join(words[:9] + stats + words[9:] + stats) + "\n"


@pytest.mark.parametrize(
    "header, row",
    [  # -C: the time columns headed 'cputime' (nccl-tests src/util.cu writeResultHeader)
     (lambda ln: ln.replace("     time", "  cputime"), lambda ln: ln),
     # report_timestamps: a last 'timestamp' column, each row's '%Y-%m-%d %H:%M:%S' two words
     (lambda ln: ln.rstrip("\n") + " timestamp\n", lambda ln: ln.rstrip("\n") + "  2026-11-30 08:01:02\n"),
     # per-iteration statistics (i_min i_max i_p99 i_cv%) after each placement's four columns
     (lambda ln: ln.replace("#wrong", "#wrong    i_min    i_max    i_p99    i_cv%"), _with_iteration_stats)],
    ids=["cputime", "timestamp", "per-iteration"],
)  # fmt: skip
def test_the_columns_nccl_tests_options_add_or_rename_are_read(tmp_path, header, row):
    """The out-of-place time and busbw are read from the same rows as without the option."""
    [plain] = parse_log(CURRENT)
    [log] = parse_log(_reworded(tmp_path, header, row))
    assert [r[:3] for r in log.rows] == [r[:3] for r in plain.rows]
    assert log.rows[5][:3] == (1073741824, pytest.approx(4029.4e-6), 466.33)


def test_malformed_row_names_file_and_line(capsys):
    assert main(["import-nccl-tests", str(FIX / "nccl_malformed.txt"), "--out", "x.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "nccl_malformed.txt:20:" in err and "columns" in err


def test_a_gpu_count_the_rank_lines_contradict_is_refused():
    with pytest.raises(UserError, match=r"'#  Rank' lines list 8 ranks; --gpus 4 contradicts them"):
        parse_log(CURRENT, gpus=4)


def test_a_wrong_gpu_count_is_caught_by_the_busbw_formula(tmp_path):
    """Without Rank lines, --gpus is all there is: 294.69 GB/s busbw at 168.39 GB/s algbw is
    the ratio 1.75 = 2 x 7/8 of an all_reduce on 8 GPUs (nccl-tests doc/PERFORMANCE.md)."""
    path = tmp_path / "all_reduce_perf.log"
    path.write_text("".join(ln for ln in CURRENT.read_text().splitlines(True) if "Rank" not in ln))
    with pytest.raises(UserError, match=r":10: busbw 294.69 GB/s disagrees .* 4 GPUs \(252.54\): .*busbw/algbw 1.750 is all_reduce's factor on 8 GPUs; check --gpus"):
        parse_log(path, gpus=4)
    assert parse_log(path, gpus=8)[0].gpus == 8


def test_op_needed_when_the_log_does_not_say(tmp_path):
    anonymous = tmp_path / "run.log"
    anonymous.write_text(OLD.read_text())
    with pytest.raises(UserError, match="pass --op"):
        parse_log(anonymous)
    assert parse_log(anonymous, op="all_gather")[0].gpus == 16


def test_import_writes_a_loadable_profile(tmp_path):
    out = tmp_path / "h100.yaml"
    assert main(["import-nccl-tests", str(CURRENT), str(JSON), "--out", str(out)]) == 0
    prof = load_profile(out)
    rows = [r for r in prof.measured["collectives"] if r["nodes"] == 1]
    assert len(rows) == 13
    gib = next(r for r in rows if r["op"] == "all_reduce" and r["bytes"] == 2**30)
    assert gib["scope"] == "intra" and gib["busbw_GBps"] == pytest.approx(466.33, abs=0.01)
    assert {r["scope"] for r in rows if r["op"] == "reduce_scatter"} == {"intra"}
    # The 16 GiB all_reduce (479.9 GB/s, NVLink SHARP) exceeds the 450 GB/s line rate: capped at 1.
    assert prof.efficiency.nvlink == 1.0
    # both logs ran on 'NVIDIA H100 80GB HBM3': the shipped DGX H100 is the base
    assert prof.name == "dgx-h100-calibrated" and prof.gpu.name == "NVIDIA H100 SXM5 80GB"


def test_one_node_import_keeps_the_base_profiles_multi_node_table(tmp_path, capsys):
    """A one-node nccl-tests log replaces only the base's single-node rows: aws-p5's published
    EFA tables (2-32 nodes, crazyguitar/aws-gpu-benchmark via the profile's sources) stay, so a
    4-node all-reduce still takes its measured time (273.34 GB/s busbw at 256 MiB, the p5
    profile's own row), where dropping them had made it 43% faster than measured."""
    out = tmp_path / "p5.yaml"
    assert main(["import-nccl-tests", str(CURRENT), "--base", "aws-p5", "--out", str(out)]) == 0
    base, prof = load_profile("aws-p5"), load_profile(out)
    multi = [r for r in base.measured["collectives"] if (r.get("nodes") or 1) > 1]
    rows = prof.measured["collectives"]
    assert [r for r in rows if (r.get("nodes") or 1) > 1] == multi
    single = [r for r in rows if (r.get("nodes") or 1) == 1]
    assert len(single) == 10 and {r["scope"] for r in single} == {"intra"}
    assert single[0]["time_s"] != next(
        r for r in base.measured["collectives"] if (r.get("nodes") or 1) == 1
    )["time_s"]
    note = prof.sources["measured.collectives"]
    assert note.startswith("single-node all_reduce rows from nccl-tests logs (provenance.source)") and "kept from aws-p5" in note
    capsys.readouterr()
    args = ["collective", "all_reduce", "256MiB", "--gpus", "32", "--json", "--hardware", str(out)]
    assert simcluster_main(args) == 0
    assert json.loads(capsys.readouterr().out)["busbw_GBps"] == pytest.approx(273.34, rel=1e-3)


def test_an_import_on_a_measured_base_replaces_only_the_ops_it_measured(tmp_path):
    """Logs of one op on a base that measured others on the same fabric (a calibrate run's six
    ops, or an earlier import) replace that op's rows only: the base's reduce_scatter table stays
    beside the new all_reduce one, and so does the base's provenance, under provenance.base;
    the name says 'calibrated' once."""
    first, second = tmp_path / "rs.yaml", tmp_path / "both.yaml"
    assert main(["import-nccl-tests", str(JSON), "--out", str(first)]) == 0
    assert main(["import-nccl-tests", str(CURRENT), "--base", str(first), "--out", str(second)]) == 0
    base, prof = yaml.safe_load(first.read_text()), yaml.safe_load(second.read_text())
    rows = prof["measured"]["collectives"]
    scattered = [r for r in base["measured"]["collectives"] if r["op"] == "reduce_scatter"]
    assert len(scattered) == 3 and [r for r in rows if r["op"] == "reduce_scatter"] == scattered
    # the base's all_reduce rows (dgx-h100's NVIDIA sample, 12 sizes) gave way to the log's 10
    assert sorted(r["bytes"] for r in rows if r["op"] == "all_reduce") == [r[0] for r in parse_log(CURRENT)[0].rows]
    assert prof["provenance"]["base"] == base["provenance"]
    assert prof["provenance"]["source"].endswith(CURRENT.name)
    assert prof["name"] == base["name"] == "dgx-h100-calibrated"
    note = prof["sources"]["measured.collectives"]
    assert note.startswith("single-node all_reduce rows from nccl-tests logs (provenance.source); "
                           f"single-node reduce_scatter rows kept from {first} (provenance.base)")  # fmt: skip


def test_a_profile_without_base_carries_no_table_of_the_fallback_machine(tmp_path):
    """Without --base the fallback (dgx-h100) only fills fields; its nccl-tests sample
    describes a DGX H100, so neither its rows nor its source text reach the new profile."""
    data = build_profile(Measurements(), {"backend": "gloo"}, None, Machine("Box", None, 2))
    assert "collectives" not in data["measured"]
    assert "measured.collectives" not in data["sources"]


def test_device_memory_rate_is_the_streaming_one_not_a_cached_one():
    """A 1M-element add (12 MB) stays in a CPU's L3 or an H100's 50 MB L2 and runs faster than
    memory; the profile takes each kernel at its largest size (STREAM's rule: arrays several
    times the last-level cache), here 38.6 GB/s, not the cached 94.3."""
    rows = [
        {"kernel": "elementwise", "bytes": 12 * 2**20, "time_s": 1.0, "bytes_per_s": 94.3e9},
        {"kernel": "elementwise", "bytes": 12 * 2**23, "time_s": 1.0, "bytes_per_s": 38.6e9},
        {"kernel": "layernorm", "bytes": 8 * 2**20, "time_s": 1.0, "bytes_per_s": 60.0e9},
        {"kernel": "layernorm", "bytes": 8 * 2**23, "time_s": 1.0, "bytes_per_s": 2.7e9},
    ]
    data = build_profile(Measurements(memory=rows), {"backend": "gloo"}, None, Machine("Box", None, 2))
    assert data["gpu"]["hbm_tbps"] == pytest.approx(0.0386) and data["efficiency"]["hbm"] == 1.0
    base = build_profile(Measurements(memory=rows), {"backend": "nccl"}, "dgx-h100", None)
    assert base["efficiency"]["hbm"] == pytest.approx(38.6e9 / 3.35e12)


def test_the_simulator_reads_device_memory_at_the_streaming_rate_too(tmp_path):
    """A calibrated profile's memory-bound kernels run at the rate the profile writer took (each
    kernel at its largest size), not at the fastest cache-resident row."""
    from simcluster.compute import KernelModel

    rows = [
        {"kernel": "elementwise", "bytes": 12 * 2**20, "time_s": 1.0, "bytes_per_s": 94.3e9},
        {"kernel": "elementwise", "bytes": 12 * 2**23, "time_s": 1.0, "bytes_per_s": 38.6e9},
    ]
    data = build_profile(Measurements(memory=rows), {"backend": "gloo"}, None, Machine("Box", None, 2))
    path = tmp_path / "box.yaml"
    path.write_text(yaml.safe_dump(data))
    km = KernelModel(load_profile(path), "fp32")
    assert km.hbm_bytes_per_s == pytest.approx(38.6e9)


def test_hand_written_memory_rows_are_read_or_refused_in_one_line():
    """A row without ``bytes`` counts as its kernel's smallest (a profile from before sizes were
    written still reads); one without a number ``bytes_per_s`` names measured.memory."""
    from simcluster.memory_rate import streaming_rate

    assert streaming_rate([{"bytes_per_s": 5e9}]) == 5e9
    assert streaming_rate([{"kernel": "add", "bytes_per_s": 9e9}, {"kernel": "add", "bytes": 8, "bytes_per_s": 3e9}]) == 3e9
    with pytest.raises(UserError, match="measured.memory: row .* needs a number bytes_per_s"):
        streaming_rate([{"kernel": "add", "bytes": 8, "bytes_per_s": "fast"}])


# --- several runs in one file (B1) ----------------------------------------------------------
def test_a_log_holding_the_same_64_rank_run_twice_is_read_once(tmp_path, capsys):
    """``cat run.log run.log``: 64 ranks on 8 nodes, not 128 on 16 GPUs per node, so the rows'
    busbw is the log's (algbw x 2 x 63/64; 128 ranks made it x 2 x 127/128)."""
    twice = _concat(tmp_path, AR64, AR64)
    code, prof = _import(tmp_path, twice)
    assert code == 0
    rows = prof["measured"]["collectives"]
    ours = [r for r in rows if r["nodes"] == 8]
    assert len(ours) == 6 and {(r["gpus"], r["gpus_per_node"]) for r in ours} == {(64, 8)}
    assert [round(r["busbw_GBps"], 2) for r in ours] == [74.32, 76.47, 77.59, 78.17, 78.46, 78.60]
    assert prof["provenance"]["device_count"] == 64 and prof["provenance"]["nodes"] == 8
    out = capsys.readouterr().out
    assert f"{twice}:78: the same all_reduce on 64 GPUs (8 nodes) table as {twice}:1; read once" in out


def test_the_same_8_gpu_run_twice_imports_as_the_run_once(tmp_path):
    code, once = _import(tmp_path, CURRENT)
    code2, twice = _import(tmp_path, _concat(tmp_path, CURRENT, CURRENT))
    assert code == code2 == 0
    assert twice["measured"]["collectives"] == once["measured"]["collectives"]
    assert {r["gpus"] for r in twice["measured"]["collectives"] if r["nodes"] == 1} == {8}


def test_two_different_binaries_in_one_output_are_each_imported(tmp_path):
    """``all_reduce_perf; all_gather_perf`` into one Slurm output, the job script's echo lines
    around them: each run keeps its own 8 ranks and op; the all_gather rows are the log's
    (busbw = algbw x 7/8)."""
    runs = parse_log(TWO_RUNS)
    assert [(r.op, r.gpus, r.start, len(r.rows)) for r in runs] == [
        ("all_reduce", 8, 3, 10),
        ("all_gather", 8, 38, 6),
    ]
    code, prof = _import(tmp_path, TWO_RUNS)
    assert code == 0
    ag = [r for r in prof["measured"]["collectives"] if r["op"] == "all_gather"]
    assert [r["gpus"] for r in ag] == [8] * 6
    gib = next(r for r in ag if r["bytes"] == 2**30)
    assert gib["time_s"] == pytest.approx(2609.06e-6)
    assert gib["busbw_GBps"] == pytest.approx(360.10, abs=0.01)


def _as_variant(row: str, kind: str, redop: str, slower: float) -> str:
    """A CURRENT float/sum row as another data type's or reduction's row of the same size,
    ``slower`` times its time (busbw = algbw x 2*7/8, as nccl-tests prints it for 8 ranks)."""
    w = row.split()
    time_us = float(w[5]) * slower
    alg = int(w[0]) / time_us / 1e3
    count = int(w[0]) // (2 if kind in ("bfloat16", "half") else 4)
    body = f"{time_us:8.1f}  {alg:6.2f}  {alg * 1.75:6.2f}       0"
    return f"{w[0]:>12}  {count:12d}  {kind:>8}  {redop:>6}  {w[4]:>6}  {body}  {body}\n"


@pytest.mark.parametrize(
    "variants",
    [[("bfloat16", "sum", 1.3)],  # -d all: every size once per data type, float among them
     [("float", "prod", 1.1), ("float", "max", 1.2), ("float", "avg", 1.05)]],  # -o all
    ids=["all-types", "all-reductions"],
)  # fmt: skip
def test_a_run_of_several_types_or_reductions_keeps_nccl_tests_default(tmp_path, capsys, variants):
    """nccl-tests' -d all / -o all time every size once per data type or reduction (src/common.cu
    loops over them); the profile's table holds one time per size: the default float / sum rows
    are kept and the others named as left out, not left for the simulator to pick one by size."""
    lines = CURRENT.read_text().splitlines(True)
    rows = [ln for ln in lines if ln[:12].strip().isdigit()]
    at = lines.index(rows[-1]) + 1
    extra = [_as_variant(r, kind, redop, slower) for kind, redop, slower in variants for r in rows]
    log = tmp_path / "all_reduce_perf.log"
    log.write_text("".join(lines[:at] + extra + lines[at:]))
    code, data = _import(tmp_path, log)
    assert code == 0
    [plain] = parse_log(CURRENT)
    kept = sorted((r["bytes"], r["time_s"]) for r in data["measured"]["collectives"] if r["gpus"] == 8)
    assert kept == sorted((size, pytest.approx(t)) for size, t, _, _ in plain.rows)
    note = capsys.readouterr().out.splitlines()[0]
    assert f"the run times {1 + len(variants)} variants" in note and "kept 'float sum -1' (10 rows)" in note


def test_a_size_twice_in_one_table_is_refused(tmp_path):
    lines = CURRENT.read_text().splitlines(True)
    log = _concat(tmp_path, "".join(lines[:21] + [lines[20]] + lines[21:]))
    with pytest.raises(UserError, match=rf"{log}:22: a second 268435456 B row in one table \(line 21\)"):
        merge_runs(parse_log(log))


def test_a_table_row_outside_any_run_is_refused(tmp_path):
    """Rows pasted after a run's summary lines, without a header of their own."""
    rows = [ln for ln in CURRENT.read_text().splitlines(True) if ln.startswith("    ")][:2]
    log = _concat(tmp_path, CURRENT, "echo done\n", *rows)
    with pytest.raises(UserError, match=rf"{log}:34: a table row after its run ended \(line 29\)"):
        parse_log(log)


def test_a_run_that_failed_before_its_table_is_left_out_with_a_note(tmp_path, capsys):
    """A reused Slurm output: the first attempt died after its header (an NCCL WARN), the second ran."""
    header = "".join(CURRENT.read_text().splitlines(True)[:13])
    failed = header + "\ndgx-h100-01:4100:4212 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got async event : port error\n"
    log = _concat(tmp_path, failed, CURRENT)
    code, prof = _import(tmp_path, log)
    assert code == 0 and len(prof["measured"]["collectives"]) == len(_import(tmp_path, CURRENT)[1]["measured"]["collectives"])
    assert f"{log}:1: a run without result rows (it failed or was cut short?); left out" in capsys.readouterr().out


def test_split_communicators_are_refused(tmp_path):
    """NCCL_TESTS_SPLIT_MASK: 'Group 1' ranks are another communicator; busbw is per group."""
    log = _concat(tmp_path, CURRENT.read_text().replace("Rank  4 Group  0", "Rank  4 Group  1"))
    with pytest.raises(UserError, match=r":10: the ranks form several groups \(NCCL_TESTS_SPLIT_MASK\)"):
        parse_log(log)


def test_two_runs_of_the_same_test_with_other_numbers_are_refused_at_the_second(tmp_path):
    """Which of two measurements of the same op and geometry the profile should hold is the
    user's call: a one-line error naming the line the second run starts on."""
    # a rerun: 32 MiB in 205.10 us, algbw 33554432 B / 205.10 us = 163.60 GB/s, busbw x 14/8
    second = CURRENT.read_text().replace("199.30  168.39  294.69", "205.10  163.60  286.30", 1)
    log = _concat(tmp_path, CURRENT, second)
    code, prof = _import(tmp_path, log)
    assert code == 2 and prof is None
    with pytest.raises(UserError, match=rf"{log}:33: a second all_reduce on 8 GPUs .*33554432 B in 205.1 us \(line 50\) where the run from line 1 took 199.3 us"):
        nccl_tests_import.merge_runs(parse_log(log))


# --- NCCL_DEBUG lines and task labels (B2) ----------------------------------------------------
DEBUG_INFO = FIX / "nccl_all_reduce_debug_info.txt"  # CURRENT run under NCCL_DEBUG=INFO
SRUN_L = FIX / "nccl_all_reduce_2nodes_srun_l.txt"  # srun -l, 16 tasks on 2 nodes


def _table(log):
    return [(size, time_s, bus) for size, time_s, bus, _ in log.rows]


def test_nccl_info_lines_before_and_inside_the_table_are_skipped(tmp_path):
    """NCCL's own 'host:pid:tid [dev] NCCL INFO ...' lines (and its bare 'NCCL version' line)
    around and inside the table leave the run as it is without them."""
    [log] = parse_log(DEBUG_INFO)
    [plain] = parse_log(CURRENT)
    assert (log.op, log.gpus, log.nodes, log.device) == ("all_reduce", 8, 1, "NVIDIA H100 80GB HBM3")
    assert _table(log) == _table(plain) and log.rows[5][:3] == (2**30, pytest.approx(4029.4e-6), 466.33)
    code, prof = _import(tmp_path, DEBUG_INFO)
    assert code == 0 and prof["measured"]["collectives"] == _import(tmp_path, CURRENT)[1]["measured"]["collectives"]


@pytest.mark.parametrize(
    "line",
    ["dgx-h100-01:4100:4230 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got async event : port error",
     "[2024-05-01 10:11:12] dgx-h100-01:4100:4230 [0] proxy.cc:1494 (ncclProxyProgress) NCCL WARN [Proxy Service] Poll failed",
     "dgx-h100-01:4100:4100 [0] NCCL INFO NCCL version 2.19.3+cuda12.3",
     "dgx-h100-01:4100:4100 NCCL CALL ncclAllReduce(0x7f2a00000000, 0x7f2b00000000, 8388608, 7, 0)"],
)  # fmt: skip
def test_nccl_warn_and_trace_lines_in_their_real_formats_are_skipped(tmp_path, line):
    lines = CURRENT.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("33554432"))
    path = tmp_path / "all_reduce_perf.log"
    path.write_text("\n".join([*lines[:at], "", line, *lines[at:]]) + "\n")
    [log] = parse_log(path)
    assert _table(log) == _table(parse_log(CURRENT)[0])


def test_srun_label_prefixes_are_taken_off(tmp_path):
    """srun -l puts '%2d: ' (the task) before every line; nccl-tests prints from task 0, NCCL's
    INFO lines from every task. 16 ranks on 2 nodes; busbw = algbw x 30/16 as in the log."""
    [log] = parse_log(SRUN_L)
    assert (log.op, log.gpus, log.nodes, len(log.rows)) == ("all_reduce", 16, 2, 6)
    code, prof = _import(tmp_path, SRUN_L)
    assert code == 0
    rows = [r for r in prof["measured"]["collectives"] if r["nodes"] == 2]
    assert [round(r["busbw_GBps"], 2) for r in rows] == [150.20, 221.70, 289.40, 331.80, 355.60, 368.30]
    assert {(r["gpus"], r["gpus_per_node"]) for r in rows} == {(16, 8)}
    assert prof["provenance"]["device_count"] == 16 and prof["provenance"]["nodes"] == 2


def test_mpirun_tag_output_prefixes_are_taken_off(tmp_path):
    path = tmp_path / "all_reduce_perf.log"
    path.write_text("".join(f"[1,0]<stdout>:{ln}\n" for ln in CURRENT.read_text().splitlines()))
    assert _table(parse_log(path)[0]) == _table(parse_log(CURRENT)[0])


def test_another_tasks_nccl_tests_output_is_refused_in_one_line(tmp_path):
    """Tasks each running their own test (nccl-tests without MPI) print a table each: not one run."""
    text = SRUN_L.read_text().replace(" 9: dgx-h100-02:5101:5101 [1] NCCL INFO Channel", " 9: # nThread 1 nGpus 1 x", 1)
    path = _concat(tmp_path, text)
    code, prof = _import(tmp_path, path)
    assert code == 2 and prof is None
    with pytest.raises(UserError, match=rf"{path}:35: task 9 among task 0's nccl-tests output"):
        parse_log(path)


# --- an --op the log contradicts (B9) ---------------------------------------------------------
def test_an_op_the_log_header_states_cannot_be_overridden(tmp_path):
    """'# Collective test starting: all_reduce_perf' (line 2) says what ran."""
    code, prof = _import(tmp_path, CURRENT, "--op", "all_gather")
    assert code == 2 and prof is None
    with pytest.raises(UserError, match=r"_current.txt:2: the log is an all_reduce run \(line 2 \('# Collective test starting: all_reduce_perf'\)\); --op all_gather contradicts it: drop --op"):
        parse_log(CURRENT, op="all_gather")
    with pytest.raises(UserError, match=r"the log is a reduce_scatter run \(its -J args \('./build/reduce_scatter_perf'\)\); --op all_reduce"):
        parse_log(JSON, op="all_reduce")
    assert parse_log(CURRENT, op="all_reduce")[0].op == "all_reduce"  # agreeing is fine


def test_an_op_the_file_name_states_is_not_silently_overridden():
    with pytest.raises(UserError, match=r"the file name says all_gather_perf \(all_gather\); --op reduce_scatter contradicts it"):
        parse_log(OLD, op="reduce_scatter")


@pytest.mark.parametrize(
    "op, needle",
    # all_gather rows (2021 layout: blank redop) read as all_reduce or reduce_scatter
    [("all_reduce", ":24: the rows carry no reduction (redop 'none'): not an all_reduce or reduce_scatter run"),
     ("reduce_scatter", ":24: the rows carry no reduction (redop 'none')"),
     # 16 ranks: busbw/algbw = 10.33/11.02 = 0.937 = 15/16, not broadcast's 1
     ("broadcast", ":24: busbw 10.33 GB/s disagrees with the nccl-tests broadcast formula for 16 GPUs (11.02): "
                   "the log's busbw/algbw 0.937 is the factor of all_gather or reduce_scatter or all_to_all on 16 GPUs; check --op")],
)  # fmt: skip
def test_an_op_the_rows_contradict_is_refused(tmp_path, op, needle):
    """A log that does not name its op (a 2021 nccl-tests, in a file named run.log) still shows
    whether it reduces (the redop column) and its busbw factor."""
    anonymous = tmp_path / "run.log"
    anonymous.write_text(OLD.read_text())
    with pytest.raises(UserError) as err:
        parse_log(anonymous, op=op)
    assert needle in str(err.value)


def test_a_log_whose_header_contradicts_its_numbers_says_so(tmp_path):
    """A header saying all_gather over rows whose busbw/algbw is 1.75 (all_reduce on 8 GPUs)."""
    path = tmp_path / "slurm-1.out"
    path.write_text(CURRENT.read_text().replace("all_reduce_perf", "all_gather_perf").replace("  sum  ", " none  "))
    with pytest.raises(UserError, match=r":18: busbw 294.69 .* all_gather formula for 8 GPUs \(147.32\): the log's busbw/algbw 1.750 is the factor of all_reduce on 8 GPUs; the log contradicts itself"):
        parse_log(path)


# --- the base profile is the log's GPU's (B6) --------------------------------------------------
@pytest.fixture
def calibrate():
    from tests.conftest import in_process

    return in_process(main)


def _one_line_error(res, *needles):
    from tests.test_scenario_errors import assert_one_line_error

    assert_one_line_error(res, *needles)


def test_a_file_without_result_rows_says_what_to_give(tmp_path, calibrate):
    """An empty file, or another program's output, has no nccl-tests rows: one line naming the
    file and the output that has them."""
    log = tmp_path / "empty.log"
    log.write_text("# nothing measured\n")
    res = calibrate("import-nccl-tests", str(log), "--out", str(tmp_path / "p.yaml"))
    _one_line_error(res, str(log), "no result rows found", "all_reduce_perf", "busbw")


def test_an_a100_log_is_imported_into_the_a100_profile(tmp_path, calibrate):
    """'#   Rank  0 Pid 5200 on node-a device 0 [0x07] NVIDIA A100-SXM4-80GB': without --base the
    base is the shipped DGX A100 (8x ConnectX-6 HDR 200 Gb/s), not the DGX H100. Two-node
    all_gather: best busbw 21.17 GB/s per GPU, a NIC per GPU -> 169.4 of 200 Gbit/s."""
    out = tmp_path / "a100.yaml"
    res = calibrate("import-nccl-tests", str(OLD), "--out", str(out))
    assert res.code == 0, res.err
    assert "base: dgx-a100, the shipped profile of the log's NVIDIA A100-SXM4-80GB" in res.out
    prof = load_profile(out)
    assert prof.name == "dgx-a100-calibrated" and prof.gpu.name == "NVIDIA A100 SXM4 80GB"
    assert prof.provenance["device"] == "NVIDIA A100-SXM4-80GB"
    assert prof.efficiency.nic == pytest.approx(21.17 * 8 / 200, rel=2e-3)
    assert prof.provenance["device_count"] == 16 and prof.provenance["nodes"] == 2


def test_a_base_of_another_gpu_is_refused_unless_allowed(tmp_path, calibrate):
    out = tmp_path / "p.yaml"
    res = calibrate("import-nccl-tests", str(OLD), "--base", "dgx-h100", "--out", str(out))
    _one_line_error(res, "--base: dgx-h100 describes 'NVIDIA H100 SXM5 80GB'", "'NVIDIA A100-SXM4-80GB'",
                    "use --base dgx-a100", "--allow-other-gpu")  # fmt: skip
    assert not out.exists()
    res = calibrate("import-nccl-tests", str(OLD), "--base", "dgx-h100", "--allow-other-gpu", "--out", str(out))
    assert res.code == 0, res.err
    prof = load_profile(out)
    assert prof.gpu.name == "NVIDIA H100 SXM5 80GB" and prof.provenance["device"] == "NVIDIA A100-SXM4-80GB"
    # the same GPU in another machine's profile is fine: aws-p5 is 8x H100 SXM
    assert calibrate("import-nccl-tests", str(CURRENT), "--base", "aws-p5", "--out", str(out)).code == 0


@pytest.mark.parametrize(
    "device, needle",
    [("NVIDIA H100 PCIe", "PCIe/NVL card"), ("Tesla T4", "no shipped profile for the log's GPU 'Tesla T4'")],
)  # fmt: skip
def test_a_gpu_without_a_shipped_profile_needs_a_base(tmp_path, calibrate, device, needle):
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(CURRENT.read_text().replace("NVIDIA H100 80GB HBM3", device))
    res = calibrate("import-nccl-tests", str(log), "--out", str(tmp_path / "p.yaml"))
    _one_line_error(res, "--base", needle)
    assert not (tmp_path / "p.yaml").exists()


def test_a_log_naming_no_gpu_needs_a_base(tmp_path, calibrate):
    log = tmp_path / "all_reduce_perf.log"
    log.write_text("".join(ln for ln in CURRENT.read_text().splitlines(True) if "Rank" not in ln))
    res = calibrate("import-nccl-tests", str(log), "--gpus", "8", "--out", str(tmp_path / "p.yaml"))
    _one_line_error(res, "--base: the log does not name its GPU")
    res = calibrate("import-nccl-tests", str(log), "--gpus", "8", "--base", "dgx-h100", "--out", str(tmp_path / "p.yaml"))
    assert res.code == 0, res.err


def test_logs_of_two_gpus_are_refused(tmp_path, calibrate):
    res = calibrate("import-nccl-tests", str(CURRENT), str(OLD), "--out", str(tmp_path / "p.yaml"))
    _one_line_error(res, "all_gather_perf_2021.txt:1: this run is on 'NVIDIA A100-SXM4-80GB'", "one GPU")


def test_mixed_gpus_in_one_run_are_refused(tmp_path):
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(CURRENT.read_text().replace("device  7 [0000:88:00] NVIDIA H100 80GB HBM3", "device  7 [0000:88:00] NVIDIA H200"))
    with pytest.raises(UserError, match=r":13: rank 7 runs on 'NVIDIA H200', the run's first rank on 'NVIDIA H100 80GB HBM3'"):
        parse_log(log)


def test_help_states_every_default(calibrate):
    res = calibrate("import-nccl-tests", "--help")
    text = " ".join(res.out.split())
    assert res.code == 0
    for needle in ("LOG nccl-tests output", "--out YAML the profile to write (required;",
                   "Default: the shipped profile of the GPU", "default: refused",
                   "(default: from its '# Collective test starting", "(default: counted from them)"):  # fmt: skip
        assert needle in text, needle


# --- each field's source says where its number came from ---------------------------------------
def test_the_sources_of_the_fields_an_import_sets_say_where_they_came_from(tmp_path):
    """The A100 two-node all_gather sets efficiency.nic (its best busbw, 21.17 GB/s per GPU, over
    the DGX A100's 200 Gb/s per NIC); node.nic_gbps keeps the datasheet value and its source."""
    base = yaml.safe_load((FIX.parent.parent / "hardware" / "dgx-a100.yaml").read_text())
    code, prof = _import(tmp_path, OLD)
    assert code == 0
    src = prof["sources"]
    assert prof["node"]["nic_gbps"] == 200 and src["node.nic_gbps"] == base["sources"]["node.nic_gbps"]
    assert src["efficiency.nic"].startswith(
        "measured (nccl-tests logs): the best inter-node busbw, 21.17 GB/s per GPU (all_gather of "
        "268435456 B on 16 GPUs, 2 nodes) x 8 GPUs / 8 NICs per node = 169.3 Gb/s per NIC, / node.nic_gbps 200"
    )
    assert src["measured.collectives"] == "multi-node all_gather rows from nccl-tests logs (provenance.source)"
    # the smallest row, 1 MiB in 95.12 us, is half transfer (1 MiB x 15/16 at 21.17 GB/s = 46.4
    # us): no per-hop latency; the base's stays with its own source
    assert prof["node"]["nic_latency_us"] == base["node"]["nic_latency_us"]
    assert src["node.nic_latency_us"] == base["sources"]["node.nic_latency_us"]


def test_a_bandwidth_bound_smallest_message_sets_no_latency(tmp_path):
    """The smallest all_reduce of the DGX H100 log is 32 MiB, 199.30 us of which 122 us is transfer
    at its best 480.16 GB/s busbw (x 14/8): 199.30/14 = 14.2 us is no NVLink latency."""
    base = yaml.safe_load((FIX.parent.parent / "hardware" / "dgx-h100.yaml").read_text())
    code, prof = _import(tmp_path, CURRENT)
    assert code == 0
    assert prof["node"]["nvlink_latency_us"] == base["node"]["nvlink_latency_us"]
    assert prof["sources"]["node.nvlink_latency_us"] == base["sources"]["node.nvlink_latency_us"]
    assert prof["sources"]["efficiency.nvlink"] == (
        "measured (nccl-tests logs): the best intra-node busbw, 480.16 GB/s (all_reduce of 8589934592 B "
        "on 8 GPUs) / node.nvlink_GBps 450, capped at 1"
    )


def test_a_latency_bound_smallest_message_sets_the_latency(tmp_path):
    """With an 8 B row (17.52 us; its transfer is nanoseconds) the latency per ring step is
    17.52 us over the all_reduce ring's 2 x 7 steps."""
    small = "           8             2     float     sum      -1    17.52    0.00    0.00       0    17.40    0.00    0.00       0\n"
    text = CURRENT.read_text()
    at = text.index("    33554432")
    log = _concat(tmp_path, text[:at] + small + text[at:], name="all_reduce_perf.log")
    code, prof = _import(tmp_path, log)
    assert code == 0
    assert prof["node"]["nvlink_latency_us"] == pytest.approx(17.52 / 14)
    assert prof["sources"]["node.nvlink_latency_us"] == (
        "measured (nccl-tests logs): the smallest all_reduce of 8 B on 8 GPUs took 17.52 us, over its 14 ring steps"
    )
