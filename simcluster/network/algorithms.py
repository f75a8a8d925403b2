"""Collective algorithms: a registry of expansions of (op, group) into transfers on graph paths.

An algorithm turns one group's collective into a :class:`Plan`: transfers (a path and the bytes it
carries as a fraction of the op size S) that run concurrently (chunks are pipelined, as NCCL
does), plus the step counts of NCCL's latency model. Plans depend only on (op, group), so they are
cached; bytes are scaled per call.

``algo=None`` picks what NCCL's tuner would: among the registered algorithms marked ``auto`` that
support the op and group, and each of their protocols, the one with the least predicted time on
an idle network (NCCL: ``ncclTopoGetAlgoTime``, minimum over algorithm x protocol). Hierarchical
is never picked automatically (NCCL has no such algorithm name; ask for it with ``algo``).
"""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.errors import UserError, did_you_mean
from simcluster.topology import Cluster


@dataclass(frozen=True)
class Transfer:
    """Bytes moved along one path: ``fraction`` x S (before protocol overhead)."""

    links: tuple[int, ...]
    fraction: float


@dataclass(frozen=True)
class Plan:
    """One group's collective as concurrent transfers and NCCL latency-model step counts."""

    family: str  # latency/protocol family in protocols.py: ring, tree, nvls, nvls_tree
    transfers: tuple[Transfer, ...]
    intra_steps: int
    inter_steps: int
    intra_hop_s: float
    inter_hop_s: float
    domains: int = 1  # NVLink domains the group spans
    net_family: str | None = None  # whose network latency an inter step pays, if not family's
    p2p: bool = False  # NCCL send/recv (grouped for all-to-all): no tuner, protocol by size


class Algorithm:
    """Base class: subclasses set name, family, ops, auto and implement ``expand``."""

    name: str = ""
    family: str = "ring"
    ops: frozenset[str] = frozenset()
    auto: bool = True

    def unsupported(self, op: str, cluster: Cluster, group: list[int], redop: str = "sum") -> str | None:
        """Why this algorithm cannot run (op, group) reducing with ``redop`` (see
        :data:`REDUCE_OPS`), or None when it can."""
        if op not in self.ops:
            return f"'{self.name}' does not implement {op} (it does {', '.join(sorted(self.ops))})"
        return None

    def expand(self, op: str, cluster: Cluster, group: list[int]) -> Plan:
        raise NotImplementedError


ALGORITHMS: dict[str, Algorithm] = {}


def register_algorithm(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator adding an algorithm to the registry under its name."""
    ALGORITHMS[cls.name] = cls()
    return cls


def get_algorithm(name: str) -> Algorithm:
    """Registered algorithm by name, or a UserError listing the choices."""
    algo = ALGORITHMS.get(name)
    if algo is None:
        names = sorted(ALGORITHMS)
        raise UserError(
            "algo",
            f"unknown algorithm '{name}'{did_you_mean(name, names)}; one of {', '.join(names)}",
        )
    return algo


# --- helpers shared by the algorithm modules ---------------------------------------------------
def by_domain(cluster: Cluster, group: list[int]) -> list[list[int]]:
    """The group's GPUs split by NVLink domain, domains and GPUs in ascending order."""
    out: dict[int, list[int]] = {}
    for g in sorted(group):
        out.setdefault(cluster.domain_of(g), []).append(g)
    return [out[d] for d in sorted(out)]


#: NCCL turns NVLS off for a communicator with at most this many of its GPUs on a node (in an
#: NVLink domain): ``ncclNvlsInit`` (NVIDIA/nccl ``src/transport/nvls.cc``, NCCL 2.18 on, the
#: same in current releases) returns before enabling it when ``ncclTopoGetGpuCount`` -- the
#: communicator's GPUs in the local topology -- is ``<= 2``, so neither NVLS nor NVLS_TREE runs
NVLS_MIN_GPUS = 3

#: The reduction a collective applies, as the frameworks ask NCCL for it: ``sum`` (ncclSum),
#: ``avg`` (ncclAvg: torch ReduceOp.AVG) or ``premul_sum`` (a user op from
#: ncclRedOpCreatePreMulSum: torch's _make_nccl_premul_sum). nccl-tests measure ``sum``.
REDUCE_OPS: tuple[str, ...] = ("sum", "avg", "premul_sum")

#: The reductions NCCL runs NVLS and NVLS_TREE for, of those in :data:`REDUCE_OPS`. NVIDIA/nccl
#: ``src/enqueue.cc`` ``hostToDevRedOp`` turns ncclAvg into ncclDevPreMulSum (x 1/nRanks before
#: the sum) for fp16, bf16, fp32 and fp64 and into ncclDevSumPostDiv for integers, and a
#: ncclRedOpCreatePreMulSum op is ncclDevPreMulSum too; ``ncclNvlsSupported(devRedOp, type)``
#: (``src/include/device.h``, called where ``ncclPrepareTasks`` sets ``nvlsSupport``) accepts
#: ncclDevSum for int32/uint32/int64/uint64/fp16/bf16/fp32/fp64 (and ncclDevMinMax for all but
#: fp32/fp64), nothing else. NCCL 2.17-2.18 had the same rule as the macro
#: ``NCCL_NVLS_SUPPORTS(type, red)`` (``src/include/collectives.h``, red 0 = Sum, 2/3 = Max/Min;
#: PreMulSum = 4 and SumPostDiv = 5 absent) checked in ``getAlgoInfo`` for NCCL_ALGO_NVLS and
#: NCCL_ALGO_NVLS_TREE. Every dtype a gradient is reduced in (fp32, bf16, fp16) takes Sum.
NVLS_REDUCE_OPS = frozenset({"sum"})


def check_redop(redop: str, field: str = "redop") -> str:
    """The reduction's name, or a UserError naming the choices."""
    if redop not in REDUCE_OPS:
        raise UserError(
            field,
            f"unknown reduction '{redop}'{did_you_mean(redop, REDUCE_OPS)}; one of {', '.join(REDUCE_OPS)}",
        )
    return redop


def nvls_reduction_unsupported(name: str, redop: str) -> str | None:
    """Why NCCL would not run ``name`` (NVLS or NVLS_TREE) for a ``redop`` reduction (see
    :data:`NVLS_REDUCE_OPS`), or None."""
    if redop in NVLS_REDUCE_OPS:
        return None
    return (
        f"'{name}' does not reduce with {redop}: NCCL runs it for sum only (ncclNvlsSupported: "
        f"ncclAvg becomes ncclDevPreMulSum, which NVLS has no kernel for)"
    )


def nvls_unsupported(name: str, cluster: Cluster, group: list[int], redop: str = "sum") -> str | None:
    """Why NCCL would not run algorithm ``name`` (NVLS or NVLS_TREE) for ``group`` reducing
    with ``redop``: the reduction is not one NVLS runs (:func:`nvls_reduction_unsupported`), the
    profile has no NVLS, or some NVLink domain holds fewer than :data:`NVLS_MIN_GPUS` of its
    GPUs; None otherwise."""
    why = nvls_reduction_unsupported(name, redop)
    if why:
        return why
    if not cluster.profile.node.nvls:
        return f"hardware '{cluster.profile.name}' has no NVLS (node.nvls is false)"
    fewest = min(len(d) for d in by_domain(cluster, group))
    if fewest < NVLS_MIN_GPUS:
        return (
            f"'{name}' needs >= {NVLS_MIN_GPUS} of the group's GPUs in each NVLink domain (NCCL's "
            f"ncclNvlsInit turns NVLS off at gpuCount <= 2); this group has {fewest} in one"
        )
    return None


def hop_latencies(
    cluster: Cluster, transfers: list[Transfer], group: list[int]
) -> tuple[float, float]:
    """(intra, inter) per-step hop latency: the slowest path of each kind used by the plan."""
    intra = cluster.profile.node.nvlink_latency_us * 1e-6
    inter = 0.0
    for t in transfers:
        lat = cluster.path_latency(t.links)
        if any(cluster.edges[e][1].startswith("nic") for e in t.links):
            inter = max(inter, lat)
        else:
            intra = max(intra, lat)
    return intra, inter


def ring_order(domains: list[list[int]], channel: int) -> list[int]:
    """Ring for one channel: each domain's GPUs rotated by the channel, so every channel
    enters a domain at a different GPU and crosses the fabric on a different rail."""
    ring: list[int] = []
    for gpus in domains:
        k = channel % len(gpus)
        ring.extend(gpus[k:] + gpus[:k])
    return ring


def ring_transfers(
    cluster: Cluster, ring: list[int], fraction: float, chain: bool = False
) -> list[Transfer]:
    """Neighbour transfers along a ring (or an open chain when ``chain``)."""
    n = len(ring)
    last = n - 1 if chain else n
    return [Transfer(cluster.path(ring[i], ring[(i + 1) % n]), fraction) for i in range(last)]
