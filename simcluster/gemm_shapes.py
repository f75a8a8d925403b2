"""The exact GEMM shapes a scenario's step runs (for ``calibrate --scenario``).

Built by planning the step with a kernel model that records every GEMM it is asked to time, so
the list is by construction what the simulator uses (TP/EP sharding, forward, dgrad, wgrad),
each with its role (:mod:`simcluster.gemm_roles`; None for the batched score GEMMs of unfused
attention), which ``calibrate`` times in that role's operand layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from simcluster.compute import KernelModel
from simcluster.context import build_context
from simcluster.engine.plan import build_plans
from simcluster.scenario import Scenario, load_scenario

#: M, N, K and the GEMM's role in the step
Shape = tuple[int, int, int, str | None]


@dataclass
class _RecordingKernels(KernelModel):
    shapes: set[Shape] = field(default_factory=set)

    def gemm(
        self, m: float, n: float, k: float, dtype: str | None = None, count: float = 1, role: str | None = None
    ) -> float:
        if m > 0 and n > 0 and k > 0:
            self.shapes.add((round(m), round(n), round(k), role))
        return super().gemm(m, n, k, dtype, count, role)

    __hash__ = KernelModel.__hash__


def gemm_shapes(scenario: str | Path | Scenario) -> list[Shape]:
    """Sorted unique (M, N, K, role) of every GEMM in one training step of ``scenario``."""
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    ctx = build_context(sc)
    km = _RecordingKernels(ctx.profile, sc.training.precision)
    build_plans(ctx, km)
    return sorted(km.shapes, key=lambda s: (*s[:3], s[3] or ""))
