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


def test_presets_are_listed_with_the_sizes_their_model_cards_give(cli):
    """``list presets``: each preset's parameters and shape (before, the names alone). The
    figures are the published ones: Llama 3 8B's and 70B's model cards (8.03B, 70.6B, 32 and
    80 layers, 8 KV heads), Mistral's Mixtral of Experts (46.7B, 12.9B active per token, 8
    experts top-2), GPT-3 175B (Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads)."""
    res = cli("list", "presets")
    assert res.code == 0, res.err
    lines = {line.split()[0]: " ".join(line.split()[1:]) for line in res.out.splitlines()}
    assert lines["llama3-8b"] == "8.03B: 32 layers, hidden 4096, 32 heads (8 KV)"
    assert lines["llama3-70b"] == "70.6B: 80 layers, hidden 8192, 64 heads (8 KV)"
    assert lines["mixtral-8x7b"] == "46.7B (12.9B active): 32 layers, hidden 4096, 32 heads (8 KV), 8 experts top-2"
    assert lines["gpt3-175b"].endswith(": 96 layers, hidden 12288, 96 heads")
