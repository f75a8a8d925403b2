"""Relative paths in a scenario or cases file are read from that file's folder (simcluster/paths.py)."""

import json
import shutil
from pathlib import Path

import yaml

from simcluster.scenario import load_scenario
from simcluster.validate import load_cases

ROOT = Path(__file__).resolve().parent.parent
# Llama 2 7B's config.json fields (meta-llama/Llama-2-7b-hf)
LLAMA2_7B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
    "max_position_embeddings": 4096, "tie_word_embeddings": False,
}


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "study"
    (folder / "llama").mkdir(parents=True)
    (folder / "llama" / "config.json").write_text(json.dumps(LLAMA2_7B))
    shutil.copy(ROOT / "hardware" / "dgx-a100.yaml", folder / "my-cluster.yaml")
    return folder


SCENARIO = {
    "model": {"hf_config": "llama/config.json"},
    "cluster": {"hardware": "my-cluster.yaml", "gpus": 8},
    "training": {"seq_len": 4096, "global_batch": 16},
}


def test_a_scenario_reads_its_paths_beside_it(tmp_path, monkeypatch):
    folder = _folder(tmp_path)
    (folder / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    sc = load_scenario(folder / "s.yaml")
    assert Path(sc.cluster.hardware) == folder / "my-cluster.yaml"
    assert Path(sc.model.hf_config) == folder / "llama" / "config.json"


def test_a_case_reads_its_paths_beside_the_cases_file(tmp_path, monkeypatch):
    folder = _folder(tmp_path)
    case = {"name": "c", "scenario": SCENARIO, "measured": {"step_time_s": 1.0}}
    (folder / "cases.yaml").write_text(yaml.safe_dump({"cases": [case]}))
    monkeypatch.chdir(tmp_path)
    (loaded,) = load_cases([folder / "cases.yaml"])
    assert Path(loaded.scenario["cluster"]["hardware"]) == folder / "my-cluster.yaml"


def test_names_and_working_directory_paths_are_left_alone(tmp_path, monkeypatch):
    folder = _folder(tmp_path)
    (folder / "s.yaml").write_text(yaml.safe_dump({**SCENARIO, "cluster": {"hardware": "dgx-h100", "gpus": 8}}))
    monkeypatch.chdir(folder.parent)
    assert load_scenario(folder / "s.yaml").cluster.hardware == "dgx-h100"
