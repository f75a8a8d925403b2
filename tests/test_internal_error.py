"""A step the engine cannot finish is the simulator's fault, not the input's (errors.InternalError).

The engine notices it itself: SimPy runs out of events while some rank has ops left. To make
that happen on purpose, a stage's worker is made to stop before its first op (the rest of the
engine is the real one). The CLI then prints one line and exits 3 (a bad input exits 2), the
traceback only with SIMCLUSTER_DEBUG=1; a sweep lists the layout and simulates the others.
"""

from __future__ import annotations

import pytest
import yaml

from simcluster.engine import simulate
from simcluster.engine.worker import Worker
from simcluster.errors import DEBUG_ENV, InternalError
from simcluster.scenario import scenario_from_dict
from simcluster.sweep import candidates, run_sweep
from tests.conftest import make_scenario

REAL_RUN = Worker.run


def _stall_when(condition):
    """Patch target: a Worker.run that returns before its first op when ``condition(worker)``."""

    def run(self):
        if condition(self):
            return
            yield  # a generator that ends at once
        yield from REAL_RUN(self)

    return run


def _pipeline() -> dict:
    return make_scenario(name="stuck", parallel={"tp": 1, "pp": 2}, training={"global_batch": 8})


@pytest.fixture
def stuck_yaml(tmp_path):
    """The pipeline scenario as a file, for the CLI."""
    path = tmp_path / "stuck.yaml"
    path.write_text(yaml.safe_dump(_pipeline()))
    return path


def test_a_rank_that_stops_early_is_reported_as_an_internal_error(monkeypatch):
    monkeypatch.setattr(Worker, "run", _stall_when(lambda w: w.stage == 1))
    with pytest.raises(InternalError, match=r"'stuck' \(.*pp2.*\) deadlocked: ranks \[[0-9, ]+\] stopped"):
        simulate(scenario_from_dict(_pipeline()))


def test_a_rank_stuck_after_its_last_op_is_an_internal_error_too(monkeypatch):
    """A rank can finish its ops and then wait for ever (a collective its peers issued in
    another order): its step end was never set, and the summary divided by a 0 s step."""
    real_drain = Worker._drain

    def drain(self):
        if self.stage == 1:
            yield self.shared.env.event()  # never triggered
        yield from real_drain(self)

    monkeypatch.setattr(Worker, "_drain", drain)
    with pytest.raises(InternalError, match=r"deadlocked: ranks \[[0-9, ]+\] stopped after their last op"):
        simulate(scenario_from_dict(_pipeline()))


def test_the_cli_prints_one_line_and_exits_3(monkeypatch, stuck_yaml, cli):
    monkeypatch.setattr(Worker, "run", _stall_when(lambda w: w.stage == 1))
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    res = cli("run", str(stuck_yaml))
    assert res.code == 3
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: internal: the simulation of 'stuck'")
    assert "please report it with the scenario" in lines[0] and "Traceback" not in res.err


def test_simcluster_debug_lets_the_traceback_through(monkeypatch, stuck_yaml, cli):
    monkeypatch.setattr(Worker, "run", _stall_when(lambda w: w.stage == 1))
    monkeypatch.setenv(DEBUG_ENV, "1")
    with pytest.raises(InternalError):
        cli("run", str(stuck_yaml))


def test_a_sweep_lists_the_stuck_layout_and_simulates_the_others(monkeypatch):
    monkeypatch.setattr(Worker, "run", _stall_when(lambda w: w.shared.ctx.layout.pp == 2))
    rows = run_sweep(candidates(_pipeline(), {"pp": [1, 2]}), jobs=1)
    by_pp = {row.candidate.scenario["parallel"]["pp"]: row for row in rows}
    assert by_pp[1].summary is not None and by_pp[1].skipped is None
    assert by_pp[2].summary is None and by_pp[2].skipped.startswith("internal: the simulation of")
