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

import numpy as np

_REL_EPS = 1e-9

#: link entries (summed over the flows) from which the filling runs on arrays: a data-parallel
#: group spread over many NVLink domains has collectives of thousands of links in flight together,
#: where the per-link dictionaries cost milliseconds a reshare; a few small flows stay cheaper so
_ARRAY_ENTRIES = 512


@dataclass(eq=False)
class Flow:
    """Bytes to move over links with per-link copy counts."""

    links: tuple[int, ...]
    coeffs: tuple[float, ...]
    remaining: float
    rate: float = 0.0
    on_done: Callable[[], object] | None = field(default=None, repr=False)
    #: ``links`` as a set, for :class:`FlowSolver`'s component search
    link_set: frozenset[int] = field(init=False, repr=False)
    _arrays: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.link_set = frozenset(self.links)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``links`` and ``coeffs`` as arrays (made once: a flow is reshared many times)."""
        if self._arrays is None:
            self._arrays = (np.array(self.links, dtype=np.int64), np.array(self.coeffs, dtype=np.float64))
        return self._arrays


def max_min_rates(flows: list[Flow], capacity: list[float], capacity_array: np.ndarray | None = None) -> None:
    """Set ``flow.rate`` for every flow by progressive filling on the link capacities
    (``capacity_array``: the same as an array, where the caller keeps one)."""
    if len(flows) == 1 and flows[0].links:
        # most reshares touch one collective alone on its links: progressive filling's first
        # step, min over links of capacity / load, is its rate
        f = flows[0]
        f.rate = min(map(truediv, map(capacity.__getitem__, f.links), f.coeffs))
        return
    if sum(len(f.links) for f in flows) >= _ARRAY_ENTRIES:
        cap = np.asarray(capacity, dtype=np.float64) if capacity_array is None else capacity_array
        _fill_arrays([f for f in flows if f.links], cap)
    else:
        residual, load, users = _link_usage(flows, capacity)
        _fill({id(f): f for f in flows if f.links}, residual, load, users, capacity)
    for f in flows:
        if not f.links:
            f.rate = float("inf")


def _fill_arrays(flows: list[Flow], capacity: np.ndarray) -> None:
    """:func:`_fill` on arrays of link entries: each round the active flows' load per link is
    summed afresh (in flow order, as the dictionaries add it), the level rises to the first
    link to fill, and every flow on a full link freezes there."""
    owner = np.repeat(np.arange(len(flows)), [len(f.links) for f in flows])
    pairs = [f.arrays() for f in flows]
    links = np.concatenate([p[0] for p in pairs])
    coeffs = np.concatenate([p[1] for p in pairs])
    uniq, entry_link = np.unique(links, return_inverse=True)
    cap = capacity[uniq]
    residual = cap.copy()
    active = np.ones(len(flows), dtype=bool)
    rate = np.zeros(len(flows))
    level = 0.0
    while active.any():
        load = np.bincount(entry_link, weights=coeffs * active[owner], minlength=uniq.size)
        loaded = np.flatnonzero(load > 0)
        ratios = residual[loaded] / load[loaded]
        first = int(np.argmin(ratios))
        step = float(ratios[first])
        level += step
        residual[loaded] -= step * load[loaded]
        full = np.zeros(uniq.size, dtype=bool)
        full[loaded[residual[loaded] <= _REL_EPS * cap[loaded]]] = True
        full[loaded[first]] = True  # the link that set the step is full, rounding or not
        frozen = np.zeros(len(flows), dtype=bool)
        frozen[owner[full[entry_link]]] = True
        frozen &= active
        rate[frozen] = level
        active &= ~frozen
    for f, r in zip(flows, rate.tolist(), strict=True):
        f.rate = r


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
        _freeze(full, level, active, load, users)


def _freeze(
    full: list[int],
    level: float,
    active: dict[int, Flow],
    load: dict[int, float],
    users: dict[int, list[Flow]],
) -> None:
    """One step of :func:`_fill`: the active flows on the ``full`` links freeze at ``level``
    (their load leaves every link they cross), and the full links leave the filling."""
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

    The search is over flows, not links: a step has a handful of flows in flight, each a
    collective in lockstep over hundreds of links, so testing each flow's link set against the
    touched links (set operations, in C) beats walking the links one by one.
    """

    def __init__(self, capacity: list[float]) -> None:
        self.capacity = capacity
        self._capacity_array = np.asarray(capacity, dtype=np.float64)
        self.flows: list[Flow] = []
        self._last = 0.0
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
        for f in done:
            self._dirty |= f.link_set
        return done

    def add(self, flow: Flow) -> None:
        self.flows.append(flow)
        self._dirty |= flow.link_set
        if not flow.links:
            flow.rate = float("inf")

    def _component(self) -> list[Flow]:
        """Flows connected (through shared links) to the links touched since the last reshare,
        in the order they were added."""
        touched = self._dirty
        if not touched:
            return []
        self._dirty = set()
        found: set[int] = set()  # ids of the flows met: flows compare by identity
        size = 0
        while size != len(touched):  # new links may reach flows passed over before them
            size = len(touched)
            for f in self.flows:
                if id(f) not in found and not touched.isdisjoint(f.link_set):
                    found.add(id(f))
                    touched |= f.link_set
        return [f for f in self.flows if id(f) in found]

    def reshare(self) -> float:
        """Recompute rates; the time until the next flow finishes (inf if none)."""
        if not self.flows:
            self._dirty.clear()
            return float("inf")
        component = self._component()
        if component:
            max_min_rates(component, self.capacity, self._capacity_array)
        return min([f.remaining / f.rate for f in self.flows])
