"""Collectives over message sizes, timed as nccl-tests does and reported as time/algbw/busbw.

Each rank times ``iters`` back-to-back calls after a barrier; the per-call time is averaged over
the group's ranks (nccl-tests ``Allreduce(&deltaSec, average)``). Buffers follow the nccl-tests
``size`` column (see :mod:`calibrate.busbw`), in fp32 elements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from calibrate.busbw import collective_record
from calibrate.dist import agree_max
from calibrate.gemm import iterations_for
from calibrate.timers import Timer
from simcluster.network.ops import OPS

Builder = Callable[[int, Any, list[int], int, torch.device], Callable[[], object]]

# torch >= 2.11 renamed the tensor collectives; keep working on older releases.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _all_reduce(
    nelem: int, group: Any, ranks: list[int], me: int, device: torch.device
) -> Callable[[], object]:
    buf = torch.ones(nelem, device=device)
    return lambda: dist.all_reduce(buf, group=group)


def _all_gather_op(
    nelem: int, group: Any, ranks: list[int], me: int, device: torch.device
) -> Callable[[], object]:
    out = torch.empty(nelem, device=device)  # size column = gathered buffer
    inp = torch.ones(nelem // len(ranks), device=device)
    return lambda: _all_gather(out, inp, group=group)


def _reduce_scatter_op(
    nelem: int, group: Any, ranks: list[int], me: int, device: torch.device
) -> Callable[[], object]:
    inp = torch.ones(nelem, device=device)  # size column = input buffer
    out = torch.empty(nelem // len(ranks), device=device)
    return lambda: _reduce_scatter(out, inp, group=group)


def _all_to_all(
    nelem: int, group: Any, ranks: list[int], me: int, device: torch.device
) -> Callable[[], object]:
    inp, out = torch.ones(nelem, device=device), torch.empty(nelem, device=device)
    return lambda: dist.all_to_all_single(out, inp, group=group)


def _broadcast(
    nelem: int, group: Any, ranks: list[int], me: int, device: torch.device
) -> Callable[[], object]:
    buf = torch.ones(nelem, device=device)
    return lambda: dist.broadcast(buf, src=ranks[0], group=group)


def _send_recv(
    nelem: int, group: Any, ranks: list[int], me: int, device: torch.device
) -> Callable[[], object]:
    """Every rank sends to the next and receives from the previous (nccl-tests sendrecv)."""
    send, recv = torch.ones(nelem, device=device), torch.empty(nelem, device=device)
    nxt, prev = ranks[(me + 1) % len(ranks)], ranks[(me - 1) % len(ranks)]

    def call() -> None:
        reqs = [dist.isend(send, dst=nxt, group=group), dist.irecv(recv, src=prev, group=group)]
        for req in reqs:
            if req is not None:  # None only for a rank outside ``group``, which never calls
                req.wait()

    return call


BUILDERS: dict[str, Builder] = {
    "all_reduce": _all_reduce,
    "all_gather": _all_gather_op,
    "reduce_scatter": _reduce_scatter_op,
    "all_to_all": _all_to_all,
    "broadcast": _broadcast,
    "send_recv": _send_recv,
}
assert tuple(BUILDERS) == OPS, "every op with a busbw formula needs a builder"


def default_sizes(device: str, quick: bool) -> list[int]:
    """Message sizes in bytes (the nccl-tests ``size`` column)."""
    if quick:
        return [1 << 12, 1 << 16, 1 << 20, 1 << 22]
    if device == "cuda":
        return [1 << p for p in range(10, 34, 2)]  # 1 KiB .. 8 GiB
    return [1 << p for p in range(10, 27, 2)]  # 1 KiB .. 64 MiB


def measure_collective(
    op: str,
    size_bytes: int,
    scope: str,
    group: Any,
    group_size: int,
    ctx_nodes: int,
    device: torch.device,
    timer: Timer,
    budget_s: float,
) -> dict[str, object]:
    """Time one op at one size in one group; every member must call this together."""
    ranks = dist.get_process_group_ranks(group)
    me = ranks.index(dist.get_rank())
    # Whole fp32 elements, divisible by the group size (as nccl-tests rounds counts).
    nelem = max(group_size, size_bytes // 4 // group_size * group_size)
    call = BUILDERS[op](nelem, group, ranks, me, device)
    once = timer(call, iters=1, warmup=1)
    # Every member must run the same number of calls: agree on the slowest estimate.
    iters = iterations_for(agree_max(once, device, group), budget_s, lo=3, hi=100)
    dist.barrier(group=group)
    t = timer(call, iters=iters, warmup=1)
    mean = torch.tensor([t], dtype=torch.float64, device=device)
    dist.all_reduce(mean, group=group)
    nodes = ctx_nodes if scope in ("world", "inter") else 1
    return collective_record(
        op=op,
        scope=scope,
        size_bytes=nelem * 4,
        time_s=float(mean.item()) / group_size,
        gpus=group_size,
        gpus_per_node=group_size // nodes,
        nodes=nodes,
    )
