"""Progress of sweep and validate (simcluster/progress.py): the time left scaled by
the expected cost still to run over the cost done, skipped items excluded; piped, a bounded
number of plain lines."""

from __future__ import annotations

import io

import pytest

from simcluster.cost_hint import cost_hint
from simcluster.progress import HEARTBEAT_S, QUIET_S, PlainLines, Tracker, clock_text


def test_skipped_items_do_not_make_the_estimate_short():
    """100 layouts, 60 skipped by the checks in the first milliseconds, then 4 simulated in
    40 s: 36 to go at 10 s each is 360 s. Counted as done work, the skips made it
    40 x 36 / 64 = 22.5 s."""
    t = Tracker(100, 100.0)
    for _ in range(60):
        t.advance(1.0, ran=False)
    assert t.left_s(0.1) is None  # nothing has run: estimating
    for _ in range(4):
        t.advance(1.0, ran=True)
    assert t.left_s(40.0) == pytest.approx(360.0)


def test_the_estimate_weighs_each_item_by_its_cost():
    """Three layouts of 8 microbatches ran in 30 s; the last has 56 (7x): 70 s left, not 10."""
    t = Tracker(4, 8 + 8 + 8 + 56.0)
    for _ in range(3):
        t.advance(8.0, ran=True)
    assert t.left_s(30.0) == pytest.approx(70.0)


def test_estimating_until_one_item_per_worker_has_run():
    t = Tracker(20, 20.0, parallel=4)
    for _ in range(3):
        t.advance(1.0, ran=True)
    assert t.left_s(3.0) is None
    t.advance(1.0, ran=True)
    assert t.left_s(4.0) == pytest.approx(16.0)
    assert "estimating" in Tracker(5, 5.0).line("sweep", 1.0)


def _run(total: int, seconds_each: float, ticks: bool = True, after_s: int = 0) -> list[str]:
    """A serial run of ``total`` items taking ``seconds_each``, the clock ticking every second,
    and ``after_s`` seconds more before the work's context ends (a Dask cluster shutting down)."""
    now = [0.0]
    out = io.StringIO()
    tracker = Tracker(total, float(total))
    lines = PlainLines("sweep", tracker, out, clock=lambda: now[0])
    for _ in range(total):
        for _ in range(int(seconds_each)):
            now[0] += 1.0
            if ticks:
                lines.on_tick()
        tracker.advance(1.0, ran=True)
        lines.on_advance()
    for _ in range(after_s):
        now[0] += 1.0
        lines.on_tick()
    lines.finish()
    return out.getvalue().splitlines()


def test_a_short_run_prints_nothing():
    assert _run(20, 0.4) == []  # 8 s in all: under QUIET_S
    assert QUIET_S == 10.0


def test_lines_at_each_tenth_then_the_end():
    got = _run(20, 2.0)  # 40 s: tenths from 10 s on
    assert got[0] == "sweep: 5/20, 0:10 elapsed, about 0:30 left"
    assert got[1] == "sweep: 6/20, 0:12 elapsed, about 0:28 left"
    assert got[-1] == "sweep: 20/20 done in 0:40"
    assert len(got) == 9  # 25% (the first past 10 s), 30%, 40%, ... 100%, the last also the end


def test_the_closing_line_comes_once_whatever_follows_the_last_item():
    """`sweep --dask local` printed 'done in 0:11' and then 'done in 0:13': the last item's
    line closes the run, and the cluster's shutdown after it adds no line, nor do heartbeats."""
    got = _run(20, 2.0, after_s=120)
    assert got[-1] == "sweep: 20/20 done in 0:40" and sum(" done in " in ln for ln in got) == 1


def test_a_slow_item_still_shows_the_command_alive_with_bounded_lines():
    """Two hours, one item every 12 minutes: a line after 30 s of silence, then after a quarter
    of the time elapsed; 10 tenths, a few dozen heartbeats at most, not one every 30 s (240)."""
    got = _run(10, 720.0)
    assert got[0] == "sweep: 0/10, 0:30 elapsed, time left: estimating"
    assert got[-1] == "sweep: 10/10 done in 2:00:00"
    assert 12 <= len(got) <= 40
    assert HEARTBEAT_S == 30.0


def test_a_heartbeat_names_the_item_under_way():
    """calibrate names each measurement before it runs (``count=0``); piped, a heartbeat during
    a measurement that takes minutes (a scenario's LM-head GEMM on a CPU) says which one, and
    lines printed between items name none."""
    now = [0.0]
    out = io.StringIO()
    tracker = Tracker(3, 3.0)
    lines = PlainLines("calibrate (measurements)", tracker, out, clock=lambda: now[0])
    lines.name("heat soak 2 s", 0)
    for _ in range(31):  # 31 s of silence: past QUIET_S and HEARTBEAT_S
        now[0] += 1.0
        lines.on_tick()
    tracker.advance(1.0, ran=True)
    lines.name("heat soak 2 s", 1)  # the item finished
    lines.on_advance()
    got = out.getvalue().splitlines()
    assert got[0] == "calibrate (measurements): 0/3, 0:30 elapsed, time left: estimating; now: heat soak 2 s"
    assert got[1] == "calibrate (measurements): 1/3, 0:31 elapsed, time left: estimating"


def test_clock_text():
    assert clock_text(65) == "1:05" and clock_text(3725) == "1:02:05" and clock_text(-1) == "0:00"


def test_cost_hint_is_microbatches_times_layers():
    # 64 GPUs at tp 8, pp 2: dp 4; 512 sequences in micro-batches of 2: 64 microbatches x 80 layers
    raw = {"cluster": {"gpus": 64}, "parallel": {"tp": 8, "pp": 2},
           "training": {"global_batch": 512, "micro_batch": 2}, "model": {"layers": 80}}  # fmt: skip
    assert cost_hint(raw, extrapolate=False) == 64 * 80
    assert cost_hint({"model": "llama3-8b"}) == 1.0  # unreadable: 1


def test_cost_hint_counts_the_shorter_steps_a_long_step_is_read_off():
    """steady_state.py simulates steps of 1, 2, 3 ... groups of pp microbatches (about 10 groups
    in all) for a step of at least 64 where 1 + 2 + 3 groups are at most half of it."""
    raw = {"cluster": {"gpus": 64}, "parallel": {"tp": 8, "pp": 4},
           "training": {"global_batch": 512, "micro_batch": 1}, "model": {"layers": 80}}  # fmt: skip
    # dp 2: 256 microbatches, of which 10 groups of 4 are simulated
    assert cost_hint(raw) == 40 * 80 and cost_hint(raw, extrapolate=False) == 256 * 80
    assert cost_hint({**raw, "parallel": {**raw["parallel"], "schedule": "gpipe"}}) == 256 * 80  # held whole
    few = {**raw, "training": {"global_batch": 96, "micro_batch": 1}}  # 48 microbatches: under 64
    assert cost_hint(few) == 48 * 80


def test_a_piped_run_prints_its_simulation_progress_only_when_long(monkeypatch, capsys):
    """`run` simulates with progress=None: a bar on a terminal; piped (capsys is no terminal),
    nothing for a run under QUIET_S, lines of pipeline ops past it (QUIET_S set to 0 here, so
    the first batch of 20,000 SimPy steps already crosses a tenth), ending in the total."""
    import simcluster.progress as progress
    from simcluster.engine import simulate
    from simcluster.scenario import scenario_from_dict
    from tests.engine_helpers import pipeline_scenario

    scenario = scenario_from_dict(pipeline_scenario(4, 16, "1f1b", layers=8))
    quiet = simulate(scenario, progress=None)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    loud = simulate(scenario, progress=None)
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(ln.startswith("simulating (pipeline ops): ") for ln in lines)
    assert " done in " in lines[-1]
    assert loud.summary["step_time_s"] == quiet.summary["step_time_s"]


class _FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal, as Rich asks (``isatty``)."""

    def isatty(self) -> bool:
        return True


def test_a_terminal_run_draws_its_simulation_bar_on_stderr_not_stdout(monkeypatch):
    """One module decides terminal against piped (simcluster/progress.py): the simulation's bar
    goes to stderr like sweep's, so `run --json > out.json` on a terminal shows it and leaves
    stdout to the document (engine/progress.py drew it on Rich's default console, stdout)."""
    import sys

    import simcluster.engine.progress as engine_progress
    from simcluster.engine import simulate
    from simcluster.scenario import scenario_from_dict
    from tests.engine_helpers import pipeline_scenario

    scenario = scenario_from_dict(pipeline_scenario(4, 16, "1f1b", layers=8))
    out, err = io.StringIO(), _FakeTerminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(engine_progress, "BAR_DELAY_S", 0.0)
    monkeypatch.setattr(engine_progress, "_BATCH", 500)
    monkeypatch.setenv("COLUMNS", "150")
    loud = simulate(scenario, progress=None)
    assert out.getvalue() == ""
    assert "simulating" in err.getvalue() and "pipeline ops" in err.getvalue()
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert simulate(scenario, progress=False).summary["step_time_s"] == loud.summary["step_time_s"]


def test_the_bar_waits_for_its_delay(monkeypatch):
    """A run shorter than the bar's delay draws nothing, on a terminal too."""
    import sys

    from simcluster.progress import progress_bar

    err = _FakeTerminal()
    monkeypatch.setattr(sys, "stderr", err)
    with progress_bar("simulating", 10, delay_s=3600.0, unit="pipeline ops") as advance:
        advance(count=5, cost=5.0)
    assert err.getvalue() == ""
    with progress_bar("simulating", 10, delay_s=0.0, unit="pipeline ops") as advance:
        advance(count=5, cost=5.0)
    assert "simulating" in err.getvalue()


def test_naming_the_item_under_way_does_not_count_it(monkeypatch):
    """``advance(label, cost=0.0, count=0)`` shows what runs now (calibrate's measurement, a
    measure-step step) without counting it or moving the time left."""
    import sys

    from simcluster.progress import progress_bar

    err = _FakeTerminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("COLUMNS", "150")
    with progress_bar("calibrate", 4, unit="measurements") as advance:
        advance("gemm 4096^3 bf16", cost=0.0, count=0)
    frames = [f for f in err.getvalue().split("\r") if "gemm 4096^3 bf16" in f]  # drawn as it stops
    assert frames and all("0/4" in f for f in frames)
    tracker = Tracker(4, 4.0)
    tracker.advance(0.0, True, 0)
    assert (tracker.done, tracker.ran, tracker.left_cost, tracker.ran_cost) == (0, 0, 4.0, 0.0)


def test_calibrate_reports_progress_through_the_one_progress_module(monkeypatch, tmp_path, capsys):
    """calibrate's measuring run counts its measurements into simcluster/progress.py, so piped
    (torchrun's logs, a batch job) it prints the same plain lines as a sweep, not a Rich bar's
    last frame; a failed measurement stops the lines and is reported once."""
    pytest.importorskip("torch")
    import simcluster.progress as progress
    from calibrate import runner

    ran: list[str] = []

    def steps(cfg, ctx):
        def fails(m):
            raise RuntimeError("device lost")

        return [runner.Step(label, ran.append) for label in ("gemm a", "gemm b")] + [runner.Step("gemm c", fails)]

    monkeypatch.setattr(runner, "plan_steps", steps)
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    cfg = runner.RunConfig("cpu", True, tmp_path / "p.yaml", None, 60.0, ())
    assert runner.run(cfg) == 1
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(",")[0] for ln in lines[:2]] == ["calibrate (measurements): 1/3", "calibrate (measurements): 2/3"]
    assert lines[2].startswith("error: rank 0: during 'gemm c': RuntimeError: device lost") and len(lines) == 3
    assert len(ran) == 2


def test_v_auto_planning_shows_progress_only_inside_a_showing_run(monkeypatch, capsys):
    """v-auto's search (tens of seconds at pp 8-16) counts its 60 stage-0 blocks x 15 offset
    pairs (sail-sg's v_auto_schedule.py loops) into the progress of the run around it: piped,
    lines once past QUIET_S (0 here), ending in the total; outside `showing` (sweep,
    validate, memory) nothing, and the plan is the same either way."""
    import simcluster.progress as progress
    from simcluster.schedules.v_auto import candidates

    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    candidates.cache_clear()
    silent = candidates(4, 8, 6)
    assert capsys.readouterr().err == ""
    candidates.cache_clear()
    with progress.showing(None):
        shown = candidates(4, 8, 6)
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(ln.startswith("planning v-auto (block offsets): ") for ln in lines)
    assert lines[-1].startswith("planning v-auto (block offsets): 900/900 done in ")
    assert shown == silent


def test_a_run_shows_its_v_auto_planning(monkeypatch, capsys):
    """simulate(progress=None), as `run` calls it, plans v-auto inside `showing`."""
    import simcluster.progress as progress
    from simcluster.engine import simulate
    from simcluster.scenario import scenario_from_dict
    from simcluster.schedules.v_auto import candidates
    from tests.engine_helpers import pipeline_scenario

    data = pipeline_scenario(4, 8, "v-auto", layers=8)
    data["parallel"]["activation_limit"] = 0.75
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    candidates.cache_clear()
    simulate(scenario_from_dict(data), progress=None)
    assert "planning v-auto (block offsets): 900/900 done in " in capsys.readouterr().err
