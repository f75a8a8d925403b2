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


def test_exposed_all_to_alls_name_the_dispatch_kernels_fastest_measured_sm_count(cli):
    """Qwen3-30B-A3B at ep 8 inside one DGX B200 with DeepEP: its kernels on 48 SMs move
    (646 + 586) / 2 = 616 GB/s, on Megatron-Core's default 20 (348 + 302 + 494 + 420) / 4 = 391
    (deepseek-ai/DeepEP docs/README_Hybrid-EP.md, B200 table), for the table's 14,336-byte tokens:
    1.58x. Its tokens are 4,096 bytes (hidden 2,048 in BF16), and the kernels' fixed work a token
    (the same table's FP8/BF16 dispatch pairs: 188 SM-ns at 48 SMs, (291 + 308) / 2 at 20) weighs
    more on fewer SMs: each rate times x / (f + (1 - f) x), x = 4,096 / 14,336, f = that work / SMs
    over the table's time a token: 2.24x. On 48 already, nothing is said. HybridEP at 8 ranks of
    GB200 gains 1.02x from 32 SMs on the table's tokens ((545.71 + 568.94) / 2 over (550.10 +
    538.44) / 2, below the hint's 1.05) but 1.20x on these (135 and 178 SM-ns a token at 16 and
    32 SMs), the count the Megatron-MoE model zoo's GB200 runs set."""
    x = 4096 / 14336

    def rate(gbps: float, sm_ns: float, sms: int) -> float:
        f = sm_ns / sms / (14336 / gbps)
        return gbps * x / (f + (1 - f) * x)

    gain = rate(616, 188, 48) / rate(391, (291 + 308) / 2, 20)
    b200 = ["--hardware", "dgx-b200", "--set", "moe.dispatcher=deepep"]
    res = cli("run", "qwen3-30b-a3b-16xh100", *b200)
    assert res.code == 0, res.err
    line = next(x for x in res.out.splitlines() if "moe.dispatch_sms" in x)
    assert f"on 48 SMs run at {gain:.2f}x their rate on 20" in line and "--dispatch-sms 20,48" in line
    res = cli("run", "qwen3-30b-a3b-16xh100", *b200, "--set", "moe.dispatch_sms=48")
    assert res.code == 0, res.err
    assert "moe.dispatch_sms;" not in res.out
    g16, g32 = (550.10 + 538.44) / 2, (545.71 + 568.94) / 2
    assert g32 / g16 < 1.05
    res = cli("run", "qwen3-30b-a3b-16xh100", "--hardware", "gb200-nvl72", "--set", "moe.dispatcher=hybridep")
    assert res.code == 0, res.err
    line = next(x for x in res.out.splitlines() if "moe.dispatch_sms" in x)
    assert f"on 32 SMs run at {rate(g32, 178, 32) / rate(g16, 135, 16):.2f}x their rate on 16" in line


def test_the_hints_are_in_the_json_and_summary_json(cli, tmp_path):
    import json

    res = cli("run", "llama3-70b-64xh100", "--set", "training.global_batch=16", "--json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    bubble = summary["bubble_fraction"]
    # 1F1B at p 4, m 8: (p - 1) / (m + p - 1) = 27.3% of the step (Narayanan et al. 2021), a
    # little more as the data-parallel buckets slow the cool-down's last backwards
    assert 3 / 11 <= bubble <= 3 / 11 + 0.02
    assert any(h.startswith(f"pipeline bubble {100 * bubble:.0f}% of the step") for h in summary["speed_hints"])
    res = cli("run", "llama3-8b-8xh100", "--out", str(tmp_path / "o"))
    assert res.code == 0, res.err
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["speed_hints"] == []


@pytest.mark.parametrize(("pp", "m"), [(4, 8), (8, 8), (8, 64), (2, 1)])
def test_zb_h1s_bubble_is_a_third_of_1f1bs_at_equal_passes(pp, m):
    """Qi et al. 2024 (sec. 2.1; sail-sg's schedule table): at T_F = T_B = T_W, 1F1B idles
    (p - 1)/m of the work and ZB-H1 (p - 1)/3m."""
    from simcluster.speed_hints import zb_h1_bubble

    share = zb_h1_bubble(pp, m, 1.0, 1.0, 1.0)
    assert share / (1 - share) == pytest.approx((pp - 1) / (3 * m))
    one_f_one_b = analytic_bubble(pp, m)
    assert one_f_one_b / (1 - one_f_one_b) == pytest.approx((pp - 1) / m)
    # a weight pass as long as the forward and backward together leaves nothing idle
    assert zb_h1_bubble(pp, m, 1.0, 1.0, 2.0) == 0.0


def test_a_1f1b_bubble_names_the_zero_bubble_schedules_that_fit(cli):
    """Llama 3 70B, pp 4 1F1B at 8 microbatches, no framework: ZB-1p, ZB-V and ZB-2p each fit
    and each simulates a shorter step with a smaller bubble than 1F1B's (3/11 = 27% analytic; 28%
    simulated, the DP buckets slowing the cool-down) (ZB-1p's near ZB-H1's (p - 1)(F + B - W)
    from the step's own pass times)."""
    res = cli("run", "llama3-70b-64xh100", "--set", "training.global_batch=16")
    assert res.code == 0, res.err
    line = _hint(res.out, "zero-bubble schedules")
    assert "would fill the 28% pipeline bubble" in line
    assert [part.split(" (")[0] for part in line.split(": ", 1)[1].split("; this step")[0].split("), ")] == [
        "zb-1p", "zbv", "zb-2p",
    ]  # fmt: skip
    zb_h1 = float(line.split("idle ")[1].split("%")[0]) / 100
    command = line.split("(compare: ")[1].rstrip(")")
    assert shlex.split(command) == [
        "simcluster", "sweep", "llama3-70b-64xh100", "--schedule", "1f1b,zb-1p,zbv,zb-2p",
        "--set", "training.global_batch=16",
    ]  # fmt: skip
    import json

    runs = {}
    for schedule in ("1f1b", "zb-1p", "zbv", "zb-2p"):
        out = cli("run", "llama3-70b-64xh100", "--set", "training.global_batch=16", "--set", f"parallel.schedule={schedule}", "--json")
        assert out.code == 0, out.err
        runs[schedule] = json.loads(out.out)
    for schedule in ("zb-1p", "zbv", "zb-2p"):
        assert runs[schedule]["step_time_s"] < runs["1f1b"]["step_time_s"]
        assert runs[schedule]["bubble_fraction"] < runs["1f1b"]["bubble_fraction"]
    assert runs["zb-1p"]["bubble_fraction"] == pytest.approx(zb_h1, abs=0.05)
    per = runs["1f1b"]["compute_per_microbatch_s"]
    from simcluster.speed_hints import zb_h1_bubble

    assert zb_h1 == pytest.approx(zb_h1_bubble(4, 8, per["forward"], per["backward_input"], per["backward_weight"]), abs=0.005)


def test_a_zero_bubble_schedule_that_does_not_fit_is_left_out():
    """At micro-batch 2 the same layout holds 68 GiB under 1F1B: ZB-2p's twice as many
    microbatches in flight need 110 GiB of an H100's 80, ZB-1p and ZB-V stay near 1F1B's."""
    from simcluster.context import build_context
    from simcluster.scenario import load_scenario
    from simcluster.speed_hints import zero_bubble_options

    sc = load_scenario("llama3-70b-64xh100", [("training.global_batch", 32), ("training.micro_batch", 2)])
    options = {option.name: option.peak_bytes for option in zero_bubble_options(build_context(sc))}
    assert list(options) == ["zb-1p", "zbv"]
    assert all(peak < 72 * 2**30 for peak in options.values())


@pytest.mark.parametrize(
    ("framework", "offered"),
    [("megatron-core", None), ("nanotron", None), ("deepspeed", None), ("zero-bubble", "zb-1p")],
)
def test_zero_bubble_schedules_are_offered_where_the_framework_runs_them(cli, framework, offered):
    """Megatron-Core and nanotron run no zero-bubble schedule; DeepSpeed's engine runs
    Megatron-DeepSpeed's ZB-H1 without sequence parallelism only, which this layout has
    (tests/test_zb_h1_ds.py offers it where it runs); sail-sg's fork of Megatron-LM runs ZB-1p,
    ZB-2p and ZB-V."""
    res = cli("run", "llama3-70b-64xh100", "--set", "training.global_batch=16", "--set", f"framework={framework}")
    assert res.code == 0, res.err
    hints = [line for line in res.out.splitlines() if line.startswith("zero-bubble schedules")]
    assert (hints[0].split(": ", 1)[1].split(" (")[0] if hints else None) == offered


def test_torchtitans_interleaved_pipeline_is_offered_pytorchs_zbv(cli):
    """torchtitan's pipelines run torch.distributed.pipelining's schedules, whose zero-bubble V
    is ScheduleZBVZeroBubble (zbv-fixed); swept beside interleaved at the scenario's vpp 2,
    which the V schedule does not take. PyTorch's V schedules refuse compiled stage modules
    (_check_torch_compile_compatibility), and torchtitan's async TP needs them compiled: so the
    scenario as shipped (compiled, async TP) is offered none, and uncompiled it is offered zbv-fixed."""
    shipped = cli("run", "llama3-70b-128xh100-fsdp-tp-pp", "--set", "training.global_batch=32")
    assert shipped.code == 0, shipped.err
    assert not [line for line in shipped.out.splitlines() if line.startswith("zero-bubble schedules")]
    eager = ("--set", "training.elementwise=eager", "--set", "overlap.tp_comm=false")
    res = cli("run", "llama3-70b-128xh100-fsdp-tp-pp", "--set", "training.global_batch=32", *eager)
    assert res.code == 0, res.err
    line = _hint(res.out, "zero-bubble schedules")
    assert ": zbv-fixed (peak " in line and "zb-1p" not in line
    assert "--schedule interleaved,zbv-fixed --vpp 2 " in line
