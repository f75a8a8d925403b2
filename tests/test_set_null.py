"""``--set KEY=null`` means "as if the scenario had not written KEY" for every key of every
section: the field's default (or its framework's) applies, and a key with no default is a
one-line error naming it. Before, a field typed ``int | None`` took the null and a plain ``int``
(``parallel.tp``, ``overlap.tp_comm``, ``training.micro_batch``) refused it as a type error."""

from __future__ import annotations

import copy

import pytest
from pydantic import BaseModel

from simcluster.errors import UserError
from simcluster.scenario import Scenario
from simcluster.scenario.loading import read_scenario_file, scenario_from_dict
from tests.test_scenario_errors import assert_one_line_error

BASE = "llama3-8b-8xh100"  # writes model.preset, cluster.*, parallel.tp/pp/zero, training.*


def _settable_keys() -> list[str]:
    """Every ``section.field`` of the scenario schema, and the top-level scalar fields."""
    keys = []
    for name, field in Scenario.model_fields.items():
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            keys += [f"{name}.{sub}" for sub in section.model_fields]
        keys.append(name)
    return keys


def _without(data: dict, key: str) -> dict:
    """The raw scenario with ``key`` deleted by hand (not through the override code)."""
    out = copy.deepcopy(data)
    *parents, leaf = key.split(".")
    node = out
    for part in parents:
        node = node.get(part) or {}
    if isinstance(node, dict):
        node.pop(leaf, None)
    return out


@pytest.mark.parametrize("key", _settable_keys())
def test_null_is_the_key_unwritten_or_a_one_line_error(key):
    data, _ = read_scenario_file(BASE)
    try:
        expected = scenario_from_dict(_without(data, key))
    except UserError as exc:  # the key has no default: null names it and the fix
        with pytest.raises(UserError) as got:
            scenario_from_dict(data, [(key, None)])
        assert got.value.field == exc.field == key, (got.value, exc)
        assert "has no default" in got.value.message and f"--set {key}=VALUE" in got.value.message
        return
    assert scenario_from_dict(data, [(key, None)]) == expected


def test_null_on_a_plain_int_field_is_its_default():
    """parallel.tp is an int defaulting to 1; the scenario's tp: 1 unset is tp 1 again, and
    micro_batch's documented default is 1 (README, training.micro_batch)."""
    data, _ = read_scenario_file(BASE)
    scenario = scenario_from_dict(data, [("parallel.tp", None), ("training.micro_batch", None)])
    assert scenario.parallel.tp == 1 and scenario.training.micro_batch == 1
    assert "parallel.tp" not in scenario.written and "training.micro_batch" not in scenario.written


def test_null_leaves_a_framework_default_to_the_framework():
    """Unset, overlap.tp_comm is what framework megatron-core sets for it, as if unwritten."""
    data, _ = read_scenario_file(BASE)
    data = {**data, "framework": "megatron-core", "overlap": {"tp_comm": False}}
    unwritten = scenario_from_dict(_without(data, "overlap.tp_comm"))
    nulled = scenario_from_dict(data, [("overlap.tp_comm", None)])
    assert nulled.overlap == unwritten.overlap


def test_cli_null_without_default_is_one_line(cli):
    res = cli("memory", BASE, "--set", "training.seq_len=null")
    assert_one_line_error(res, "training.seq_len", "has no default", "--set training.seq_len=VALUE")


def test_null_on_a_profile_field_is_the_profiles_own_value():
    """cluster.profile.efficiency.nic=null unsets the scenario's patch of it: the profile as
    shipped (an empty efficiency mapping left behind patched the whole table away)."""
    from simcluster.context import build_context

    data, _ = read_scenario_file(BASE)
    patched = {**data, "cluster": {**data["cluster"], "profile": {"efficiency": {"nic": 0.5}}}}
    nulled = build_context(scenario_from_dict(patched, [("cluster.profile.efficiency.nic", None)]))
    assert nulled.profile == build_context(scenario_from_dict(data)).profile
    plain = build_context(scenario_from_dict(data, [("cluster.profile.efficiency.nic", None)]))
    assert plain.profile == nulled.profile


def test_gemm_and_collective_null_profile_fields_are_the_profiles_own(cli):
    base = cli("gemm", "4096,4096,4096", "--json")
    nulled = cli("gemm", "4096,4096,4096", "--json", "--set", "cluster.profile.efficiency.sustained=null")
    assert nulled.code == 0, nulled.err
    assert nulled.out == base.out
