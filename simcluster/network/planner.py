"""From (op, groups, size, algo) to a recipe: a latency and representative flows, cached.

Separated from the SimPy driver so ``collective_time`` and algorithm selection share it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from simcluster.errors import UserError
from simcluster.network import direct, ring, tree  # noqa: F401  (register algorithms)
from simcluster.network.algorithms import (
    ALGORITHMS,
    Algorithm,
    Plan,
    by_domain,
    check_redop,
    get_algorithm,
)
from simcluster.network.calibrated import Geometry, measured_ratio
from simcluster.network.flows import Flow, isolated_time
from simcluster.network.ops import check_op
from simcluster.network.protocol_costs import candidates
from simcluster.network.protocols import Protocol
from simcluster.network.symmetry import FlowSpec, explicit_specs, lockstep, symmetric_specs
from simcluster.topology import Cluster, build_cluster

GroupsKey = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Recipe:
    """What the simulator runs: wait ``latency``, then move ``scale`` x fraction bytes per flow.

    ``specs[0]`` are the representative group's flows; further entries (explicit mode only)
    are the other groups'."""

    algo: str
    proto: str
    latency: float
    scale: float
    specs: tuple[tuple[FlowSpec, ...], ...]
    measured_ratio: float | None = None  # measured / modelled time applied (calibrated tables)


def check_groups(cluster: Cluster, groups: Sequence[Sequence[int]]) -> GroupsKey:
    """Validate groups (non-empty, same size, distinct GPUs that exist) -> hashable key."""
    if not groups or not groups[0]:
        raise UserError("groups", "need at least one non-empty group of GPUs")
    # The engine passes its cached tuple of a stage's groups for every collective (hundreds of
    # groups on a 2,048-GPU cluster): a tuple is remembered by identity, and held, so its id
    # cannot be reused while remembered. Lists (built per call) are checked by value.
    remembered: dict[int, tuple[Sequence[Sequence[int]], GroupsKey]] = cluster.cache.setdefault("checked_tuples", {})
    hit = remembered.get(id(groups))
    if hit is not None and hit[0] is groups:
        return hit[1]
    key = tuple(map(tuple, groups))
    memo = cluster.cache.setdefault("checked", set())
    if key not in memo:
        size = len(key[0])
        for grp in key:
            if len(grp) != size:
                raise UserError(
                    "groups",
                    f"groups of one call must have equal sizes, got {len(grp)} and {size}",
                )
            if len(set(grp)) != len(grp):
                raise UserError("groups", f"group {list(grp)} repeats a GPU")
            cluster.check_gpus(list(grp), "groups")
        memo.add(key)
    if type(groups) is tuple:
        remembered[id(groups)] = (groups, key)
    return key


def _signature(cluster: Cluster, group: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """What an algorithm's support and speed depend on: GPUs per NVLink domain, per node."""
    per_domain = tuple(len(d) for d in by_domain(cluster, list(group)))
    per_node = tuple(sorted(Counter(cluster.node_of(g) for g in group).values(), reverse=True))
    return per_domain, per_node


def _shapes(cluster: Cluster, key: GroupsKey) -> list[tuple[int, ...]]:
    """One group of each distinct shape in the call, the widest first (most NVLink domains,
    then most nodes; first seen on ties).

    The groups of one call are usually alike (rank-grid translations of each other), but not
    always: with 72-GPU NVLink domains a pipeline stage can end inside a domain, so the tied
    embedding's group of the first and last stage is inside one domain for some ranks and
    spans two for others. Every group must be able to run the chosen algorithm, and the call
    is timed by its widest group, the one the step waits for.
    """
    memo: dict[GroupsKey, list[tuple[int, ...]]] = cluster.cache.setdefault("shapes", {})
    hit = memo.get(key)
    if hit is None:
        first: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...]] = {}
        for grp in key:
            first.setdefault(_signature(cluster, grp), grp)
        order = sorted(first, key=lambda sig: (len(sig[0]), len(sig[1])), reverse=True)
        hit = memo[key] = [first[sig] for sig in order]
    return hit


def _widest_first(cluster: Cluster, key: GroupsKey) -> GroupsKey:
    """The call's groups with its widest group (see :func:`_shapes`) as the representative."""
    shapes = _shapes(cluster, key)
    rep = shapes[0]
    if rep == key[0]:
        return key
    ordered = (rep, *(grp for grp in key if grp != rep))
    # the same groups in another order: one group per shape, so _best need not redo them
    cluster.cache["shapes"][ordered] = shapes
    return ordered


def _plans(cluster: Cluster, op: str, algo: Algorithm, key: GroupsKey) -> list[Plan]:
    memo = cluster.cache.setdefault("plans", {})
    out = []
    for grp in key:
        k = (op, algo.name, grp)
        if k not in memo:
            memo[k] = algo.expand(op, cluster, list(grp))
        out.append(memo[k])
    return out


def _specs(
    cluster: Cluster, op: str, algo: Algorithm, key: GroupsKey, symmetric: bool
) -> tuple[tuple[FlowSpec, ...], ...]:
    memo: dict[tuple[str, str, GroupsKey, bool], tuple[tuple[FlowSpec, ...], ...]] = cluster.cache.setdefault("specs", {})
    k = (op, algo.name, key, symmetric)
    if k not in memo:
        plans = _plans(cluster, op, algo, key)
        if symmetric or len(plans) == 1:
            memo[k] = (lockstep(symmetric_specs(plans)),)
        else:
            memo[k] = tuple(lockstep(explicit_specs(p)) for p in plans)
    return memo[k]


def _alone(cluster: Cluster, latency: float, specs: tuple[FlowSpec, ...], scale: float) -> float:
    flows = [Flow(s.links, s.coeffs, s.fraction * scale) for s in specs]
    return latency + isolated_time(flows, cluster.capacity)


def _candidates(
    cluster: Cluster, op: str, algo: str | None, shapes: list[tuple[int, ...]], redop: str = "sum"
) -> list[Algorithm]:
    """The algorithms every group shape of the call can run reducing with ``redop`` (or the
    one asked for)."""

    def why_not(a: Algorithm) -> str | None:
        return next(
            (why for grp in shapes if (why := a.unsupported(op, cluster, list(grp), redop))), None
        )

    if algo is not None:
        chosen = get_algorithm(algo)
        why = why_not(chosen)
        if why:
            raise UserError("algo", why)
        return [chosen]
    out = [a for a in ALGORITHMS.values() if a.auto and why_not(a) is None]
    if not out:
        raise UserError("op", f"no algorithm implements {op} for this group")
    return out


def _geometry(cluster: Cluster, group: tuple[int, ...]) -> Geometry:
    nodes = len({cluster.node_of(g) for g in group})
    return Geometry(nodes, -(-len(group) // nodes))


def _best(cluster: Cluster, op: str, key: GroupsKey, nbytes: float, algo: str | None,
          redop: str = "sum", channels: int = 0) -> tuple[float, Algorithm, Protocol, float]:  # fmt: skip
    """The fastest (algorithm, protocol) for the representative group alone reducing with
    ``redop`` on ``channels`` (0: the profile's): (time, algorithm, protocol, latency) by the
    uncalibrated model."""
    best: tuple[float, Algorithm, Protocol, float] | None = None
    for a in _candidates(cluster, op, algo, _shapes(cluster, key), redop):
        plan = _plans(cluster, op, a, key)[0]
        specs = _specs(cluster, op, a, key, True)[0]
        for c in candidates(cluster, op, plan, len(key[0]), nbytes, channels):
            t = _alone(cluster, c.latency, specs, nbytes / c.proto.bw_fraction)
            if best is None or t < best[0]:
                best = (t, a, c.proto, c.latency)
    assert best is not None
    return best


def _reference_time(cluster: Cluster, op: str, geometry: Geometry, nbytes: float) -> float:
    """Model time of ``op`` on whole nodes laid out as a measured table's geometry: the first
    ``per_node`` GPUs of ``nodes`` nodes of a cluster of exactly that many nodes (cached), built
    from the profile the table was measured on (``HardwareProfile.as_measured``), reducing with
    sum as nccl-tests do (``-o sum``, their default), so NVLS stays in the reference."""
    refs = cluster.cache.setdefault("reference_clusters", {})
    nodes = geometry.nodes
    # the table's nodes as measured, even when the scenario packs fewer GPUs per node
    gpn = max(cluster.gpus_per_node, geometry.per_node)
    if (nodes, gpn) not in refs:
        refs[(nodes, gpn)] = build_cluster(cluster.profile.as_measured, nodes * gpn, gpn)
    ref = refs[(nodes, gpn)]
    group = tuple(n * gpn + i for n in range(nodes) for i in range(geometry.per_node))
    return _best(ref, op, (group,), nbytes, None, "sum")[0]


def make_recipe(cluster: Cluster, op: str, groups: Sequence[Sequence[int]], nbytes: float,
                algo: str | None = None, symmetric: bool = True, redop: str = "sum",
                channels: int = 0) -> Recipe:  # fmt: skip
    """Choose algorithm and protocol and build the flows for one collective call (cached).
    ``redop``: the reduction it applies (algorithms.REDUCE_OPS; only NVLS and NVLS_TREE depend
    on it). ``channels``: the communicator's channels when its CTA limits change them
    (:mod:`simcluster.nccl_ctas`), else 0. A calibrated table's ratio is taken against the sum model on
    the profile's channels, as it was measured."""
    check_op(op)
    check_redop(redop)
    key = check_groups(cluster, groups)
    memo: dict[tuple[str, GroupsKey, float, str | None, bool, str, int], Recipe] = cluster.cache.setdefault("recipes", {})
    mkey = (op, key, float(nbytes), algo, symmetric, redop, channels)
    hit = memo.get(mkey)
    if hit is not None:
        return hit
    key = _widest_first(cluster, key)
    t_model, a, p, latency = _best(cluster, op, key, nbytes, algo, redop, channels)
    scale = nbytes / p.bw_fraction
    specs = _specs(cluster, op, a, key, symmetric)
    ratio = None
    if algo is None and cluster.profile.measured.get("collectives"):
        geometry = _geometry(cluster, key[0])
        scope = "intra" if geometry.nodes == 1 else "inter"
        ratio = measured_ratio(
            cluster.profile.measured, op, scope, geometry, nbytes,
            lambda o, g, size: _reference_time(cluster, o, g, size),
        )  # fmt: skip
    if ratio is not None:
        # Calibrated: keep the modelled latency, stretch the flows so the op alone takes the
        # measured time (contention still slows it further).
        target = ratio * t_model
        t_flows = t_model - latency
        if target > latency and t_flows > 0:
            scale *= (target - latency) / t_flows
        else:
            latency, scale = target, 0.0
    recipe = Recipe(a.name, p.name, latency, scale, specs, ratio)
    memo[mkey] = recipe
    return recipe


def recipe_time_alone(cluster: Cluster, recipe: Recipe) -> float:
    """Time of the representative group's part of a recipe on an idle network."""
    flows = [
        Flow(s.links, s.coeffs, s.fraction * recipe.scale) for grp in recipe.specs for s in grp
    ]
    if not flows or recipe.scale == 0:
        return recipe.latency
    return recipe.latency + isolated_time(flows, cluster.capacity)
