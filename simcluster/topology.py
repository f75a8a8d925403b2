"""The cluster as a networkx graph: GPUs, NVSwitch domains, NICs, leaf and spine switches.

Every physical link is two directed edges carrying ``bandwidth`` (datasheet, B/s), ``capacity``
(bandwidth x achievable efficiency from the profile, B/s: what concurrent flows share),
``latency`` (s) and ``kind`` (nvlink, pcie, nic, uplink). Edges get integer ids so the network
simulator works on plain lists, never on networkx in its hot path.

Builders are chosen by ``profile.fabric.topology`` through :data:`TOPOLOGIES`:

* ``rail_fat_tree`` - DGX SuperPOD style: NIC k of every node sits on leaf "rail k"; traffic
  between different rails crosses NVLink first (NCCL PXN) so it stays on one rail.
* ``fat_tree`` - all NICs of a node on one leaf; leaves joined by a spine.
* ``nvl_domain`` - NVL72-style: ``node.nvlink_domain`` GPUs (several nodes) share one NVSwitch
  domain; domains joined by a rail-optimized fat tree.

Inside a node the GPUs meet at an NVSwitch (``node.scale_up: switch``: one port per GPU) or over
a direct link between every pair (``mesh``: AMD Infinity Fabric, e.g. MI300X's seven xGMI links,
``nvlink_GBps`` split equally over them), so on a mesh a pair of GPUs gets one link's bandwidth.

The spine is one aggregated switch; a leaf's uplink capacity is the sum of its NIC downlinks
divided by ``fabric.oversubscription`` (so k:1 lowers cross-leaf bandwidth by k under load).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simcluster.errors import UserError
from simcluster.hardware import HardwareProfile

if TYPE_CHECKING:  # imported where a cluster is built: loading a scenario stays free of networkx
    import networkx


@dataclass(frozen=True)
class TopologySpec:
    """How one fabric family is wired."""

    name: str
    rail_optimized: bool
    domain_size: Callable[[HardwareProfile, int], int]
    description: str


def _node_domain(profile: HardwareProfile, gpus_per_node: int) -> int:
    return profile.node.nvlink_domain or gpus_per_node


def _nvl_domain(profile: HardwareProfile, gpus_per_node: int) -> int:
    if not profile.node.nvlink_domain:
        raise UserError(
            "cluster.nvlink_domain",
            "topology 'nvl_domain' needs node.nvlink_domain (e.g. 72 for NVL72); set it in the "
            "profile or with --set cluster.nvlink_domain=72",
        )
    return profile.node.nvlink_domain


def _job_domain(domain: int, profile: HardwareProfile, num_gpus: int, gpn: int) -> int:
    """The job's GPUs per NVLink domain. A job that fits one domain is given one; a larger job
    scheduled in segments (``fabric.segment_nodes``, Slurm's ``--segment``) takes that many nodes
    of each domain it spans, when its nodes divide into whole segments. Only the job's GPUs are
    simulated, so a domain of the job is those GPUs and the rest of the rack's are not there."""
    segment = profile.fabric.segment_nodes
    if not segment or num_gpus <= domain:
        return domain
    gpus = segment * gpn
    return gpus if gpus < domain and num_gpus % gpus == 0 else domain


TOPOLOGIES: dict[str, TopologySpec] = {}


def register_topology(spec: TopologySpec) -> TopologySpec:
    """Add a fabric family to the registry (name -> spec)."""
    TOPOLOGIES[spec.name] = spec
    return spec


register_topology(TopologySpec("rail_fat_tree", True, _node_domain, "rail-optimized fat tree"))
register_topology(
    TopologySpec("fat_tree", False, _node_domain, "fat tree, one leaf per node group")
)
register_topology(TopologySpec("nvl_domain", True, _nvl_domain, "NVL72-style NVLink domains"))


@dataclass
class Cluster:
    """A built cluster: the profile, its graph, and cached routes."""

    profile: HardwareProfile
    graph: networkx.DiGraph
    num_gpus: int
    gpus_per_node: int
    domain_size: int = 0
    rail_optimized: bool = True
    mesh: bool = False  # scale-up by direct GPU-GPU links (no switch node)
    # Link tables indexed by edge id (filled by build_cluster).
    edges: list[tuple[str, str]] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    _edge_id: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    _paths: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict, repr=False)
    # Memo of the network layer (plans, flow specs, algorithm choices); keyed by its callers.
    cache: dict = field(default_factory=dict, repr=False)

    # --- placement --------------------------------------------------------------------------
    def node_of(self, gpu: int) -> int:
        """The node (server) holding a GPU."""
        return gpu // self.gpus_per_node

    def domain_of(self, gpu: int) -> int:
        """The NVLink (NVSwitch) domain holding a GPU."""
        return gpu // self.domain_size

    def local_of(self, gpu: int) -> int:
        """The GPU's index inside its node."""
        return gpu % self.gpus_per_node

    def rail_of(self, gpu: int) -> int:
        """The NIC index (rail) a GPU is attached to, NICs spread evenly over local GPUs."""
        nics = self.profile.node.nics_per_node
        return self.local_of(gpu) * nics // self.gpus_per_node

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    def check_gpus(self, gpus: list[int], field_name: str = "group") -> None:
        """UserError unless every GPU id exists in this cluster."""
        for g in gpus:
            if not 0 <= g < self.num_gpus:
                raise UserError(
                    field_name, f"GPU {g} is outside the cluster (0..{self.num_gpus - 1})"
                )

    # --- links and routes -------------------------------------------------------------------
    def link(self, u: str, v: str) -> int:
        """Edge id of the directed link u -> v."""
        return self._edge_id[(u, v)]

    def path(self, src: int, dst: int) -> tuple[int, ...]:
        """Edge ids of the route GPU src -> GPU dst (cached)."""
        key = (src, dst)
        hit = self._paths.get(key)
        if hit is None:
            nodes = self._route(src, dst)
            hit = tuple(self._edge_id[(a, b)] for a, b in zip(nodes, nodes[1:], strict=False))
            self._paths[key] = hit
        return hit

    def path_latency(self, links: tuple[int, ...]) -> float:
        """Sum of edge latencies along a path, seconds."""
        return sum(self.latency[e] for e in links)

    def _leaf(self, node: int, rail: int) -> str:
        group = node // self.profile.fabric.nodes_per_leaf
        return f"leaf{rail}.{group}" if self.rail_optimized else f"leaf{group}"

    def _route(self, src: int, dst: int) -> list[str]:
        if src == dst:
            return [f"gpu{src}"]
        if self.domain_of(src) == self.domain_of(dst):
            if self.mesh:
                return [f"gpu{src}", f"gpu{dst}"]
            return [f"gpu{src}", f"nvs{self.domain_of(src)}", f"gpu{dst}"]
        n_src, n_dst = self.node_of(src), self.node_of(dst)
        rail = self.rail_of(dst)
        hops = [f"gpu{src}"]
        if self.rail_optimized and self.rail_of(src) != rail:
            # PXN: hop over NVLink to the local GPU on the destination's rail, then its NIC.
            relay = n_src * self.gpus_per_node + self.local_of(dst)
            if self.domain_of(relay) != self.domain_of(src) or relay >= self.num_gpus:
                raise UserError("cluster", f"no PXN relay for GPU {src} -> {dst}")
            hops += [f"gpu{relay}"] if self.mesh else [f"nvs{self.domain_of(src)}", f"gpu{relay}"]
        out_rail = rail if self.rail_optimized else self.rail_of(src)
        nic_src, nic_dst = f"nic{n_src}.{out_rail}", f"nic{n_dst}.{rail}"
        leaf_src, leaf_dst = self._leaf(n_src, out_rail), self._leaf(n_dst, rail)
        hops += [nic_src, leaf_src]
        if leaf_src != leaf_dst:
            hops += ["spine", leaf_dst]
        hops += [nic_dst, f"gpu{dst}"]
        return hops


def _add_link(
    g: networkx.DiGraph, u: str, v: str, bw: float, eff: float, lat: float, kind: str
) -> None:
    """A full-duplex link: two directed edges."""
    for a, b in ((u, v), (v, u)):
        g.add_edge(a, b, bandwidth=bw, capacity=bw * eff, latency=lat, kind=kind)


def _topology(profile: HardwareProfile) -> TopologySpec:
    """The registered fabric family of ``profile`` (fabric.topology); an unknown name is refused."""
    spec = TOPOLOGIES.get(profile.fabric.topology)
    if spec is None:
        from simcluster.errors import did_you_mean

        names = sorted(TOPOLOGIES)
        raise UserError(
            "cluster.topology",
            f"unknown topology '{profile.fabric.topology}'"
            f"{did_you_mean(profile.fabric.topology, names)}; choose one of {', '.join(names)}",
        )
    return spec


def job_domain(profile: HardwareProfile, num_gpus: int, gpus_per_node: int) -> int:
    """The job's GPUs per NVLink domain, refused (cluster.nvlink_domain) where the cluster
    could not be built: the check :func:`build_cluster` makes, for the commands that stop
    before a cluster is built (memory, sweep's prefilter, compare) so that they refuse what
    ``run`` refuses, with the same message."""
    return _checked_domain(_topology(profile), profile, num_gpus, gpus_per_node)


def _checked_domain(spec: TopologySpec, profile: HardwareProfile, num_gpus: int, gpn: int) -> int:
    """The job's NVLink domain under ``spec``, refused when it does not tile ``gpn``-GPU nodes."""
    domain = _job_domain(spec.domain_size(profile, gpn), profile, num_gpus, gpn)
    if domain < gpn:
        # two GPUs of one node in different domains have no route here: the scale-out path
        # (and its PXN relay, _route) starts from another node, and the PCIe or shared-memory
        # path NCCL would take inside the node is not modelled; the routing once failed
        # mid-simulation ("no PXN relay for GPU 0 -> 2") with a domain of 2 on 4-GPU trays
        raise UserError(
            "cluster.nvlink_domain",
            f"an NVLink domain of {domain} GPUs is smaller than one node ({gpn} GPUs), whose GPUs "
            f"would reach each other over PCIe (not modelled); use a multiple of {gpn}, or "
            "leave it unset for a domain of one node",
        )
    if domain % gpn:
        raise UserError(
            "cluster.nvlink_domain",
            f"NVLink domain of {domain} GPUs does not tile {gpn}-GPU nodes; use a multiple of {gpn}",
        )
    if profile.node.scale_up == "mesh" and domain != gpn:
        raise UserError(
            "cluster.nvlink_domain",
            f"a mesh scale-up (node.scale_up: mesh) joins the GPUs of one node; drop "
            f"node.nvlink_domain ({domain}) or set it to gpus_per_node ({gpn})",
        )
    return domain


def build_cluster(
    profile: HardwareProfile, num_gpus: int, gpus_per_node: int | None = None
) -> Cluster:
    """Build the graph for ``num_gpus`` GPUs of ``profile`` (builder from fabric.topology)."""
    spec = _topology(profile)
    gpn = gpus_per_node or profile.node.gpus_per_node
    if gpn <= 0:
        raise UserError("cluster.gpus_per_node", f"must be positive, got {gpn}")
    if num_gpus <= 0:
        raise UserError("cluster.gpus", f"must be positive, got {num_gpus}")
    if num_gpus > gpn and num_gpus % gpn:
        raise UserError(
            "cluster.gpus",
            f"{num_gpus} GPUs is not a whole number of {gpn}-GPU nodes; use a multiple of {gpn}",
        )
    domain = _checked_domain(spec, profile, num_gpus, gpn)
    node, eff = profile.node, profile.efficiency
    mesh = node.scale_up == "mesh"
    import networkx

    g = networkx.DiGraph(topology=spec.name)
    nvl_bw, nic_bw = profile.nvlink_bytes_per_s, profile.nic_bytes_per_s
    for gpu in range(num_gpus):
        g.add_node(f"gpu{gpu}", kind="gpu", node=gpu // gpn)
        if not mesh:
            _add_link(g, f"gpu{gpu}", f"nvs{gpu // domain}", nvl_bw, eff.nvlink,
                      node.nvlink_latency_us * 0.5e-6, "nvlink")  # fmt: skip
    if mesh:
        _add_mesh(g, num_gpus, domain, nvl_bw, eff.nvlink, node.nvlink_latency_us * 1e-6)
    num_nodes = -(-num_gpus // gpn)
    cluster = Cluster(profile, g, num_gpus, gpn, domain, spec.rail_optimized, mesh)
    if num_nodes > 1 or num_gpus > domain:
        _add_scale_out(cluster, num_nodes, nic_bw)
    for i, (u, v, data) in enumerate(g.edges(data=True)):
        cluster._edge_id[(u, v)] = i
        cluster.edges.append((u, v))
        cluster.capacity.append(data["capacity"])
        cluster.latency.append(data["latency"])
    return cluster


def _add_mesh(
    g: networkx.DiGraph, num_gpus: int, domain: int, bw: float, eff: float, lat: float
) -> None:
    """A direct full-duplex link between every pair of GPUs of a domain, each carrying an equal
    part of the GPU's scale-up bandwidth (one hop: the whole hop latency on the link)."""
    per_link = bw / max(1, domain - 1)  # the links exist even where fewer GPUs are simulated
    for first in range(0, num_gpus, domain):
        gpus = range(first, min(first + domain, num_gpus))
        for a in gpus:
            for b in gpus:
                if a < b:
                    _add_link(g, f"gpu{a}", f"gpu{b}", per_link, eff, lat, "nvlink")


def _add_scale_out(cluster: Cluster, num_nodes: int, nic_bw: float) -> None:
    """NICs, leaves and the spine for a multi-node cluster."""
    g, p = cluster.graph, cluster.profile
    node, fab, eff = p.node, p.fabric, p.efficiency
    nic_lat, sw_lat = node.nic_latency_us * 1e-6, fab.switch_latency_us * 1e-6
    leaf_down: dict[str, float] = {}
    for gpu in range(cluster.num_gpus):
        n, rail = cluster.node_of(gpu), cluster.rail_of(gpu)
        _add_link(g, f"gpu{gpu}", f"nic{n}.{rail}", nic_bw, eff.nic, nic_lat / 2, "pcie")
    for n in range(num_nodes):
        for rail in range(node.nics_per_node):
            nic = f"nic{n}.{rail}"
            if nic not in g:
                continue
            leaf = cluster._leaf(n, rail)
            # The switch latency sits on the NIC->leaf edge so each switch counts once per path.
            g.add_edge(nic, leaf, bandwidth=nic_bw, capacity=nic_bw * eff.nic, latency=sw_lat,
                       kind="nic")  # fmt: skip
            g.add_edge(leaf, nic, bandwidth=nic_bw, capacity=nic_bw * eff.nic, latency=0.0,
                       kind="nic")  # fmt: skip
            leaf_down[leaf] = leaf_down.get(leaf, 0.0) + nic_bw
    if len(leaf_down) > 1:
        for leaf, down in sorted(leaf_down.items()):
            up = down / fab.oversubscription
            g.add_edge(leaf, "spine", bandwidth=up, capacity=up * eff.nic, latency=sw_lat,
                       kind="uplink")  # fmt: skip
            g.add_edge("spine", leaf, bandwidth=up, capacity=up * eff.nic, latency=sw_lat,
                       kind="uplink")  # fmt: skip


@dataclass(frozen=True)
class Placement:
    """Rank grid -> GPU ids. The first dimension of ``order`` is innermost (consecutive GPUs)."""

    dims: dict[str, int]
    order: tuple[str, ...]

    @property
    def world(self) -> int:
        total = 1
        for d in self.order:
            total *= self.dims[d]
        return total

    def gpu(self, coords: dict[str, int]) -> int:
        """GPU id of the rank at ``coords`` (missing dimensions count as 0)."""
        gpu, stride = 0, 1
        for d in self.order:
            gpu += coords.get(d, 0) * stride
            stride *= self.dims[d]
        return gpu

    def groups(self, dim: str) -> list[list[int]]:
        """All groups along ``dim`` (ranks differing only in ``dim``), sorted by first GPU."""
        if dim not in self.dims:
            raise UserError("layout", f"unknown dimension '{dim}'; have {', '.join(self.order)}")
        stride = 1
        for d in self.order[: self.order.index(dim)]:
            stride *= self.dims[d]
        size = self.dims[dim]
        out = []
        for gpu in range(self.world):
            if (gpu // stride) % size == 0:
                out.append([gpu + i * stride for i in range(size)])
        return out


def rank_to_gpu(layout_dims: dict[str, int], order: str = "tp,cp,dp,pp") -> Placement:
    """Place the rank grid on GPUs: ``order`` lists dimensions innermost first, so with the
    default TP groups are consecutive GPUs (inside one node when tp <= gpus_per_node), then CP,
    DP and PP outermost (as Megatron-LM's default rank order). Dimensions absent from
    ``layout_dims`` have size 1."""
    names = tuple(x.strip() for x in order.split(",") if x.strip())
    if len(set(names)) != len(names):
        raise UserError("layout.order", f"'{order}' repeats a dimension")
    unknown = sorted(set(layout_dims) - set(names))
    if unknown:
        raise UserError("layout.order", f"'{order}' does not place {', '.join(unknown)}; add it")
    dims = {d: int(layout_dims.get(d, 1)) for d in names}
    for d, size in dims.items():
        if size < 1:
            raise UserError(f"layout.{d}", f"must be >= 1, got {size}")
    return Placement(dims, names)
