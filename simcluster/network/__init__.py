"""Collectives over shared links: algorithms -> flows on graph paths, max-min fair sharing.

``Network.collective`` starts an op on every group of a call at once (symmetric peers, e.g. the
DP groups of all TP ranks of one stage) and returns an event that fires when the representative
``groups[0]`` has finished. By default only the representative's flows are simulated, each
loading the links of its path with the number of peer flows on them (see ``symmetry.py``);
``symmetric=False`` simulates every group's flows (for checks and heterogeneous runs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import simpy

from simcluster.network.flows import Flow, FlowSolver
from simcluster.network.ops import OPS, bandwidths, busbw_factor, check_op
from simcluster.network.planner import Recipe, make_recipe, recipe_time_alone
from simcluster.topology import Cluster

__all__ = ["OPS", "Network", "bandwidths", "busbw_factor", "check_op", "collective_time"]


class Network:
    """The cluster's links shared by every transfer of one SimPy run."""

    def __init__(self, env: simpy.Environment, cluster: Cluster, ideal: bool = False,
                 symmetric: bool = True) -> None:  # fmt: skip
        self.env = env
        self.cluster = cluster
        self.ideal = ideal
        self.symmetric = symmetric
        self._solver = FlowSolver(cluster.capacity)
        self._gen = 0
        # (src, dst, pairs) -> the call's groups; (src, dst, id(pairs)) -> (pairs, groups)
        self._send_groups: dict[tuple, tuple] = {}
        # (op, id of the groups tuple, bytes, algo) -> (that tuple, its recipe): the engine
        # passes one cached tuple per stage and group for every call, so a repeated call skips
        # the planner's checks and key building (the tuple is held, so its id is not reused)
        self._recipes: dict[tuple, tuple[Sequence[Sequence[int]], Recipe]] = {}

    def collective(self, op: str, groups: Sequence[Sequence[int]], nbytes: float,
                   algo: str | None = None, redop: str = "sum", channels: int = 0) -> simpy.Event:  # fmt: skip
        """Start ``op`` on every group in ``groups`` at once; the event fires when groups[0]
        has finished. nbytes = the nccl-tests 'size' of the op (all_reduce/broadcast: buffer;
        all_gather: total output; reduce_scatter: total input; all_to_all: total send buffer
        per rank). ``redop``: the reduction applied (sum, avg, premul_sum), which decides
        whether NVLS may run. ``channels``: the communicator's channels when its CTA limits
        change them (:mod:`~simcluster.nccl_ctas`), else 0."""
        done = self.env.event()
        if self.ideal or nbytes <= 0 or len(groups[0]) < 2:
            check_op(op)
            done.succeed()
            return done
        recipe = self._recipe(op, groups, nbytes, algo, redop, channels)
        # callbacks, not a SimPy process: a step runs hundreds of thousands of collectives and
        # a process costs two extra events each
        if recipe.latency > 0:
            self.env.timeout(recipe.latency).callbacks.append(
                lambda _ev: self._start(recipe, done)
            )
        else:
            self._start(recipe, done)
        return done

    def algorithm(self, op: str, groups: Sequence[Sequence[int]], nbytes: float, redop: str = "sum",
                  channels: int = 0) -> str:  # fmt: skip
        """The algorithm :meth:`collective` would run the call with ('' when it moves nothing)."""
        if self.ideal or nbytes <= 0 or len(groups[0]) < 2:
            return ""
        return self._recipe(op, groups, nbytes, None, redop, channels).algo

    def _recipe(self, op: str, groups: Sequence[Sequence[int]], nbytes: float, algo: str | None,
                redop: str = "sum", channels: int = 0) -> Recipe:  # fmt: skip
        """:func:`make_recipe`'s recipe for the call, remembered by the groups tuple's identity."""
        if type(groups) is not tuple:
            return make_recipe(self.cluster, op, groups, nbytes, algo, self.symmetric, redop, channels)
        key = (op, id(groups), nbytes, algo, redop, channels)
        hit = self._recipes.get(key)
        if hit is not None and hit[0] is groups:
            return hit[1]
        recipe = make_recipe(self.cluster, op, groups, nbytes, algo, self.symmetric, redop, channels)
        self._recipes[key] = (groups, recipe)
        return recipe

    def send(self, src: int, dst: int, nbytes: float,
             pairs: Sequence[tuple[int, int]] | None = None, channels: int = 0) -> simpy.Event:  # fmt: skip
        """Point-to-point; ``pairs`` = all symmetric concurrent (src, dst) pairs incl. (src, dst);
        ``channels``: the communicator's CTA limit when it has one, else 0."""
        # the engine passes a stage pair's cached tuple of pairs: remembered by identity (and
        # held), it is not rebuilt and hashed pair by pair for every pipeline transfer
        by_id = (src, dst, id(pairs)) if type(pairs) is tuple else None
        if by_id is not None:
            hit = self._send_groups.get(by_id)
            if hit is not None and hit[0] is pairs:
                return self.collective("send_recv", hit[1], nbytes, channels=channels)
        key = (src, dst, tuple(map(tuple, pairs or ())))
        groups = self._send_groups.get(key)
        if groups is None:
            others = tuple(p for p in key[2] if p != (src, dst))
            groups = self._send_groups[key] = ((src, dst), *others)
        if by_id is not None:
            self._send_groups[by_id] = (pairs, groups)
        return self.collective("send_recv", groups, nbytes, channels=channels)

    # --- SimPy driver -----------------------------------------------------------------------
    def _start(self, recipe: Recipe, done: simpy.Event) -> None:
        """Add the recipe's flows now; ``done`` succeeds when the representative's have ended."""
        rep = recipe.specs[0] if recipe.scale > 0 else ()
        if not rep:
            done.succeed()
            return
        if len(rep) == 1:
            # one flow (a collective in lockstep, symmetry.lockstep): its end is the call's
            finished: Callable[[], object] = done.succeed
        else:
            pending = [len(rep)]

            def finished() -> None:
                pending[0] -= 1
                if pending[0] == 0:
                    done.succeed()

        self._sync()
        for i, specs in enumerate(recipe.specs):
            for s in specs:
                self._solver.add(
                    Flow(
                        s.links,
                        s.coeffs,
                        s.fraction * recipe.scale,
                        on_done=finished if i == 0 else None,
                    )
                )
        self._reshare()

    def _sync(self) -> None:
        for f in self._solver.advance(self.env.now):
            if f.on_done is not None:
                f.on_done()

    def _reshare(self) -> None:
        dt = self._solver.reshare()
        self._gen += 1
        if dt != float("inf"):
            gen = self._gen
            self.env.timeout(dt).callbacks.append(lambda _ev: self._wake(gen))

    def _wake(self, gen: int) -> None:
        if gen == self._gen:
            self._sync()
            self._reshare()


def collective_time(op: str, nbytes: float, cluster: Cluster, group: list[int],
                    algo: str | None = None, redop: str = "sum", channels: int = 0) -> float:  # fmt: skip
    """Seconds for ``op`` of ``nbytes`` on ``group`` alone on an idle network, reducing with
    ``redop``, on ``channels`` (0: the profile's; see :mod:`simcluster.nccl_ctas`)."""
    if nbytes <= 0 or len(group) < 2:
        check_op(op)
        return 0.0
    recipe = make_recipe(cluster, op, [group], nbytes, algo, redop=redop, channels=channels)
    return recipe_time_alone(cluster, recipe)


def describe(
    op: str, nbytes: float, cluster: Cluster, group: list[int], algo: str | None = None,
    redop: str = "sum", channels: int = 0,
) -> Recipe:
    """The recipe (chosen algorithm, protocol, latency) for an op alone; for reports."""
    return make_recipe(cluster, op, [group], nbytes, algo, redop=redop, channels=channels)
