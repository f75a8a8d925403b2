"""The exact GEMM shapes a scenario's step runs (for ``calibrate --scenario``).

Built by planning the step with a kernel model that records every GEMM it is asked to time, so
the list is by construction what the simulator uses (TP/EP sharding, forward, dgrad, wgrad).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from simcluster.compute import KernelModel
from simcluster.context import build_context
from simcluster.engine.plan import build_plans
from simcluster.scenario import Scenario, load_scenario


@dataclass
class _RecordingKernels(KernelModel):
    shapes: set[tuple[int, int, int]] = field(default_factory=set)

    def gemm(self, m: float, n: float, k: float, dtype: str | None = None, count: float = 1) -> float:
        if m > 0 and n > 0 and k > 0:
            self.shapes.add((round(m), round(n), round(k)))
        return super().gemm(m, n, k, dtype, count)

    __hash__ = KernelModel.__hash__


def gemm_shapes(scenario: str | Path | Scenario) -> list[tuple[int, int, int]]:
    """Sorted unique (M, N, K) of every GEMM in one training step of ``scenario``."""
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    ctx = build_context(sc)
    km = _RecordingKernels(ctx.profile, sc.training.precision)
    build_plans(ctx, km)
    return sorted(km.shapes)
