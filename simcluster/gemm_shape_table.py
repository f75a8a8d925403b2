"""A GEMM's rate by its shape, relative to the median GEMM of the same FLOP count.

The profiles' GEMM curves index efficiency by FLOPs alone. At one FLOP count cuBLAS runs a GEMM
with a short reduction dimension K slower than a squarer one: each output tile's main loop is
shorter against the same prologue and epilogue (XLA's sm_90 table: 4096x4096x1024 at 677
TFLOP/s, 1024x4096x4096 at 739). Tensor parallelism shortens K (a row-parallel linear reduces
over width / tp), and a short microbatch shortens the weight-gradient GEMM's K (its tokens).

A shape table holds measured rates on a grid of M x N x K (``hardware/gemm_shapes/``). A
shape's factor is the table's rate at it over the median rate of the table's shapes with the
same FLOP count, both read in log space. Outside the grid each dimension is held at the grid's
edge: a larger GEMM keeps the relative penalty of its short side, while the FLOP curve carries
its size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from simcluster import yamlio
from simcluster.data import data_dir
from simcluster.errors import UserError

#: the training precisions whose GEMMs a table's dtype stands for (fp16 and bf16 run the same
#: tensor-core path at the same peak)
DTYPE_ALIASES = {"fp16": "bf16"}

#: where a table holds no rates of its own for a dtype, a 16-bit table's rates at a shorter
#: reduction stand for them: an FP8 tile's main loop over K takes the time a 16-bit one takes
#: over K/2 against the same fixed cost (pipeline fill, the 16-bit epilogue), so an FP8 GEMM
#: loses at K what a 16-bit one loses at K/2. Measured, FP8 loses about twice the 16-bit share
#: at a short K: cuBLAS on an H100 (pytorch-labs/float8_experimental pull requests 38 and 100,
#: benchmarks/bench_matmul.py) runs 16384 x 1024 x 8192 FP8 at 0.79-0.82 of its K = 7168-8192
#: rate, BF16 at 0.99-1.02; TileLang on an H800 at M = N = 8192 (its benchmark/matmul and
#: matmul_fp8 READMEs) K = 1024 / 2048 at 0.73 / 0.87 of K = 16384 in FP8, 0.82 / 0.92 in FP16
REDUCED_K = {"fp8": ("bf16", 0.5)}


@dataclass(frozen=True)
class ShapeTable:
    """Measured GEMM rates on a grid of shapes, per dtype (see the module docstring)."""

    name: str
    grid: tuple[float, ...]
    #: dtype -> log of the rate, indexed [m][n][k] over ``grid``
    log_rates: dict[str, np.ndarray]
    #: dtype -> (log2 FLOPs of each level, log of the median rate at that level)
    levels: dict[str, tuple[np.ndarray, np.ndarray]]
    _memo: dict[tuple[float, float, float, str], float] = field(default_factory=dict, compare=False, repr=False)

    def source(self, dtype: str) -> tuple[str, float]:
        """The table dtype whose rates stand for GEMMs of ``dtype`` and the scale on K they are
        read at: its own (or its alias's) at K, else :data:`REDUCED_K`'s."""
        key = DTYPE_ALIASES.get(dtype, dtype)
        if key not in self.log_rates and key in REDUCED_K:
            return REDUCED_K[key]
        return key, 1.0

    def has(self, dtype: str) -> bool:
        """Whether the table holds rates for GEMMs of ``dtype`` (its own or, for FP8, a 16-bit
        table's at half the reduction)."""
        return self.source(dtype)[0] in self.log_rates

    def factor(self, m: float, n: float, k: float, dtype: str) -> float:
        """Rate of an m x n x k GEMM over the median rate of the same FLOPs (1.0 without data)."""
        memo = self._memo.get((m, n, k, dtype))
        if memo is None:
            memo = self._memo[(m, n, k, dtype)] = self._factor(m, n, k, dtype)
        return memo

    def _factor(self, m: float, n: float, k: float, dtype: str) -> float:
        key, scale = self.source(dtype)
        k *= scale
        rates = self.log_rates.get(key)
        if rates is None or m <= 0 or n <= 0 or k <= 0:
            return 1.0
        axis = np.log2(np.asarray(self.grid))
        coords = [float(np.clip(math.log2(v), axis[0], axis[-1])) for v in (m, n, k)]
        at_shape = _trilinear(rates, axis, coords)
        level_x, level_y = self.levels[key]
        at_level = float(np.interp(1.0 + sum(coords), level_x, level_y))
        return math.exp(at_shape - at_level)


def _trilinear(values: np.ndarray, axis: np.ndarray, coords: list[float]) -> float:
    """Multilinear interpolation of ``values`` on the grid ``axis`` (each coordinate inside it)."""
    lows: list[int] = []
    fracs: list[float] = []
    for c in coords:
        i = min(int(np.searchsorted(axis, c, side="right")) - 1, len(axis) - 2)
        lows.append(i)
        fracs.append(float((c - axis[i]) / (axis[i + 1] - axis[i])))
    total = 0.0
    for corner in range(8):
        weight, index = 1.0, []
        for d in range(3):
            up = (corner >> d) & 1
            weight *= fracs[d] if up else 1.0 - fracs[d]
            index.append(lows[d] + up)
        if weight:
            total += weight * float(values[tuple(index)])
    return total


def _levels(rates: np.ndarray, grid: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Median log rate of the shapes at each FLOP count of the grid."""
    by_level: dict[float, list[float]] = {}
    size = len(grid)
    for i in range(size):
        for j in range(size):
            for k in range(size):
                flops = math.log2(2.0 * grid[i] * grid[j] * grid[k])
                by_level.setdefault(round(flops, 9), []).append(float(rates[i, j, k]))
    xs = sorted(by_level)
    return np.asarray(xs), np.asarray([float(np.median(by_level[x])) for x in xs])


def table_dir() -> Path:
    """The shipped folder of shape tables (hardware/gemm_shapes)."""
    return data_dir("hardware") / "gemm_shapes"


def shipped_tables() -> list[str]:
    """Names of the shape tables shipped in hardware/gemm_shapes."""
    return sorted(p.stem for p in table_dir().glob("*.yaml"))


@cache
def load_shape_table(name: str, field: str = "efficiency.gemm_shapes") -> ShapeTable:
    """A shipped table by name ('xla-sm90') or a YAML file; a one-line error if unusable."""
    path = Path(name)
    if path.suffix not in (".yaml", ".yml"):
        path = table_dir() / f"{name}.yaml"
    if not path.is_file():
        raise UserError(
            field, f"unknown GEMM shape table '{name}'; shipped: {', '.join(shipped_tables())}, or a path to one"
        )
    raw = yamlio.load_user_file(path, field, "GEMM shape table")
    return table_from_mapping(raw, f"GEMM shape table {path}", field, name)


def shape_table(spec: str | Mapping[str, Any] | None, field: str = "efficiency.gemm_shapes") -> ShapeTable | None:
    """A profile's ``efficiency.gemm_shapes``: a table's name or path, or the table itself
    inline (``calibrate`` writes the cube it timed so)."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return load_shape_table(spec, field)
    return table_from_mapping(spec, "the inline GEMM shape table", field, "inline")


def table_from_mapping(raw: Any, what: str, field: str, name: str) -> ShapeTable:
    """Validate ``{grid: [sizes], tflops: {dtype: [m][n][k]}}`` into a table."""
    if not isinstance(raw, Mapping) or "grid" not in raw or not isinstance(raw.get("tflops"), Mapping):
        raise UserError(field, f"{what} needs 'grid' and a 'tflops' mapping of dtype -> [m][n][k]")
    try:
        grid = tuple(float(g) for g in raw["grid"])
    except (TypeError, ValueError):
        raise UserError(field, f"{what}: 'grid' must be a list of sizes") from None
    if len(grid) < 2 or any(g <= 0 for g in grid) or any(b <= a for a, b in zip(grid, grid[1:], strict=False)):
        raise UserError(field, f"{what}: 'grid' must be at least two increasing positive sizes")
    log_rates: dict[str, np.ndarray] = {}
    levels: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    size = len(grid)
    for dtype, values in raw["tflops"].items():
        try:
            arr = np.asarray(values, dtype=float)
        except (TypeError, ValueError):
            arr = np.zeros(0)
        if arr.shape != (size, size, size) or not np.all(arr > 0):
            raise UserError(
                field,
                f"{what}: tflops.{dtype} must be {size}x{size}x{size} positive rates ([m][n][k] over grid)",
            )
        log_rates[str(dtype)] = np.log(arr)
        levels[str(dtype)] = _levels(log_rates[str(dtype)], grid)
    return ShapeTable(name=str(raw.get("name", name)), grid=grid, log_rates=log_rates, levels=levels)
