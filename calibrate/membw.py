"""Memory-bound kernels → effective bandwidth (bytes moved / time).

Bytes count each tensor read or written once, the minimum traffic of the kernel:
- ``elementwise``: ``c = a + b`` reads 2 and writes 1 tensor;
- ``layernorm``: reads x, writes y (weights are negligible);
- ``adam``: fused AdamW in fp32 reads param, grad, m, v and writes param, m, v (7 × 4 B).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from calibrate.gemm import iterations_for
from calibrate.timers import Timer, robust_time


@dataclass(frozen=True)
class MemKernel:
    """A memory-bound kernel: builds its call for ``n`` fp32 elements; bytes moved per call."""

    name: str
    build: Callable[[int, torch.device], Callable[[], object]]
    bytes_per_element: int


def _elementwise(n: int, device: torch.device) -> Callable[[], object]:
    a, b, c = (torch.ones(n, device=device) for _ in range(3))
    return lambda: torch.add(a, b, out=c)


def _layernorm(n: int, device: torch.device) -> Callable[[], object]:
    hidden = 1024
    x = torch.ones(max(1, n // hidden), hidden, device=device)
    weight, bias = torch.ones(hidden, device=device), torch.zeros(hidden, device=device)
    return lambda: torch.nn.functional.layer_norm(x, (hidden,), weight, bias)


def _adam(n: int, device: torch.device) -> Callable[[], object]:
    p = torch.nn.Parameter(torch.ones(n, device=device))
    p.grad = torch.full_like(p, 1e-3)
    # fused, as the frameworks step (apex/TE FusedAdam; the simulator's optimizer reads and
    # writes each state once): foreach AdamW makes several passes, 6x slower on a CPU here
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    return opt.step


KERNELS: dict[str, MemKernel] = {
    k.name: k
    for k in (
        MemKernel("elementwise", _elementwise, 3 * 4),
        MemKernel("layernorm", _layernorm, 2 * 4),
        MemKernel("adam", _adam, 7 * 4),
    )
}


def default_sizes(device: str, quick: bool) -> list[int]:
    """Element counts, large enough to leave the caches (CPU) or hide launch cost (GPU)."""
    if quick:
        return [1 << 20, 1 << 23]
    return [1 << 22, 1 << 26, 1 << 28] if device == "cuda" else [1 << 20, 1 << 23, 1 << 25]


def measure_kernel(
    kernel: MemKernel, n: int, device: torch.device, timer: Timer, budget_s: float
) -> dict[str, object]:
    """Time one kernel on ``n`` elements; returns a ``measured.memory`` row."""
    call = kernel.build(n, device)
    once = timer(call, iters=1, warmup=1)
    t = robust_time(timer, call, iterations_for(once, budget_s))
    nbytes = kernel.bytes_per_element * n
    return {"kernel": kernel.name, "bytes": nbytes, "time_s": t, "bytes_per_s": nbytes / t}


def measure_launch(device: torch.device, timer: Timer) -> float:
    """Seconds for a one-element add: the per-kernel fixed cost (launch + dispatch)."""
    a = torch.ones(1, device=device)
    return timer(lambda: torch.add(a, a), iters=200, warmup=10)


def measure_host_op(device: torch.device, calls: int = 2000) -> float:
    """Host seconds to issue one small ``torch.nn.Linear`` forward from Python, autograd on: the
    unit of ``efficiency.host_op_us`` (parallelism/host.py). Timed on the CPU clock without
    synchronising inside the loop, so on a GPU it is the issue cost, not the kernel; the
    operands are 8 x 8 so on the CPU the arithmetic is negligible beside the dispatch."""
    import time

    layer = torch.nn.Linear(8, 8, device=device)
    x = torch.ones(8, 8, device=device, requires_grad=True)
    for _ in range(50):
        layer(x)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        layer(x)
    elapsed = time.perf_counter() - start
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return elapsed / calls
