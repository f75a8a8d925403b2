"""Direct algorithms: NVLS in-switch all-reduce, pairwise all-to-all and point-to-point.

NVLS (NVLink SHARP, NCCL >= 2.17 on NVSwitch gen3+): every GPU pushes its buffer into the
switch, which reduces and multicasts the result back, so each GPU's NVLink carries about S each
way. The achieved algbw is ``efficiency.nvls`` x NVLink bandwidth (from nccl-tests), so the flow
bytes are scaled by nvlink/nvls efficiency to make one S cost S / (B x eff_nvls) alone while
still sharing the NVLink ports with other traffic.
"""

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
from simcluster.topology import Cluster


def switch_reduce_transfers(cluster: Cluster, gpus: list[int]) -> list[Transfer]:
    """In-switch reduction in one NVLink domain: each GPU pushes S into the switch and takes S
    back, the bytes scaled so S alone moves at NVLS's measured algbw (``efficiency.nvls``)."""
    eff = cluster.profile.efficiency
    scale = eff.nvlink / float(eff.nvls or eff.nvlink)
    nvs = f"nvs{cluster.domain_of(gpus[0])}"
    transfers: list[Transfer] = []
    for g in gpus:
        transfers.append(Transfer((cluster.link(f"gpu{g}", nvs),), scale))
        transfers.append(Transfer((cluster.link(nvs, f"gpu{g}"),), scale))
    return transfers


@register_algorithm
class Nvls(Algorithm):
    """NVSwitch in-network reduction within one NVLink domain."""

    name = "nvls"
    family = "nvls"
    ops = frozenset({"all_reduce"})

    def unsupported(self, op: str, cluster: Cluster, group: list[int], redop: str = "sum") -> str | None:
        why = super().unsupported(op, cluster, group, redop)
        if why:
            return why
        if len(by_domain(cluster, group)) != 1:
            return "'nvls' needs the whole group inside one NVLink domain"
        return nvls_unsupported(self.name, cluster, group, redop)

    def expand(self, op: str, cluster: Cluster, group: list[int]) -> Plan:
        transfers = switch_reduce_transfers(cluster, sorted(group))
        return Plan("nvls", tuple(transfers), 1, 0, *hop_latencies(cluster, transfers, group))


@register_algorithm
class Direct(Algorithm):
    """Every rank sends its share straight to every peer (all-to-all) or to one (send_recv:
    group = [src, dst])."""

    name = "direct"
    family = "ring"
    ops = frozenset({"all_to_all", "send_recv"})

    def expand(self, op: str, cluster: Cluster, group: list[int]) -> Plan:
        if op == "send_recv":
            pairs = [(group[0], group[1])] if len(group) > 1 else []
            frac = 1.0
        else:
            pairs = [(s, d) for s in group for d in group if s != d]
            frac = 1.0 / len(group)
        transfers = [Transfer(cluster.path(s, d), frac) for s, d in pairs]
        intra, inter = hop_latencies(cluster, transfers, group)
        domains = len(by_domain(cluster, group))
        multi = domains > 1
        return Plan("ring", tuple(transfers), 0 if multi else 1, 1 if multi else 0, intra, inter,
                    domains=domains, p2p=True)  # fmt: skip
