"""GEMM throughput over (M, N, K, dtype): ``torch.matmul`` timed on the device; FP8 as
``torch._scaled_mm`` (E4M3 operands, per-tensor scales, a bf16 result)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from calibrate.shapes import GemmShape
from calibrate.timers import Timer, robust_time

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}  # fp8's format depends on the device: fp8_format
#: what an FP8 GEMM writes: TransformerEngine's linears return their activation dtype
FP8_OUT = torch.bfloat16
#: the multiple every dimension of an FP8 GEMM must be (cuBLASLt; torch._scaled_mm checks it)
FP8_ALIGN = 16


def e4m3_for(arch: str | None) -> torch.dtype:
    """The E4M3 format a GPU's FP8 units take, by its ROCm architecture name (None: not ROCm).

    gfx940-gfx942 (MI300, CDNA 3) have only the FNUZ variant (no infinities, no negative zero,
    exponent bias 8; ROCm's HIP reference, "FP8 Numbers"); MI350 (gfx950, CDNA 4) and NVIDIA's
    Ada and Hopper take OCP's E4M3FN. A GEMM given the other format fails rather than run."""
    if arch is not None and arch.split(":")[0].startswith("gfx94"):
        return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def fp8_format(device: torch.device) -> torch.dtype:
    """The E4M3 format of ``device`` (e4m3_for of its ROCm architecture; E4M3FN elsewhere)."""
    if device.type == "cuda" and torch.version.hip:
        return e4m3_for(torch.cuda.get_device_properties(device).gcnArchName)
    return e4m3_for(None)


def operand_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The torch dtype a GEMM's operands are stored in: ``dtype``'s, or in fp8 the device's
    E4M3 format."""
    return fp8_format(device) if dtype == "fp8" else DTYPES[dtype]


def result_dtype(dtype: str) -> torch.dtype:
    """The dtype a GEMM in ``dtype`` writes: its own, bf16 for an FP8 GEMM."""
    return FP8_OUT if dtype == "fp8" else DTYPES[dtype]


def fp8_padded(size: int) -> int:
    """``size`` rounded up to the multiple of FP8_ALIGN TransformerEngine pads FP8 GEMMs to."""
    return -(-size // FP8_ALIGN) * FP8_ALIGN


def iterations_for(once_s: float, budget_s: float, lo: int = 2, hi: int = 200) -> int:
    """How many timed calls fit in ``budget_s`` given one call's time."""
    return max(lo, min(hi, int(budget_s / max(once_s, 1e-9))))


def operands(shape: GemmShape, dtype: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(A, B, out) laid out as the shape's role finds them, so that ``A @ B`` into ``out`` is the
    GEMM autograd issues (simcluster/gemm_roles.py); a transposed operand is a view of the stored
    tensor, which cuBLAS reads through its transpose flag, not a copy."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    m, n, k = shape.m, shape.n, shape.k

    kind = operand_dtype(dtype, device)

    def stored(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=gen).to(device=device, dtype=kind)

    if dtype == "fp8":
        # cuBLASLt's FP8 GEMMs take only the TN layout (A row-major, B column-major), and
        # TransformerEngine's cast-transpose hands every role its operands so: one layout for
        # all; and dimensions in multiples of 16, to which TransformerEngine pads (Fp8Padding)
        m, n, k = (fp8_padded(d) for d in (m, n, k))
        return stored(m, k), stored(n, k).t(), torch.empty(m, n, device=device, dtype=result_dtype(dtype))
    if shape.role == "fwd":  # y = x @ W.t(), the weight stored [out, in] = [n, k]
        a, b, out_shape = stored(m, k), stored(n, k).t(), (m, n)
    elif shape.role == "wgrad":  # dW[out, in] = dy.t() @ x, dy stored [tokens, out] = [k, n]
        a, b, out_shape = stored(k, n).t(), stored(k, m), (n, m)
    else:  # dgrad (dx = dy @ W, W stored [out, in] = [k, n]) and a plain A @ B
        a, b, out_shape = stored(m, k), stored(k, n), (m, n)
    return a, b, torch.empty(*out_shape, device=device, dtype=result_dtype(dtype))


def gemm_call(shape: GemmShape, dtype: str, device: torch.device) -> Callable[[], object]:
    """One call of the shape's GEMM in ``dtype`` (operands made once, outside the call)."""
    a, b, out = operands(shape, dtype, device)
    if dtype == "fp8":
        one = torch.ones((), device=device, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=FP8_OUT)
    return lambda: torch.matmul(a, b, out=out)


def fp8_missing(device: torch.device) -> str | None:
    """Why this device cannot run FP8 GEMMs (a GPU before compute capability 8.9, a torch build
    without them), or None: tried on a 16 x 16 x 16 GEMM."""
    try:
        gemm_call(GemmShape(16, 16, 16), "fp8", device)()
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    return None


def measure_gemm(
    shape: GemmShape, dtype: str, device: torch.device, timer: Timer, budget_s: float
) -> dict[str, object]:
    """Time one GEMM shape (in its role's layout); returns a ``measured.gemm`` row."""
    call = gemm_call(shape, dtype, device)
    once = timer(call, iters=1, warmup=1)
    t = robust_time(timer, call, iterations_for(once, budget_s))
    row: dict[str, object] = {"m": shape.m, "n": shape.n, "k": shape.k, "dtype": dtype}
    if shape.role:
        row["role"] = shape.role
    return {**row, "time_s": t, "tflops": shape.flops / t / 1e12}
