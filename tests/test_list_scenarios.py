"""``simcluster list scenarios`` says what each shipped scenario runs: its name and the
``description:`` its YAML file gives (before, only the names, which abbreviate the model,
the GPU count and the GPU)."""

from __future__ import annotations

import yaml

from simcluster.data import data_dir
from simcluster.scenario import shipped_scenarios


def test_each_scenario_is_listed_with_its_description(cli):
    res = cli("list", "scenarios")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert [ln.split()[0] for ln in lines] == shipped_scenarios()
    for name, line in zip(shipped_scenarios(), lines, strict=True):
        described = yaml.safe_load((data_dir("scenarios") / f"{name}.yaml").read_text())["description"]
        assert " ".join(line.split()[1:]) == " ".join(described.split()), name


def test_the_plain_list_still_names_them_in_one_line(cli):
    res = cli("list")
    assert res.code == 0
    assert f"scenarios: {', '.join(shipped_scenarios())}" in res.out.splitlines()
