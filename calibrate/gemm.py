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


def iterations_for(once_s: float, budget_s: float, lo: int = 2, hi: int = 200) -> int:
    """How many timed calls fit in ``budget_s`` given one call's time."""
    return max(lo, min(hi, int(budget_s / max(once_s, 1e-9))))


def operands(shape: GemmShape, dtype: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(A, B, out) laid out as the shape's role finds them, so that ``A @ B`` into ``out`` is the
    GEMM autograd issues (simcluster/gemm_roles.py); a transposed operand is a view of the stored
    tensor, which cuBLAS reads through its transpose flag, not a copy."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    m, n, k = shape.m, shape.n, shape.k

    def stored(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=gen).to(device=device, dtype=DTYPES[dtype])

    if shape.role == "fwd":  # y = x @ W.t(), the weight stored [out, in] = [n, k]
        a, b, out_shape = stored(m, k), stored(n, k).t(), (m, n)
    elif shape.role == "wgrad":  # dW[out, in] = dy.t() @ x, dy stored [tokens, out] = [k, n]
        a, b, out_shape = stored(k, n).t(), stored(k, m), (n, m)
    else:  # dgrad (dx = dy @ W, W stored [out, in] = [k, n]) and a plain A @ B
        a, b, out_shape = stored(m, k), stored(k, n), (m, n)
    return a, b, torch.empty(*out_shape, device=device, dtype=DTYPES[dtype])


def measure_gemm(
    shape: GemmShape, dtype: str, device: torch.device, timer: Timer, budget_s: float
) -> dict[str, object]:
    """Time one GEMM shape (in its role's layout); returns a ``measured.gemm`` row."""
    a, b, out = operands(shape, dtype, device)

    def call() -> None:
        torch.matmul(a, b, out=out)

    once = timer(call, iters=1, warmup=1)
    t = robust_time(timer, call, iterations_for(once, budget_s))
    row: dict[str, object] = {"m": shape.m, "n": shape.n, "k": shape.k, "dtype": dtype}
    if shape.role:
        row["role"] = shape.role
    return {**row, "time_s": t, "tflops": shape.flops / t / 1e12}
