"""The host side of an offloaded optimizer: the GPU <-> host copy rate and the CPU update rate.

- ``measure_host_link``: ``copy_`` of a buffer from the device into pinned host memory and back
  (the copy engines over PCIe or NVLink-C2C on a GPU; on a CPU device, a host memcpy), timed per
  direction; ``node.host_link_GBps`` takes the slower direction.
- ``measure_host_update``: one ``torch.optim.AdamW`` step on fp32 host tensors, the update an
  offloaded optimizer runs (Megatron-Core's HybridDeviceOptimizer steps a torch optimizer on the
  CPU), bytes counted as ``membw``'s adam row (param, grad, m, v read; param, m, v written:
  7 x 4 B). Every rank runs it at once, as every GPU's optimizer shard steps at once, so the
  node's rate (``node.host_memory_GBps``) is one rank's times the ranks per node.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from calibrate.timers import synchronize

ADAM_BYTES_PER_ELEMENT = 7 * 4


def default_bytes(device: str, quick: bool) -> int:
    """Buffer size: large enough to hide the per-copy setup (64 MiB and up on a GPU)."""
    if quick:
        return 1 << 24
    return 1 << 28 if device == "cuda" else 1 << 26


def _rate(copy: Callable[[], object], nbytes: int, device: torch.device, repeats: int) -> float:
    copy()
    synchronize(device.type)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        copy()
        synchronize(device.type)
        best = min(best, time.perf_counter() - start)
    return nbytes / best


def measure_host_link(device: torch.device, nbytes: int, repeats: int = 5) -> dict[str, float]:
    """Bytes per second device -> host and host -> device for one ``nbytes`` buffer (the best
    of ``repeats`` timed copies, each synchronised)."""
    n = max(1, nbytes // 4)
    on_device = torch.ones(n, device=device)
    host = torch.empty(n, pin_memory=device.type == "cuda")
    return {
        "bytes": 4 * n,
        "d2h_bytes_per_s": _rate(lambda: host.copy_(on_device, non_blocking=True), 4 * n, device, repeats),
        "h2d_bytes_per_s": _rate(lambda: on_device.copy_(host, non_blocking=True), 4 * n, device, repeats),
    }


def measure_host_update(elements: int, repeats: int = 3) -> dict[str, float]:
    """Bytes per second of one AdamW step over ``elements`` fp32 host parameters (one rank)."""
    p = torch.nn.Parameter(torch.ones(elements))
    p.grad = torch.full_like(p, 1e-3)
    opt = torch.optim.AdamW([p], lr=1e-4, foreach=True)
    opt.step()  # allocates the moments
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - start)
    nbytes = ADAM_BYTES_PER_ELEMENT * elements
    return {"bytes": nbytes, "time_s": best, "bytes_per_s": nbytes / best}
