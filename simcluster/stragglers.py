"""Known stragglers: a GPU whose kernels run slower, a node whose NICs run below their rate.

A synchronous training step waits for its slowest participant: a data-parallel collective
cannot finish before its slowest rank enters it, and a pipeline runs at its slowest stage. The
statistical spread of same-SKU GPUs is already in every run (``gpu.speed_spread``,
``variability.py``); this module models a *known* bad part, as production teams find them
(a GPU throttled by a failing fan or a degraded HBM stack, a NIC link trained down to a lower
speed; MegaScale, Jiang et al. NSDI'24, and the Llama 3 report, Grattafiori et al. 2024,
describe hunting both down at scale), so a user can ask what one such part costs a job.

``simulation.stragglers`` lists them; a scenario with any is simulated with every rank
(``simulation.all_ranks``), since the parts are no longer symmetric:

* ``{gpu: r, compute: f}``: every kernel of GPU (global rank) ``r`` takes ``f`` times as long:
  GEMMs, attention, memory-bound work and the optimizer alike (a lower clock or a slower
  memory slows all of them; ``f`` is the user's measured ratio).
* ``{node: n, nic: f}``: the links between node ``n``'s NICs and their switch keep the fraction
  ``f`` of their capacity, in both directions; every flow crossing them is slowed by the
  max-min sharing, and ring collectives through them with it (they advance in lockstep).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from simcluster.errors import UserError
from simcluster.scenario import Straggler
from simcluster.topology import Cluster

FIELD = "simulation.stragglers"


@dataclass(frozen=True)
class Stragglers:
    """The resolved stragglers: compute time factors by rank, NIC bandwidth fractions by node."""

    compute: dict[int, float] = field(default_factory=dict)
    nic: dict[int, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.compute or self.nic)

    def compute_factor(self, rank: int) -> float:
        """How many times longer ``rank``'s kernels take (1.0 for a healthy GPU)."""
        return self.compute.get(rank, 1.0)

    def describe(self) -> list[str]:
        """One short phrase per straggler, for tables and titles."""
        return [f"GPU {r} kernels x{f:g}" for r, f in sorted(self.compute.items())] + [
            f"node {n} NICs at {f:.0%}" for n, f in sorted(self.nic.items())
        ]

    def to_dict(self) -> dict[str, dict[str, float]]:
        """JSON form for the run summary (string keys)."""
        return {
            "compute": {str(r): f for r, f in sorted(self.compute.items())},
            "nic": {str(n): f for n, f in sorted(self.nic.items())},
        }

    @staticmethod
    def from_dict(data: dict[str, dict[str, float]]) -> Stragglers:
        """The inverse of :meth:`to_dict` (a run summary's ``stragglers``)."""
        return Stragglers(
            {int(r): f for r, f in data.get("compute", {}).items()},
            {int(n): f for n, f in data.get("nic", {}).items()},
        )


def _check_gpu(s: Straggler, where: str, world: int, compute: dict[int, float]) -> None:
    """A slow GPU: inside the job, listed once, with no NIC factor."""
    assert s.gpu is not None
    if s.nic != 1.0:
        raise UserError(f"{where}.nic", "applies to a node; use {node: N, nic: F}")
    if s.gpu >= world:
        raise UserError(f"{where}.gpu", f"GPU {s.gpu} is outside the job (0..{world - 1})")
    if s.gpu in compute:
        raise UserError(f"{where}.gpu", f"GPU {s.gpu} is listed twice; give it once")


def _check_node(s: Straggler, where: str, num_nodes: int, nic: dict[int, float]) -> None:
    """A node with degraded NICs: inside a multi-node cluster, listed once, no compute factor."""
    assert s.node is not None
    if s.compute != 1.0:
        raise UserError(f"{where}.compute", "applies to a GPU; use {gpu: R, compute: F}")
    if s.node >= num_nodes:
        raise UserError(f"{where}.node", f"node {s.node} is outside the cluster (0..{num_nodes - 1})")
    if num_nodes < 2:
        raise UserError(f"{where}.node", "a single-node job sends nothing over its NICs; drop the entry")
    if s.node in nic:
        raise UserError(f"{where}.node", f"node {s.node} is listed twice; give it once")


def resolve(items: Sequence[Straggler], world: int, num_nodes: int) -> Stragglers:
    """Check ``simulation.stragglers`` against the cluster and index it; UserError naming the
    item's field otherwise."""
    compute: dict[int, float] = {}
    nic: dict[int, float] = {}
    for i, s in enumerate(items):
        where = f"{FIELD}.{i}"
        if (s.gpu is None) == (s.node is None):
            raise UserError(where, "give exactly one of gpu (a slow GPU) or node (degraded NICs)")
        if s.gpu is not None:
            _check_gpu(s, where, world, compute)
            compute[s.gpu] = s.compute
        else:
            assert s.node is not None
            _check_node(s, where, num_nodes, nic)
            nic[s.node] = s.nic
    return Stragglers(compute, nic)


def degrade_nics(cluster: Cluster, nic: dict[int, float]) -> None:
    """Scale the capacity of each listed node's NIC-to-switch links (both directions)."""
    if not nic:
        return
    for eid, (u, v) in enumerate(cluster.edges):
        if cluster.graph.edges[u, v]["kind"] != "nic":
            continue
        end = u if u.startswith("nic") else v
        node = int(end[3:].split(".")[0])
        if node in nic:
            cluster.capacity[eid] *= nic[node]
