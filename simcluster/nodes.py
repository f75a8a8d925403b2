"""``cluster.nodes``: a job size given in nodes, as papers and schedulers state it.

``cluster: {hardware: dgx-h100, nodes: 8}`` means 8 x the profile's GPUs per node (or
``cluster.gpus_per_node`` when the scenario sets it). Given together with ``gpus``, the two
must agree. Expanded on the raw scenario, before validation, so every later stage sees
``cluster.gpus`` only.
"""

from __future__ import annotations

from typing import Any

from simcluster.errors import UserError
from simcluster.raw_sections import take, whole


def _per_node(cluster: dict[str, Any]) -> int:
    per = whole(cluster.get("gpus_per_node"))
    if per is not None:
        return per
    from simcluster.hardware import load_profile  # the profile is needed only for this

    return load_profile(cluster.get("hardware", "dgx-h100")).gpus_per_node


def expand_nodes(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``cluster.nodes`` turned into ``cluster.gpus``."""
    taken = take(data, "cluster", "nodes")
    if taken is None:
        return data
    cluster, nodes = taken
    if whole(nodes) is None:
        raise UserError("cluster.nodes", f"must be a whole number of nodes above 0, got {nodes!r}")
    per = _per_node(cluster)
    gpus = cluster.get("gpus")
    if gpus is not None and gpus != nodes * per:
        raise UserError(
            "cluster.nodes",
            f"{nodes} nodes x {per} GPUs = {nodes * per}, but cluster.gpus is {gpus!r}; give one of them",
        )
    cluster["gpus"] = nodes * per
    return {**data, "cluster": cluster}
