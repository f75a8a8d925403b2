"""Flow-level max-min fair bandwidth sharing (progressive filling).

A flow has a byte count and, for each link it loads, a coefficient: how many identical copies
of it cross that link (1 for an explicit flow; with the symmetry shortcut, the number of peer
groups' twin flows on that link). Rates are recomputed whenever a flow starts or ends: every
unfrozen flow's rate rises together until some link fills, the flows on it freeze, repeat
(Bertsekas & Gallager, Data Networks, sec. 6.5.2). No networkx here: links are integer ids.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import truediv

_REL_EPS = 1e-9


@dataclass(eq=False)
class Flow:
    """Bytes to move over links with per-link copy counts."""

    links: tuple[int, ...]
    coeffs: tuple[float, ...]
    remaining: float
    rate: float = 0.0
    on_done: Callable[[], object] | None = field(default=None, repr=False)


def max_min_rates(flows: list[Flow], capacity: list[float]) -> None:
    """Set ``flow.rate`` for every flow by progressive filling on the link capacities."""
    if len(flows) == 1 and flows[0].links:
        # most reshares touch one collective alone on its links: progressive filling's first
        # step, min over links of capacity / load, is its rate
        f = flows[0]
        f.rate = min(map(truediv, map(capacity.__getitem__, f.links), f.coeffs))
        return
    residual, load, users = _link_usage(flows, capacity)
    _fill({id(f): f for f in flows if f.links}, residual, load, users, capacity)
    for f in flows:
        if not f.links:
            f.rate = float("inf")


def _link_usage(
    flows: list[Flow], capacity: list[float]
) -> tuple[dict[int, float], dict[int, float], dict[int, list[Flow]]]:
    """Zero every flow's rate; per link its capacity left, its summed coefficient and its flows."""
    residual: dict[int, float] = {}
    load: dict[int, float] = {}
    users: dict[int, list[Flow]] = {}
    for f in flows:
        f.rate = 0.0
        for link, c in zip(f.links, f.coeffs, strict=True):
            if link not in residual:
                residual[link] = capacity[link]
                load[link] = 0.0
                users[link] = []
            load[link] += c
            users[link].append(f)
    return residual, load, users


def _fill(
    active: dict[int, Flow],
    residual: dict[int, float],
    load: dict[int, float],
    users: dict[int, list[Flow]],
    capacity: list[float],
) -> None:
    """Progressive filling: raise every active flow's rate together until a link fills, freeze
    that link's flows at the level reached, and go on with the rest."""
    level = 0.0
    while active:
        step = min(residual[lk] / load[lk] for lk in load if load[lk] > 0)
        level += step
        full = []
        for lk in load:
            if load[lk] > 0:
                residual[lk] -= step * load[lk]
                if residual[lk] <= _REL_EPS * capacity[lk]:
                    full.append(lk)
        for lk in full:
            for f in users[lk]:
                if id(f) in active:
                    del active[id(f)]
                    f.rate = level
                    for link, c in zip(f.links, f.coeffs, strict=True):
                        load[link] -= c
        for lk in full:
            load[lk] = 0.0


def isolated_time(flows: list[Flow], capacity: list[float]) -> float:
    """Time for ``flows`` started together on an idle network to all finish (seconds)."""
    live = [f for f in flows if f.remaining > 0]
    now = 0.0
    while live:
        max_min_rates(live, capacity)
        dt = min(f.remaining / f.rate for f in live)
        now += dt
        for f in live:
            f.remaining -= f.rate * dt
        live = [f for f in live if f.remaining > f.rate * 1e-12 + 1e-6]
    return now


class FlowSolver:
    """Active flows of a SimPy run; the owner calls :meth:`advance` at every event time.

    Max-min fairness decomposes over connected components of the flow/link graph, so a reshare
    only recomputes the flows linked (through shared links) to those that started or ended
    since the last one; the others keep their rates.
    """

    def __init__(self, capacity: list[float]) -> None:
        self.capacity = capacity
        self.flows: list[Flow] = []
        self._last = 0.0
        self._by_link: dict[int, list[Flow]] = {}
        self._dirty: set[int] = set()

    def advance(self, now: float) -> list[Flow]:
        """Move every flow forward to ``now``; return (and drop) the ones that finished."""
        dt = now - self._last
        self._last = now
        # Less than a picosecond of work left is float noise from summing dt's; so is less than
        # the clock can still resolve at ``now`` (a few ulps: from about 1,000 simulated seconds
        # on), or the timeout for that last sliver would fire at the same ``now`` for ever.
        horizon = max(1e-12, 4 * math.ulp(now))
        done: list[Flow] = []
        keep: list[Flow] = []
        # runs at every network event (a million times in a big step): locals, not attributes
        for f in self.flows:
            rate = f.rate
            left = f.remaining - rate * dt
            f.remaining = left
            if left <= rate * horizon + 1e-6:
                done.append(f)
            else:
                keep.append(f)
        self.flows = keep
        if done:
            by_link, dirty = self._by_link, self._dirty
            for f in done:
                for link in f.links:
                    by_link[link].remove(f)
                    dirty.add(link)
        return done

    def add(self, flow: Flow) -> None:
        self.flows.append(flow)
        by_link = self._by_link
        for link in flow.links:
            users = by_link.get(link)
            if users is None:
                by_link[link] = [flow]
            else:
                users.append(flow)
        self._dirty.update(flow.links)
        if not flow.links:
            flow.rate = float("inf")

    def _component(self) -> list[Flow]:
        """Flows connected (through shared links) to the links touched since the last reshare."""
        dirty = self._dirty
        if not dirty:
            return []
        by_link = self._by_link
        seen_links = set(dirty)
        stack = list(dirty)
        # flows compare by identity (eq=False): a dict of them keeps the order they were met in
        seen: dict[Flow, None] = {}
        while stack:
            users = by_link.get(stack.pop())
            if not users:
                continue
            for f in users:
                if f in seen:
                    continue
                seen[f] = None
                for other in f.links:
                    if other not in seen_links:
                        seen_links.add(other)
                        stack.append(other)
        dirty.clear()
        return list(seen)

    def reshare(self) -> float:
        """Recompute rates; the time until the next flow finishes (inf if none)."""
        if not self.flows:
            self._dirty.clear()
            return float("inf")
        component = self._component()
        if component:
            max_min_rates(component, self.capacity)
        return min([f.remaining / f.rate for f in self.flows])
