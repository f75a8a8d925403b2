"""One syntax-error message for every user-given YAML file (scenario, profile, cases)."""

from __future__ import annotations

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
