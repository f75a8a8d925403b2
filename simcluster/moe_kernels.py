"""A calibrated profile's MoE kernels (``measured.moe``), read as the simulator uses them.

``calibrate`` (calibrate/moe.py, moe_alltoall.py) times on the user's GPUs what a
mixture-of-experts layer runs besides its dense GEMMs. Where a profile holds these tables the
expert layer (parallelism/expert.py) takes:

- the grouped expert GEMMs as the per-GEMM model's time times the measured ratio of a grouped
  call to the same GEMMs timed singly, for the implementation the framework runs
  (:data:`GROUPED_BY_FRAMEWORK`), interpolated in tokens per expert (log) at the table's
  nearest expert count and GEMM size;
- the permute (a gather of the routed copies) and unpermute (their scatter-add back) at the
  measured bytes per second, interpolated in bytes moved (log);
- the router's softmax and top-k at the measured logits per second, interpolated in
  tokens x experts (log) at the nearest top_k;
- the dropless dispatcher's read-back of the per-expert counts at its measured host time;
- the expert-parallel all-to-alls at the measured ratio of an uneven all-to-all (a uniform
  routing draw's splits) to an even one of the same bytes, interpolated in bytes (log) at the
  nearest rank count, applied as that many times the bytes: exact where the exchange is
  bandwidth-bound, as a dispatch of megabytes is (an ASSUMPTION for small ones); never below 1,
  since the busiest rank of an uneven exchange sets its end and an even one has none busier.

Rates carry to a scenario's patched HBM as the measured memory table does (compute.py).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simcluster.errors import UserError
from simcluster.interp import interp

if TYPE_CHECKING:
    from simcluster.hardware import HardwareProfile

#: the grouped-GEMM implementation a framework runs: torchtitan calls torch._grouped_mm
#: (torchtitan/models/moe/moe.py ``_run_experts_grouped_mm``); Megatron-Core's TEGroupedMLP
#: (TransformerEngine GroupedLinear: one cuBLAS GEMM per split, over several streams),
#: DeepSpeed-MoE and PyTorch eager loop over the experts
GROUPED_BY_FRAMEWORK: dict[str, str] = {"torchtitan": "grouped_mm"}
DEFAULT_GROUPED = "loop"

_POS = Field(gt=0, allow_inf_nan=False)


class _Row(BaseModel):
    # extra columns (tflops, max_tokens, ...) are what calibrate records for the reader
    model_config = ConfigDict(extra="allow", frozen=True)


class GroupedGemmRow(_Row):
    """A grouped call over ``experts`` GEMMs of [t_i, k] @ [k, n], ``tokens_per_expert`` t_i on
    average; ``ratio`` = its ``time_s`` over ``singles_s``, the same GEMMs timed singly."""

    impl: Literal["loop", "grouped_mm"]
    dtype: str
    experts: int = Field(gt=0)
    tokens_per_expert: float = _POS
    n: int = Field(gt=0)
    k: int = Field(gt=0)
    time_s: float = _POS
    singles_s: float = _POS
    ratio: float = _POS


class PermuteRow(_Row):
    """Gather (``permute_s``) and scatter-add back (``unpermute_s``) of routed copies moving
    ``bytes`` (each copy's row read and written once)."""

    bytes: float = _POS
    permute_s: float = _POS
    unpermute_s: float = _POS


class RouterRow(_Row):
    """Softmax and top-k over [tokens, experts] fp32 logits."""

    tokens: int = Field(gt=0)
    experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    time_s: float = _POS


class AllToAllRow(_Row):
    """An uneven all-to-all of ``bytes`` per rank on ``gpus`` ranks beside an even one."""

    bytes: float = _POS
    gpus: int = Field(ge=2)
    uneven_s: float = _POS
    even_s: float = _POS
    ratio: float = _POS


class MoeTables(BaseModel):
    """The ``measured.moe`` map."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grouped_gemm: list[GroupedGemmRow] = []
    permute: list[PermuteRow] = []
    router: list[RouterRow] = []
    all_to_all: list[AllToAllRow] = []
    count_read_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    notes: list[str] = []


def moe_tables(measured: dict[str, Any]) -> MoeTables | None:
    """The profile's ``measured.moe`` (None without one); a malformed table is a one-line
    error naming the field."""
    raw = measured.get("moe")
    if raw is None:
        return None
    try:
        return MoeTables.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = "measured.moe" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        raise UserError(loc, f"{err['msg']}; re-run calibrate or fix the row") from None


def _curve(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(x, y) sorted by x, repeated x's at their median y."""
    by_x: dict[float, list[float]] = {}
    for x, y in points:
        by_x.setdefault(x, []).append(y)
    return [(x, statistics.median(ys)) for x, ys in sorted(by_x.items())]


def _distance(a: float, b: float) -> float:
    return abs(math.log(a / b))


class MoeKernels:
    """Lookups into a profile's MoE tables; ``hbm_scale`` = the scenario's HBM over the
    measured machine's (1 unpatched)."""

    def __init__(self, tables: MoeTables, hbm_scale: float = 1.0) -> None:
        self.tables = tables
        self.hbm_scale = hbm_scale

    def grouped_ratio(self, impl: str, tokens_per_expert: float, experts: float, n: float, k: float, dtype: str) -> float | None:
        """A grouped call's time over its GEMMs timed singly, for ``impl``; None when the table
        has no row of it. Rows of the GEMM's dtype where there are some (the ratio is a
        launch-and-occupancy effect, so another dtype's stands in otherwise: an ASSUMPTION);
        of those, the expert count and n x k nearest in log distance."""
        rows = [r for r in self.tables.grouped_gemm if r.impl == impl]
        rows = [r for r in rows if r.dtype == dtype] or rows
        if not rows or tokens_per_expert <= 0:
            return None
        near = min(
            {(r.experts, r.n, r.k) for r in rows},
            key=lambda g: (_distance(g[0], experts) + _distance(g[1] * g[2], n * k), g),
        )
        curve = _curve([(r.tokens_per_expert, r.ratio) for r in rows if (r.experts, r.n, r.k) == near])
        return interp(curve, tokens_per_expert, log_x=True)

    def permute_seconds(self, nbytes: float, scatter: bool) -> float | None:
        """Seconds of a permute (gather) or, with ``scatter``, an unpermute moving ``nbytes``."""
        rows = self.tables.permute
        if not rows or nbytes <= 0:
            return None
        rates = _curve([(r.bytes, r.bytes / (r.unpermute_s if scatter else r.permute_s)) for r in rows])
        return nbytes / (interp(rates, nbytes, log_x=True) * self.hbm_scale)

    def router_seconds(self, tokens: float, experts: int, top_k: int) -> float | None:
        """Seconds of the router's softmax and top-k over ``tokens`` x ``experts`` logits."""
        rows = self.tables.router
        if not rows or tokens <= 0:
            return None
        nearest = min({r.top_k for r in rows}, key=lambda k: (_distance(k, top_k), k))
        rates = _curve([(r.tokens * r.experts, r.tokens * r.experts / r.time_s) for r in rows if r.top_k == nearest])
        logits = tokens * experts
        return logits / (interp(rates, logits, log_x=True) * self.hbm_scale)

    def all_to_all_ratio(self, nbytes: float, gpus: int) -> float | None:
        """The uneven all-to-all's time over an even one's of ``nbytes`` per rank, at the
        table's rank count nearest ``gpus`` (at least 1; None without rows)."""
        rows = self.tables.all_to_all
        if not rows or nbytes <= 0:
            return None
        nearest = min({r.gpus for r in rows}, key=lambda g: (_distance(g, gpus), g))
        curve = _curve([(r.bytes, r.ratio) for r in rows if r.gpus == nearest])
        return max(1.0, interp(curve, nbytes, log_x=True))

    @property
    def count_read_s(self) -> float | None:
        """Host seconds of reading the per-expert counts back, the device idle."""
        return self.tables.count_read_s


def of_profile(profile: HardwareProfile) -> MoeKernels | None:
    """The MoE kernels a profile measured (None without ``measured.moe``), their rates carried
    to a scenario's patched HBM bandwidth."""
    tables = moe_tables(profile.measured)
    if tables is None:
        return None
    return MoeKernels(tables, profile.gpu.hbm_tbps / profile.as_measured.gpu.hbm_tbps)


def scenario_moe_shapes(scenario: str | Path) -> list[tuple[int, int, int, int, int, int, int]]:
    """One rank's MoE layer of ``scenario`` for ``calibrate --scenario``: (local experts, mean
    tokens per expert, fc1's output width, hidden, experts, top_k, tokens routed), as the
    simulator sizes it (parallelism/expert.py); empty for a dense model."""
    from simcluster.context import build_context
    from simcluster.parallelism.expert import _routed_load, _widths
    from simcluster.parallelism.shapes import Shapes
    from simcluster.scenario import load_scenario

    sc = load_scenario(scenario)
    ctx = build_context(sc)
    m = ctx.model
    if not m.experts:
        return []
    shapes = Shapes(m, ctx.layout, sc.training)
    per_expert, local = _routed_load(shapes, 1.0)
    up, _ = _widths(shapes)
    return [
        (round(local), max(1, round(per_expert)), round(up), m.hidden, m.experts, m.top_k, max(1, round(shapes.moe_tokens)))
    ]
