"""Heat soak: bring the device to the clock its power limit allows before anything is timed.

A GPU that idles between calls boosts its clock; one kept busy falls to what its power limit
allows within tens of milliseconds (a B200 from 1,965 to about 1,580 MHz, FlashAttention-4 from
1,450 to 1,237 TFLOP/s: flashinfer-ai/flashinfer pull request 2899). A training step never
idles, so the rates a profile carries should be the sustained ones. The run therefore opens
with back-to-back GEMMs of the default grid's largest shape for a fixed time, untimed; the measurements that
follow run back to back too, so the device stays at that clock. On a CPU the same loop runs
(the code path is the same on every device) and changes nothing.
"""

from __future__ import annotations

import time

import torch

from calibrate.gemm import DTYPES
from calibrate.shapes import GemmShape


def soak_seconds(quick: bool) -> float:
    """How long to soak: long enough for a power limit to settle, short in quick runs."""
    return 0.05 if quick else 2.0


def heat_soak(shape: GemmShape, dtype: str, device: torch.device, seconds: float) -> int:
    """Run ``shape`` GEMMs back to back for ``seconds`` of wall time; returns the calls made."""
    a = torch.ones(shape.m, shape.k, device=device, dtype=DTYPES[dtype])
    b = torch.ones(shape.k, shape.n, device=device, dtype=DTYPES[dtype])
    out = torch.empty(shape.m, shape.n, device=device, dtype=DTYPES[dtype])
    # on a GPU, launches are queued ahead and checked every few calls so the queue never runs
    # dry; on a CPU each call completes before it returns
    per_check = 8 if device.type == "cuda" else 1
    calls = 0
    start = time.perf_counter()
    while True:
        for _ in range(per_check):
            torch.matmul(a, b, out=out)
        calls += per_check
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if time.perf_counter() - start >= seconds:
            return calls
