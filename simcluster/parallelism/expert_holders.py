"""How many holders of experts (GPUs or nodes) one token's routed experts lie on: the copies a
DeepEP-family dispatch sends it (one per holder, :func:`simcluster.parallelism.expert.deepep_copies`).

Uniform routing spreads a token's top_k experts over every holder. Group-limited routing
(``model.router_groups`` / ``model.group_topk``: DeepSeek-V2/V3's ``n_group`` / ``topk_group``,
Megatron-Core's ``group_limited_topk``) first picks group_topk of the equal contiguous groups by
the sum of each group's best top_k / group_topk scores, then the token's top_k experts inside
those groups only. EP ranks hold contiguous experts, so the groups nest with the holders:

- a group spans several holders (groups divide the holders: DeepSeek-V3's 8 groups of 32 experts
  over 32 GPUs of 8): the token reaches group_topk groups with top_k / group_topk experts in each,
  spread uniformly over the group's holders (ASSUMPTION: the group score is the sum of exactly
  that many scores, so each chosen group tends to give that many; a simulation of the router on
  random logits, the load balancing Megatron's ``moe_router_force_load_balancing`` forces, gives
  6.85 GPUs a token at 32 GPUs where this gives 7.10 and uniform routing 7.27);
- a holder holds whole groups (the holders divide the groups: 8 groups over 8 nodes or 8 GPUs):
  the holders of its group_topk groups, ``distinct_holders`` over groups (8 nodes: 4 exactly,
  DeepSeek-V3 Sec 2.1.2's node-limited routing; the router simulation gives 3.96);
- groups and holders that do not nest, or a top_k the groups do not split evenly: uniform
  routing, an upper bound.
"""

from __future__ import annotations

import math

from simcluster.model import ModelSpec


def distinct_holders(experts: int, top_k: int, holders: int) -> float:
    """Expected number of the ``holders`` (GPUs or nodes, each with experts / holders of the
    experts) that hold at least one of a token's top_k experts, for uniform routing:
    N (1 - C(E - E/N, k) / C(E, k)), the complement of every one of its k experts lying
    elsewhere. In whole numbers until one division, correctly rounded: the float complement
    gave 0.9999999999999998 for one holder's worth of a top-1 token (6 experts on 6 nodes), and
    the dispatcher's inert note, which compares with top_k, missed it."""
    per_holder = experts // holders
    every = math.comb(experts, top_k)
    return holders * (every - math.comb(experts - per_holder, top_k)) / every


def holders_per_token(model: ModelSpec, holders: int) -> float:
    """Expected holders among ``holders`` (each with model.experts / holders contiguous experts)
    that one token's routed experts lie on, under the model's routing (module docstring)."""
    experts, top_k = model.experts, model.top_k
    groups, picked = model.router_groups, model.group_topk
    if groups > 1 and picked < groups and top_k % picked == 0:
        if holders % groups == 0:
            return picked * distinct_holders(experts // groups, top_k // picked, holders // groups)
        if groups % holders == 0:
            return distinct_holders(groups, picked, holders)
    return distinct_holders(experts, top_k, holders)
