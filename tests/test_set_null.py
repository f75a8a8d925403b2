"""``--set KEY=null`` means "as if the scenario had not written KEY" for every key of every
section: the field's default (or its framework's) applies, and a key with no default is a
one-line error naming it. Before, a field typed ``int | None`` took the null and a plain ``int``
(``parallel.tp``, ``overlap.tp_comm``, ``training.micro_batch``) refused it as a type error."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
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


# --- null written in the scenario file: the same rule as --set KEY=null -------------------------
def _with_null(data: dict, key: str) -> dict:
    """The raw scenario with ``key`` written as null (``tp: null``, or YAML's bare ``tp:``)."""
    out = copy.deepcopy(data)
    *parents, leaf = key.split(".")
    node = out
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = None
    return out


@pytest.mark.parametrize("key", _settable_keys())
def test_null_in_the_file_is_the_key_unwritten_or_a_one_line_error(key):
    """What --set KEY=null means (above), a null the scenario itself writes means too: before,
    ``tp: null`` in a file was 'input should be a valid integer (got None)'."""
    data, _ = read_scenario_file(BASE)
    try:
        expected = scenario_from_dict(_without(data, key))
    except UserError as exc:
        with pytest.raises(UserError) as got:
            scenario_from_dict(_with_null(data, key))
        assert got.value.field == exc.field == key, (got.value, exc)
        assert "has no default" in got.value.message and "give it a value in the scenario" in got.value.message
        return
    got = scenario_from_dict(_with_null(data, key))
    assert got == expected and got.written == expected.written


def test_null_in_the_file_leaves_a_framework_default_to_the_framework():
    data, _ = read_scenario_file(BASE)
    data = {**data, "framework": "megatron-core", "overlap": {"tp_comm": None}}
    assert scenario_from_dict(data).overlap == scenario_from_dict(_without(data, "overlap.tp_comm")).overlap


def test_null_in_the_file_under_another_name_or_one_level_off():
    """A null under a launch-flag name or written one level off is unset where it belongs,
    and, being unwritten, does not clash with the same key written with a value (before, the
    pair was 'given twice; keep one')."""
    data, _ = read_scenario_file(BASE)
    aliased = {**data, "parallel": {**data["parallel"], "tensor-model-parallel-size": None}}
    aliased["parallel"].pop("tp")
    assert scenario_from_dict(aliased).parallel.tp == 1
    top = {**_without(data, "parallel.zero"), "zero": None}
    assert scenario_from_dict(top) == scenario_from_dict(_without(data, "parallel.zero"))
    written = scenario_from_dict(data)
    for twin in (
        {**data, "parallel": {**data["parallel"], "tensor-model-parallel-size": None}},
        {**data, "zero": None},
        {**data, "model": {**data["model"], "seq_len": None}},
    ):
        assert scenario_from_dict(twin) == written
    without_seq_len = {**_without(data, "training.seq_len"), "model": {**data["model"], "seq_len": None}}
    with pytest.raises(UserError) as got:
        scenario_from_dict(without_seq_len)
    assert got.value.field == "training.seq_len" and "has no default" in got.value.message


def test_null_in_a_profile_patch_is_the_profiles_own_value():
    """cluster.profile.efficiency: {nic: null} is the shipped profile (the emptied patch
    mappings are dropped with it, not left to replace the profile's efficiency table)."""
    from simcluster.context import build_context

    data, _ = read_scenario_file(BASE)
    patched = {**data, "cluster": {**data["cluster"], "profile": {"efficiency": {"nic": None}}}}
    assert build_context(scenario_from_dict(patched)).profile == build_context(scenario_from_dict(data)).profile


def test_then_set_gives_the_nulled_key_a_value():
    data, _ = read_scenario_file(BASE)
    nulled = _with_null(data, "training.seq_len")
    assert scenario_from_dict(nulled, [("training.seq_len", 4096)]).training.seq_len == 4096


def test_cli_file_with_bare_keys(cli, tmp_path):
    """YAML's bare ``tp:`` and an emptied section (every key commented out) run on the
    defaults; a bare key with no default is one line naming it, exit status 2."""
    from tests.test_scenario_errors import write

    text = (
        "model: llama3-8b\ncluster: {hardware: dgx-h100, gpus: 8}\ntp: 2\n"
        "parallel:\n  # tp: 4\noverlap:\n  tp_comm:\ntraining:\n  seq_len: 4096\n  global_batch: 8\n"
        "  micro_batch:\n"
    )
    res = cli("memory", write(tmp_path, text), "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["layout"] == "dp4 tp2 pp1 1f1b"  # micro_batch and the overlap: defaults
    missing = write(tmp_path, text.replace("seq_len: 4096", "seq_len:"), "m.yaml")
    assert_one_line_error(cli("memory", missing), "training.seq_len", "has no default", "in the scenario")


def test_null_in_a_validate_case_scenario_is_unwritten_too(tmp_path):
    """validate reads a case's inline scenario before scenario_from_dict does (the sequence
    length of a samples/s figure): a null beside its twin is unwritten there as well."""
    from simcluster.validate import load_cases

    scenario = {"model": "llama3-8b", "cluster": {"gpus": 8}, "training": {"seq_len": 4096, "global_batch": 8}}
    nulled = copy.deepcopy(scenario) | {"parallel": {"tp": 2, "tensor-model-parallel-size": None}}
    plain = copy.deepcopy(scenario) | {"parallel": {"tp": 2}}
    cases = [{"name": n, "scenario": s, "measured": {"tokens_per_s": 1000}} for n, s in (("a", nulled), ("b", plain))]
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": cases}))
    a, b = load_cases([path])
    assert a.problem == "" and scenario_from_dict(dict(a.scenario)) == scenario_from_dict(dict(b.scenario))


def test_null_without_default_in_a_validate_case_says_it_was_nulled(tmp_path):
    """A case whose scenario (or set:) writes a key with no default as null fails naming the
    null, as `run` does, not with a bare 'is required'; a set: value after the null wins."""
    from simcluster.validate import load_cases, run_case

    scenario = {"model": "llama3-8b", "cluster": {"gpus": 8}, "training": {"seq_len": None, "global_batch": 8}}
    given = copy.deepcopy(scenario) | {"training": {"seq_len": 4096, "global_batch": 8}}
    cases = [
        {"name": "file-null", "scenario": scenario, "measured": {"step_time_s": 1}},
        {"name": "set-null", "scenario": given, "set": {"training.global_batch": None}, "measured": {"step_time_s": 1}},
        {"name": "set-again", "scenario": scenario, "set": {"seq-length": 4096}, "measured": {"step_time_s": 1}},
    ]
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": cases}))
    file_null, set_null, set_again = load_cases([path])
    for case, key in ((file_null, "training.seq_len"), (set_null, "training.global_batch")):
        error = run_case(case).error or ""
        assert error.startswith(f"{key}: is null, which means unwritten, and it has no default"), error
        assert "\n" not in error
    assert set_again.unset == ()  # the set: value stands; nothing is passed as null
    assert scenario_from_dict(dict(set_again.scenario)).training.seq_len == 4096
