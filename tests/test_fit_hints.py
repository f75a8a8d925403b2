"""One-field changes that make a layout fit (``simcluster/fit_hints.py``): each hint is checked
against the memory walk of the changed scenario itself."""

from __future__ import annotations

import json

import pytest
from conftest import make_scenario

from simcluster.context import build_context
from simcluster.fit_hints import fitting_changes
from simcluster.memory_report import memory_summary
from simcluster.scenario import parse_set, scenario_from_dict


def _tight() -> dict:
    """A 4-layer h=4096 model at 8K tokens and micro-batch 4 on 32 GB GPUs: too big as given (44 GiB)."""
    return make_scenario(
        model={"name": "m", "layers": 4, "hidden": 4096, "heads": 32, "ffn": 16384, "vocab": 32000,
               "tied_embeddings": False, "max_positions": 8192},  # learned positions for all 8K
        cluster={"hardware": "dgx-h100", "gpus": 8, "profile": {"gpu": {"memory_gib": 32}}},
        parallel={"tp": 1, "pp": 1, "zero": 0},
        training={"seq_len": 8192, "micro_batch": 4, "global_batch": 32},
    )  # fmt: skip


def test_every_hint_fits_when_applied_and_they_come_smallest_first():
    data = _tight()
    sc = scenario_from_dict(data)
    assert not memory_summary(build_context(sc))["fits"]
    hints = fitting_changes(sc)
    assert 1 <= len(hints) <= 3
    assert [h.total_bytes for h in hints] == sorted(h.total_bytes for h in hints)
    for h in hints:
        changed = memory_summary(build_context(scenario_from_dict(data, parse_set([h.change]))))
        assert changed["fits"] and changed["total_bytes"] == pytest.approx(h.total_bytes)


def test_run_and_memory_report_them_only_when_it_does_not_fit(cli, tmp_path):
    import yaml

    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(_tight()))
    mem = json.loads(cli("memory", str(path), "--json").out)
    assert not mem["fits"] and mem["would_fit"]
    r = cli("run", str(path))
    assert r.code == 0 and "would fit with: --set" in " ".join(r.out.split())
    roomy = json.loads(cli("memory", str(path), "--json", "--set", "cluster.profile.gpu.memory_gib=80").out)
    assert roomy["fits"] and "would_fit" not in roomy


def test_a_hopeless_layout_points_to_the_sweep(cli, tmp_path):
    import yaml

    data = _tight()
    data["cluster"]["profile"] = {"gpu": {"memory_gib": 1}}
    path = tmp_path / "hopeless.yaml"
    path.write_text(yaml.safe_dump(data))
    r = cli("memory", str(path))
    assert "no single change" in " ".join(r.out.split()) and "sweep" in r.out
