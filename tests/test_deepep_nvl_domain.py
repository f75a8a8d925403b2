"""DeepEP's "node" is the NVLink domain: on an NVL72 rack the EP group's 4-GPU trays are one.

HybridEP (deepseek-ai/DeepEP's hybrid-ep backend, Megatron-Core's flex dispatcher on GB200)
names an NVLink domain a node: deepseek-ai/DeepEP issue 596 (2026-04-16, a maintainer: "the
term 'nodes' here (in num_of_nodes) actually refers to NVL domains"; sending over RDMA what
NVLink reaches "would increase communication time"). Inside one domain a token goes once to
each GPU holding any of its experts, so the copies are distinct GPUs, N (1 - C(E - E/N, k) /
C(E, k)) for uniform routing; across domains, distinct domains.
"""

from __future__ import annotations

import math

import pytest

from tests.engine_helpers import run

TOKENS = 4096
HIDDEN = 2048


def _scenario(hardware: str, gpus: int) -> dict:
    return {
        "model": {
            "name": "qwen3-30b-like", "layers": 1, "hidden": HIDDEN, "heads": 32, "kv_heads": 4,
            "head_dim": 128, "ffn": 6144, "vocab": 1024, "experts": 128, "top_k": 8,
            "expert_ffn": 768,
        },
        "cluster": {"hardware": hardware, "gpus": gpus},
        "parallel": {"ep": gpus, "etp": 1},
        "training": {"seq_len": TOKENS, "micro_batch": 1, "global_batch": gpus, "precision": "bf16"},
        "moe": {"dispatcher": "deepep"},
    }  # fmt: skip


def _holders(experts: int, top_k: int, holders: int) -> float:
    per = experts // holders
    return holders * (1 - math.comb(experts - per, top_k) / math.comb(experts, top_k))


def _copies(hardware: str, gpus: int) -> float:
    events = run(_scenario(hardware, gpus)).events
    ev = events[(events["name"] == "ep_dispatch") & (events["rank"] == 0)]
    return float(ev["bytes"].iloc[0]) / (TOKENS * HIDDEN * 2)


def test_ep16_on_gb200_sends_one_copy_per_distinct_gpu():
    """16 GB200 are four trays of one NVL72 domain: 16 (1 - C(120, 8) / C(128, 8)) = 6.59
    copies a token (the trays' count, 3.63, sent 45% too few bytes over NVLink)."""
    assert _copies("gb200-nvl72", 16) == pytest.approx(_holders(128, 8, 16), rel=1e-9)
    assert _holders(128, 8, 16) == pytest.approx(6.59, abs=0.01)


def test_ep16_over_two_h100_nodes_sends_one_copy_per_distinct_node():
    """Two 8-GPU nodes, two NVLink domains: a token crosses once to each node holding its
    experts, 2 (1 - C(64, 8) / C(128, 8)) = 1.99."""
    assert _copies("dgx-h100", 16) == pytest.approx(_holders(128, 8, 2), rel=1e-9)
