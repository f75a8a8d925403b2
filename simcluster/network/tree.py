"""NCCL-style tree all-reduce (and NVLS_TREE below): a chain inside each NVLink domain and two
complementary binary trees across domains (the "double binary tree" of NCCL 2.4, Sanders et al.
2009), each carrying half the data, spread over the rails. Reduce goes up and broadcast comes
down, pipelined.

The trees are NCCL's own (``src/graph/trees.cc``, ``ncclGetBtree`` / ``ncclGetDtree``): the
first is a binary tree rooted at node 0 with one child, in which a node's parent and children
follow from its lowest set bit (0-8, 8-4-12, 4-2-6, 2-1-3, ...); the second mirrors it
(node r as D - 1 - r) when D is even and shifts it by one node when D is odd. The shape sets how
much a NIC carries: on four nodes node 2 is interior in the first tree and a leaf of the second,
so it sends 2 x S/2 down, S/2 up and S/2 up again - 2 S per rail's share where a heap-shaped tree
pair would load no NIC beyond 1.5 S (on two nodes both give S).

Latency: 2((g-1) intra + floor(log2 D) inter) steps, as NCCL's tuning model (``log2i``);
NVLS_TREE: one NVLS step inside the domain and 2 floor(log2 D) network steps (NVIDIA/nccl
``src/tuning/nvls.cc``)."""

from __future__ import annotations

from simcluster.network.algorithms import (
    Algorithm,
    Plan,
    Transfer,
    by_domain,
    hop_latencies,
    nvls_unsupported,
    register_algorithm,
)
from simcluster.network.direct import switch_reduce_transfers
from simcluster.topology import Cluster


def _depth(d: int) -> int:
    """NCCL's tree depth term ``log2i(nNodes)``: floor(log2 d)."""
    return max(d, 1).bit_length() - 1


def _btree_parent(r: int, d: int) -> int:
    """Parent of node ``r`` > 0 in NCCL's btree of ``d`` nodes: clear r's lowest set bit and
    set the next one up, or only clear it when that lands beyond the last node."""
    low = r & -r
    up = (r ^ low) | (low << 1)
    return up if up < d else r ^ low


def _dtree_edges(d: int, second: bool) -> list[tuple[int, int]]:
    """(parent, child) edges of NCCL's first btree on d nodes, or of its second tree: the
    first mirrored (even d) or shifted by one node (odd d)."""
    edges = [(_btree_parent(r, d), r) for r in range(1, d)]
    if not second:
        return edges
    name = (lambda i: d - 1 - i) if d % 2 == 0 else (lambda i: (i + 1) % d)
    return [(name(p), name(c)) for p, c in edges]


def _across_domains(cluster: Cluster, domains: list[list[int]]) -> list[Transfer]:
    """The double binary tree across domains: local position k's shard (S / rails) on its own
    rail, half in each tree, reduced up and broadcast down."""
    d, rails = len(domains), min(len(x) for x in domains)
    transfers: list[Transfer] = []
    for second in (False, True):
        for parent, child in _dtree_edges(d, second):
            for k in range(rails):
                p, c = domains[parent][k], domains[child][k]
                frac = 0.5 / rails
                transfers += [
                    Transfer(cluster.path(c, p), frac),
                    Transfer(cluster.path(p, c), frac),
                ]
    return transfers


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
        transfers += _across_domains(cluster, domains)
        d = len(domains)
        g = max(len(x) for x in domains)
        inter = 2 * _depth(d)
        return Plan("tree", tuple(transfers), 2 * (g - 1), inter,
                    *hop_latencies(cluster, transfers, group), domains=d)  # fmt: skip


@register_algorithm
class NvlsTree(Algorithm):
    """NCCL's NVLS_TREE all-reduce (NCCL >= 2.18, multi-node with NVLink SHARP): each NVLink
    domain reduces in the switch (every GPU pushes S up and takes S back, as ``nvls``), and
    the shard of each local position crosses domains on its own rail in two complementary
    binary trees (half each, as ``tree``). A NIC so carries S/g each way where a ring carries
    2(n-1)/n x S/g; the switch side runs at NVLS's measured rate."""

    name = "nvls_tree"
    family = "nvls_tree"
    ops = frozenset({"all_reduce"})

    def unsupported(self, op: str, cluster: Cluster, group: list[int], redop: str = "sum") -> str | None:
        why = super().unsupported(op, cluster, group, redop)
        if why:
            return why
        domains = by_domain(cluster, group)
        if len(domains) < 2 or len({len(d) for d in domains}) != 1:
            return "'nvls_tree' needs >= 2 NVLink domains with the same number of GPUs each"
        return nvls_unsupported(self.name, cluster, group, redop)

    def expand(self, op: str, cluster: Cluster, group: list[int]) -> Plan:
        domains = by_domain(cluster, group)
        transfers: list[Transfer] = []
        for gpus in domains:
            transfers += switch_reduce_transfers(cluster, gpus)
        transfers += _across_domains(cluster, domains)
        # NCCL: intraLat + 2 log2i(nNodes) interLat - one switch step, not one each way
        d = len(domains)
        return Plan("nvls_tree", tuple(transfers), 1, 2 * _depth(d),
                    *hop_latencies(cluster, transfers, group), domains=d)  # fmt: skip
