"""A linear layer as the layer builders see it: its GEMM's reduction and output widths on this GPU."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gemm:
    """A linear layer y = x W on this GPU: tokens x k -> tokens x n."""

    k: float
    n: float
