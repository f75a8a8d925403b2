"""One-field changes that make a layout fit (``simcluster/fit_hints.py``): each hint is checked
against the memory walk of the changed scenario itself."""

from __future__ import annotations

import json

import pytest
from conftest import make_scenario

from simcluster.context import build_context
from simcluster.fit_hints import COST_ORDER, fitting_changes
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


def test_every_hint_fits_when_applied_and_they_come_cheapest_first():
    data = _tight()
    sc = scenario_from_dict(data)
    assert not memory_summary(build_context(sc))["fits"]
    hints = fitting_changes(sc)
    assert 1 <= len(hints) <= 3
    ranks = [COST_ORDER.index(h.change.split("=")[0]) for h in hints]
    assert ranks == sorted(ranks)
    for h in hints:
        changed = memory_summary(build_context(scenario_from_dict(data, parse_set([h.change]))))
        assert changed["fits"] and changed["total_bytes"] == pytest.approx(h.total_bytes)


def test_zero_1_is_offered_before_changes_that_leave_less_memory_but_cost_more():
    # ZeRO-0 Llama 3 8B at tp 2 on 80 GB: 81.8 GiB. ZeRO-1 (48 GiB) costs DDP's traffic only;
    # tp 4 (42 GiB) and full recomputation leave less memory but cost step time. Before, the
    # hints were the three smallest peaks, and ZeRO-1 was not among them.
    data = {
        "name": "llama3-8b-zero0", "model": "llama3-8b", "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"tp": 2, "zero": 0},
        # DeepSpeed's gradient lifetime (the 16-bit .grad kept all step, 6 B a parameter with
        # the fp32 main gradient): Megatron's 4 B would fit at ZeRO-0
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 16, "precision": "bf16",
                     "grad_16bit_freed": "step"},
    }  # fmt: skip
    sc = scenario_from_dict(data)
    assert not memory_summary(build_context(sc))["fits"]
    hints = [h.change for h in fitting_changes(sc)]
    assert hints[0] == "parallel.zero=1"
    assert "training.recompute=full" not in hints


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


def test_a_hopeless_layout_points_to_more_gpus_and_the_sweep(cli, tmp_path):
    import yaml

    data = _tight()
    data["cluster"]["profile"] = {"gpu": {"memory_gib": 1}}
    path = tmp_path / "hopeless.yaml"
    path.write_text(yaml.safe_dump(data))
    r = cli("memory", str(path))
    out = " ".join(r.out.split())
    assert "alone or up to three together: try more GPUs (cluster.gpus)" in out and "sweep --fitting-only" in out
    assert json.loads(cli("memory", str(path), "--json").out)["would_fit_together"] is None


def _llama70b_on_8(**training) -> dict:
    """Llama 3 70B (70.55 B parameters) data parallel on one DGX H100 node at 8K tokens."""
    return {
        "name": "llama3-70b-on-8", "model": "llama3-70b", "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"tp": 1}, "training": {"seq_len": 8192, "global_batch": 8, **training},
    }  # fmt: skip


def test_changes_that_only_fit_together_are_named_and_fit_when_applied(cli, tmp_path):
    # Llama 3 70B on 8 H100: 2 + 4 + 12 B a parameter is 1.18 TiB of state, 148 GiB per GPU even
    # under ZeRO-3, so no single change fits; before, the line said 'try simcluster sweep', whose
    # layouts at 8 GPUs all stay over 80 GiB without the host. ZeRO-3 with the fp32 optimizer
    # state on the host (12 B x 70.55 B = 788.5 GiB of dgx-h100's 2 TiB per node) and full
    # recomputation fit, by the same walk.
    import yaml

    from simcluster.fit_hints import fitting_combination

    data = _llama70b_on_8()
    sc = scenario_from_dict(data)
    assert fitting_changes(sc) == []
    hint = fitting_combination(sc)
    assert hint is not None
    assert hint.sets == ["parallel.zero=3", "training.recompute=full", "training.optimizer_offload=1.0"]
    changed = memory_summary(build_context(scenario_from_dict(data, parse_set(hint.sets))))
    assert changed["fits"] and changed["total_bytes"] == pytest.approx(hint.total_bytes)
    assert changed["host_bytes_per_node"] == pytest.approx(12 * 70.55e9, rel=2e-3)
    path = tmp_path / "l70.yaml"
    path.write_text(yaml.safe_dump(data))
    out = " ".join(cli("memory", str(path)).out.split())
    assert (
        "together these do: --set parallel.zero=3 --set training.recompute=full "
        "--set training.optimizer_offload=1.0 (72.27 GiB by the memory walk)"
    ) in out


def test_an_offload_hint_must_fit_the_hosts_memory_too():
    # the same model: on a 1,000 GiB host the optimizer's 788.5 GiB per node fits, on a 500 GiB
    # one it does not, and nothing else fits without it (before, a hint could trade the GPU's
    # shortage for the host's: ZeRO-3 with both offloads came to 2.05 TiB on a 2 TiB host)
    from simcluster.fit_hints import fitting_combination

    data = _llama70b_on_8()
    data["cluster"]["profile"] = {"node": {"host_memory_gib": 1000}}
    roomy = fitting_combination(scenario_from_dict(data))
    assert roomy is not None and "training.optimizer_offload=1.0" in roomy.sets
    data["cluster"]["profile"] = {"node": {"host_memory_gib": 500}}
    assert fitting_combination(scenario_from_dict(data)) is None
