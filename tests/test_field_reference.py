"""The scenario field reference (``simcluster list fields``, docs/scenario-fields.md) is the
schema's own: every key described, the doc regenerated with the schema, the keys the shipped
scenarios and validation cases write all listed, and the other names a key is read under
(Megatron-LM's launch flags, Hugging Face config.json keys) shown beside it."""

from __future__ import annotations

from pathlib import Path

import yaml

from simcluster.data import data_dir
from simcluster.field_reference import field_docs, markdown
from simcluster.hardware import CLUSTER_OVERRIDES

ROOT = Path(__file__).resolve().parent.parent


def _docs() -> dict[str, object]:
    return {d.key: d for d in field_docs()}


def test_the_doc_is_the_schema_regenerated():
    written = (ROOT / "docs" / "scenario-fields.md").read_text()
    assert written == markdown(field_docs()), "run: python tools/write_field_reference.py"


def test_every_field_says_what_it_means():
    assert [d.key for d in field_docs() if not d.description] == []


def test_each_cluster_override_names_the_profile_field_it_replaces():
    docs = _docs()
    for key, profile_path in CLUSTER_OVERRIDES.items():
        assert profile_path in docs[f"cluster.{key}"].description, key


def _written_keys(scenario: dict) -> set[str]:
    keys = set()
    for section, value in scenario.items():
        if isinstance(value, dict):
            keys.update(f"{section}.{key}" for key in value)
        else:
            keys.add(section)
    return keys


def test_every_key_the_shipped_scenarios_and_cases_write_is_listed():
    """Keys as the shipped files spell them (no aliases there): each has its row."""
    listed = set(_docs())
    written: set[str] = set()
    for path in sorted(data_dir("scenarios").glob("*.yaml")):
        written |= _written_keys(yaml.safe_load(path.read_text()))
    for path in sorted((ROOT / "validation").glob("*.yaml")):
        for case in yaml.safe_load(path.read_text())["cases"]:
            written |= _written_keys(case["scenario"])
    assert len(written) > 60
    assert sorted(written - listed) == []


def test_defaults_and_bounds_as_the_schema_enforces_them():
    """torch DDP's bucket_cap_mb default is 25 (MB); ZeRO has stages 0-3 (Rajbhandari et al.
    2020); the GPU count has no default."""
    docs = _docs()
    assert (docs["dp.bucket_mb"].default, docs["dp.bucket_mb"].kind) == ("25.0", "float | megatron-core | comm-overlap")
    assert (docs["parallel.zero"].default, docs["parallel.zero"].kind) == ("0", "int >= 0, <= 3")
    assert docs["cluster.gpus"].default == "required"
    assert docs["parallel.dp"].default == "unset"
    assert docs["training.precision"].kind == "fp32 | bf16 | fp16 | fp8 | nvfp4"
    assert docs["simulation.stragglers"].default == "[]"


def test_launch_flag_and_config_names_are_shown_beside_the_key():
    """Megatron-LM's --tensor-model-parallel-size and Hugging Face's num_hidden_layers and
    num_key_value_heads are read as tp, layers and kv_heads (simcluster/key_aliases.py)."""
    docs = _docs()
    assert "tensor_model_parallel_size" in docs["parallel.tp"].aliases
    assert "num_hidden_layers" in docs["model.layers"].aliases
    assert "num_key_value_heads" in docs["model.kv_heads"].aliases


def test_list_fields_prints_a_section_and_refuses_an_unknown_one(cli):
    res = cli("list", "fields", "parallel", "dp.bucket_mb")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[0] == "parallel:"
    assert "  parallel.tp  int > 0, default 1" in lines
    assert "  dp.bucket_mb  float | megatron-core | comm-overlap, default 25.0" in lines
    assert not any(line.startswith("  model.") for line in lines)
    bad = cli("list", "fields", "paralel")
    assert bad.code == 2
    assert bad.err.count("\n") == 1 and "sections: cluster, dp, lora, model" in bad.err


def test_a_profile_argument_is_still_refused_outside_hardware_and_fields(cli):
    res = cli("list", "schedules", "extra")
    assert res.code == 2
    assert "simcluster list hardware extra" in res.err


def test_shorthand_keys_are_listed_and_read():
    """cluster.nodes, training.global_batch_tokens and parallel.fsdp are not schema fields but
    are read before validation (nodes.py, global_batch.py, fsdp_column.py): each has its row,
    and each stands for the schema fields it says (8 nodes of a DGX H100 = 64 GPUs; Llama 3's
    16M-token batch at 8,192 tokens = 2,048 sequences; FSDP FULL_SHARD = ZeRO-3)."""
    from simcluster.scenario import Scenario, scenario_from_dict
    from simcluster.scenario.loading import _SAME_QUANTITY

    docs = _docs()
    schema = {f"{s}.{k}" for s, m in Scenario.model_fields.items() for k in getattr(m.annotation, "model_fields", {})}
    shorthands = {key for key in _SAME_QUANTITY if key not in schema}
    assert shorthands == {"cluster.nodes", "training.global_batch_tokens", "parallel.fsdp"}
    assert shorthands <= set(docs)
    sc = scenario_from_dict({
        "model": {"preset": "llama3-8b"},
        "cluster": {"hardware": "dgx-h100", "nodes": 8},
        "parallel": {"fsdp": "FULL_SHARD"},
        "training": {"seq_len": 8192, "global_batch_tokens": "16M"},
    })  # fmt: skip
    assert (sc.cluster.gpus, sc.training.global_batch, sc.parallel.zero) == (64, 2048, 3)
    assert "sharding_strategy" in docs["parallel.fsdp"].aliases
