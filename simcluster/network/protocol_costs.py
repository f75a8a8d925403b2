"""What each NCCL protocol costs for one plan on one profile: its bandwidth fraction and latency.

The candidates the planner times (NCCL: ``ncclTopoGetAlgoTime`` over algorithm x protocol).
Collectives get NCCL's tuner rates: on an NVIDIA GPU (``gpu.compute_capability``) the current
caps of :mod:`nccl_caps` by generation and host CPU (``node.host_cpu``), the intra-node step
floor of a multi-node ring and its Simple all-reduce latency factor; otherwise NCCL <= 2.19's
fractions of :mod:`protocols`, as before.

Send/recv (and all-to-all, a group of them) has no tuner: NVIDIA/nccl ``src/enqueue.cc``
``addP2pToPlan`` takes LL when a peer's bytes fit ``nChannels x NCCL_P2P_LL_THRESHOLD``
(16 KiB) and Simple otherwise, never LL128; a message up to the minimum part size (a quarter of
the 128 KiB NET / an eighth of the 512 KiB NVLink p2p chunk, 64 KiB either way) runs on one
channel, and a larger one on about one channel per 64 KiB, so LL is taken up to 16 KiB a peer.
LL carries 8 data bytes in each 16-byte line (``union ncclLLFifoLine``): half the link. The
latency is :data:`P2P_BASE_US` plus the step's hop, not a collective's base latency.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simcluster import nccl_ctas
from simcluster.network import nccl_caps
from simcluster.network.algorithms import Plan
from simcluster.network.flows import Flow, isolated_time
from simcluster.network.ops import busbw_factor
from simcluster.network.protocols import Protocol, protocols_for, step_latency
from simcluster.network.symmetry import explicit_specs, lockstep
from simcluster.topology import Cluster

P2P_LL_THRESHOLD = 16384  # bytes a peer, NCCL_P2P_LL_THRESHOLD's default
# The fixed cost of one NCCL send/recv beyond its hop, us. NCCL's tuner constants (baseLat 6.6
# to 14 us) are for collectives; p2p never goes through the tuner. Published nccl-tests
# sendrecv_perf small messages between two NVLink GPUs: ~3 us on H100 (NVIDIA/nccl issue 1487),
# 3.7 us at 1 KiB on H800 (issue 1984, CUDA graphs); 3.0 + the 0.6 us NVLink LL hop = 3.6.
P2P_BASE_US = 3.0
_P2P_LL_FRACTION = 0.5
_PROBE = 1e9  # bytes: the plan's link rate is taken from a flow this size (time is linear)


@dataclass(frozen=True)
class Candidate:
    """One protocol for a plan (``proto.bw_fraction``: its payload share of the link rate, as
    NCCL sets it for this plan) and its latency in seconds."""

    proto: Protocol
    latency: float


def _link_GBps(cluster: Cluster, op: str, plan: Plan, n: int) -> float:
    """NCCL's ``busBw`` of the plan's graph: the rate of this group alone at the full protocol
    rate (a ring's nccl-tests bus bandwidth; a tree's algbw, the rate its chain links run at).
    Other groups of the call are left out: NCCL's graph knows only its own communicator."""
    # plans are cached (planner._plans): keyed by identity, held so the id is not reused, since
    # hashing a plan of thousands of transfers on every call would cost more than the lookup
    memo = cluster.cache.setdefault("link_rates", {})
    entry = memo.get((op, id(plan)))
    hit = entry[1] if entry is not None and entry[0] is plan else None
    if hit is None:
        flows = [
            Flow(s.links, s.coeffs, s.fraction * _PROBE) for s in lockstep(explicit_specs(plan))
        ]
        t = isolated_time(flows, cluster.capacity)
        factor = busbw_factor(op, n) if plan.family == "ring" else 1.0
        hit = factor * _PROBE / t / 1e9 if t > 0 else float("inf")
        memo[(op, id(plan))] = (plan, hit)
    return hit


def _p2p(cluster: Cluster, plan: Plan, nbytes: float, n: int, channels: int) -> list[Candidate]:
    """NCCL's send/recv protocol by size, at its p2p base latency plus the step's hop (and the
    protocol's extra per-hop cost of NCCL's ring model, hwLat[p] - hwLat[LL]). ``channels``:
    the communicator's limit (0: none), whose CTAs carry every send/recv of it (nccl_ctas)."""
    peer_bytes = nbytes if n <= 2 else nbytes / n
    name = "LL" if peer_bytes <= P2P_LL_THRESHOLD else "Simple"
    proto = next(p for p in protocols_for("ring", plan.domains > 1) if p.name == name)
    frac = _P2P_LL_FRACTION if name == "LL" else 1.0
    cap = nccl_ctas.cap_GBps(cluster.profile.efficiency.channel_busbw, channels)
    if cap != float("inf"):
        frac = min(frac, cap / _link_GBps(cluster, "send_recv", plan, n))
    proto = replace(proto, base_s=P2P_BASE_US * 1e-6, bw_fraction=frac)
    lat = step_latency(
        proto, plan.intra_steps, plan.inter_steps, plan.intra_hop_s, plan.inter_hop_s
    )
    return [Candidate(proto, lat)]


def candidates(cluster: Cluster, op: str, plan: Plan, n: int, nbytes: float,
               channels: int = 0) -> list[Candidate]:  # fmt: skip
    """The protocols NCCL could run ``plan`` with, each with its rate share and latency.
    ``channels``: the communicator's channel count when its CTA limits change it (nccl_ctas),
    else 0 (the profile's ``collective_sms``)."""
    if plan.p2p:
        return _p2p(cluster, plan, nbytes, n, channels)
    profile = cluster.profile
    cc = profile.gpu.compute_capability
    gen = nccl_caps.generation(cc)
    if gen is None or cc is None:  # not NVIDIA: NCCL <= 2.19's model, as RCCL keeps it
        return [
            Candidate(p, step_latency(p, plan.intra_steps, plan.inter_steps,
                                                     plan.intra_hop_s, plan.inter_hop_s))
            for p in protocols_for(plan.family, plan.domains > 1, plan.net_family)
        ]  # fmt: skip
    cpu = profile.node.host_cpu
    multi = plan.domains > 1
    limited = channels > 0
    channels = channels or profile.efficiency.collective_sms
    # what the communicator's CTAs move when copying through SMs (ring, tree; NVLS's CTAs
    # drive the switch's multicast and are not measured here): binds only below the search's
    cap = nccl_ctas.cap_GBps(profile.efficiency.channel_busbw, channels) if limited else float("inf")
    out = []
    # A ring with one rank per node pays the tree's network latency per inter-node step
    # (plan.net_family): NCCL <= 2.2x's src/graph/tuning.cc ("With ppn=1 latencies are fully
    # exposed, use the Tree network latency") and again 2.32's src/tuning/ring.cc
    # (maxLocalRanks == 1: "Preserve the pre-refactor model"); only the releases between read
    # the ring's own. LL 5.0 / LL128 8.5 us a step instead of 2.7 / 4.0; Simple 14 either way.
    # Broadcast and reduce take another branch of ring.cc, which never reads interLat.
    net_family = plan.net_family if op != "broadcast" else None
    for p in protocols_for(plan.family, multi, net_family):
        frac = p.bw_fraction
        if plan.family in ("ring", "tree"):
            link = _link_GBps(cluster, op, plan, n)
            # the graph runs at what its CTAs move, each protocol at its share of that (NCCL's
            # busBw = nChannels x per-channel bw); the cap is nccl-tests bus bandwidth, and a
            # tree's rates here are its algbw
            graph = min(link, cap if plan.family == "ring" else cap / busbw_factor(op, n))
            bus = nccl_caps.bus_GBps(plan.family, p.name, gen, cpu, plan.domains, channels, graph)
            frac = bus / link
        intra = plan.intra_hop_s + p.intra_extra_s
        if plan.family == "ring" and multi and op != "broadcast":
            intra = max(intra, nccl_caps.net_overhead_s(cpu, p.name))
        lat = (p.base_s + plan.intra_steps * intra
               + plan.inter_steps * (plan.inter_hop_s + p.inter_extra_s))  # fmt: skip
        per_rank = nbytes / (max(channels, 1) * n)
        if (
            plan.family == "ring"
            and p.name == "Simple"
            and multi
            and op == "all_reduce"
            and per_rank >= 64
        ):
            lat *= nccl_caps.simple_plateau(cc)
        out.append(Candidate(replace(p, bw_fraction=frac), lat))
    return out
