"""DeepEP's normal kernels inside one node, against its README's measured bandwidth.

deepseek-ai/DeepEP README.md, "Normal kernels with NVLink and RDMA forwarding": H800 ("~160 GB/s
NVLink maximum bandwidth"), the DeepSeek-V3/R1 pretraining setting (4,096 tokens per batch,
hidden 7,168, top-8 experts, FP8 dispatching and BF16 combining), EP 8 inside one node: dispatch
153 GB/s, combine 158 GB/s "bottleneck bandwidth (NVLink)". ``tests/test_intranode.py`` counts
that bandwidth as the received bytes over the time, a rank's own tokens included
(``dispatch_bf16_nvl_recv_bytes = recv_x.numel() * 2``, times (1 + 4/128) / 2 in FP8).
DeepEP sends a token once to each GPU holding its experts (``is_token_in_rank``), so for
balanced routing a rank receives what it sends and the events' bytes (the send buffer) stand
for the received ones (parallelism/expert.py ``deepep_copies``, ``deepep_link_factor``).
"""

from __future__ import annotations

import pytest

from tests.engine_helpers import run

DEEPEP_DISPATCH_GBPS = 153.0
DEEPEP_COMBINE_GBPS = 158.0


def _scenario(dispatcher: str) -> dict:
    return {
        "model": {
            "name": "dsv3-like", "layers": 1, "hidden": 7168, "heads": 56, "kv_heads": 56,
            "ffn": 18432, "vocab": 1024, "experts": 256, "top_k": 8, "expert_ffn": 2048,
        },
        "cluster": {"hardware": "hgx-h800", "gpus": 8},
        "parallel": {"ep": 8, "etp": 1},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 8, "precision": "fp8",
                     "fp8_recipe": "block"},
        "moe": {"dispatcher": dispatcher, "fp8_dispatch": True},
    }  # fmt: skip


def _rate(events, name: str) -> float:
    ev = events[(events["kind"] == "all_to_all") & (events["name"] == name) & (events["rank"] == 0)]
    row = ev.iloc[0]
    return row["bytes"] / (row["end_s"] - row["start_s"]) / 1e9


def test_deepep_intranode_rates_as_its_readme_measured_them():
    """Dispatch (FP8) and combine (BF16) each within 5% of DeepEP's 153 and 158 GB/s: the
    hgx-h800 profile keeps their mean as DeepEP's rate (efficiency.deepep_nvlink, 155.5 of
    200 GB/s), a rank's own share counted, which DeepEP's copy kernels spend on it as on the
    others'."""
    events = run(_scenario("deepep")).events
    assert _rate(events, "ep_dispatch") == pytest.approx(DEEPEP_DISPATCH_GBPS, rel=0.05)
    assert _rate(events, "ep_combine") == pytest.approx(DEEPEP_COMBINE_GBPS, rel=0.05)


def test_nccl_all_to_all_keeps_its_own_share_off_the_links():
    """Megatron's alltoall dispatcher (NCCL's all-to-all) copies the own share locally: by
    DeepEP's measure, send bytes over time, it runs 8/7 as fast as the links carry the others'
    share (hgx-h800: 200 GB/s x efficiency.nvlink 0.80 = 160, so 183)."""
    nccl = _rate(run(_scenario("alltoall")).events, "ep_combine")
    assert nccl == pytest.approx(200 * 0.80 * 8 / 7, rel=0.02)


def test_a_rate_at_the_links_share_charges_the_own_share_at_the_link_rate():
    """DeepEP's rate written as the links' own share (efficiency.deepep_nvlink [[8, 0.80]], as a
    profile without the table runs it) moves its received bytes, its own share with them, at
    the links' 160 GB/s: NCCL's all-to-all runs 8/7 as fast by that measure."""
    at_links = _scenario("deepep")
    at_links["cluster"]["profile"] = {"efficiency": {"deepep_nvlink": [[8, 0.80]]}}
    deepep = _rate(run(at_links).events, "ep_combine")
    nccl = _rate(run(_scenario("alltoall")).events, "ep_combine")
    assert nccl / deepep == pytest.approx(8 / 7, rel=0.02)
