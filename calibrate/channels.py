"""The bus bandwidth an NCCL communicator held to n CTAs reaches (``efficiency.channel_busbw``).

For each n of :data:`CHANNELS`, every node's ranks get a communicator created with
``ncclConfig_t`` minCTAs = maxCTAs = n (torch's ``ProcessGroupNCCL.Options().config``, the
fields Megatron-Core's ``get_nccl_options`` sets from its per-communicator YAML), and an
all-reduce of one size is timed on it as nccl-tests times one (:mod:`calibrate.collectives`);
its busBw is the curve's point. The simulator caps a communicator limited below the profile's
``collective_sms`` at this curve (``simcluster/nccl_ctas.py``).

NCCL only: gloo runs collectives on host threads, with no CTAs to count, so a CPU run has no
such step (and says so). The environment's ``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS`` would replace
the communicator's own limits (NCCL's ``envConfigOverride``): the step refuses to run under them.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from calibrate.collectives import measure_collective
from calibrate.dist import my_group
from calibrate.timers import Timer

CHANNELS = (1, 2, 4, 8)
#: environment variables that would override the communicators' limits
OVERRIDING = ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")


def unsupported(backend: str, local_world: int) -> str | None:
    """Why this run cannot measure the curve, or None when it can."""
    if backend != "nccl":
        return f"the {backend} backend has no CTAs (NCCL only)"
    if local_world < 2:
        return "one rank per node: no intra-node communicator to limit"
    set_here = [v for v in OVERRIDING if os.environ.get(v)]
    if set_here:
        return f"{', '.join(set_here)} set: NCCL would replace each communicator's limits with it"
    return None


def default_bytes(quick: bool) -> int:
    """The all-reduce size: large enough that bandwidth, not latency, decides (the published
    H200 sweep used 128 MiB)."""
    return (16 if quick else 128) * 2**20


def _limited_group(local_world: int, nodes: int, rank: int, ctas: int) -> object:
    """Every node's communicator at ``ctas`` CTAs (created collectively); this rank's."""
    opts = dist.ProcessGroupNCCL.Options()
    opts.config.min_ctas = ctas
    opts.config.max_ctas = ctas
    partition = [[node * local_world + i for i in range(local_world)] for node in range(nodes)]
    return my_group(partition, rank, opts)[0]


def measure_channels(
    local_world: int, nodes: int, nbytes: int, device: torch.device, timer: Timer, budget_s: float
) -> list[dict[str, Any]]:
    """One row per CTA count: the all-reduce record on a communicator held to that many, with
    ``channels``. Every rank must call this together."""
    rows = []
    for ctas in CHANNELS:
        group = _limited_group(local_world, nodes, dist.get_rank(), ctas)
        record = measure_collective("all_reduce", nbytes, "intra", group, local_world, 1, device, timer, budget_s)
        rows.append({"channels": ctas, **record})
        dist.destroy_process_group(group)  # type: ignore[arg-type]  # a ProcessGroup
    return rows


def channel_curve(rows: list[dict[str, Any]]) -> list[list[float]]:
    """[[channels, busBw GB/s], ...] from :func:`measure_channels` rows, increasing; a point
    whose bandwidth falls below an earlier one's (noise) takes the earlier one's, as the
    profile's curve may not fall."""
    curve: list[list[float]] = []
    for row in sorted(rows, key=lambda r: int(r["channels"])):
        busbw = round(float(row["busbw_GBps"]), 2)
        if curve:
            busbw = max(busbw, curve[-1][1])
        curve.append([int(row["channels"]), busbw])
    return curve
