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

from calibrate.gemm import DTYPES, gemm_call
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


#: the probe shape of :func:`slow_dtype_note`: small enough for an emulated precision (a
#: 512^3 bf16 GEMM takes ~0.2 s on two AVX2 cores, whose emulated rate falls with size: 1.9,
#: 1.4 and 0.7 GFLOP/s at 256, 512 and 1024)
PROBE = GemmShape(512, 512, 512)
#: a precision this many times slower than the soak's at the same shape runs without units of
#: its own (a CPU without native bf16 converts to fp32 and back)
SLOW_RATIO = 3.0
#: a slow precision's least time worth a line: a minute, the whole of a CPU run's fp32 grid
SLOW_NOTE_S = 60.0


def probe_rate(dtype: str, device: torch.device) -> float:
    """FLOP/s of :data:`PROBE` GEMMs in ``dtype``: one warm-up call, then two timed."""
    call = gemm_call(PROBE, dtype, device)
    call()
    start = time.perf_counter()
    for _ in range(2):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return 2 * PROBE.flops / max(time.perf_counter() - start, 1e-9)


def slow_dtype_note(
    dtype: str, rate: float, soak_dtype: str, soak_rate: float, shapes: Sequence[GemmShape]
) -> str | None:
    """A line saying that ``dtype`` runs far slower than ``soak_dtype`` here (``rate`` and
    ``soak_rate``: their :func:`probe_rate`) and how long its GEMMs of ``shapes`` will take,
    when that is long, with the flag that skips them."""
    if rate <= 0 or rate * SLOW_RATIO > soak_rate:
        return None
    seconds = extra_gemm_seconds(shapes, 1, rate)
    if seconds < SLOW_NOTE_S:
        return None
    return (
        f"note: {dtype} matmul runs {soak_rate / rate:.0f}x slower than {soak_dtype} here at "
        f"{PROBE.m}^3 (no native {dtype}): its {len(shapes)} GEMM measurements take at least "
        f"{clock_text(seconds)}, longer if its rate falls with size; --dtypes {soak_dtype} times "
        f"{soak_dtype} alone"
    )
