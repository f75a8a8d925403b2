"""Process-group setup from the torchrun environment: NCCL on CUDA, gloo on CPU.

A plain single process (no ``WORLD_SIZE`` in the environment) runs without a process group and
measures kernels only. With ≥2 nodes the context also builds the intra-node groups (the ranks
of one node) and inter-node groups (one rank per node with the same local rank), which every
rank must create in the same order.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from simcluster.errors import UserError

BACKENDS: dict[str, str] = {"cuda": "nccl", "cpu": "gloo"}


def agree_max(value: float, device: torch.device, group: object = None) -> float:
    """The largest ``value`` over the group's ranks (a collective: every member calls it), so
    that all of them plan the same number of calls."""
    probe = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=group)
    return float(probe.item())


@dataclass
class DistContext:
    """Where this process sits: rank, node, device, backend and its communication groups."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    device: torch.device
    backend: str
    distributed: bool
    hostnames: list[str] = field(default_factory=list)
    # scope -> (group, its size); 'world' always, 'intra'/'inter' with >= 2 nodes.
    groups: dict[str, tuple[object, int]] = field(default_factory=dict)

    @property
    def nodes(self) -> int:
        """Node count, assuming torchrun's equal processes per node."""
        return self.world // self.local_world

    @property
    def is_main(self) -> bool:
        """Rank 0 writes files and shows progress."""
        return self.rank == 0

    def barrier(self) -> None:
        """All ranks meet (no-op when not distributed)."""
        if self.distributed:
            dist.barrier()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise UserError(name, f"environment variable {name}='{value}' is not an integer") from None


def init(device_type: str, timeout_s: float) -> DistContext:
    """Initialise from torchrun's env vars (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)."""
    if device_type not in BACKENDS:
        raise UserError("--device", f"unknown device '{device_type}'; use cuda or cpu")
    if device_type == "cuda" and not torch.cuda.is_available():
        raise UserError("--device", "CUDA is not available on this machine; use --device cpu")
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    if world % local_world:
        raise UserError("--nproc-per-node", "every node must run the same number of processes")
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    ctx = DistContext(
        rank=rank,
        world=world,
        local_rank=local_rank,
        local_world=local_world,
        device=device,
        backend=BACKENDS[device_type],
        distributed=world > 1,
        hostnames=[socket.gethostname()],
    )
    if not ctx.distributed:
        return ctx
    _check_rendezvous(world)
    dist.init_process_group(backend=ctx.backend, timeout=datetime.timedelta(seconds=timeout_s))
    names: list[object] = [None] * world
    dist.all_gather_object(names, socket.gethostname())
    ctx.hostnames = [str(n) for n in names]
    ctx.groups["world"] = (dist.group.WORLD, world)
    if ctx.nodes >= 2:
        ctx.groups["intra"] = my_group(
            [[n * local_world + i for i in range(local_world)] for n in range(ctx.nodes)], rank
        )
        ctx.groups["inter"] = my_group(
            [[n * local_world + i for n in range(ctx.nodes)] for i in range(local_world)], rank
        )
    return ctx


#: what init_process_group's env:// rendezvous reads besides WORLD_SIZE (torchrun sets them all)
RENDEZVOUS_ENV = ("RANK", "MASTER_ADDR", "MASTER_PORT")


def _check_rendezvous(world: int) -> None:
    """WORLD_SIZE > 1 without the rest of torchrun's environment (a stray export, a launch by
    hand) is a one-line error, not the backend's traceback."""
    missing = [name for name in RENDEZVOUS_ENV if not os.environ.get(name)]
    if missing:
        raise UserError(
            "WORLD_SIZE",
            f"WORLD_SIZE={world} is set but the distributed environment is incomplete "
            f"({', '.join(missing)} not set); launch with torchrun (torchrun --nproc-per-node "
            f"{world} -m calibrate ...), or unset WORLD_SIZE to run one process",
        )


def my_group(partition: list[list[int]], rank: int, pg_options: object = None) -> tuple[object, int]:
    """Create every group of a partition (collectively, with the backend's ``pg_options``) and
    return the one holding ``rank``."""
    mine: tuple[object, int] | None = None
    for ranks in partition:
        group = dist.new_group(ranks, pg_options=pg_options)
        if rank in ranks:
            mine = (group, len(ranks))
    assert mine is not None  # a partition covers every rank
    return mine


def shutdown(ctx: DistContext) -> None:
    """Tear down the process group."""
    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()
