"""Robustness sweep of the CLIs (simcluster and python -m calibrate): each bad input found by
fuzzing is one line on stderr naming the field and the fix, exit code 2, no traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import in_process, make_scenario
from tests.test_scenario_errors import assert_one_line_error, write

FIX = Path(__file__).parent / "fixtures"
NOT_UTF8 = b"name: \xff\xfe bad\nmodel: {}\n"


@pytest.fixture
def calibrate():
    """Run ``python -m calibrate`` in-process; returns CliResult(code, out, err)."""
    from calibrate.cli import main

    return in_process(main)


def not_utf8(tmp_path, name="bad.yaml"):
    path = tmp_path / name
    path.write_bytes(NOT_UTF8)
    return str(path)


# --- files that are not UTF-8 text, directories -----------------------------------------------
def test_scenario_not_utf8(cli, tmp_path):
    assert_one_line_error(cli("memory", not_utf8(tmp_path)), "scenario", "not UTF-8", "0xff")


def test_scenario_is_a_directory(cli, tmp_path):
    (tmp_path / "d.yaml").mkdir()
    assert_one_line_error(cli("memory", str(tmp_path / "d.yaml")), "scenario", "is a directory")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_scenario_given_through_a_pipe_is_read(cli, tmp_path):
    """`simcluster memory <(sed ... my.yaml)`: the shell passes a named pipe (/dev/fd/63),
    which exists but is no regular file; it is read, where it was once 'not found'."""
    import threading

    fifo = tmp_path / "fd63"
    os.mkfifo(fifo)
    text = yaml.safe_dump(make_scenario())
    writer = threading.Thread(target=lambda: fifo.write_text(text), daemon=True)
    writer.start()
    res = cli("memory", str(fifo), "--json")
    writer.join(timeout=5)
    assert res.code == 0, res.err
    assert json.loads(res.out)["scenario"] == "test"


@pytest.mark.parametrize("text", ["", "\n\n", "# parallel: {tp: 2}\n"])
def test_empty_files_say_they_are_empty(cli, tmp_path, text):
    """A scenario, profile or cases file with no YAML in it (a truncated copy, a file saved
    before its content) is named empty, not 'must be a mapping' or 'needs a cases: list'."""
    path = write(tmp_path, text, "e.yaml")
    assert_one_line_error(cli("memory", path), "scenario", "e.yaml is empty")
    assert_one_line_error(cli("memory", "llama3-8b-8xh100", "--hardware", path), "--hardware", "is empty")
    assert_one_line_error(cli("validate", path), "CASES", "is empty")


def test_calibrate_inputs_that_are_folders_or_missing(calibrate, tmp_path):
    """The trace and log readers (errors.read_text) say what the path is and what to give,
    not only the OS's 'Is a directory' / 'No such file or directory'."""
    out = str(tmp_path / "p.yaml")
    assert_one_line_error(calibrate("compare-trace", str(tmp_path), "llama3-8b-8xh100"), "KINETO_TRACE",
                          f"trace '{tmp_path}' is a directory; give the trace file in it")  # fmt: skip
    assert_one_line_error(calibrate("import-nccl-tests", str(tmp_path), "--out", out), "LOG",
                          "is a directory; give the log file in it")  # fmt: skip
    missing = str(tmp_path / "nope.log")
    assert_one_line_error(calibrate("import-nccl-tests", missing, "--out", out), "LOG", f"log '{missing}' not found")


def test_hardware_profile_not_utf8(cli, tmp_path):
    path = not_utf8(tmp_path)
    assert_one_line_error(
        cli("memory", "llama3-8b-8xh100", "--hardware", path), "--hardware", "not UTF-8"
    )
    data = make_scenario(cluster={"hardware": path})
    assert_one_line_error(cli("memory", write(tmp_path, data)), "cluster.hardware", "not UTF-8")


def test_hardware_profile_is_a_directory(cli, tmp_path):
    assert_one_line_error(
        cli("memory", "llama3-8b-8xh100", "--hardware", str(tmp_path)), "--hardware", "directory"
    )


def test_hf_config_not_utf8(cli, tmp_path):
    data = make_scenario()
    data["model"] = {"hf_config": not_utf8(tmp_path, "config.json")}
    assert_one_line_error(cli("memory", write(tmp_path, data)), "model.hf_config", "not UTF-8")


def test_hf_config_as_the_model_folder_reads_its_config_json(cli, tmp_path):
    """``from_pretrained`` takes a model's folder; hf_config naming one reads its config.json
    (the same model as naming the file), and a folder without one is a one-line error."""
    folder = tmp_path / "Qwen2.5-7B"
    folder.mkdir()
    config = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
              "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    by_folder, by_file = make_scenario(), make_scenario()
    by_folder["model"] = {"hf_config": str(folder)}
    by_file["model"] = {"hf_config": str(folder / "config.json")}
    runs = [cli("memory", write(tmp_path, data, name), "--json") for name, data in (("a.yaml", by_folder), ("b.yaml", by_file))]
    assert runs[0].code == runs[1].code == 0, runs[0].err
    counts = [json.loads(r.out)["params_total"] for r in runs]
    assert counts[0] == counts[1] and counts[0] > 7.6e9  # Qwen2.5-7B's model card: 7.61B
    empty = make_scenario()
    empty["model"] = {"hf_config": str(tmp_path)}
    res = cli("memory", write(tmp_path, empty, "c.yaml"))
    assert_one_line_error(res, "model.hf_config", "is a folder without a config.json; give the model's config.json")


@pytest.mark.parametrize(
    "value, needle",
    [("Qwen/Qwen2-7B", "huggingface-cli download Qwen/Qwen2-7B config.json"),
     ("meta-llama/Meta-Llama-3-8B", "that repository's model is shipped: write model.preset: llama3-8b"),
     ("configs/missing.json", "check the path (in a scenario a relative path is read from the scenario's folder)")],
)  # fmt: skip
def test_hf_config_not_a_file_says_how_to_get_one(cli, value, needle):
    """A Hub repository id is not fetched (simcluster reads files): the fix is the download, or
    the shipped preset the id names; a missing path says where a relative one is read from."""
    res = cli("memory", "llama3-8b-8xh100", "--set", "model.preset=null", "--set", f"model.hf_config={value}")
    assert_one_line_error(res, "model.hf_config", "not found", needle)


def test_missing_hardware_file_says_where_relative_paths_are_read(cli, tmp_path):
    data = make_scenario(cluster={"hardware": "my-cluster.yaml"})
    res = cli("memory", write(tmp_path, data))
    assert_one_line_error(res, "cluster.hardware", "'my-cluster.yaml' not found", "scenario's folder", "simcluster list hardware")


@pytest.mark.parametrize("name", ["FSDP2", "hsdp", "pytorch-fsdp2"])
def test_fsdp_as_a_framework_names_the_setting_and_the_frameworks_that_run_it(cli, name):
    """'framework: fsdp2' is a sharding named where a framework goes: the fix is parallel.fsdp
    (README: 'fsdp: true or a degree = zero 3') or a framework that runs FSDP2 (torchtitan,
    automodel), not the list of names alone ('fsdp' and 'fsdp1' name framework pytorch-fsdp,
    PyTorch's FSDP1, tested in test_fsdp1)."""
    res = cli("memory", "llama3-8b-8xh100", "--set", f"framework={name}")
    assert_one_line_error(res, "framework:", f"unknown framework '{name}'", "parallel.fsdp: true", "torchtitan or automodel")


@pytest.mark.parametrize("command", ["memory", "run"])
def test_run_and_memory_say_what_set_changed_in_the_scenario_they_name(cli, command):
    """The table's title names the scenario (llama3-8b-8xh100), and no row names the model:
    with --set model=qwen2.5-7b the output said Llama 3 8B's scenario and ran Qwen 2.5 7B."""
    res = cli(command, "llama3-8b-8xh100", "--set", "model=qwen2.5-7b", "--set", "training.global_batch=32")
    assert res.code == 0, res.err
    assert res.out.splitlines()[0] == "with --set model=qwen2.5-7b training.global_batch=32"
    assert not cli(command, "llama3-8b-8xh100").out.startswith("with --set")


def test_cases_file_not_utf8_or_directory(cli, tmp_path):
    assert_one_line_error(cli("validate", not_utf8(tmp_path)), "CASES", "not UTF-8")
    assert_one_line_error(cli("validate", str(tmp_path)), "CASES", "is a directory")


# --- python -m calibrate ----------------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_calibrate_timeout_not_finite(calibrate, tmp_path, value):
    res = calibrate("--out", str(tmp_path / "p.yaml"), "--timeout", value)
    assert_one_line_error(res, "--timeout", "positive number of seconds")


@pytest.mark.parametrize(
    "text, needle",
    [("model: {preset: x\n", "not valid YAML"), ("- a\n", "must be a YAML mapping"),
     ("schema_version: 1\nname: x\n", "missing field 'gpu'")],
)  # fmt: skip
def test_calibrate_base_malformed(calibrate, tmp_path, text, needle):
    base = tmp_path / "base.yaml"
    base.write_text(text)
    out = str(tmp_path / "p.yaml")
    # before any measuring starts
    assert_one_line_error(calibrate("--out", out, "--base", str(base)), "--base", needle)
    res = calibrate("import-nccl-tests", str(FIX / "nccl_reduce_scatter.json"), "--out", out,
                    "--base", str(base))  # fmt: skip
    assert_one_line_error(res, "--base", needle)


def test_calibrate_base_not_utf8(calibrate, tmp_path):
    res = calibrate("--out", str(tmp_path / "p.yaml"), "--base", not_utf8(tmp_path))
    assert_one_line_error(res, "--base", "not UTF-8")


def test_calibrate_out_is_checked_before_measuring(calibrate, tmp_path, monkeypatch):
    quick = ("--device", "cpu", "--quick", "--out")
    # an existing directory is named as one, and nothing is measured (no partial file beside it)
    res = calibrate(*quick, str(tmp_path))
    assert_one_line_error(res, "--out", f"'{tmp_path}' is a directory; name a file")
    assert not (tmp_path.parent / f"{tmp_path.name}.partial.yaml").exists()
    # a missing folder under a file cannot be made
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = calibrate(*quick, str(blocker / "sub" / "p.yaml"))
    assert_one_line_error(res, "--out", f"'{blocker}' is a file")
    # a folder that cannot be written into (root passes chmod: the check reads os.access)
    ro = tmp_path / "ro"
    ro.mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != ro and access(p, mode, **kw))
    res = calibrate(*quick, str(ro / "new" / "p.yaml"))
    assert_one_line_error(res, "--out", f"cannot write into '{ro}'")
    assert not any(ro.iterdir())


def test_calibrate_without_torchrun_but_with_world_size(calibrate, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    res = calibrate("--device", "cpu", "--quick", "--out", str(tmp_path / "x.yaml"))
    assert_one_line_error(res, "WORLD_SIZE", "MASTER_ADDR, MASTER_PORT not set", "torchrun")
    assert not list(tmp_path.iterdir())


def test_calibrate_unknown_subcommand_names_the_subcommands(calibrate):
    res = calibrate("bogus-sub", "--out", "x.yaml")
    assert_one_line_error(res, "unknown subcommand 'bogus-sub'", "import-nccl-tests, compare-trace, measure-step")
    assert_one_line_error(calibrate("mesure-step", "x.yaml"), "(did you mean 'measure-step'?)")


def test_calibrate_help_says_how_to_launch_ranks(calibrate):
    res = calibrate("--help")
    assert res.code == 0
    assert "torchrun --nproc-per-node 8 -m calibrate" in res.out and "--nnodes" in res.out
    assert "one measurement (one step of the progress bar" in " ".join(res.out.split())


def test_a_partial_calibration_given_as_hardware(cli, tmp_path):
    partial = tmp_path / "p.partial.yaml"
    partial.write_text(yaml.safe_dump({"partial": True, "error": None, "measured": {"gemm": []}}))
    res = cli("run", "llama3-8b-8xh100", "--hardware", str(partial))
    assert_one_line_error(res, "--hardware", f"'{partial}' is an unfinished calibration", "--out")
    # the finished profile beside it is offered once it exists
    (tmp_path / "p.yaml").write_text("name: x\n")
    res = cli("run", "llama3-8b-8xh100", "--hardware", str(partial))
    assert_one_line_error(res, f"give '{tmp_path / 'p.yaml'}'")


def test_import_out_is_a_directory_or_unwritable(calibrate, tmp_path):
    log = str(FIX / "nccl_reduce_scatter.json")
    assert_one_line_error(calibrate("import-nccl-tests", log, "--out", str(tmp_path)), "--out")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = calibrate("import-nccl-tests", log, "--out", str(blocker / "p.yaml"))
    assert_one_line_error(res, "--out", "cannot write")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux procfs")
def test_a_folder_that_takes_no_new_file_is_refused_before_measuring(calibrate, tmp_path):
    """procfs holds no new regular files (proc(5)), yet os.access says root may write into
    /proc: the check creates a scratch file as the write will, so a calibration (as root in a
    container, or on an NFS export that squashes root) is refused before it measures, not after;
    in a writable folder the scratch file is gone again."""
    from simcluster.errors import UserError
    from simcluster.output.atomic import check_file_writable

    with pytest.raises(UserError, match=r"cannot write into '/proc'"):
        check_file_writable("/proc/profile.yaml", "--out")
    res = calibrate("--device", "cpu", "--quick", "--out", "/proc/profile.yaml")
    assert_one_line_error(res, "--out", "cannot write into '/proc'")
    check_file_writable(tmp_path / "sub" / "p.yaml", "--out")
    assert list(tmp_path.iterdir()) == []


def test_import_log_not_utf8(calibrate, tmp_path):
    res = calibrate("import-nccl-tests", not_utf8(tmp_path, "x.txt"), "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(res, "LOG", "not UTF-8")


@pytest.mark.parametrize(
    "doc, needle",
    [({"results": [{"size": "x", "out_of_place": {"time": 1, "bus_bw": 1}}]}, "results[0].size"),
     ({"results": [{"size": 1e400, "out_of_place": {"time": 1, "bus_bw": 1}}]}, "results[0].size"),
     ({"results": [{"size": -8, "out_of_place": {"time": 1, "bus_bw": 1}}]}, "results[0].size"),
     ({"results": [], "config": {"devices": [1]}}, "config.devices[0]"),
     ({"results": [], "config": {"devices": "gpu0"}}, "config.devices")],
)  # fmt: skip
def test_import_json_report_malformed(calibrate, tmp_path, doc, needle):
    path = tmp_path / "all_reduce_perf.json"
    path.write_text(json.dumps(doc).replace("Infinity", "1e400"))
    res = calibrate("import-nccl-tests", str(path), "--gpus", "2", "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(res, needle)


def test_import_json_report_args_not_a_list(calibrate, tmp_path):
    path = tmp_path / "r.json"
    doc = {"args": 5, "config": "x", "results": [{"size": 8, "out_of_place": {"time": 1, "bus_bw": 1}}]}
    path.write_text(json.dumps(doc))
    res = calibrate("import-nccl-tests", str(path), "--op", "all_reduce", "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(res, "Rank", "--gpus")


@pytest.mark.parametrize("column, bad", [("time", "nan"), ("size", "-1048576")])
def test_import_text_log_non_numbers(calibrate, tmp_path, column, bad):
    lines = (FIX / "nccl_all_reduce_dgx_h100_current.txt").read_text().splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.strip().startswith("33554432"))
    tokens = lines[row].split()
    tokens[0 if column == "size" else 5] = bad
    lines[row] = "  ".join(tokens)
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text("\n".join(lines) + "\n")
    res = calibrate("import-nccl-tests", str(path), "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(res, f":{row + 1}:", f"{column} '{bad}' is not a number")


@pytest.mark.parametrize(
    "events, needle",
    [([1, 2], "traceEvents[0]"),
     ([{"ph": "X", "cat": "kernel", "name": "gemm", "ts": "a", "dur": 1}], "traceEvents[0].ts"),
     ([{"ph": "X", "cat": "kernel", "name": "gemm", "dur": 1}], "traceEvents[0].ts")],
)  # fmt: skip
def test_compare_trace_malformed_events(calibrate, tmp_path, events, needle):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert_one_line_error(calibrate("compare-trace", str(path), "llama3-8b-8xh100"), needle)


def test_compare_trace_not_utf8(calibrate, tmp_path):
    res = calibrate("compare-trace", not_utf8(tmp_path, "t.json"), "llama3-8b-8xh100")
    assert_one_line_error(res, "KINETO_TRACE", "not UTF-8")




# --- model fields ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fields, field, needle",
    [({"head_dim": -4}, "model.head_dim", "0 or more"),
     ({"ffn": -5}, "model.ffn", "0 or more"),
     ({"ffn": 0}, "model.ffn", "ffn > 0"),
     ({"experts": -1}, "model.experts", "0 or more"),
     ({"max_positions": -1}, "model.max_positions", "0 or more"),
     ({"top_k": 2}, "model.top_k", "set model.experts"),
     ({"shared_experts": 1}, "model.shared_experts", "set model.experts"),
     ({"layers": 10**18}, "model.layers", "more than the 10,000"),
     ({"mtp_layers": 10**6}, "model.mtp_layers", "at most layers"),
     ({"mla": {"kv_lora_rank": 512}}, "model.mla.q_lora_rank", "missing"),
     ({"mla": {"a": 1}}, "model.mla.a", "unknown MLA field")],
)  # fmt: skip
def test_bad_model_fields(cli, tmp_path, fields, field, needle):
    data = make_scenario(model=fields)
    assert_one_line_error(cli("memory", write(tmp_path, data)), field, needle)


@pytest.mark.parametrize(
    "setting, field, needle",
    [("model.mla.kv_lora=1", "model.mla.kv_lora", "did you mean 'kv_lora_rank'"),
     ("model.mla.kv_lora_rank=0", "model.mla.kv_lora_rank", "positive whole number"),
     ("model.mla.q_lora_rank=-1", "model.mla.q_lora_rank", "0 (no query compression)")],
)  # fmt: skip
def test_bad_mla_override_of_a_preset(cli, setting, field, needle):
    assert_one_line_error(cli("memory", "deepseek-v3-2048xh800", "--set", setting), field, needle)


def test_partial_mla_override_keeps_the_preset_dimensions(cli):
    base = json.loads(cli("memory", "deepseek-v3-2048xh800", "--json").out)
    res = cli("memory", "deepseek-v3-2048xh800", "--json", "--set", "model.mla.kv_lora_rank=256")
    assert res.code == 0, res.err
    assert json.loads(res.out)["params_total"] < base["params_total"]


def test_hf_config_with_mistyped_fields(cli, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": "x", "num_hidden_layers": 2, "num_attention_heads": 16,
                                  "intermediate_size": 4096, "vocab_size": 1000}))  # fmt: skip
    data = make_scenario()
    data["model"] = {"hf_config": str(config)}
    assert_one_line_error(cli("memory", write(tmp_path, data)), "model.hf_config", "hidden")


# --- numbers: infinities, limits ---------------------------------------------------------------
@pytest.mark.parametrize(
    "setting, field",
    [("cluster.nic_gbps=.inf", "cluster.nic_gbps"), ("dp.bucket_mb=.inf", "dp.bucket_mb"),
     ("training.memory_overhead_gib=.inf", "training.memory_overhead_gib"),
     ("moe.load_imbalance=.inf", "moe.load_imbalance")],
)  # fmt: skip
def test_infinite_numbers_are_refused(cli, setting, field):
    assert_one_line_error(cli("memory", "llama3-8b-8xh100", "--set", setting), field, "finite")


def test_too_many_microbatches(cli):
    res = cli("memory", "llama3-8b-8xh100", "--set", "training.global_batch=8000000000")
    assert_one_line_error(res, "training.global_batch", "1,000,000", "micro_batch")


def test_too_many_gpus(cli):
    res = cli("memory", "llama3-8b-8xh100", "--set", "cluster.gpus=1000000000")
    assert_one_line_error(res, "cluster.gpus", "131,072 GPUs", "largest published", "lower it")
    res = cli("collective", "all_reduce", "1MiB", "--gpus", "100000000")
    assert_one_line_error(res, "--gpus", "131,072")
    res = cli("collective", "all_reduce", "1MiB", "--gpus", "131072", "--per-node", "1")
    assert_one_line_error(res, "--per-node", "131,072")


@pytest.mark.parametrize("value", ["0", "-2"])
def test_collective_gpus_per_node_not_positive(cli, value):
    res = cli("collective", "all_reduce", "1MiB", "--gpus", "8", "--gpus-per-node", value)
    assert_one_line_error(res, "--gpus-per-node", ">= 1")


# --- hardware profile fields -------------------------------------------------------------------
@pytest.mark.parametrize(
    "setting, field, needle",
    [("cluster.profile.efficiency.gemm=[]", "cluster.profile.efficiency.gemm", "at least 1"),
     ("cluster.profile.efficiency.gemm=[[-1, 0.5]]", "cluster.profile.efficiency.gemm.0.0", "greater than 0"),
     ("cluster.profile.efficiency.gemm=[[1e9, 5]]", "cluster.profile.efficiency.gemm.0.1", "less than or equal to 1"),
     ("cluster.profile.gpu.peak_tflops.bf16=0", "cluster.profile.gpu.peak_tflops.bf16", "greater than 0"),
     ("cluster.profile.gpu.peak_tflops={}", "cluster.profile.gpu.peak_tflops", "at least 1"),
     ("cluster.profile.schema_version=99", "cluster.profile.schema_version", "less than or equal to 1"),
     ("cluster.profile.gpu.memory_gib.x=1", "cluster.profile.gpu.memory_gib.x", "not a section")],
)  # fmt: skip
def test_bad_profile_override(cli, setting, field, needle):
    # run, not memory: these broke the compute model (IndexError, ZeroDivisionError, StopIteration)
    res = cli("run", "llama3-8b-8xh100", "--set", "training.global_batch=8", "--set", setting)
    assert_one_line_error(res, field, needle)


def test_profile_of_a_future_schema(cli, tmp_path):
    hw = yaml.safe_load((Path(__file__).parents[1] / "hardware" / "dgx-h100.yaml").read_text())
    hw["schema_version"] = 99
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(hw))
    res = cli("memory", "llama3-8b-8xh100", "--hardware", str(path))
    assert_one_line_error(res, "--hardware", "schema_version")


# --- --set keys, sections ----------------------------------------------------------------------
@pytest.mark.parametrize("setting", [".=1", "parallel..tp=1", "parallel.=2"])
def test_set_key_with_an_empty_part(cli, setting):
    assert_one_line_error(cli("memory", "llama3-8b-8xh100", "--set", setting), "--set", "empty part")


@pytest.mark.parametrize(
    "argv",
    [["run", "llama3-8b-8xh100", "--set", "parallel.tp", "2"],  # a space where the '=' goes
     ["compare", "llama3-8b-8xh100", "--set", "parallel.tp", "2", "llama3-8b-8xh100@parallel.tp=4"],
     ["memory", "llama3-8b-8xh100", "--set", "parallel.tp"]],
)  # fmt: skip
def test_set_with_its_value_as_another_word_names_the_key_and_the_fix(cli, argv):
    """argparse alone said 'unrecognized arguments: 2', naming neither --set nor the key."""
    assert_one_line_error(cli(*argv), "--set: 'parallel.tp' has no '=VALUE'", "--set parallel.tp=VALUE")


@pytest.mark.parametrize(
    "argv, needle",
    [(["sweep", "llama3-8b-8xh100", "--tpp", "2"], "simcluster sweep: unrecognized arguments: --tpp 2 (did you mean '--tp'?)"),
     (["memory", "llama3-8b-8xh100", "--jsn"], "simcluster memory: unrecognized arguments: --jsn (did you mean '--json'?)"),
     (["run", "llama3-8b-8xh100", "extra"], "simcluster run: unrecognized arguments: extra")],
)  # fmt: skip
def test_a_misspelt_option_names_the_command_and_its_nearest_option(cli, argv, needle):
    """argparse said 'simcluster: unrecognized arguments: --tpp 2', naming neither the command
    nor the option meant."""
    assert_one_line_error(cli(*argv), needle)


@pytest.mark.parametrize(
    "argv, needle",
    [(["sweep", "llama3-8b-8xh100", "--axis", "tp=1,2"], "unrecognized arguments: --axis tp=1,2 (did you mean --tp 1,2?)"),
     (["sweep", "llama3-8b-8xh100", "--axes", "training.micro_batch=1,2"], "(did you mean --micro-batch 1,2?)"),
     (["memory", "llama3-8b-8xh100", "parallel.tp=2"], "parallel.tp=2 (an override takes --set: --set parallel.tp=2)")],
)  # fmt: skip
def test_a_key_value_word_is_named_as_the_command_takes_it(cli, argv, needle):
    """`sweep --axis tp=1,2` was 'did you mean --dask?' (the nearest spelling of --axis), and
    an override written without its --set named nothing: the word itself says what was meant."""
    assert_one_line_error(cli(*argv), needle)



@pytest.mark.parametrize(
    "argv, needle",
    [(["run", "llama3-8b-8xh100", "--tp", "2"], "unrecognized arguments: --tp 2 (a scenario setting: --set parallel.tp=2)"),
     (["run", "llama3-8b-8xh100", "--pp=4"], "(a scenario setting: --set parallel.pp=4)"),
     (["memory", "llama3-8b-8xh100", "--micro-batch-size", "2"], "(a scenario setting: --set training.micro_batch=2)"),
     (["compare", "llama3-8b-8xh100", "--gpus", "16"], "(a scenario setting: --set cluster.gpus=16)"),
     (["run", "llama3-8b-8xh100", "--sp"], "(a scenario setting: --set parallel.sequence_parallel=true)"),
     (["run", "llama3-8b-8xh100", "--framework", "nanotron"], "(a scenario setting: --set framework=nanotron)"),
     (["run", "llama3-8b-8xh100", "--model", "llama3-70b"], "(a scenario setting: --set model=llama3-70b)")],
)  # fmt: skip
def test_a_layout_flag_is_named_as_its_set_override(cli, argv, needle):
    """`run NAME --tp 2` said 'did you mean '--set'?' and `--pp 4` 'did you mean '--help'?':
    a scenario key typed as an option is named with the --set path that changes it (the
    path the scenario loader reads the same key at: --set tp=2 reaches parallel.tp)."""
    assert_one_line_error(cli(*argv), needle)

@pytest.mark.parametrize(
    "argv",
    [["run", "llama3-8b-8xh100"], ["sweep", "llama3-8b-8xh100"], ["validate"],
     ["compare", "llama3-8b-8xh100", "llama3-8b-8xh100@parallel.tp=2"], ["import", "megatron", "x.sh"]],
)  # fmt: skip
def test_an_empty_out_is_refused(cli, argv):
    """`--out "$DIR"` with DIR unset: argparse passed '' and the command read it as no --out,
    simulating without writing anything or saying so."""
    res = cli(*argv, "--out", " ")
    assert_one_line_error(res, f"simcluster {argv[0]}: argument --out: is empty", "drop --out")


def test_a_misspelt_calibrate_option_gets_its_nearest_option(calibrate, tmp_path):
    res = calibrate("import-nccl-tests", str(tmp_path / "a.log"), "--basee", "x", "--out", str(tmp_path / "y.yaml"))
    assert_one_line_error(res, "calibrate import-nccl-tests: unrecognized arguments: --basee x (did you mean '--base'?)")


def test_section_of_the_wrong_type(cli):
    res = cli("memory", "llama3-8b-8xh100", "--set", "parallel=1")
    assert_one_line_error(res, "parallel:", "must be a mapping")


# --- no command, --price, collective sizes ------------------------------------------------------
def test_no_command(cli):
    res = cli()
    assert_one_line_error(res, "choose a command", "run", "memory")
    assert "usage: simcluster" in res.out  # the help says what to type next


@pytest.mark.parametrize(
    "size, needle",
    [("0", "not a positive size"), ("0MiB", "not a positive size"), ("-8", "not a positive size"),
     ("1.5", "not a whole number of bytes"), ("1e-3KiB", "not a whole number of bytes"),
     ("1e400", "more than 1 PiB"), ("1e9999999", "more than 1 PiB")],
)  # fmt: skip
def test_collective_size_not_a_positive_whole_number_of_bytes(cli, size, needle):
    assert_one_line_error(cli("collective", "all_reduce", size, "--gpus", "8"), "size:", needle)


@pytest.mark.parametrize("size, nbytes", [("0.5KiB", 512), ("1.1KB", 1100), ("1e9", 10**9), ("8", 8)])
def test_collective_sizes_in_whole_bytes_with_units(cli, size, nbytes):
    res = cli("collective", "all_reduce", size, "--gpus", "8", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["bytes"] == nbytes


def test_compare_price_for_an_unknown_profile(cli):
    res = cli("compare", "llama3-8b-8xh100", "llama3-8b-8xh100@parallel.tp=2", "--price", "dgx-h10=2.5")
    assert_one_line_error(res, "--price", "'dgx-h10' is not a hardware profile", "did you mean 'dgx-h100'")


def test_compare_price_missing_for_a_profile_in_use(cli):
    res = cli("compare", "llama3-8b-8xh100", "llama3-8b-8xh100@cluster.hardware=dgx-a100",
              "--price", "dgx-h100=2.5")  # fmt: skip
    assert_one_line_error(res, "--price", "no price for hardware 'dgx-a100'", "dgx-a100=", "--price 2.5")


# --- calibrate --shapes ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shapes, needle",
    [("0,4096,4096", "'0,4096,4096': M must be a positive integer, got 0"),
     ("--shapes=-8,4096,4096", "'-8,4096,4096': M must be a positive integer, got -8"),
     ("1.5,4096,4096", "'1.5,4096,4096' is not M,N,K (three integers)"),
     ("4096,4096", "'4096,4096' is not M,N,K"),
     ("1000000,1000000,1000000", "'1000000,1000000,1000000': A, B and C in fp32 take 10.91 TiB"),
     ("1,1,99999999999999999999", "beyond any GPU's memory")],
)  # fmt: skip
def test_calibrate_impossible_gemm_shapes(calibrate, tmp_path, shapes, needle):
    flag = [shapes] if shapes.startswith("--") else ["--shapes", shapes]  # argparse and a leading '-'
    res = calibrate("--device", "cpu", "--out", str(tmp_path / "p.yaml"), *flag)
    assert_one_line_error(res, "--shapes", needle)


def test_calibrate_gemm_shape_larger_than_the_device(calibrate, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr("calibrate.cli.device_memory", lambda device: 2**30)
    res = calibrate("--device", "cpu", "--out", str(tmp_path / "p.yaml"), "--shapes", "8,8,8;16384,16384,16384")
    assert_one_line_error(res, "--shapes", "'16384,16384,16384'", "3.00 GiB", "1.00 GiB of this cpu device")
    assert not (tmp_path / "p.yaml").exists() and not (tmp_path / "p.partial.yaml").exists()  # nothing measured


# --- scenario fields that only make sense together -------------------------------------------
def test_seq_len_longer_than_the_learned_position_table(cli, tmp_path):
    training = {"seq_len": 4096, "micro_batch": 1, "global_batch": 8}
    data = make_scenario(training=training)  # learned positions, max_positions 2048
    assert_one_line_error(cli("memory", write(tmp_path, data)), "training.seq_len", "4096",
                          "model.max_positions=2048")  # fmt: skip
    # RoPE has no table to run past; a learned table as long as the sequence is fine
    for model in ({"position": "rope"}, {"max_positions": 4096}):
        res = cli("memory", write(tmp_path, make_scenario(model=model, training=training)))
        assert res.code == 0, res.err


@pytest.mark.parametrize(
    "parallel, layers, needle",
    [({"pp": 1}, 9, "more than the model's 8 layers"),
     ({"pp": 2}, 5, "more than the 4 layers of the largest pipeline chunk"),
     ({"pp": 2, "vpp": 2, "schedule": "interleaved"}, 3, "the 2 layers of the largest pipeline chunk")],
)  # fmt: skip
def test_recompute_num_layers_beyond_a_pipeline_chunk(cli, tmp_path, parallel, layers, needle):
    training = {"seq_len": 2048, "global_batch": 8, "recompute": "full"}
    data = make_scenario(parallel=parallel, training={**training, "recompute_num_layers": layers})
    assert_one_line_error(cli("memory", write(tmp_path, data)), "training.recompute_num_layers", needle)
    data["training"]["recompute_num_layers"] = layers - 1  # a whole chunk: allowed
    res = cli("memory", write(tmp_path, data))
    assert res.code == 0, res.err


@pytest.mark.parametrize(
    "setting", ["moe.max_nodes_per_token=2", "moe.dispatcher=deepep", "moe.fp8_dispatch=true",
                "moe.load_imbalance=1.2"],
)  # fmt: skip
def test_moe_settings_on_a_dense_model(cli, setting):
    field = setting.split("=")[0]
    res = cli("memory", "llama3-8b-8xh100", "--set", setting)
    assert_one_line_error(res, field, "mixture-of-experts", "set model.experts")


def test_moe_defaults_spelled_out_on_a_dense_model_are_fine(cli):
    res = cli("memory", "llama3-8b-8xh100", "--set", "moe.dispatcher=alltoall", "--set", "moe.load_imbalance=1")
    assert res.code == 0, res.err


@pytest.mark.parametrize("command", ["run", "memory"])
def test_a_precision_the_gpu_has_no_peak_for_is_refused_before_simulating(cli, command):
    """V100 tensor cores have no bf16 (NVIDIA V100 datasheet: FP16, FP32, FP64); a bf16 run on
    them used to be simulated with a stand-in rate first, for minutes on a large model."""
    res = cli(command, "llama3-8b-8xh100", "--hardware", "dgx-2-v100")
    assert_one_line_error(res, "training.precision", "'dgx-2-v100' lists no peak for 'bf16'", "fp16")


@pytest.mark.parametrize("spelled", ["all-reduce", "AllReduce", "allreduce", "all_reduce_perf"])
def test_collective_op_as_people_write_it(cli, spelled):
    # nccl-tests names its binaries all_reduce_perf; the README reads dashes as underscores
    res = cli("collective", spelled, "1MiB", "--gpus", "8", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["op"] == "all_reduce"


def test_collective_group_not_whole_nodes_names_gpus_and_per_node(cli):
    # the cluster is sized by --gpus here: the error names the flag, not cluster.gpus
    assert_one_line_error(cli("collective", "all_reduce", "1GiB", "--gpus", "12"), "--gpus:", "--per-node")


def test_collective_title_counts_one_node_in_the_singular(cli):
    out = cli("collective", "all_reduce", "1MiB", "--gpus", "4").out
    assert "(1 node)" in out and "measured/model: the profile's measured nccl-tests time" in " ".join(out.split())
    # before: '... the time shown is the model's times it', a sentence cut short to the eye
    assert "the time shown is the measured one (the model's times this ratio)" in " ".join(out.split())


@pytest.mark.parametrize("name", ["llama3-8b-8xh100.yaml", "LLAMA3-8B-8XH100", "Llama3-8B-8xH100.YAML"])
def test_a_shipped_scenario_by_its_file_name_or_in_any_case(name, tmp_path, monkeypatch):
    # from a folder without scenarios/: the name as `ls scenarios/` shows it, or in capitals
    from simcluster.scenario.loading import resolve_scenario_path

    monkeypatch.chdir(tmp_path)
    assert resolve_scenario_path(name).name == "llama3-8b-8xh100.yaml"


def test_a_missing_path_names_the_shipped_scenario_it_looks_like(tmp_path, monkeypatch):
    from simcluster.errors import UserError
    from simcluster.scenario.loading import resolve_scenario_path

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="not found \\(a shipped scenario is 'llama3-8b-8xh100'\\)"):
        resolve_scenario_path("./llama3-8b-8xh100.yaml")
    with pytest.raises(UserError, match="did you mean 'llama3-8b-8xh100'"):
        resolve_scenario_path("LLAMA3-8B-8XH10")


def test_a_misspelt_command_gets_a_close_spelling(cli):
    res = cli("runn", "llama3-8b-8xh100")
    assert res.code == 2 and res.err.count("\n") == 1 and "(did you mean 'run'?)" in res.err


@pytest.mark.parametrize("word", ["calibrate", "Calibrate", "calibration"])
def test_calibrate_as_a_command_points_to_its_own_program(cli, word):
    """`simcluster calibrate --help` (README: "calibrate/ writes a profile measured on your GPUs";
    the unknown-hardware error says "`calibrate` writes one") got argparse's nearest command,
    "did you mean 'validate'?", which runs something else. calibrate is its own program
    (calibrate/__main__.py, `python -m calibrate`), so the one line names that command."""
    for argv in ([word, "--help"], [word, "--out", "p.yaml"]):
        res = cli(*argv)
        assert_one_line_error(res, "python -m calibrate --help", "Calibrating on your cluster")
        assert "validate" not in res.err
    assert "python -m calibrate" in cli("--help").out  # the top-level help says where it is


@pytest.mark.parametrize(
    "argv",
    [
        ["memory", "llama3-8b-8xh100", "--hardware", "dgx-h200", "--set", "cluster.hardware=dgx-b200"],
        ["run", "llama3-8b-8xh100", "--hardware", "dgx-h200", "--set", "cluster={hardware: dgx-b200}"],
        # the variant labelled dgx-b200 ran on dgx-h200 and compare said "no difference"
        ["compare", "llama3-8b-8xh100", "llama3-8b-8xh100@cluster.hardware=dgx-b200", "--hardware", "dgx-h200"],
        ["sweep", "llama3-8b-8xh100", "--hardware", "dgx-h100,dgx-h200", "--set", "cluster.hardware=dgx-b200"],
    ],
)
def test_hardware_given_twice_differently_is_refused(cli, argv):
    assert_one_line_error(cli(*argv), "--hardware", "cluster.hardware=dgx-b200", "give the hardware once")


def test_hardware_given_twice_as_the_same_profile_runs(cli):
    # 'h200' is dgx-h200's GPU name (gpu_names.REFERENCE_NODES): one machine, named twice
    res = cli("memory", "llama3-8b-8xh100", "--hardware", "dgx-h200", "--set", "cluster.hardware=h200", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["hardware"] == "dgx-h200"


def test_close_choice_reads_both_argparse_quotings():
    # Python 3.12.7+ prints the choices without quotes
    from simcluster.cli import _close_choice

    assert _close_choice("argument COMMAND: invalid choice: 'lst' (choose from 'run', 'list')") == " (did you mean 'list'?)"
    assert _close_choice("argument COMMAND: invalid choice: 'lst' (choose from run, list)") == " (did you mean 'list'?)"
    assert _close_choice("argument --x: expected one argument") == ""


def test_a_mapping_given_to_set_merges_into_its_section():
    # --set 'parallel={tp: 2}' replaced the whole section before, dropping the scenario's zero: 2
    from simcluster.scenario.loading import apply_overrides

    data = {"parallel": {"tp": 1, "zero": 2}, "training": {"global_batch": 64, "seq_len": 4096}}
    out = apply_overrides(data, [("parallel", {"tp": 2}), ("training", {"global_batch_tokens": "1M"})])
    assert out["parallel"] == {"tp": 2, "zero": 2}
    # each merged key is an override of its own: the batch stated in tokens replaces the one in sequences
    assert out["training"] == {"seq_len": 4096, "global_batch_tokens": "1M"}
    # a list or a scalar still replaces, and a mapping where the section is absent is set whole
    assert apply_overrides({}, [("simulation", {"stragglers": []})]) == {"simulation": {"stragglers": []}}


def test_list_hardware_shows_a_calibrated_profile_beside_the_shipped_ones(cli, tmp_path, monkeypatch):
    # a calibrated profile's measured: holds scalars (launch and host op times) beside tables
    import yaml as _yaml

    monkeypatch.delenv("COLUMNS", raising=False)  # the table at its redirected width, unwrapped

    data = _yaml.safe_load((Path(__file__).parent.parent / "hardware" / "dgx-h100.yaml").read_text())
    data["name"] = "my-h100"
    data.setdefault("measured", {})["kernel_launch_s"] = 4.5e-6
    path = tmp_path / "mine.yaml"
    path.write_text(_yaml.safe_dump(data))
    res = cli("list", "hardware", str(path))
    assert res.code == 0, res.err
    assert "my-h100 (mine.yaml)" in res.out and "dgx-a100" in res.out and "kernel_launch_s" in res.out
    assert_one_line_error(cli("list", "presets", str(path)), "PROFILE:", "list hardware")


@pytest.mark.parametrize("name", ["fsdp", "FSDP1", "torch-fsdp", "pytorch-fsdp"])
def test_fsdp_and_fsdp1_as_a_framework_name_pytorchs_fsdp1(name):
    """FullyShardedDataParallel (FSDP1) is a framework preset of its own (frameworks/
    pytorch-fsdp), so its usual names resolve to it instead of the FSDP2 hint above."""
    from simcluster.frameworks import get_framework

    assert get_framework(name).name == "pytorch-fsdp"
