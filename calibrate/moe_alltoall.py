"""An expert-parallel dispatch: ``all_to_all_single`` with uneven splits, beside an even one.

Every rank sends ``rows`` token copies, each to the rank holding its expert, drawn uniformly
at random (seeded, the same matrix on every rank, so each knows what it receives). The even
all-to-all moves the same bytes per rank in equal splits (what the collectives table and
nccl-tests' alltoall time). Their ratio is what routing's unevenness costs the collective.
Both backends take split sizes: NCCL (grouped send/recv) and gloo (``alltoallv``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from calibrate.dist import agree_max
from calibrate.gemm import iterations_for
from calibrate.timers import Timer


def split_matrix(world: int, rows: int, seed: int = 5) -> list[list[int]]:
    """``m[src][dst]``: rows rank ``src`` sends to ``dst``, each of a rank's ``rows`` copies
    going to a uniformly drawn rank."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    picks = torch.randint(0, world, (world, rows), generator=gen)
    return [[int(c) for c in torch.bincount(picks[r], minlength=world).tolist()] for r in range(world)]


def measure_all_to_all(
    rows: int, hidden: int, dtype: torch.dtype, group: Any, device: torch.device, timer: Timer, budget_s: float
) -> dict[str, object]:
    """A ``measured.moe.all_to_all`` row over ``group`` (every member calls it together)."""
    world, me = dist.get_world_size(group), dist.get_rank(group)
    rows = max(rows // world, 1) * world  # the even split's equal parts
    m = split_matrix(world, rows)
    send, recv = m[me], [m[src][me] for src in range(world)]
    inp = torch.ones(rows, hidden, device=device, dtype=dtype)
    out_uneven = torch.empty(sum(recv), hidden, device=device, dtype=dtype)
    out_even = torch.empty(rows, hidden, device=device, dtype=dtype)

    def uneven() -> None:
        dist.all_to_all_single(out_uneven, inp, output_split_sizes=recv, input_split_sizes=send, group=group)

    def even() -> None:
        dist.all_to_all_single(out_even, inp, group=group)

    times = {}
    for name, call in (("uneven_s", uneven), ("even_s", even)):
        once = timer(call, iters=1, warmup=1)
        iters = iterations_for(agree_max(once, device, group), budget_s, lo=3, hi=100)
        dist.barrier(group=group)
        t = torch.tensor([timer(call, iters=iters, warmup=1)], dtype=torch.float64, device=device)
        dist.all_reduce(t, group=group)  # the mean over ranks, as the collectives table takes it
        times[name] = float(t.item()) / world
    received = [sum(m[src][dst] for src in range(world)) for dst in range(world)]
    return {
        "bytes": rows * hidden * inp.element_size(), "gpus": world,
        # the busiest receiver over the mean: how uneven this draw is
        "max_over_mean": max(received) * world / sum(received),
        **times, "ratio": times["uneven_s"] / times["even_s"],
    }  # fmt: skip
