"""One syntax-error message for every user-given YAML file (scenario, profile, cases), and
no key given twice in one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simcluster import yamlio
from simcluster.errors import UserError
from simcluster.hardware import load_profile
from simcluster.scenario import load_scenario
from simcluster.validate import load_cases_file


def test_safe_load_builds_what_pyyaml_builds():
    text = "a: [1, 2.5, yes, null, '3']\nb: {c: 1e3}\n"
    assert yamlio.safe_load(text) == yaml.safe_load(text)


@pytest.mark.parametrize(
    "loader, field, what",
    [
        (load_scenario, "scenario", "scenario file"),
        (load_profile, "cluster.hardware", "hardware profile"),
        (load_cases_file, "CASES", "cases file"),
    ],
)
def test_syntax_error_names_field_line_and_column(tmp_path, loader, field, what):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nmodel: {preset: a\n")  # the flow mapping is never closed
    with pytest.raises(UserError) as err:
        loader(path)
    assert err.value.field == field
    message = str(err.value)
    assert what in message and "line 3, column 1" in message
    assert "not valid YAML" in message and "fix the syntax" in message
    assert "\n" not in message


def test_undecodable_bytes_are_a_user_error(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(UserError, match="not UTF-8"):
        yamlio.load_user_file(path, "scenario", "scenario file")


@pytest.mark.parametrize(
    "loader, field, text, path, line",
    [
        (load_scenario, "scenario", "name: x\nparallel:\n  tp: 2\n  pp: 1\n  tp: 4\n", "parallel.tp", 5),
        (load_profile, "cluster.hardware", "name: x\ngpu: {memory_gib: 80, memory_gib: 96}\n", "gpu.memory_gib", 2),
        (load_cases_file, "CASES", "cases:\n- name: a\n  scenario: {}\n- name: b\n  name: c\n", "cases[1].name", 5),
    ],
)  # fmt: skip
def test_a_key_given_twice_names_its_path_and_line(tmp_path, loader, field, text, path, line):
    """PyYAML keeps the last of two equal keys without a word; a file that gives one twice is
    refused before anything reads it."""
    file = tmp_path / "twice.yaml"
    file.write_text(text)
    with pytest.raises(UserError) as err:
        loader(file)
    assert err.value.field == field
    message = str(err.value)
    assert f"line {line}: {path} is given twice" in message and "keep one" in message
    assert "\n" not in message


def test_a_key_given_twice_is_one_line_on_the_command_line(cli, tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("model: llama3-8b\ncluster: {hardware: dgx-h100, gpus: 8}\nparallel:\n  tp: 2\n  tp: 4\n"
                    "training: {seq_len: 2048, global_batch: 16}\n")  # fmt: skip
    res = cli("memory", str(path))
    assert res.code == 2 and "Traceback" not in res.err
    assert res.err.strip() == (
        f"error: scenario: scenario file {path} line 5: parallel.tp is given twice (also at line 4); keep one"
    )
    res = cli("memory", "llama3-8b-8xh100", "--set", "parallel={tp: 2, tp: 4}")
    assert res.code == 2 and res.err.strip() == "error: --set: 'parallel={tp: 2, tp: 4}': tp is given twice; keep one"


def test_merged_keys_may_still_be_overridden():
    """``<<: *base`` then a key of base: YAML's merge keys mean the mapping's own key wins."""
    text = "base: &b {tp: 2, pp: 1}\nrun:\n  <<: *b\n  tp: 4\n"
    assert yamlio.safe_load(text)["run"] == {"tp": 4, "pp": 1}


def test_no_shipped_yaml_file_gives_a_key_twice():
    root = Path(__file__).resolve().parent.parent
    files = [p for d in ("scenarios", "hardware", "validation", "simcluster", "tests") for p in (root / d).rglob("*.y*ml")]
    assert len(files) > 50
    for path in files:
        yamlio.safe_load(path.read_text())  # raises DuplicateKeyError naming the key


def test_a_tab_indent_says_yaml_indents_with_spaces(cli, tmp_path):
    """A tab where YAML wants spaces (an editor's indent): libyaml says only 'found character
    that cannot start any token'; the line says what the character is and the fix."""
    path = tmp_path / "s.yaml"
    path.write_text("name: x\nmodel: llama3-8b\ncluster: {gpus: 8}\nparallel:\n\ttp: 1\ntraining: {seq_len: 2048, global_batch: 8}\n")
    res = cli("memory", str(path))
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1
    assert "at line 5, column 1: not valid YAML (" in res.err
    assert "YAML indents with spaces, not tabs: replace the tab with spaces" in res.err
