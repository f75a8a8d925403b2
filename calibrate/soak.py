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
from collections.abc import Sequence

import torch

from calibrate.gemm import DTYPES
from calibrate.shapes import GemmShape
from simcluster.progress import clock_text


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


#: the fewest calls one GEMM measurement makes: a warm-up and a first timing (calibrate/gemm.py),
#: then at least two timed calls after one more warm-up (timers.robust_time)
MIN_CALLS_PER_GEMM = 5

#: estimates below this many seconds are not worth a line
ESTIMATE_NOTE_S = 300.0


def extra_gemm_seconds(shapes: Sequence[GemmShape], dtypes: int, flops_per_s: float) -> float:
    """The least time the GEMMs of ``shapes`` take in ``dtypes`` precisions at ``flops_per_s``
    (the rate the heat soak just ran at): each measurement's fewest calls at that rate."""
    return MIN_CALLS_PER_GEMM * dtypes * sum(s.flops for s in shapes) / flops_per_s


def extra_gemm_note(shapes: Sequence[GemmShape], dtypes: int, flops_per_s: float) -> str | None:
    """A line saying how long the --scenario / --shapes GEMMs will take, when that is long (a
    large model's shapes on a CPU: hours), so a run that looks stuck says why up front."""
    if not shapes or flops_per_s <= 0:
        return None
    seconds = extra_gemm_seconds(shapes, dtypes, flops_per_s)
    if seconds < ESTIMATE_NOTE_S:
        return None
    largest = max(s.flops for s in shapes)
    return (
        f"note: the {len(shapes)} GEMM shapes of --scenario/--shapes (the largest {largest / 1e12:.3g} "
        f"TFLOP a call, each timed at least {MIN_CALLS_PER_GEMM} times in {dtypes} precisions) take "
        f"at least {clock_text(seconds)} at the {flops_per_s / 1e12:.3g} TFLOP/s of the heat soak"
    )
