"""NCCL-style tree all-reduce: a chain inside each NVLink domain and two complementary binary
trees across domains (the "double binary tree" of NCCL 2.4, Sanders et al. 2009), each carrying
half the data, spread over the rails. Reduce goes up and broadcast comes down, pipelined.
Latency: 2((g-1) intra + log2(D) inter) steps, as NCCL's tuning model."""

from __future__ import annotations

import math

from simcluster.network.algorithms import (
    Algorithm,
    Plan,
    Transfer,
    by_domain,
    hop_latencies,
    register_algorithm,
)
from simcluster.topology import Cluster


def _binary_tree_edges(d: int, mirror: bool) -> list[tuple[int, int]]:
    """(parent, child) edges of a heap-shaped binary tree on d items; ``mirror`` numbers the
    items from the other end so interior nodes of one tree are leaves of the other."""
    name = (lambda i: d - 1 - i) if mirror else (lambda i: i)
    return [(name((i - 1) // 2), name(i)) for i in range(1, d)]


@register_algorithm
class Tree(Algorithm):
    """Chain within a domain + double binary tree across domains (all-reduce only)."""

    name = "tree"
    family = "tree"
    ops = frozenset({"all_reduce"})

    def expand(self, op: str, cluster: Cluster, group: list[int]) -> Plan:
        domains = by_domain(cluster, group)
        transfers: list[Transfer] = []
        for gpus in domains:  # chain: reduce up and broadcast down, S each way
            for a, b in zip(gpus, gpus[1:], strict=False):
                transfers += [Transfer(cluster.path(b, a), 1.0), Transfer(cluster.path(a, b), 1.0)]
        d = len(domains)
        rails = min(len(x) for x in domains)
        for mirror in (False, True):
            for parent, child in _binary_tree_edges(d, mirror):
                for k in range(rails):
                    p, c = domains[parent][k], domains[child][k]
                    frac = 0.5 / rails
                    transfers += [
                        Transfer(cluster.path(c, p), frac),
                        Transfer(cluster.path(p, c), frac),
                    ]
        g = max(len(x) for x in domains)
        inter = 2 * math.ceil(math.log2(d)) if d > 1 else 0
        return Plan("tree", tuple(transfers), 2 * (g - 1), inter,
                    *hop_latencies(cluster, transfers, group))  # fmt: skip
