"""Where many independent simulations run: in this process, in local worker processes, or on a
Dask cluster.

A sweep (or any batch of scenarios) hands an executor a picklable function and its jobs and
gets the results back as they finish; the caller sorts them, so the executor never changes a
number. ``processes`` uses :class:`concurrent.futures.ProcessPoolExecutor`; ``dask`` submits to
a ``distributed`` scheduler (the optional ``dask`` extra): ``local`` starts a
:class:`distributed.LocalCluster` on this machine, an address (``tcp://host:8786``) joins a
running cluster whose workers have simcluster installed and can read the same hardware files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from simcluster.errors import UserError

J = TypeVar("J")
R = TypeVar("R")


@dataclass(frozen=True)
class Executor:
    """How to run jobs: ``kind`` is a key of :data:`EXECUTORS`; ``workers`` the local worker
    count; ``address`` a Dask scheduler address or ``local``."""

    kind: str = "processes"
    workers: int = 1
    address: str = "local"

    def map_unordered(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
        """``fn(job)`` for every job, yielded in completion order."""
        if not jobs:
            return iter(())
        return EXECUTORS[self.kind](self, fn, jobs)


def _serial_or_processes(ex: Executor, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
    if ex.workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield fn(job)
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=ex.workers) as pool:
        futures = [pool.submit(fn, job) for job in jobs]
        for fut in as_completed(futures):
            yield fut.result()


def _dask(ex: Executor, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise UserError(
            "--dask", "needs the dask extra: pip install 'simcluster[dask]'"
        ) from None
    cluster: Any = None
    try:
        if ex.address == "local":
            # one single-threaded worker process per core: a simulation holds the GIL
            cluster = LocalCluster(
                n_workers=max(ex.workers, 1), threads_per_worker=1, processes=True,
                dashboard_address=None,
            )  # fmt: skip
            client = Client(cluster)
        else:
            client = Client(ex.address, timeout="10s")
    except OSError as exc:
        if cluster is not None:
            cluster.close()
        raise UserError("--dask", f"cannot reach the Dask scheduler at {ex.address}: {exc}") from None
    try:
        # pure=False: every job runs, even two identical ones (results are deterministic anyway)
        futures = client.map(fn, list(jobs), pure=False)
        for fut in as_completed(futures):
            yield fut.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


#: executor kind -> runner(executor, fn, jobs) yielding results as they finish
EXECUTORS: dict[str, Callable[[Executor, Callable[[Any], Any], Sequence[Any]], Iterator[Any]]] = {
    "processes": _serial_or_processes,
    "dask": _dask,
}
