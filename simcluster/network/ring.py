"""Ring (with one channel per rail) and hierarchical all-reduce.

Ring: each of C channels carries S/C around its own ring; per rank the wire bytes are
2(n-1)/n S (all-reduce), (n-1)/n S (all-gather, reduce-scatter) - the textbook bandwidth-optimal
ring (Patarasuk & Yuan 2009) that nccl-tests' busbw normalises away. Channels matter only when a
ring crosses NVLink domains: C = the fewest GPUs the group has in one domain, each channel
entering a domain on a different rail, as NCCL's multi-channel rings do on rail-optimized DGX
fabrics; NCCL builds its channels for the whole communicator, so a group split unequally over
domains (two NVL72 racks holding 36 and 28 of its GPUs) still crosses on that many NICs.

On a mesh scale-up (``node.scale_up: mesh``: a direct link between every pair of a node's GPUs)
RCCL builds enough channels that every link of the group carries an equal share (AMD: all seven
xGMI links of an MI300X carry an 8-GPU all-reduce, ~7x one link's bus bandwidth). The ring's hops
inside a domain are therefore spread evenly over all ordered pairs of the domain's GPUs, and each
channel crosses between domains on one rail (exit and entry at the same local GPU, no PXN hop, so
no xGMI link carries relay traffic on top of its share). A pair of GPUs so gets one link.

Hierarchical all-reduce: reduce-scatter inside each NVLink domain, all-reduce of the S/g shards
across domains (one ring per local position, i.e. per rail), all-gather inside the domain; the
three phases are pipelined (concurrent flows), latency is the sum of their steps.
"""

from __future__ import annotations

from simcluster.network.algorithms import (
    Algorithm,
    Plan,
    Transfer,
    by_domain,
    hop_latencies,
    register_algorithm,
    ring_order,
    ring_transfers,
)
from simcluster.topology import Cluster

_RING_FRACTION = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def _steps(op: str, n: int, domains: int) -> tuple[int, int]:
    """NCCL ring step counts (total, inter-node): NVIDIA/nccl ``src/tuning/ring.cc``, all-reduce
    2(nNodes - 1) inter-node steps (2 nNodes in releases up to 2.2x's ``ncclTopoTuneModel``:
    a ring crosses D domain boundaries per pass, the last back to the first)."""
    inter_ar = 2 * (domains - 1)
    total, inter = {
        "all_reduce": (2 * (n - 1), inter_ar),
        "all_gather": (n - 1, domains - 1),
        "reduce_scatter": (n - 1, domains - 1),
        "broadcast": (n - 1, domains - 1),
    }[op]
    inter = min(inter, total)
    return total - inter, inter


def _mesh_transfers(
    cluster: Cluster, domains: list[list[int]], frac: float, channels: int, chain: bool
) -> list[Transfer]:
    """A ring's transfers on a mesh scale-up: per channel, its hops inside each domain spread
    over the g (g - 1) ordered pairs, and one hop between consecutive domains on the
    channel's rail (local GPU ``c`` to local GPU ``c``; an open chain for broadcast)."""
    transfers: list[Transfer] = []
    d = len(domains)
    for c in range(channels):
        for gpus in domains:
            g = len(gpus)
            if g > 1:
                # A closed ring inside one domain has g hops, otherwise g - 1 (the last leaves
                # the domain); their frac each is spread over the g (g - 1) ordered pairs.
                share = frac / (g - 1) if d == 1 and not chain else frac / g
                transfers += [
                    Transfer(cluster.path(a, b), share) for a in gpus for b in gpus if a != b
                ]
        hops = d - 1 if chain else d
        if d > 1:
            transfers += [
                Transfer(cluster.path(domains[k][c], domains[(k + 1) % d][c]), frac)
                for k in range(hops)
            ]
    return transfers


@register_algorithm
class Ring(Algorithm):
    """Ring with one channel per GPU-per-domain (rail)."""

    name = "ring"
    family = "ring"
    ops = frozenset(_RING_FRACTION)

    def expand(self, op: str, cluster: Cluster, group: list[int]) -> Plan:
        domains = by_domain(cluster, group)
        n = len(group)
        sizes = {len(d) for d in domains}
        channels = min(sizes) if len(domains) > 1 else 1
        frac = _RING_FRACTION[op](n) / channels
        if cluster.mesh:
            transfers = _mesh_transfers(cluster, domains, frac, channels, op == "broadcast")
        else:
            transfers = []
            for c in range(channels):
                ring = ring_order(domains, c)
                if op == "broadcast":
                    # Chain from the root (first GPU of the caller's group order).
                    root = ring.index(group[0])
                    ring = ring[root:] + ring[:root]
                transfers += ring_transfers(cluster, ring, frac, chain=op == "broadcast")
        intra, inter = _steps(op, n, len(domains))
        # NCCL ring.cc: with one rank per node an inter-node step pays the tree's net latency
        alone = len(domains) > 1 and max(sizes) == 1
        return Plan(
            "ring", tuple(transfers), intra, inter, *hop_latencies(cluster, transfers, group),
            domains=len(domains), net_family="tree" if alone else None,
        )  # fmt: skip


@register_algorithm
class Hierarchical(Algorithm):
    """Intra-domain reduce-scatter -> inter-domain all-reduce per rail -> intra all-gather."""

    name = "hierarchical"
    family = "ring"
    ops = frozenset({"all_reduce"})
    auto = False

    def unsupported(self, op: str, cluster: Cluster, group: list[int], redop: str = "sum") -> str | None:
        why = super().unsupported(op, cluster, group, redop)
        if why:
            return why
        domains = by_domain(cluster, group)
        if len(domains) < 2 or len({len(d) for d in domains}) != 1 or len(domains[0]) < 2:
            return (
                "'hierarchical' needs >= 2 NVLink domains with the same number (>= 2) of GPUs each"
            )
        return None

    def expand(self, op: str, cluster: Cluster, group: list[int]) -> Plan:
        domains = by_domain(cluster, group)
        g, d = len(domains[0]), len(domains)
        transfers: list[Transfer] = []
        for gpus in domains:  # reduce-scatter and all-gather of S inside the domain
            transfers += ring_transfers(cluster, gpus, 2 * (g - 1) / g)
        for k in range(g):  # all-reduce of the S/g shard across domains, one ring per rail
            transfers += ring_transfers(cluster, [dom[k] for dom in domains], 2 * (d - 1) / d / g)
        intra_steps, inter_steps = 2 * (g - 1), 2 * (d - 1)
        return Plan("ring", tuple(transfers), intra_steps, inter_steps,
                    *hop_latencies(cluster, transfers, group))  # fmt: skip
