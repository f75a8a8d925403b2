"""The slowest GPU of a synchronous job: why per-GPU speed spread costs more at scale.

GPUs of one SKU do not run equally fast: manufacturing variation and power management give each
GPU its own sustained clock under a compute-bound load (Sinha et al., "Not All GPUs Are Created
Equal", SC'22: 8% average spread of the same kernel across the GPUs of a cluster). A
synchronous training step ends at the gradient reduction and the pipeline's last stage, so it
waits for its slowest GPU. With per-GPU throughput spread ``sigma`` (a fraction, normally
distributed) the expected slowest of ``n`` GPUs is ``sigma * E[max of n standard normals]``
below the typical GPU that kernel microbenchmarks measure; the simulator slows tensor-core work
(GEMMs, attention) by that much. Memory-bound kernels keep the typical rate: their speed is set
by HBM bandwidth, not by the SM clock that power management lowers (ASSUMPTION).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# integration grid for E[max]: the density of the maximum of up to ~1e6 normals is negligible
# outside [-8, 9]
_GRID = np.linspace(-8.0, 9.0, 34001)


@lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    """E[max of ``n`` independent standard normals] (0 for n = 1).

    Integrates ``x * n * phi(x) * Phi(x)^(n-1)``; e.g. 0.5642 for n = 2 (1/sqrt(pi)), 1.5388
    for 10, 3.2414 for 1000 (Harter 1961's tables of normal order statistics).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    x = _GRID
    phi = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    cdf = 0.5 * (1.0 + _erf(x / np.sqrt(2.0)))
    # log form keeps Phi^(n-1) finite for large n
    with np.errstate(divide="ignore"):
        log_cdf = np.log(cdf)
    density = n * phi * np.exp((n - 1) * log_cdf)
    y = x * density
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0)  # trapezoid rule


def _erf(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.vectorize(math.erf, otypes=[float])(x)
    return out


def slowest_gpu_slowdown(spread: float, gpus: int) -> float:
    """Factor on tensor-core time of the slowest of ``gpus`` GPUs with throughput spread
    ``spread`` (sigma as a fraction): 1 + spread * E[max of gpus standard normals]."""
    if spread <= 0 or gpus <= 1:
        return 1.0
    return 1.0 + spread * expected_max_normal(int(gpus))
