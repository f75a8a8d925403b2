"""Group-limited routing (``model.router_groups`` / ``model.group_topk``): the holders (GPUs or
nodes) one token's experts lie on, which a DeepEP-family dispatch sends it to once each.

Sources: DeepSeek-V3 technical report Sec 2.1.2 (node-limited routing: "each token will be sent
to at most M nodes", M = 4) and its config.json (n_group 8, topk_group 4); Megatron-Core
``moe_utils.group_limited_topk`` (groups scored by the sum of their top topk // group_topk
scores, group_topk of them kept, then the top-k experts inside those), whose steps the router
simulation below repeats on random logits."""

from __future__ import annotations

from dataclasses import replace
from math import comb
from pathlib import Path

import numpy as np
import pytest

from simcluster.errors import UserError
from simcluster.importers import ImportOptions, import_config
from simcluster.model import build_model, from_hf_config, load_preset
from simcluster.parallelism.expert_holders import distinct_holders, holders_per_token
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import run

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
BASE = {"layers": 1, "hidden": 64, "heads": 8, "vocab": 256, "experts": 32, "top_k": 8, "expert_ffn": 64}


def _router_holders(experts: int, top_k: int, groups: int, picked: int, holders: int, tokens: int = 6000) -> float:
    """Megatron-Core's group_limited_topk on sigmoid scores of random normal logits (the uniform
    load that --moe-router-force-load-balancing forces), counted per token: distinct holders."""
    rng = np.random.default_rng(7)
    scores = 1.0 / (1.0 + np.exp(-rng.standard_normal((tokens, experts))))
    per_group = np.sort(scores.reshape(tokens, groups, -1), axis=2)[:, :, -(top_k // picked):].sum(axis=2)
    chosen = np.argsort(-per_group, axis=1)[:, :picked]
    mask = np.zeros((tokens, groups), dtype=bool)
    np.put_along_axis(mask, chosen, True, axis=1)
    masked = np.where(np.repeat(mask, experts // groups, axis=1), scores, -np.inf)
    top = np.argsort(-masked, axis=1)[:, :top_k] // (experts // holders)
    return float(np.mean([len(set(row)) for row in top]))


def test_deepseek_v3_reaches_four_of_eight_nodes():
    """Eight groups on eight nodes: each token's experts on exactly its 4 groups' nodes (the
    report's M = 4), where uniform routing would reach 8 (1 - C(224, 8) / C(256, 8)) = 5.29."""
    v3 = load_preset("deepseek-v3")
    assert (v3.router_groups, v3.group_topk) == (8, 4)
    assert holders_per_token(v3, 8) == 4.0
    assert distinct_holders(256, 8, 8) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)))
    assert distinct_holders(256, 8, 8) == pytest.approx(5.295, abs=1e-3)


def test_holders_of_whole_groups_count_the_groups_picked():
    """Four holders of two groups each: 4 (1 - C(6, 4) / C(8, 4)) = 22/7 holders a token."""
    assert holders_per_token(load_preset("deepseek-v3"), 4) == pytest.approx(22 / 7)


def test_a_group_over_several_gpus_takes_its_share_of_the_tokens_experts():
    """DeepSeek-V3 on 32 GPUs (8 experts each, a group of 32 over 4 GPUs): 4 groups, 2 experts
    in each, 4 (1 - C(24, 2) / C(32, 2)) GPUs a group: 16 x 220 / 496 = 7.097."""
    assert holders_per_token(load_preset("deepseek-v3"), 32) == pytest.approx(16 * 220 / 496)


@pytest.mark.parametrize("holders", [4, 8, 16, 32, 64])
def test_the_count_bounds_megatrons_router_from_above_within_six_percent(holders):
    """Against the router simulation: never below it (a dispatch is not costed short), at most
    6% above (the per-group count varies about top_k / group_topk; 16 GPUs is the widest gap)."""
    v3 = load_preset("deepseek-v3")
    simulated = _router_holders(256, 8, 8, 4, holders)
    assert simulated <= holders_per_token(v3, holders) <= 1.065 * simulated


def test_groups_and_holders_that_do_not_nest_route_as_uniform():
    m = build_model({**BASE, "experts": 48, "router_groups": 8, "group_topk": 4})
    assert holders_per_token(m, 12) == distinct_holders(48, 8, 12)
    # every group picked limits nothing; nor does a top_k the groups do not split evenly
    assert holders_per_token(build_model({**BASE, "router_groups": 4, "group_topk": 4}), 8) == distinct_holders(32, 8, 8)
    assert holders_per_token(build_model({**BASE, "router_groups": 8, "group_topk": 3}), 8) == distinct_holders(32, 8, 8)


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"router_groups": 8}, "model.group_topk", "needs both"),
        ({"group_topk": 2}, "model.router_groups", "needs both"),
        ({"router_groups": 7, "group_topk": 2}, "model.router_groups", "divisor of experts"),
        ({"router_groups": 8, "group_topk": 9}, "model.group_topk", "1..router_groups=8"),
        ({"router_groups": 8, "group_topk": 1}, "model.group_topk", "fewer than top_k=8"),
    ],
)
def test_impossible_groups_are_one_line_errors(fields, field, says):
    with pytest.raises(UserError) as err:
        build_model({**BASE, **fields})
    assert err.value.field == field and says in err.value.one_line()


def test_a_dense_model_has_no_router_groups():
    with pytest.raises(UserError) as err:
        build_model({"layers": 1, "hidden": 64, "heads": 8, "vocab": 256, "ffn": 64, "router_groups": 8})
    assert err.value.field == "model.router_groups"


def test_config_json_and_megatron_spellings(tmp_path):
    """DeepSeek-V3's config.json (n_group, topk_group, the noaux_tc gate) and Megatron-Core's
    --moe-router-num-groups / --moe-router-group-topk; DeepSeek-V2-Lite's greedy gate and one
    group route without groups."""
    v3 = from_hf_config(FIXTURES / "deepseek-v3.json")
    assert (v3.router_groups, v3.group_topk) == (8, 4)
    lite = from_hf_config(FIXTURES / "deepseek-v2-lite.json")
    assert (lite.router_groups, lite.group_topk) == (0, 0)
    sc = scenario_from_dict({
        "model": {**BASE, "n_group": 8, "topk_group": 4},
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 8},
    })  # fmt: skip
    assert (sc.model.router_groups, sc.model.group_topk) == (8, 4)
    args = tmp_path / "train.args"
    args.write_text(
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --micro-batch-size 1 "
        "--bf16 --vocab-size 32000 --num-experts 32 --moe-router-topk 8 --moe-router-num-groups 8 "
        "--moe-router-group-topk 4\n"
    )
    out = import_config("megatron", args, ImportOptions(cluster="dgx-h100", nodes=1))
    assert (out.scenario["model"]["router_groups"], out.scenario["model"]["group_topk"]) == (8, 4)


def _dsv3_like(groups: bool) -> dict:
    model = {"name": "dsv3-like", "layers": 1, "hidden": 7168, "heads": 56, "kv_heads": 56, "ffn": 18432,
             "vocab": 1024, "experts": 256, "top_k": 8, "expert_ffn": 2048}
    if groups:
        model |= {"router_groups": 8, "group_topk": 4}
    return {
        "model": model,
        "cluster": {"hardware": "dgx-h100", "gpus": 64},
        "parallel": {"ep": 64, "etp": 1},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64},
        "moe": {"dispatcher": "deepep"},
    }  # fmt: skip


def _dispatch_bytes(scenario: dict) -> float:
    ev = run(scenario).events
    return float(ev[(ev["name"] == "ep_dispatch") & (ev["rank"] == 0)].iloc[0]["bytes"])


def test_deepep_across_nodes_sends_a_token_to_its_four_groups_nodes():
    """EP 64 over eight DGX H100s: DeepEP's dispatch sends each token to 4 nodes under the
    groups, 5.29 without them: the bytes in that ratio."""
    ratio = _dispatch_bytes(_dsv3_like(True)) / _dispatch_bytes(_dsv3_like(False))
    assert ratio == pytest.approx(4.0 / distinct_holders(256, 8, 8), rel=1e-9)


@pytest.mark.parametrize("holders", [4, 8, 16, 32, 64])
def test_picking_more_groups_never_reaches_fewer_holders(holders):
    """Loosening the limit (group_topk 1, 2, 4, 8 of 8 groups, each splitting top_k 8 evenly)
    never lowers the holders a token reaches, and every group picked is uniform routing."""
    v3 = load_preset("deepseek-v3")
    counts = [holders_per_token(replace(v3, group_topk=k), holders) for k in (1, 2, 4, 8)]
    assert counts == sorted(counts)
    assert counts[-1] == distinct_holders(256, 8, holders)
