"""Megatron-DeepSpeed's ZB-H1 (``zb-h1-ds``): its ZeroBubbleH1Pipeline on DeepSpeed's engine
(microsoft/Megatron-DeepSpeed, megatron/core/pipeline_parallel/deepspeed_zbh1_schedule.py),
with the engine's blocking sends and receives in that schedule's own order."""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.importers import ImportOptions, import_config
from simcluster.scenario import scenario_from_dict
from simcluster.schedules.check import bubble_fraction
from tests.schedule_helpers import run


def _names(ops) -> str:
    return " ".join(f"{op.kind}{op.microbatch}" for op in ops)


#: steps() at p 4, m 8, by hand. Stage s runs p-s-1 forwards (F section), s forwards each with
#: a backward-only pass (FB section), whole backwards until the last forward, whose backward is
#: split and followed by the oldest queued weight pass (FBW section), then a backward-only and
#: a weight pass per step (BW section) and the queue's rest (W section); the first stage never
#: splits. With enable_zbh1_exact_semantics the FBW section runs BackwardOnlyPass, SendGrad,
#: WeightPass on every stage but the first, so the weight pass of microbatch i - s follows the
#: backward of microbatch i (the paper's ZB-H1); stage 0 runs as without it
BY_HAND = {
    "zb-h1-ds": [
        "F0 F1 F2 F3 BW0 F4 BW1 F5 BW2 F6 BW3 F7 BW4 BW5 BW6 BW7",
        "F0 F1 F2 B0 F3 BW1 F4 BW2 F5 BW3 F6 BW4 F7 B5 W0 B6 W5 B7 W6 W7",
        "F0 F1 B0 F2 B1 F3 BW2 F4 BW3 F5 BW4 F6 BW5 F7 B6 W0 B7 W1 W6 W7",
        "F0 B0 F1 B1 F2 B2 F3 BW3 F4 BW4 F5 BW5 F6 BW6 F7 B7 W0 W1 W2 W7",
    ],
    "zb-h1-ds-exact": [
        "F0 F1 F2 F3 BW0 F4 BW1 F5 BW2 F6 BW3 F7 BW4 BW5 BW6 BW7",
        "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7",
        "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7",
        "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7",
    ],
}


@pytest.mark.parametrize("schedule", sorted(BY_HAND))
def test_each_stage_runs_the_steps_zero_bubble_h1_pipeline_issues(schedule):
    ops, _ = run(schedule, 4, 8)
    assert [_names(stage) for stage in ops] == BY_HAND[schedule]


def test_the_last_stage_applies_weight_gradients_in_the_order_the_tutorial_gives():
    """Megatron-DeepSpeed examples_deepspeed/zero_bubble_pp/README.md: the default variation
    "changes the ordering of applying weight update of different microbatches (E.g. for
    Device 4 [...] 4->5->6->7->1->2->3->8)" (p 4, m 8); exact semantics keep 1F1B's order."""
    for schedule, order in (("zb-h1-ds", [4, 5, 6, 7, 1, 2, 3, 8]), ("zb-h1-ds-exact", list(range(1, 9)))):
        ops, _ = run(schedule, 4, 8)
        assert [op.microbatch + 1 for op in ops[3] if op.kind in ("W", "BW")] == order


@pytest.mark.parametrize("schedule", ["zb-h1-ds", "zb-h1-ds-exact"])
@pytest.mark.parametrize(("p", "m"), [(4, 8), (6, 12), (8, 16), (4, 13)])
@pytest.mark.parametrize(("f", "b", "w"), [(1.0, 1.0, 1.0), (1.0, 1.3, 0.7)])
def test_it_idles_as_zb_h1(schedule, p, m, f, b, w):
    """Qi et al. 2024 sec. 2.1: ZB-H1 idles (p-1)(F+B-W) beside m(F+B+W) of work, a third of
    1F1B's (p-1)(F+B+W) at equal passes; DeepSpeed's order reaches it with fewer splits."""
    _, timeline = run(schedule, p, m, t_f=f, t_b=b, t_w=w)
    idle = (p - 1) * (f + b - w)
    assert bubble_fraction(timeline) == pytest.approx(idle / (m * (f + b + w) + idle), rel=1e-9)


def test_fewer_microbatches_than_stages_are_refused():
    with pytest.raises(UserError) as err:
        run("zb-h1-ds", 4, 3)
    assert "needs at least 4 microbatches" in str(err.value)


def _scenario(p: int, m: int, schedule: str, p2p: str = "serial", framework: str | None = None):
    doc = {
        "model": {"name": "t", "layers": 2 * p, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 1024},
        # one GPU per node: each stage boundary crosses the network
        "cluster": {"hardware": "dgx-a100", "gpus": p, "gpus_per_node": 1},
        "parallel": {"tp": 1, "pp": p, "schedule": schedule},
        "overlap": {"pp_comm": False, "pp_p2p": p2p, "dp_grad_reduce": False},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": m, "precision": "bf16", "recompute": "none"},
    }
    if framework:
        doc["framework"] = framework
    return scenario_from_dict(doc)


@pytest.mark.parametrize(("p", "m"), [(2, 2), (2, 5), (3, 3), (3, 7), (4, 4), (4, 9)])
def test_blocking_p2p_in_its_order_finishes_and_idles_less_than_1f1b(p, m):
    """Every blocking send meets its receive (no deadlock at m = p or beyond); both engines pay
    the same blocking transfers, and ZB-H1's cool-down weight passes fill what 1F1B idles."""
    zb = simulate(build_context(_scenario(p, m, "zb-h1-ds"))).summary
    one = simulate(build_context(_scenario(p, m, "1f1b"))).summary
    assert 0 < zb["bubble_fraction"] < one["bubble_fraction"]
    assert zb["step_time_s"] < one["step_time_s"]
    batched = simulate(build_context(_scenario(p, m, "zb-h1-ds", p2p="batched"))).summary
    assert batched["step_time_s"] <= zb["step_time_s"]


def test_a_step_receives_its_gradient_before_it_sends_its_forwards_activation():
    """A FB or FBW step of stage s is [RecvActivation f, ForwardPass, RecvGrad b, SendActivation
    f, backward b, SendGrad b], f = b + p - s - 1: stage 1's activation f goes out the moment
    stage 2's gradient b has arrived. TrainSchedule's order (the activation sent before the
    gradient is received) would send it two transfers earlier."""
    events = simulate(build_context(_scenario(4, 8, "zb-h1-ds"))).events
    sends = events[events["kind"] == "send"]

    def at(rank: int, name: str, mb: int, column: str) -> float:
        row = sends[(sends["rank"] == rank) & (sends["name"] == name) & (sends["microbatch"] == mb)]
        return float(row[column].iloc[0])

    for b in range(6):
        assert at(1, "activation", b + 2, "start_s") == at(2, "gradient", b, "end_s")


def test_deepspeed_runs_it_without_sequence_parallelism():
    build_context(_scenario(4, 8, "zb-h1-ds", framework="deepspeed"))
    sc = scenario_from_dict({
        "framework": "deepspeed", "model": {"preset": "llama3-8b"}, "cluster": {"gpus": 16},
        "parallel": {"tp": 2, "pp": 4, "schedule": "zb-h1-ds", "sequence_parallel": True},
        "training": {"seq_len": 4096, "global_batch": 32},
    })  # fmt: skip
    with pytest.raises(UserError) as err:
        build_context(sc)
    assert err.value.field == "parallel.sequence_parallel"
    assert "(arguments.py asserts it)" in str(err.value) and "\n" not in str(err.value)


def test_megatron_core_does_not_run_it_and_the_error_names_deepspeed():
    with pytest.raises(UserError) as err:
        build_context(_scenario(4, 8, "zb-h1-ds", p2p="batched", framework="megatron-core"))
    assert "framework megatron-core does not run schedule 'zb-h1-ds'" in str(err.value)
    assert "framework deepspeed" in str(err.value)


def test_the_zero_bubble_hint_offers_it_under_deepspeed():
    """DeepSpeed's pipeline engine runs no other zero-bubble schedule; sail-sg's fork and a
    scenario without a framework are offered ZB-1p, for which it stands in."""
    from simcluster.speed_hints import zero_bubble_options

    names = [option.name for option in zero_bubble_options(build_context(_scenario(4, 8, "1f1b", framework="deepspeed")))]
    assert names == ["zb-h1-ds"]
    batched = _scenario(4, 8, "1f1b", p2p="batched")
    assert "zb-h1-ds" not in [option.name for option in zero_bubble_options(build_context(batched))]


def test_with_sequence_parallelism_the_hint_offers_it_with_sp_off(cli, tmp_path):
    """Megatron-DeepSpeed runs ZB-H1 only without sequence parallelism (arguments.py asserts
    it): under SP the hint offers it with SP off, priced so, and sweeps both settings."""
    from simcluster.speed_hints import zero_bubble_options

    data = {
        "model": {"name": "t", "layers": 8, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 1024},
        "cluster": {"hardware": "dgx-a100", "gpus": 8, "gpus_per_node": 2},
        "parallel": {"tp": 2, "pp": 4, "schedule": "1f1b", "sequence_parallel": True},
        "overlap": {"pp_comm": False, "pp_p2p": "serial", "dp_grad_reduce": False},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "precision": "bf16", "recompute": "none"},
        "framework": "deepspeed",
    }
    options = zero_bubble_options(build_context(scenario_from_dict(data)))
    assert [(o.name, o.without_sp) for o in options] == [("zb-h1-ds", True)]
    said = _run_said(cli, tmp_path, data)
    assert "zb-h1-ds (sequence parallelism off, as deepspeed runs it; peak" in said
    assert "--schedule 1f1b,zb-h1-ds --sequence-parallel true,false" in said


def _args_file(tmp_path, flags: str):
    path = tmp_path / "args.txt"
    path.write_text(
        "--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
        "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 16 "
        f"--pipeline-model-parallel-size 4 --bf16 {flags}\n"
    )
    return path


def test_the_megatron_importer_reads_enable_zbh1_pipeline(tmp_path):
    out = import_config(
        "megatron", _args_file(tmp_path, "--deepspeed --enable-zbh1-pipeline"), ImportOptions(cluster="dgx-a100", nodes=1)
    )
    assert out.scenario["framework"] == "deepspeed"
    assert out.scenario["parallel"]["schedule"] == "zb-h1-ds"
    with pytest.raises(UserError) as err:
        import_config("megatron", _args_file(tmp_path, "--enable-zbh1-pipeline"), ImportOptions(cluster="dgx-a100", nodes=1))
    assert err.value.field == "--enable-zbh1-pipeline" and "add --deepspeed" in str(err.value)
    sp = "--deepspeed --enable-zbh1-pipeline --tensor-model-parallel-size 2 --sequence-parallel"
    with pytest.raises(UserError) as err:
        import_config("megatron", _args_file(tmp_path, sp), ImportOptions(cluster="dgx-a100", nodes=1))
    assert "without --sequence-parallel" in str(err.value)


def test_the_importer_reads_exact_semantics_and_arguments_py_s_assertion(tmp_path):
    """Megatron-DeepSpeed's arguments.py: ``--enable-zbh1-exact-semantics`` asserts
    ``--enable-zbh1-pipeline`` ("Exact semantics require ZBH1 pipeline enabled")."""
    options = ImportOptions(cluster="dgx-a100", nodes=1)
    out = import_config("megatron", _args_file(tmp_path, "--deepspeed --enable-zbh1-pipeline --enable-zbh1-exact-semantics"), options)
    assert out.scenario["parallel"]["schedule"] == "zb-h1-ds-exact"
    assert not any("exact-semantics" in line for line in out.skipped)
    with pytest.raises(UserError) as err:
        import_config("megatron", _args_file(tmp_path, "--deepspeed --enable-zbh1-exact-semantics"), options)
    assert err.value.field == "--enable-zbh1-exact-semantics" and "add --enable-zbh1-pipeline" in str(err.value)


@pytest.mark.parametrize(("p", "m"), [(2, 2), (2, 5), (3, 3), (3, 7), (4, 4), (4, 9)])
def test_exact_semantics_on_blocking_p2p_put_a_weight_pass_on_every_steady_exchange(p, m):
    """A steady step of stage s > 0 is [RecvActivation, F, BackwardOnlyPass, SendGrad,
    WeightPass] with exact semantics. Its blocking gradient send completes when stage s - 1
    posts the receive, after that stage's forward; the weight pass then runs while stage s - 1
    waits in its blocking activation send. Each steady exchange so carries one W more than the
    default order's [F, BackwardPass, SendGrad], and with more microbatches than stages the step
    is slower than the default order's; at m = p there is no such step and the orders are one.
    With batched (non-blocking) transfers the weight pass no longer sits between the two and
    the orders come within 1%. Every blocking send meets its receive."""
    exact = simulate(build_context(_scenario(p, m, "zb-h1-ds-exact"))).summary["step_time_s"]
    default = simulate(build_context(_scenario(p, m, "zb-h1-ds"))).summary["step_time_s"]
    if m == p:
        assert exact == pytest.approx(default, rel=1e-12)
    else:
        assert exact > default * 1.05
    batched = [
        simulate(build_context(_scenario(p, m, name, p2p="batched"))).summary["step_time_s"]
        for name in ("zb-h1-ds", "zb-h1-ds-exact")
    ]  # fmt: skip
    assert batched[1] == pytest.approx(batched[0], rel=0.01)
    assert batched[1] <= exact


def test_run_says_what_exact_semantics_cost_under_blocking_transfers(cli, tmp_path):
    """The hint names the bubble against ZB-H1's analytic (p-1)(F+B-W) share and the sweep
    that compares the two orders; the default order's run says nothing of it."""

    doc = {
        "model": {"name": "t", "layers": 8, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 1024},
        "cluster": {"hardware": "dgx-a100", "gpus": 4, "gpus_per_node": 1},
        "parallel": {"tp": 1, "pp": 4, "schedule": "zb-h1-ds-exact"},
        "overlap": {"pp_comm": False, "pp_p2p": "serial", "dp_grad_reduce": False},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "precision": "bf16", "recompute": "none"},
        "framework": "deepspeed",
    }
    said = _run_said(cli, tmp_path, doc)
    assert "with exact semantics (--enable-zbh1-exact-semantics)" in said
    assert "--schedule zb-h1-ds-exact,zb-h1-ds" in said
    doc["parallel"]["schedule"] = "zb-h1-ds"
    assert "exact semantics" not in _run_said(cli, tmp_path, doc)


def _run_said(cli, tmp_path, doc: dict) -> str:
    """What `simcluster run` prints for the scenario ``doc``, on one line."""
    import yaml

    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    res = cli("run", str(path))
    assert res.code == 0, res.err
    return " ".join(res.out.split())
