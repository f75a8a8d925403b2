"""GEMM throughput over (M, N, K, dtype): ``torch.matmul`` timed on the device."""

from __future__ import annotations

import torch

from calibrate.shapes import GemmShape
from calibrate.timers import Timer, robust_time

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


#: the dtype of the shape table's cube (the precision LLM training runs its GEMMs in)
CUBE_DTYPE = "bf16"


def default_dtypes(device: str) -> list[str]:
    """Precisions worth timing: CPUs run fp16 matmul through slow paths, so skip it there."""
    return ["bf16", "fp16", "fp32"] if device == "cuda" else ["bf16", "fp32"]


def iterations_for(once_s: float, budget_s: float, lo: int = 2, hi: int = 200) -> int:
    """How many timed calls fit in ``budget_s`` given one call's time."""
    return max(lo, min(hi, int(budget_s / max(once_s, 1e-9))))


def measure_gemm(
    shape: GemmShape, dtype: str, device: torch.device, timer: Timer, budget_s: float
) -> dict[str, object]:
    """Time one GEMM shape; returns a ``measured.gemm`` row."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(shape.m, shape.k, generator=gen).to(device=device, dtype=DTYPES[dtype])
    b = torch.randn(shape.k, shape.n, generator=gen).to(device=device, dtype=DTYPES[dtype])
    out = torch.empty(shape.m, shape.n, device=device, dtype=DTYPES[dtype])

    def call() -> None:
        torch.matmul(a, b, out=out)

    once = timer(call, iters=1, warmup=1)
    t = robust_time(timer, call, iterations_for(once, budget_s))
    return {
        "m": shape.m,
        "n": shape.n,
        "k": shape.k,
        "dtype": dtype,
        "time_s": t,
        "tflops": shape.flops / t / 1e12,
    }
