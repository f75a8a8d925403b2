"""Scenario builders for engine tests: balanced pipelines on an ideal network."""

from __future__ import annotations

from typing import Any

from simcluster.engine import simulate
from simcluster.scenario import scenario_from_dict


def pipeline_scenario(
    p: int, m: int, schedule: str, v: int = 1, layers: int | None = None, **extra: Any
) -> dict:
    """A pure-pipeline GPT-style scenario with a tiny vocabulary (balanced stages)."""
    chunks = 2 if schedule in ("zbv", "dualpipev") else v
    layers = layers or 2 * p * chunks
    data = {
        "name": f"pipe-{schedule}",
        "model": {
            "layers": layers,
            "hidden": 4096,
            "heads": 32,
            "ffn": 16384,
            "vocab": 8,
            "mlp": "gelu",
            "norm": "layernorm",
        },
        "cluster": {
            "hardware": "dgx-h100",
            "gpus": p,
            "gpus_per_node": min(p, 8),
            "network": "ideal",
        },
        "parallel": {"pp": p, "schedule": schedule, "vpp": v},
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": m, "precision": "bf16"},
        "overlap": {"dp_grad_reduce": True, "param_gather": True},
    }
    return merge_sections(data, **extra)


def merge_sections(data: dict, **sections: dict) -> dict:
    """Update ``data``'s sections in place with ``sections`` (one level deep) and return it."""
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return data


def run(data: dict, **kw: Any):
    return simulate(scenario_from_dict(data), **kw)
