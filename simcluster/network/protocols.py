"""NCCL protocols (LL, LL128, Simple) and the latency/bandwidth constants of NCCL's own model.

Numbers are NCCL's tuning constants (NVIDIA/nccl master, 2026: ``src/tuning/cost_model.cc``
``ncclTunerConstantsDefaults`` for ``baseLatencies`` and ``hwLatencies``; the per-protocol
bus-bandwidth refinements of ``src/tuning/ring.cc`` and ``tree.cc``; older releases kept them in
``src/graph/tuning.cc``), i.e. software constants of the library, not properties of a cluster.
The hardware part of each step - the wire/switch latency of the hop - comes from the profile
(``node.nvlink_latency_us``, ``node.nic_latency_us``, ``fabric.switch_latency_us``); NCCL's LL
hop latencies (NVLink 0.6 us, network 2.7 us) are the reference those profile numbers replace,
and the protocol's extra per-step cost is NCCL's ``hwLat[p] - hwLat[LL]``.

Which network latency a step pays: NVLS_TREE has one of its own (20.9 us for Simple, NVLS 18);
NCCL <= 2.2x's ``src/graph/tuning.cc`` gave a ring whose nodes hold one rank each the *tree*'s
(``ppn == 1``); the refactored ``src/tuning/ring.cc`` dropped it for a few releases and 2.32
restored it (``maxLocalRanks == 1``, "Preserve the pre-refactor model"): ``net_family`` carries
it for every GPU (:mod:`protocol_costs`).

The fractions below are NCCL <= 2.19's (ring LL 1/4 of the link). On an NVIDIA GPU the current
tuner's rates replace them - LL half the link capped by ``llMaxBws`` by GPU generation and host
CPU, per-channel LL128 and tree caps - with its CPU-dependent intra-step floor and ring Simple
plateau (:mod:`nccl_caps`, applied in :mod:`protocol_costs`). Not modelled: NCCL's
``treeCorrectionFactor`` (its tuner's tree bandwidth x0.4-0.9 between 64 B and 256 MiB): tried,
it made every case it touched worse (nanotron's one-GPU-per-node DP trees, and Alps through the
measured table, whose 2-node tree rows then explained less of the loss carried to the 64-node
rings), since the measured tables (``calibrated.py``) already carry NCCL's mid-size losses.
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOS: tuple[str, ...] = ("LL", "LL128", "Simple")
_US = 1e-6

# NCCL baseLat (us) per algorithm family and protocol.
_BASE = {
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "nvls": {"Simple": 0.0},
    "nvls_tree": {"Simple": 0.0},
}
# NCCL hwLat (us) per step: NVLink and network, per family and protocol.
_HW_NVLINK = {
    "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
    "nvls": {"Simple": 25.0},
    "nvls_tree": {"Simple": 25.0},
}
_HW_NET = {
    "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
    "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
    "nvls": {"Simple": 18.0},
    "nvls_tree": {"Simple": 20.9},
}
_REF_NVLINK_US, _REF_NET_US = 0.6, 2.7  # NCCL's ring/LL hop: the pure wire part of a step

# Fraction of the link bandwidth the payload gets (NCCL ncclTopoTuneModel refinements):
# ring LL 1/4, ring LL128 0.92; tree x0.92, tree LL /3.8, tree LL128 x7/9 (1 node) or 120/128
# (several nodes: ``_TREE_LL128_MULTI_NODE``).
_BW = {
    ("ring", "LL"): 0.25,
    ("ring", "LL128"): 0.92,
    ("ring", "Simple"): 1.0,
    ("tree", "LL"): 0.92 / 3.8,
    ("tree", "LL128"): 0.92 * 7 / 9,
    ("tree", "Simple"): 0.92,
    ("nvls", "Simple"): 1.0,
    ("nvls_tree", "Simple"): 1.0,
}
_TREE_LL128_MULTI_NODE = 0.92 * 120 / 128


@dataclass(frozen=True)
class Protocol:
    """Latency and bandwidth terms of one (algorithm family, protocol) pair."""

    family: str
    name: str
    base_s: float
    intra_extra_s: float
    inter_extra_s: float
    bw_fraction: float


def protocols_for(family: str, multi_node: bool = False, net_family: str | None = None) -> list[Protocol]:
    """The protocols NCCL offers for an algorithm family (NVLS, NVLS_TREE: Simple only).

    ``multi_node``: the plan crosses NVLink domains (tree LL128 then runs at 120/128 of the
    link, not 7/9); ``net_family``: the family whose network latency an inter-node step pays,
    when not its own (a ring with one rank per node pays the tree's)."""
    out = []
    net = _HW_NET[net_family or family]
    for name in PROTOS:
        if name not in _BASE[family]:
            continue
        bw = _BW[(family, name)]
        if multi_node and (family, name) == ("tree", "LL128"):
            bw = _TREE_LL128_MULTI_NODE
        out.append(
            Protocol(
                family,
                name,
                _BASE[family][name] * _US,
                (_HW_NVLINK[family][name] - _REF_NVLINK_US) * _US,
                (net[name] - _REF_NET_US) * _US,
                bw,
            )
        )
    return out


def step_latency(proto: Protocol, intra_steps: int, inter_steps: int, intra_hop_s: float,
                 inter_hop_s: float) -> float:  # fmt: skip
    """NCCL's latency model: base + steps x (hop latency + protocol overhead)."""
    return (
        proto.base_s
        + intra_steps * (intra_hop_s + proto.intra_extra_s)
        + inter_steps * (inter_hop_s + proto.inter_extra_s)
    )
