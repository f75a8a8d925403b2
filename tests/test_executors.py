"""Executors run the same simulations wherever they run: local processes or a Dask cluster give
the serial numbers bit for bit; a missing extra or an unreachable scheduler is a one-line error."""

from __future__ import annotations

import sys

import pytest

from simcluster.errors import UserError
from simcluster.executors import Executor
from simcluster.sweep import candidates, run_sweep
from tests.conftest import make_scenario


def _square(x: int) -> int:
    return x * x


def _cands():
    base = make_scenario(training={"seq_len": 1024, "micro_batch": 1, "global_batch": 8})
    return candidates(base, {"tp": [1, 2], "pp": [1, 2]})


def _numbers(rows):
    return sorted(
        (r.candidate.label, r.summary["step_time_s"], r.summary["peak_memory_bytes"]["max"])
        for r in rows
        if r.ran
    )


def test_processes_executor_returns_every_result():
    assert sorted(Executor("processes", 2).map_unordered(_square, [1, 2, 3, 4])) == [1, 4, 9, 16]
    assert list(Executor("processes", 1).map_unordered(_square, [3])) == [9]
    assert list(Executor("processes", 2).map_unordered(_square, [])) == []


def test_dask_local_cluster_gives_the_serial_numbers():
    pytest.importorskip("distributed")
    cands = _cands()
    serial = run_sweep(cands, jobs=1)
    on_dask = run_sweep(cands, executor=Executor("dask", 2, "local"))
    assert len(_numbers(serial)) == 4
    assert _numbers(on_dask) == _numbers(serial)
    assert [r.candidate.label for r in on_dask] == [r.candidate.label for r in serial]  # ranked alike


def test_dask_joins_a_running_scheduler_by_address():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        out = sorted(Executor("dask", 1, cluster.scheduler_address).map_unordered(_square, [2, 5]))
    assert out == [4, 25]


def test_unreachable_scheduler_is_a_one_line_error():
    pytest.importorskip("distributed")
    with pytest.raises(UserError) as err:
        list(Executor("dask", 1, "tcp://127.0.0.1:9").map_unordered(_square, [1]))
    assert err.value.field == "--dask" and "cannot reach" in err.value.one_line()


def test_without_the_extra_dask_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if not installed
    with pytest.raises(UserError) as err:
        list(Executor("dask", 1).map_unordered(_square, [1]))
    assert "simcluster[dask]" in err.value.one_line()


def test_sweep_cli_runs_on_a_local_dask_cluster(cli):
    pytest.importorskip("distributed")
    res = cli("sweep", "llama3-8b-8xh100", "--tp", "1,2", "--dask", "local", "--jobs", "1", "--json")
    assert res.code == 0, res.err
    bad = cli("sweep", "llama3-8b-8xh100", "--tp", "1,2", "--dask", "tcp://127.0.0.1:9")
    assert bad.code == 2 and bad.err.strip().count("\n") == 0 and "--dask" in bad.err


def test_validate_cases_on_dask_match_the_serial_run():
    pytest.importorskip("distributed")
    from simcluster.cost_hint import cost_hint
    from simcluster.validate import load_cases, run_cases

    cases = sorted(load_cases(quick=True), key=lambda c: cost_hint(c.scenario))[:3]  # the three cheapest shipped cases
    serial = run_cases(cases, jobs=1)
    on_dask = run_cases(cases, executor=Executor("dask", 2, "local"))
    assert [r.case.name for r in on_dask] == [c.name for c in cases]  # in case order
    assert [r.predicted for r in on_dask] == [r.predicted for r in serial]
    assert all(r.error is None for r in serial)
