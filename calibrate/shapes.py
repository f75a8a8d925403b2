"""GEMM shape grids: the default sweep, ``--shapes M,N,K;...`` and a scenario's own shapes.

Pure Python (no torch) so the CLI can validate arguments before starting any measurement.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from simcluster.errors import UserError
from simcluster.units import format_bytes, parse_gemm_shape

# A shape's memory is that of the widest precision timed (fp32, calibrate.gemm): A, B and C.
FP32_BYTES = 4
# Above any accelerator's memory; a host that holds it would spend hours per timed call.
MAX_GEMM_BYTES = 2**40


@dataclass(frozen=True, order=True)
class GemmShape:
    """C[m, n] = A[m, k] @ B[k, n]; 2·m·n·k FLOPs. ``role`` (fwd, dgrad, wgrad) times it in the
    operand layout autograd gives that GEMM of a linear layer (simcluster/gemm_roles.py); ""
    is a plain A @ B."""

    m: int
    n: int
    k: int
    role: str = ""

    @property
    def flops(self) -> float:
        """Multiply-adds counted as two FLOPs."""
        return 2.0 * self.m * self.n * self.k

    @property
    def operand_bytes(self) -> int:
        """A, B and C in fp32, what timing the shape holds in memory at once."""
        return FP32_BYTES * (self.m * self.k + self.k * self.n + self.m * self.n)

    def text(self) -> str:
        """The shape as written on the command line (with its role, where it has one)."""
        return f"{self.m},{self.n},{self.k}" + (f" ({self.role})" if self.role else "")


# Square sizes span the launch-bound to compute-bound range; the rectangular ones have the
# aspect of transformer projections (tokens × hidden × 4·hidden).
# The quick grid stops at 512^3: a CPU without native bf16 (AVX2 only) takes about 3 s a call
# at 1024^3 in bf16 (0.2 s at 512^3; one thread, 2026-12-02), and a measurement makes at
# least five calls, so that one shape had been three quarters of a quick run's time.
_QUICK = [GemmShape(s, s, s) for s in (128, 256, 512)] + [GemmShape(256, 1024, 256)]
_FULL_CPU = [GemmShape(s, s, s) for s in (128, 256, 512, 1024, 2048)] + [
    GemmShape(512, 4096, 1024),
    GemmShape(512, 1024, 4096),
]
_FULL_GPU = [GemmShape(s, s, s) for s in (256, 512, 1024, 2048, 4096, 8192, 16384)] + [
    GemmShape(4096, 4 * h, h) for h in (2048, 4096, 8192)
]


# Every M x N x K over these sizes is timed too, for the profile's GEMM shape table (how a
# GEMM's rate moves with its shape at one FLOP count: simcluster/gemm_shape_table.py). The
# GPU's is the grid of XLA's cost-model tables, so a calibrated table reads beside
# hardware/gemm_shapes/.
_CUBE_GPU = (256, 512, 1024, 2048, 4096)
_CUBE_CPU = (64, 128, 256, 512)
_CUBE_QUICK = (32, 64, 128)


def shape_cube(device: str, quick: bool) -> tuple[int, ...]:
    """The sizes whose every M x N x K combination a run times."""
    if quick:
        return _CUBE_QUICK
    return _CUBE_GPU if device == "cuda" else _CUBE_CPU


def cube_shapes(device: str, quick: bool) -> list[GemmShape]:
    """Every M x N x K over :func:`shape_cube`'s sizes (timed in the table's dtype only)."""
    sizes = shape_cube(device, quick)
    return [GemmShape(m, n, k) for m in sizes for n in sizes for k in sizes]


def default_grid(device: str, quick: bool) -> list[GemmShape]:
    """The built-in sweep for a device (every precision); ``quick`` keeps a CPU run to seconds."""
    if quick:
        return list(_QUICK)
    return list(_FULL_GPU if device == "cuda" else _FULL_CPU)


def parse_shapes(text: str) -> list[GemmShape]:
    """Parse ``'M,N,K;M,N,K'`` into shapes."""
    shapes = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        shape = GemmShape(*parse_gemm_shape(item, "--shapes"))
        limit = f"{format_bytes(MAX_GEMM_BYTES)}, beyond any GPU's memory"
        check_fits([shape], MAX_GEMM_BYTES, limit, "--shapes")  # a typo: refused before torch loads
        shapes.append(shape)
    if not shapes:
        raise UserError("--shapes", "no shapes given; write e.g. 4096,4096,1024;4096,1024,4096")
    return shapes


def check_fits(shapes: list[GemmShape], capacity_bytes: int, limit: str, field: str) -> None:
    """Each shape's fp32 operands fit in ``capacity_bytes`` (``limit`` says what that is); a
    shape that cannot would fail deep in a measuring run (out of memory, or a hang until
    --timeout)."""
    for shape in shapes:
        if shape.operand_bytes > capacity_bytes:
            raise UserError(
                field,
                f"'{shape.text()}': A, B and C in fp32 take {format_bytes(shape.operand_bytes)}, "
                f"more than {limit}; use smaller M, N, K",
            )


# Hook for the simulator's per-layer op list: a module exposing
# ``gemm_shapes(scenario_path) -> list[tuple[int, int, int, str | None]]`` (M, N, K under the
# scenario's TP/EP sharding, and the GEMM's role in the step). Looked up lazily so calibrate
# works before the model code exists.
SCENARIO_SHAPES_HOOK = ("simcluster.gemm_shapes", "gemm_shapes")


def scenario_shapes(scenario: str) -> list[GemmShape]:
    """The exact per-layer GEMM shapes of a scenario, each with its role, from the simulator's
    model code."""
    module_name, func_name = SCENARIO_SHAPES_HOOK
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ModuleNotFoundError, AttributeError):
        raise UserError(
            "--scenario",
            f"this simcluster has no {module_name}.{func_name} yet; "
            "pass the shapes explicitly with --shapes M,N,K;...",
        ) from None
    return sorted({GemmShape(int(m), int(n), int(k), role or "") for m, n, k, role in func(scenario)})
