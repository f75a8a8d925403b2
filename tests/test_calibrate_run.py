"""Real measuring runs on CPU: torchrun with 2 gloo ranks, a single process, failures.

Every number checked here was timed for real by the run under test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

from calibrate.busbw import OPS, busbw  # noqa: E402
from calibrate.soak import heat_soak, soak_seconds  # noqa: E402
from calibrate.spread import spread  # noqa: E402
from simcluster.cli import main as simcluster_main  # noqa: E402
from simcluster.compute import median_curve  # noqa: E402
from simcluster.errors import UserError  # noqa: E402
from simcluster.hardware import load_profile  # noqa: E402
from simcluster.profile_sources import unsourced  # noqa: E402
from tests.conftest import in_process  # noqa: E402
from tests.test_scenario_errors import assert_one_line_error  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# --standalone: a rendezvous on a free local port, so a port left over by an earlier run (or a
# second job on the machine) cannot break the launch
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
CAL = ["-m", "calibrate", "--device", "cpu", "--quick"]
H100_BF16_FLOPS = 989.4e12  # NVIDIA H100 SXM5 datasheet, dense bf16 (hardware/dgx-h100.yaml)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture(scope="module")
def two_rank_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "p.yaml"
    errors = []
    # one relaunch: --standalone picks its rendezvous port before binding it, so two launches
    # at once on a loaded machine (pytest-xdist workers) can race for it; a second failure is
    # the run's own and fails the tests with both runs' errors
    for _attempt in range(2):
        proc = subprocess.run(
            TORCHRUN + CAL + ["--out", str(out)],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=180,
        )
        if proc.returncode == 0:
            out.with_name("p.stderr").write_text(proc.stderr)  # the run's closing summary
            return out
        errors.append(proc.stderr[-3000:])
    pytest.fail("two-rank calibrate run failed twice:\n" + "\n---\n".join(errors))


def test_two_rank_run_writes_a_loadable_slow_profile(two_rank_profile):
    prof = load_profile(two_rank_profile)
    assert not two_rank_profile.with_name("p.partial.yaml").exists()
    assert prof.peak_flops("bf16") < H100_BF16_FLOPS / 100  # a CPU core is far below an H100
    assert prof.gpus_per_node == 2 and prof.node.nvls is False
    # a CPU has no SMs: none to quantise waves over or to lend to the collectives
    assert prof.gpu.sm_count is None
    assert prof.efficiency.collective_sms == 0
    assert prof.provenance["backend"] == "gloo" and prof.provenance["device_count"] == 2
    assert prof.provenance["quick"] is True and prof.provenance["torch"]
    # the run opened with a heat soak (calibrate/soak.py), short in a quick run
    assert prof.provenance["heat_soak_s"] == soak_seconds(quick=True) == 0.05
    best = max(r["tflops"] for r in prof.measured["gemm"] if r["dtype"] == "bf16")
    assert prof.gpu.peak_tflops["bf16"] == best
    # the size curve is the median rate of the shapes timed at each FLOP count over that peak
    # (compute.median_curve); its top is 1 only when the fastest shape is its count's median,
    # which timing noise decides, so the test checks the construction
    rows = [r for r in prof.measured["gemm"] if r["dtype"] == "bf16"]
    expected = median_curve([(2.0 * r["m"] * r["n"] * r["k"], r["tflops"] / best) for r in rows])
    assert [x for pt in prof.efficiency.gemm for x in pt] == pytest.approx([x for pt in expected for x in pt])
    assert all(0 < f <= 1 for _, f in prof.efficiency.gemm)
    # every M x N x K of the quick cube was timed and written as the profile's own shape table,
    # each entry the timed row's rate (to 4 significant digits)
    table = prof.efficiency.gemm_shapes
    assert isinstance(table, dict) and table["grid"] == [32, 64, 128]
    timed = {(r["m"], r["n"], r["k"]): r["tflops"] for r in prof.measured["gemm"] if r["dtype"] == "bf16"}
    assert table["tflops"]["bf16"][2][0][1] == pytest.approx(timed[(128, 32, 64)], rel=1e-3)
    assert "every M x N x K" in prof.sources["efficiency.gemm_shapes"]
    kernels = {r["kernel"] for r in prof.measured["memory"]}
    assert kernels == {"elementwise", "layernorm", "adam"}
    # the host's cost of one Python-issued op (parallelism/host.py's unit), measured on this CPU:
    # microseconds, not nanoseconds or milliseconds, and written with its source
    assert prof.measured["host_op_s"] == pytest.approx(prof.efficiency.host_op_us * 1e-6)
    assert 0.5 < prof.efficiency.host_op_us < 5_000
    assert "calibrate" in prof.sources["efficiency.host_op_us"]
    # device memory's rate is the best kernel at its largest size (STREAM: arrays well beyond
    # the last-level cache), not a smaller size's cache-resident rate
    largest = {}
    for r in prof.measured["memory"]:
        if r["bytes"] > largest.get(r["kernel"], {"bytes": 0})["bytes"]:
            largest[r["kernel"]] = r
    streaming = max(r["bytes_per_s"] for r in largest.values())
    assert prof.gpu.hbm_tbps * 1e12 == pytest.approx(streaming, rel=1e-12)
    assert {r["bytes"] for r in largest.values()} == {2**23 * 12, 2**23 * 8, 2**23 * 28}


#: fields a calibrating run on a CPU times (or derives from its timings), single process
MEASURED_FIELDS = {
    "gpu.peak_tflops", "gpu.hbm_tbps", "node.host_link_GBps", "node.host_memory_GBps",
    "efficiency.gemm", "efficiency.gemm_shapes", "efficiency.attention_fwd",
    "efficiency.attention_bwd", "efficiency.attention_kernel", "efficiency.attention_kernels.measured",
    "efficiency.hbm", "efficiency.kernel_launch_us", "efficiency.host_op_us",
}  # fmt: skip
#: ... and with two ranks: the spread between them and the link between them
MEASURED_BY_RANKS = {"gpu.speed_spread", "node.nvlink_GBps", "efficiency.nvlink", "node.nvlink_latency_us"}
_ABSENT = object()


def _field(data: dict, path: str) -> object:
    node: object = data
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def _check_sources(path: Path, measured: set[str], base: str = "dgx-h100") -> dict[str, str]:
    """Every source names a field the profile holds and says truly where its number came from:
    a measured field is labelled measured, a copied one holds the value it was copied from, and
    every number has a source."""
    data = yaml.safe_load(path.read_text())
    copied = yaml.safe_load((ROOT / "hardware" / f"{base}.yaml").read_text())
    sources = data["sources"]
    for key, text in sources.items():
        assert _field(data, key) is not _ABSENT, f"sources: {key} names no field of the profile"
        if text == f"not measured; copied from {base}":
            assert _field(data, key) == _field(copied, key), f"{key} is not {base}'s"
    for key in measured:
        assert sources.get(key, "").startswith("measured"), f"{key}: {sources.get(key)}"
    for section in ("gpu", "node", "fabric", "efficiency"):
        for key, value in data[section].items():
            path_ = f"{section}.{key}"
            if isinstance(value, str):  # a name, not a number (a shipped profile's gpu.name)
                continue
            assert any(s == path_ or s.startswith(path_ + ".") for s in sources), f"{path_} has no source"
    # ... down to each number inside a section, as a run's note checks (profile_sources.py)
    assert unsourced(data) == [], unsourced(data)
    assert load_profile(path).unsourced == ()
    return sources


def test_the_run_ends_with_a_summary_of_what_it_measured(two_rank_profile):
    """After `wrote P`, rank 0 says what it timed, each kind's best rate as the profile's rows
    hold it (collectives as nccl-tests' busbw), what it kept from the fallback profile instead of
    measuring (one node: the NICs), and the command that simulates with the profile."""
    from calibrate.summary import kept_fields

    lines = two_rank_profile.with_name("p.stderr").read_text().splitlines()
    summary = lines[lines.index(f"wrote {two_rank_profile}") + 1 :]
    prof = yaml.safe_load(two_rank_profile.read_text())
    measured = prof["measured"]
    assert summary[0].startswith("calibrate: ") and "2 ranks on 1 node (gloo)" in summary[0]

    def line(kind: str) -> str:
        return next(ln for ln in summary if ln.split() and ln.split()[0] == kind)

    bf16 = max((r for r in measured["gemm"] if r["dtype"] == "bf16"), key=lambda r: r["tflops"])
    assert f"bf16 {bf16['tflops']:.3g} TFLOP/s ({bf16['m']}x{bf16['n']}x{bf16['k']})" in line("GEMMs")
    rows = measured["collectives"]
    for op in OPS:
        best = max(r["busbw_GBps"] for r in rows if r["op"] == op)
        assert f"{op} {best:.3g}" in line("collectives")
    assert f"{len(rows)} timed, world (2 ranks on 1 node)" in line("collectives")
    # the measured spread of two ranks' rates, |a - b| / (a + b), before any cap to the schema's range
    a, b = measured["gemm_ranks"]["tflops_per_rank"]
    spread_pct = 100 * abs(a - b) / (a + b)
    assert f"spread between ranks {spread_pct:.1f}%" in line("ranks")
    # gloo on a CPU: the interference rate is shown but not used (collective_sms 0), which a
    # shared machine's 154% 'under all-reduces' left unsaid before
    assert line("ranks").endswith("of its rate alone (not used: a CPU has no SMs to lend, collective_sms 0)")
    assert prof["efficiency"]["collective_sms"] == 0
    kept = kept_fields(prof, None)
    assert "node.nic_gbps" in kept and "node.nvlink_GBps" not in kept  # one node: no NIC timed
    assert summary[-2].startswith("not measured, kept from dgx-h100: ")
    assert summary[-2].endswith("(the profile's sources: section says where each field came from)")
    assert summary[-1] == f"simulate with it: simcluster run SCENARIO --hardware {two_rank_profile}"


def test_every_source_of_a_two_rank_profile_is_true(two_rank_profile):
    sources = _check_sources(two_rank_profile, MEASURED_FIELDS | MEASURED_BY_RANKS)
    data = yaml.safe_load(two_rank_profile.read_text())
    assert "gpu.sm_count" not in sources and "efficiency.sustained" not in sources  # not fields
    assert "efficiency.gemm_tile" not in sources  # no SMs: no tiles quantised over them
    # a spread beyond the schema's 20% is written capped, and its source says so
    raw = spread(data["measured"]["gemm_ranks"]["tflops_per_rank"])
    capped = f"measured {raw:.4g}, written as 0.2 (capped at the schema's 0.2" in sources["gpu.speed_spread"]
    assert capped == (raw > 0.2)


def test_every_source_of_a_one_process_profile_is_true(tmp_path):
    out = tmp_path / "one.yaml"
    proc = subprocess.run(
        [sys.executable] + CAL + ["--out", str(out)], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sources = _check_sources(out, MEASURED_FIELDS)
    # one process sees neither another GPU nor a link: those are the fallback's, and say so
    for key in MEASURED_BY_RANKS:
        assert sources[key] == "not measured; copied from dgx-h100", key


def test_speed_spread_is_the_spread_of_every_ranks_gemm_rate(two_rank_profile):
    prof = load_profile(two_rank_profile)
    ranks = prof.measured["gemm_ranks"]
    rates = ranks["tflops_per_rank"]
    assert len(rates) == 2 and ranks["dtype"] == "bf16"
    biggest = max(
        (r for r in prof.measured["gemm"] if r["dtype"] == "bf16"), key=lambda r: r["m"] * r["n"] * r["k"]
    )
    assert (ranks["m"], ranks["n"], ranks["k"]) == (biggest["m"], biggest["n"], biggest["k"])
    # timed again by both ranks at once, not each rank's sweep row from another moment
    assert all(r > 0 for r in rates)
    assert prof.gpu.speed_spread == pytest.approx(min(abs(rates[0] - rates[1]) / sum(rates), 0.2))
    assert "2 ranks" in prof.sources["gpu.speed_spread"]


def test_gemm_under_in_flight_all_reduces_was_timed_on_both_ranks(two_rank_profile):
    prof = load_profile(two_rank_profile)
    row = prof.measured["interference"]
    assert row["op"] == "all_reduce" and row["gpus"] == 2 and row["dtype"] == "fp32"
    assert row["bytes"] == 1 << 20  # the quick run's size, whole fp32 elements over 2 ranks
    biggest = max(prof.measured["gemm"], key=lambda r: r["m"] * r["n"] * r["k"])
    assert (row["m"], row["n"], row["k"]) == (biggest["m"], biggest["n"], biggest["k"])
    assert row["gemm_alone_s"] > 0 and row["gemm_overlapped_s"] > 0 and row["collective_s"] > 0
    assert row["rate"] == pytest.approx(row["gemm_alone_s"] / row["gemm_overlapped_s"], rel=1e-12)
    assert row["collectives_in_flight"] >= 1
    # a CPU has no SMs: the rate is kept as a record, the rule's SMs stay 0
    assert prof.efficiency.collective_sms == 0


def test_measured_attention_is_the_profiles_kernel_by_sequence_length(two_rank_profile):
    prof = load_profile(two_rank_profile)
    assert prof.efficiency.attention_kernel == "measured"
    assert set(prof.efficiency.attention_kernels) == {"measured"}  # no H100 curves on a CPU
    rows = prof.measured["attention"]
    for curve in prof.efficiency.attention_kernels["measured"]:
        for seq, tflops in curve.fwd_tflops:
            timed = [r["fwd_tflops"] for r in rows if r["seq"] == seq and r["head_dim"] == curve.head_dim]
            assert tflops == pytest.approx(max(timed), rel=1e-9)
    assert {seq for c in prof.attention_curves(None) for seq, _ in c.fwd_tflops} == {r["seq"] for r in rows}


def test_collectives_follow_nccl_tests_formulas(two_rank_profile):
    rows = load_profile(two_rank_profile).measured["collectives"]
    ops = {r["op"] for r in rows}
    assert ops == set(OPS)  # every op the simulator knows (listed in test_calibrate_busbw)
    for r in rows:
        assert r["scope"] == "world" and r["gpus"] == 2 and r["nodes"] == 1
        assert r["busbw_GBps"] == pytest.approx(busbw(r["op"], r["bytes"], r["time_s"], 2) / 1e9)
        assert r["algbw_GBps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
    best_all_reduce = max(r["busbw_GBps"] for r in rows if r["op"] == "all_reduce")
    prof = load_profile(two_rank_profile)
    assert prof.node.nvlink_GBps == pytest.approx(best_all_reduce)


def test_simulating_with_the_cpu_profile_is_slower(two_rank_profile):
    import simcluster
    from simcluster.scenario import load_scenario, parse_set

    # Ideal network: the flow-level network is slow to simulate on a 1 GB/s "NVLink" (noted for
    # the lead); compute alone shows what the profile implies.
    scenario = load_scenario("llama3-8b-8xh100", parse_set(["cluster.network=ideal"]))
    cpu = simcluster.simulate(scenario, hardware=str(two_rank_profile)).summary["step_time_s"]
    h100 = simcluster.simulate(scenario, hardware="dgx-h100").summary["step_time_s"]
    assert cpu > 100 * h100


def test_the_run_table_shows_a_cpus_rate_not_zero(two_rank_profile, tmp_path, capsys):
    """A calibrated CPU runs at hundredths of a TFLOP/s; the run table printed 0.0 for it."""
    from simcluster.cli import main as simcluster_main

    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(
        "model: {layers: 2, hidden: 256, heads: 4, vocab: 1024}\n"
        f"cluster: {{hardware: {two_rank_profile}, gpus: 2}}\n"
        "parallel: {tp: 1, pp: 1}\n"
        "training: {seq_len: 256, micro_batch: 1, global_batch: 2, precision: fp32}\n"
    )
    assert simcluster_main(["run", str(scenario), "--json"]) == 0
    tflops = json.loads(capsys.readouterr().out)["model_tflops_per_gpu"]
    assert 0 < tflops < 1
    assert simcluster_main(["run", str(scenario)]) == 0
    printed = capsys.readouterr()
    row = next(line for line in printed.out.splitlines() if "model TFLOP/s" in line)
    assert f"{tflops:.3g}" in row
    # the profile came from calibrate --quick (its provenance says so): a smoke test, said as such
    assert load_profile(two_rank_profile).provenance["quick"] is True
    assert "measured by calibrate --quick, a check that calibration runs, not a calibration" in printed.err


def test_the_host_side_of_an_offloaded_optimizer_was_measured(two_rank_profile):
    """calibrate/hostlink.py: the slower direction of a device <-> pinned host copy, and one
    rank's CPU AdamW step (7 x 4 B per fp32 parameter, membw's adam row) times the ranks per
    node, each written with its source; a scenario can then offload its optimizer."""
    import simcluster
    from simcluster.scenario import load_scenario, parse_set

    prof = load_profile(two_rank_profile)
    link, update = prof.measured["host_link"], prof.measured["host_update"]
    slower = min(link["d2h_bytes_per_s"], link["h2d_bytes_per_s"])
    assert prof.node.host_link_GBps * 1e9 == pytest.approx(slower, rel=1e-12)
    assert update["bytes"] == 7 * 4 * (link["bytes"] // 4)
    assert prof.node.host_memory_GBps * 1e9 == pytest.approx(update["bytes_per_s"] * 2, rel=1e-12)
    assert "calibrate" in prof.sources["node.host_link_GBps"]
    assert "calibrate" in prof.sources["node.host_memory_GBps"]
    # the node's host memory, which the offloads fill, is this host's MemTotal, not a DGX's 2 TiB
    from calibrate.provenance import host_memory_bytes

    assert prof.node.host_memory_gib == host_memory_bytes() / 2**30
    assert "MemTotal" in prof.sources["node.host_memory_gib"]
    scenario = load_scenario(
        "llama3-8b-8xh100", parse_set(["cluster.network=ideal", "training.optimizer_offload=1"])
    )
    events = simcluster.simulate(scenario, hardware=str(two_rank_profile)).events
    assert (events["name"] == "optimizer_offload").any()


def test_a_burst_fp8_curve_copied_from_the_base_takes_its_sustained_share(tmp_path):
    """dgx-b200's FP8 curve is XLA's burst table at efficiency.sustained 0.853 (no
    sustained_fp8): a calibration that times BF16 only bakes that share into the FP8 curve it
    copies, since the measured BF16 curve drops the share field."""
    out = tmp_path / "b.yaml"
    proc = subprocess.run(
        [sys.executable] + CAL + ["--base", "dgx-b200", "--shapes", "96,80,64", "--out", str(out)],
        env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    prof, base = load_profile(out).efficiency, load_profile("dgx-b200").efficiency
    assert base.sustained == pytest.approx(0.853) and base.sustained_fp8 is None
    assert prof.sustained == 1.0
    assert prof.gemm_fp8[-1][1] == pytest.approx(base.gemm_fp8[-1][1] * base.sustained)
    assert "share 0.853 (efficiency.sustained," in load_profile(out).sources["efficiency.gemm_fp8"]


def test_single_process_kernels_only_from_a_base(tmp_path):
    out = tmp_path / "k.yaml"
    proc = subprocess.run(
        [sys.executable] + CAL + ["--base", "dgx-h100", "--shapes", "96,80,64", "--out", str(out)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    prof = load_profile(out)
    assert prof.name == "dgx-h100-calibrated"
    assert prof.gpu.peak_tflops["bf16"] == 989.4  # the base's datasheet peak stays
    assert max(f for _, f in prof.efficiency.gemm) < 0.01  # a CPU reaches < 1% of it
    # the measured curve is a heat-soaked (sustained) rate: the base's sustained share no longer
    # scales it, and the FP8 curve it still copies keeps the FP8 share it had (the H100's is
    # Azure's table timed after 10,000 warm-up calls, sustained_fp8 1: copied as it is)
    base = load_profile("dgx-h100").efficiency
    assert prof.efficiency.sustained == 1.0 and prof.efficiency.sustained_fp8 is None
    assert base.sustained_fp8 == 1.0
    assert prof.efficiency.gemm_fp8 == base.gemm_fp8
    # the base's GEMM shape table (an H100's, against the H100 size curve) gives way to this
    # machine's own cube
    assert base.gemm_shapes == "xla-sm90"
    assert isinstance(prof.efficiency.gemm_shapes, dict) and prof.efficiency.gemm_shapes["grid"] == [32, 64, 128]
    # no collective was timed: the base's NVLink figures and its nccl-tests table stay
    assert prof.measured["collectives"] == load_profile("dgx-h100").measured["collectives"]
    assert prof.node.nvlink_GBps == 450
    assert any((r["m"], r["n"], r["k"]) == (96, 80, 64) for r in prof.measured["gemm"])
    # one process cannot see a spread between GPUs: the base's stays
    assert "gemm_ranks" not in prof.measured and prof.gpu.speed_spread == 0.011
    # the base's sources stay for what this run did not measure (its datasheet NVLink rate),
    # the base's sustained share goes with the field, and the measured fields say so
    sources = _check_sources(out, MEASURED_FIELDS - {"gpu.peak_tflops", "gpu.hbm_tbps"})
    base = load_profile("dgx-h100").sources
    assert sources["node.nvlink_GBps"] == base["node.nvlink_GBps"]
    assert sources["efficiency.gemm_tile"] == base["efficiency.gemm_tile"]  # an H100's SMs stay
    assert "efficiency.sustained" not in sources and "efficiency.sustained_fp8" not in sources
    # ... and says so, with how to time them
    assert "one process times no collectives" in proc.stderr
    assert "torchrun --nproc-per-node N -m calibrate" in proc.stderr
    # the closing summary: one process, and the base's NVLink rate among what it kept
    from calibrate.summary import kept_fields

    assert ", one process (gloo), " in proc.stderr
    # its best bf16 GEMM as a share of the H100 datasheet peak the profile keeps (989.4 TFLOP/s)
    best = max(r["tflops"] for r in prof.measured["gemm"] if r["dtype"] == "bf16")
    assert f"{100 * best / 989.4:.3g}% of the profile's 989 peak)" in proc.stderr
    kept = kept_fields(yaml.safe_load(out.read_text()), "dgx-h100")
    assert "node.nvlink_GBps" in kept and "gpu.peak_tflops" in kept and "efficiency.gemm" not in kept


def test_bad_arguments_are_one_line_errors(tmp_path):
    for extra, needle in (
        (["--shapes", "1,2"], "error: --shapes: '1,2' is not M,N,K"),
        (["--base", "dgx-h900"], "error: --base: unknown hardware 'dgx-h900'"),
        (["--scenario", "s.yaml"], "error: scenario: file 's.yaml' not found"),
    ):
        proc = subprocess.run(
            [sys.executable] + CAL + extra + ["--out", str(tmp_path / "x.yaml")],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2 and proc.stderr.startswith(needle), proc.stderr
        assert proc.stderr.count("\n") == 1


def _rank_pid(parent: int, local_rank: int, deadline: float) -> int:
    """The worker process torchrun started for ``local_rank`` (read from /proc)."""
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{parent}/task").iterdir():
            for child in (task / "children").read_text().split():
                environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
                if f"LOCAL_RANK={local_rank}".encode() in environ:
                    return int(child)
        time.sleep(0.05)
    raise AssertionError("worker not found")


def test_a_rank_that_aborts_as_it_exits_cannot_cost_the_profile(tmp_path):
    """A gloo rank's exit now and then aborted in its C++ teardown ('terminate called without an
    active exception'), and torchrun then stops every other rank: rank 1 aborting right after
    it tears its process group down (a sitecustomize hook) must find the profile written."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '1':\n"
        "    import torch.distributed as dist\n"
        "    _destroy = dist.destroy_process_group\n"
        "    def _and_abort(*args, **kwargs):\n"
        "        _destroy(*args, **kwargs)\n"
        "        os.abort()\n"
        "    dist.destroy_process_group = _and_abort\n"
    )
    out = tmp_path / "p.yaml"
    env = dict(_env(), PYTHONPATH=f"{hook}{os.pathsep}{ROOT}")
    # fp32 only: what is tested is the teardown, and the bf16 grid would triple the run
    args = TORCHRUN + CAL + ["--dtypes", "fp32", "--out", str(out)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode != 0 and "exitcode  : -6" in proc.stderr  # torchrun reports the abort
    assert load_profile(out).measured["gemm"], proc.stderr[-2000:]  # written whole before it
    assert not out.with_name("p.partial.yaml").exists()


def _run_until_partial(tmp_path: Path, timeout_s: int) -> tuple[subprocess.Popen[str], Path]:
    out = tmp_path / "p.yaml"
    proc = _start(TORCHRUN + CAL + ["--timeout", str(timeout_s), "--out", str(out)])
    partial = out.with_name("p.partial.yaml")
    deadline = time.monotonic() + 60
    # the first partial file comes after the heat soak; wait for one with a GEMM row in it
    while not (partial.exists() and (yaml.safe_load(partial.read_text()) or {}).get("measured", {}).get("gemm")):
        assert time.monotonic() < deadline and proc.poll() is None, "no partial file appeared"
        time.sleep(0.05)
    return proc, partial


def _error_lines(stderr: str, rank: int = 0) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"error: rank {rank}")]


@pytest.mark.parametrize("dies", [1, 0])
def test_a_dying_rank_stops_the_run_and_keeps_the_partial_file(tmp_path, dies):
    proc, partial = _run_until_partial(tmp_path, 60)
    os.kill(_rank_pid(proc.pid, dies, time.monotonic() + 10), signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not (tmp_path / "p.yaml").exists()
    survivor = 1 - dies
    lines = _error_lines(err, survivor)
    assert len(lines) == 1, err[-2000:]
    # rank 0 writes the partial file and names it; rank 1 writes none and names none
    assert (str(partial) in lines[0]) == (survivor == 0) and ("partial" in lines[0]) == (survivor == 0)
    doc = yaml.safe_load(partial.read_text())
    assert doc["partial"] is True and doc["measured"]["gemm"]


@pytest.mark.parametrize(
    "sig, code, says",
    [(signal.SIGINT, 130, "interrupted (Ctrl-C) during '"), (signal.SIGTERM, 1, "stopped by signal 15 during '")],
)
def test_a_stopped_run_names_and_records_its_partial_file(tmp_path, sig, code, says):
    out = tmp_path / "p.yaml"
    partial = tmp_path / "p.partial.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "calibrate", "--device", "cpu", "--out", str(out)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal's Ctrl-C finds it: SIGINT not ignored (a background job's would be)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not (partial.exists() and (yaml.safe_load(partial.read_text()) or {}).get("measured", {}).get("gemm")):
        assert time.monotonic() < deadline and proc.poll() is None, "no partial file appeared"
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: rank 0: {says}"), err[-2000:]
    assert lines[0].endswith(f"measurements so far are in {partial}")
    doc = yaml.safe_load(partial.read_text())
    assert doc["partial"] is True and doc["error"].startswith(says) and doc["measured"]["gemm"]
    assert not out.exists()
    # given as hardware, it is named as what it is, with the way to a profile
    res = in_process(simcluster_main)("run", "llama3-8b-8xh100", "--hardware", str(partial))
    assert_one_line_error(res, "--hardware", "is an unfinished calibration", says, f"--out {out})")


def test_a_hung_rank_times_out(tmp_path):
    proc, partial = _run_until_partial(tmp_path, 3)
    victim = _rank_pid(proc.pid, 1, time.monotonic() + 10)
    os.kill(victim, signal.SIGSTOP)  # alive but making no progress
    try:
        rank0 = _rank_pid(proc.pid, 0, time.monotonic() + 10)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{rank0}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    lines = _error_lines(err)
    assert proc.returncode != 0 and len(lines) == 1, err[-2000:]
    assert str(partial) in lines[0] and "during '" in lines[0]
    doc = yaml.safe_load(partial.read_text())
    assert doc["partial"] is True and "during '" in doc["error"]


def test_watchdog_stops_a_step_past_its_deadline():
    code = (
        "import time\n"
        "from calibrate.watchdog import FailureReport, Watchdog\n"
        "w = Watchdog(0.3, FailureReport(5, 'p.partial.yaml'))\n"
        "with w.guard('gemm bf16 8x8x8'):\n"
        "    time.sleep(10)\n"
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 3 and time.monotonic() - start < 5
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(
        "error: rank 5: during 'gemm bf16 8x8x8': did not finish within --timeout 0.3 s"
    )


def test_a_collective_simulated_alone_reproduces_the_measured_busbw(two_rank_profile, capsys):
    import json

    from simcluster.cli import main as simcluster_main

    rows = load_profile(two_rank_profile).measured["collectives"]
    biggest = max((r for r in rows if r["op"] == "all_reduce"), key=lambda r: r["bytes"])
    args = ["collective", "all_reduce", str(biggest["bytes"]), "--gpus", "2", "--json"]
    assert simcluster_main(args + ["--hardware", str(two_rank_profile)]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert simulated["busbw_GBps"] == pytest.approx(biggest["busbw_GBps"], rel=0.05)  # issue 7


def test_a_failure_is_reported_once_whichever_path_notices_it(capsys):
    from calibrate.watchdog import FailureReport

    recorded: list[str] = []
    report = FailureReport(2, "p.partial.yaml", recorded.append)
    report.fail("during 'all_reduce 1 MiB': RuntimeError: timed out")  # backend timeout
    report.fail("during 'all_reduce 1 MiB': did not finish within --timeout 3 s")  # watchdog
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: rank 2: during 'all_reduce 1 MiB'")
    assert recorded == ["during 'all_reduce 1 MiB': RuntimeError: timed out"]


def test_heat_soak_keeps_the_device_busy_for_its_time():
    # back-to-back GEMMs for the given wall time, untimed: the run's measurements then start
    # at the clock the power limit allows (calibrate/soak.py)
    import torch

    from calibrate.shapes import GemmShape

    start = time.perf_counter()
    calls = heat_soak(GemmShape(64, 64, 64), "fp32", torch.device("cpu"), 0.05)
    assert time.perf_counter() - start >= 0.05
    assert calls >= 1
    assert soak_seconds(quick=False) >= 1.0  # the settling takes tens of ms on a B200


def test_one_interrupted_run_does_not_move_a_gemms_time():
    # five runs of the timed calls, one of them preempted (a CPU rank descheduled for 20 ms):
    # the median run is kept, the mean of all calls would be 5x off
    from calibrate.timers import RUNS, robust_time

    seconds = iter([1e-3, 1e-3, 20e-3, 1e-3, 1e-3])
    calls = []

    def timer(fn, iters, warmup, drain=True):
        calls.append((iters, warmup))
        return next(seconds)

    assert robust_time(timer, lambda: None, 100) == 1e-3
    assert calls == [(100 // RUNS, 1)] + [(100 // RUNS, 0)] * (RUNS - 1)
    # too few calls to split: one run
    calls.clear()
    assert robust_time(lambda fn, iters, warmup, drain=True: calls.append(iters) or 2e-3, lambda: None, 3) == 2e-3
    assert calls == [3]


def test_an_out_unwritable_after_measuring_names_the_partial_file(tmp_path):
    # checked before measuring, --out can still fail at the end (the place changed, a full disk):
    # the error then says where the measurements are
    from calibrate.runner import _write_profile

    partial = tmp_path / "p.partial.yaml"
    partial.write_text("partial: true\n")
    taken = tmp_path / "p.yaml"
    taken.mkdir()
    with pytest.raises(UserError) as err:
        _write_profile(taken, partial, {"name": "x"})
    assert err.value.field == "--out" and err.value.message.endswith(f"the measurements are in {partial}")
    assert partial.is_file()


def test_the_reference_gemm_is_the_default_grids_not_a_scenarios(monkeypatch, tmp_path):
    """`--scenario llama3-8b-8xh100` adds the LM head's 8192 x 128256 x 4096 GEMMs (8.6 TFLOP a
    call, minutes on a CPU core); the heat soak, the per-rank spread and the interference run
    time the default grid's largest shape instead (CPU: 2048^3), so a 2 s soak lasts 2 s and
    those figures do not depend on whether a scenario was given."""
    import torch

    from calibrate import cli, runner, soak
    from calibrate.dist import DistContext
    from calibrate.shapes import GemmShape, default_grid

    seen: dict[str, runner.RunConfig] = {}

    def capture(cfg: runner.RunConfig) -> int:
        seen["cfg"] = cfg
        return 0

    monkeypatch.setattr(runner, "run", capture)
    out = tmp_path / "p.yaml"
    assert cli.main(["--device", "cpu", "--scenario", "llama3-8b-8xh100", "--out", str(out)]) == 0
    cfg = seen["cfg"]
    lm_head = GemmShape(8192, 128256, 4096, "fwd")
    assert lm_head in cfg.gemm_shapes and lm_head.flops == pytest.approx(8.6e12, rel=0.01)
    assert cfg.reference == GemmShape(2048, 2048, 2048) == max(default_grid("cpu", False), key=lambda s: s.flops)
    soaked: list[GemmShape] = []
    monkeypatch.setattr(soak, "heat_soak", lambda shape, *args: soaked.append(shape) or 1)
    ctx = DistContext(0, 1, 0, 1, torch.device("cpu"), "gloo", False)
    steps = runner.plan_steps(cfg, ctx)
    assert steps[0].label.startswith("heat soak")
    steps[0].run(runner.Measurements())
    assert soaked == [GemmShape(2048, 2048, 2048)]
    # the progress's time left weighs each GEMM by its FLOPs against the reference's: the LM
    # head is 8.6e12 / 1.7e10 = 501 reference GEMMs, every other measurement one
    head = next(st for st in steps if st.label == "gemm bf16 8192x128256x4096 fwd")
    assert head.cost == pytest.approx(lm_head.flops / cfg.reference.flops) == pytest.approx(501.1, rel=1e-3)
    assert all(st.cost == 1.0 for st in steps if not st.label.startswith("gemm"))


def test_a_long_scenario_gemm_list_is_announced_with_its_least_time():
    """Llama 3 8B's --scenario shapes on a CPU rank at 0.1 TFLOP/s (fp32 with one thread, as
    torchrun's OMP_NUM_THREADS=1 leaves it): the three LM-head GEMMs alone are 3 x 8.6 TFLOP,
    each measured at least 5 times (a warm-up and a first timing, then a warm-up and 2 timed
    calls) in bf16 and fp32: 5 x 2 x 25.8e12 / 1e11 = 2,580 s. The run says so after the soak
    instead of sitting on '0/196' for hours; a short list on a GPU says nothing."""
    from calibrate.shapes import scenario_shapes
    from calibrate.soak import MIN_CALLS_PER_GEMM, extra_gemm_note, extra_gemm_seconds

    shapes = scenario_shapes("llama3-8b-8xh100")
    heads = [s for s in shapes if 128256 in (s.m, s.n, s.k)]
    assert len(heads) == 3 and MIN_CALLS_PER_GEMM == 5
    assert extra_gemm_seconds(heads, 2, 1e11) == pytest.approx(5 * 2 * 3 * 8192 * 128256 * 4096 * 2 / 1e11)
    note = extra_gemm_note(shapes, 2, 1e11)
    assert note is not None and note.startswith(f"note: the {len(shapes)} GEMM shapes of --scenario/--shapes")
    assert "the largest 8.61 TFLOP a call" in note and "0.1 TFLOP/s of the heat soak" in note
    assert extra_gemm_note(shapes, 3, 700e12) is None  # an H100's bf16 rate: under a minute
    assert extra_gemm_note([], 2, 1e11) is None


def test_a_summary_that_fails_leaves_the_written_profile_a_success(monkeypatch, tmp_path, capsys):
    """The digest comes after the profile is on disk: a gap in it prints one note and the run
    still exits 0 with its profile, instead of reporting the finished run as failed."""
    from calibrate import runner
    from calibrate.shapes import default_grid

    real = runner.plan_steps

    def kernels_only(cfg, ctx):  # the GEMMs and memory-bound kernels: enough for a profile, quick
        return [s for s in real(cfg, ctx) if s.label.split()[0] in ("gemm", "memory")]

    def broken(*args, **kwargs):
        raise KeyError("gpu")

    monkeypatch.setattr(runner, "plan_steps", kernels_only)
    monkeypatch.setattr(runner, "summary_lines", broken)
    out = tmp_path / "p.yaml"
    cfg = runner.RunConfig("cpu", True, out, None, 60.0, tuple(default_grid("cpu", True)))
    assert runner.run(cfg) == 0
    assert load_profile(out).measured["gemm"]
    err = capsys.readouterr().err
    assert f"wrote {out}" in err and "note: no summary (KeyError: 'gpu')" in err


def test_a_gloo_run_says_why_it_has_no_cta_sweep(two_rank_profile):
    # the CTA sweep (efficiency.channel_busbw) needs NCCL's communicators: gloo has no CTAs
    err = two_rank_profile.with_name("p.stderr").read_text()
    assert "no CTA sweep (efficiency.channel_busbw): the gloo backend has no CTAs" in err
    assert "channel_busbw" not in yaml.safe_load(two_rank_profile.read_text())["efficiency"]
