"""Kineto trace parsing on a real CPU profiler trace, kernel-name classification, compare-trace."""

from __future__ import annotations

import gzip
import json

import pytest

torch = pytest.importorskip("torch")

from calibrate.compare import sim_kind  # noqa: E402
from calibrate.kineto import KINDS, breakdown, classify, load_trace  # noqa: E402
from simcluster.errors import UserError  # noqa: E402


def _profile(tmp_path, body, repeats=2):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            body()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return path


def test_real_cpu_trace_splits_gemm_attention_other(tmp_path):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, generator=gen)
    q = torch.randn(1, 8, 256, 64, generator=gen)
    kv = torch.randn(1, 2, 256, 64, generator=gen)

    def body():
        torch.mm(a, a)
        torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        torch.nn.functional.layer_norm(a, (256,))

    result = load_trace(_profile(tmp_path, body))
    assert result.level == "cpu_op" and result.steps == 1  # no ProfilerStep marks
    assert result.seconds["gemm"] > 0 and result.seconds["attention"] > 0
    assert result.seconds["other"] > 0  # layer_norm is neither
    assert result.seconds["comm"] == 0
    # The kinds partition the traced span (one thread, so no overlap between lanes).
    assert sum(result.seconds[k] for k in KINDS) == pytest.approx(result.span_s, rel=1e-9)


def test_nested_ops_are_counted_once(tmp_path):
    a = torch.ones(128, 128)
    path = _profile(tmp_path, lambda: torch.nn.functional.linear(a, a), repeats=1)
    events = json.loads(path.read_text())["traceEvents"]
    linear = sum(e["dur"] for e in events if e.get("name") == "aten::linear") * 1e-6
    assert any(e.get("name") == "aten::mm" for e in events)  # nested inside aten::linear
    assert load_trace(path).seconds["gemm"] == pytest.approx(linear)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1", "gemm"),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm"),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>",
            "gemm",
        ),
        (
            "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>",
            "attention",
        ),
        ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "attention"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "comm"),
        ("aten::mm", "gemm"),
        ("aten::scaled_dot_product_attention", "attention"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
            None,
        ),
    ],
)
def test_kernel_names(name, kind):
    assert classify(name) == kind


def test_gpu_streams_overlap_and_idle():
    # Hand-made kernel events (us): a GEMM 0-100 and an NCCL kernel 50-150 on two streams,
    # then a gap, then attention 200-260. Busy union = 150 + 60, span 260 -> idle 50.
    ev = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "sm90_xmma_gemm_x",
            "pid": 0,
            "tid": 7,
            "ts": 0,
            "dur": 100,
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_X",
            "pid": 0,
            "tid": 9,
            "ts": 50,
            "dur": 100,
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "flash_fwd_kernel",
            "pid": 0,
            "tid": 7,
            "ts": 200,
            "dur": 60,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 999},
    ]
    got = breakdown(ev)
    assert got.level == "kernel"
    expect = {"gemm": 100e-6, "attention": 60e-6, "comm": 100e-6, "other": 0.0, "idle": 50e-6}
    assert got.seconds == pytest.approx(expect)


def test_a_cpu_traces_gloo_collectives_are_comm_on_their_worker_threads():
    """A gloo all-reduce as PyTorch 2.13's profiler records it under DDP on CPU: the training
    thread's c10d::allreduce_ only queues it (2 us); the work is a 'gloo:all_reduce'
    user_annotation on gloo's worker thread (its AsyncWork profiling title), 200 us, beside the
    next matmul. comm is the collective's time (2 + 200 us), not the queueing alone, and the
    training thread's wait for it (250-302 us) is not idle; other annotations (ProfilerStep#,
    DistributedDataParallel.forward) stay out of the lanes."""
    main, worker = {"pid": 1, "tid": 10}, {"pid": 1, "tid": 12}
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "DistributedDataParallel.forward", **main, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", **main, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", **main, "ts": 100, "dur": 2},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", **worker, "ts": 102, "dur": 200},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", **main, "ts": 150, "dur": 100},
    ]  # fmt: skip
    got = breakdown(ev)
    assert got.level == "cpu_op"
    expect = {"gemm": 200e-6, "attention": 0.0, "comm": 202e-6, "other": 0.0, "idle": 0.0}
    assert got.seconds == pytest.approx(expect)
    assert got.span_s == pytest.approx(302e-6)


def test_profiler_steps_divide_the_totals():
    gemm = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "dur": 40}
    steps = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{i}",
            "ts": 100 * i,
            "dur": 100,
        }
        for i in (3, 4)
    ]
    got = breakdown([gemm | {"ts": 0}, gemm | {"ts": 100}] + steps)
    assert got.steps == 2
    assert got.seconds["gemm"] == pytest.approx(40e-6)  # per step
    assert got.seconds["idle"] == pytest.approx(30e-6)  # 60 us gap over 2 steps


def test_sim_kinds():
    assert sim_kind("all_gather", "dp grad gather") == "comm"
    assert sim_kind("forward", "layer3.attn") == "attention"
    assert sim_kind("backward_weight", "layer3.mlp.fc1") == "gemm"
    assert sim_kind("optimizer", "adam") == "other"


def test_compare_against_the_simulator(tmp_path, capsys):
    from calibrate.cli import main
    from calibrate.compare import simulate_scenario

    sim = simulate_scenario("llama3-8b-8xh100")  # a shipped scenario, by name
    assert set(sim) == set(KINDS)
    assert sim["gemm"] > 0 and sim["attention"] > 0 and sim["comm"] > 0
    a = torch.ones(64, 64)
    trace = _profile(tmp_path, lambda: a @ a, repeats=1)
    assert main(["compare-trace", str(trace), "llama3-8b-8xh100"]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:6]}
    assert float(rows["gemm"][1]) == pytest.approx(sim["gemm"] * 1e3, abs=1e-3)


def test_compare_trace_simulates_on_the_given_profile_with_the_given_changes(tmp_path, capsys):
    """--hardware and --set as `simcluster run` takes them: a trace of measure-step's DDP loop
    is compared with the scenario under framework pytorch-ddp, as measure-step simulates it,
    and the last line says what was simulated."""
    from calibrate.cli import main
    from calibrate.compare import simulate_scenario

    a = torch.ones(64, 64)
    trace = _profile(tmp_path, lambda: a @ a, repeats=1)
    changes = ["--set", "framework=pytorch-ddp", "--set", "parallel.zero=0", "--hardware", "dgx-a100"]
    assert main(["compare-trace", str(trace), "llama3-8b-8xh100", *changes]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "(simulated: llama3-8b-8xh100, dp8 tp1 pp1 1f1b on dgx-a100, framework pytorch-ddp)"
    sim = simulate_scenario("llama3-8b-8xh100", ["framework=pytorch-ddp", "parallel.zero=0"], "dgx-a100")
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:6]}
    assert float(rows["gemm"][1]) == pytest.approx(sim["gemm"] * 1e3, abs=1e-3)
    assert sim["gemm"] != pytest.approx(simulate_scenario("llama3-8b-8xh100")["gemm"], rel=0.05)


def test_compare_trace_command_shows_the_measured_side(tmp_path, capsys):
    from calibrate.cli import main

    a = torch.ones(64, 64)
    trace = _profile(tmp_path, lambda: a @ a, repeats=1)
    status = main(["compare-trace", str(trace), "no-such-scenario"])
    out, err = capsys.readouterr()
    assert out.splitlines()[0].split() == ["kind", "measured", "ms", "simulated", "ms", "sim/meas"]
    assert [line.split()[0] for line in out.splitlines()[1:6]] == list(KINDS)
    assert status == 2 and err.count("\n") == 1  # a bad scenario: one line after the table


def test_malformed_trace_is_a_one_line_error(tmp_path, capsys):
    from calibrate.cli import main

    bad = tmp_path / "t.json"
    bad.write_text('{"traceEvents": [\n{"ph": "X",,}]}')
    assert main(["compare-trace", str(bad), "s.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}:2: invalid JSON" in err
    assert "give a PyTorch profiler trace" in err  # the fix, not only the parser's complaint


def test_simulated_seconds_of_one_rank():
    import pandas as pd

    from calibrate.compare import simulated_seconds

    # Rank 0: attention 0-2 ms, an MLP GEMM 2-5 ms overlapping a DP reduce-scatter 4-6 ms,
    # nothing 6-7 ms, optimizer 7-8 ms. Rank 1's events must be ignored.
    rows = [
        (0, "forward", "layer0.attn", 0.000, 0.002),
        (0, "forward", "layer0.mlp.fc1", 0.002, 0.005),
        (0, "reduce_scatter", "dp grads", 0.004, 0.006),
        (0, "optimizer", "adam", 0.007, 0.008),
        (1, "forward", "layer0.attn", 0.0, 1.0),
    ]
    events = pd.DataFrame(rows, columns=["rank", "kind", "name", "start_s", "end_s"])
    got = simulated_seconds(events)
    expect = {"gemm": 0.003, "attention": 0.002, "comm": 0.002, "other": 0.001, "idle": 0.001}
    assert got == pytest.approx(expect)


def test_simulated_compute_is_split_as_the_engine_splits_it():
    """With the stage's time breakdown, a block's GEMM and memory-bound time are apart: an
    MLP block of 3 ms that the engine split into 2 ms of GEMMs and 1 ms memory-bound reads as
    gemm 2 ms and other 1 ms, not gemm 3 ms; communication still comes from the events."""
    import pandas as pd

    from calibrate.compare import simulated_seconds

    rows = [
        (0, "forward", "layer0.mlp", 0.000, 0.003),
        (0, "all_reduce", "dp grads", 0.002, 0.005),
    ]
    events = pd.DataFrame(rows, columns=["rank", "kind", "name", "start_s", "end_s"])
    compute = {"gemm": 0.002, "attention": 0.0, "memory": 0.001, "optimizer": 0.0,
               "comm_dp": 0.002, "idle": 0.0}  # fmt: skip
    got = simulated_seconds(events, compute=compute)
    assert got == pytest.approx({"gemm": 0.002, "attention": 0.0, "comm": 0.003, "other": 0.001, "idle": 0.0})


def test_a_gzipped_trace_from_tensorboard_trace_handler_reads_as_the_plain_one(tmp_path):
    """torch.profiler.tensorboard_trace_handler(use_gzip=True) saves '*.pt.trace.json.gz', the
    trace as a training loop's profiler schedule writes it; it breaks down as the same trace
    exported uncompressed, and a cut-off one is a one-line error."""
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    a = torch.ones(128, 128)
    handler = tensorboard_trace_handler(str(tmp_path / "tb"), use_gzip=True)
    with profile(activities=[ProfilerActivity.CPU], on_trace_ready=handler):
        for _ in range(3):
            a @ a
    [packed] = (tmp_path / "tb").glob("*.pt.trace.json.gz")
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    assert load_trace(packed) == load_trace(plain)
    assert load_trace(packed).seconds["gemm"] > 0
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(packed.read_bytes()[:200])
    with pytest.raises(UserError, match="is not a whole gzipped text file"):
        load_trace(cut)
