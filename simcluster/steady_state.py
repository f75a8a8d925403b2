"""A long step's figures from three shorter ones: a pipeline's steady state repeats.

A step of M microbatches per pipeline is a warm-up, a steady state and a cool-down. Once the
schedule has filled the pipeline, each further group of q microbatches (q: the schedule's
microbatch group, pp unless an interleaved schedule is told otherwise) runs the same pattern
of forwards, backwards and transfers on every stage, while the step's ends (parameter gathers
before the first forward, the gradient reduction and optimizer after the last backward) do not
grow with M. A deterministic simulation of such a step is therefore affine in M beyond the
warm-up: the Llama 3.1 405B GB200 case of 384 microbatches (pp 16, vpp 4) simulates to
5.3728, 7.7568 and 10.1408 s at 32, 48 and 64 microbatches, slopes equal to 1e-13, and the
line's value at 384 is the full simulation's 57.8208 s to 2e-13 (for 45 s of simulation
instead of 102 s).

:func:`step_figures` uses this where it saves at least half the work: it simulates 2q, 3q and
4q microbatches (plus M mod q, so that M is a whole number of groups further on), and extrapolates from the last two only if all three lie on one line (to
:data:`REL_TOL` of the step) and the last two agree on the peak memory; otherwise,
and wherever M is small, it simulates the whole step. The throughput figures follow from the
step time: tokens and model FLOPs per step are proportional to M.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from simcluster.context import Context, build_context
from simcluster.engine.breakdown import busiest_stage, largest_besides_gemm
from simcluster.errors import UserError
from simcluster.scenario import Scenario

#: multiples of the microbatch group simulated (the first one only checks the line)
POINTS = (2, 3, 4)
#: how far the third point may be off the line of the first two, relative to the step
REL_TOL = 1e-9


@dataclass(frozen=True)
class StepFigures:
    """What a comparison with a published run reads of one simulated step."""

    #: step_time_s, tokens_per_s, tokens_per_s_per_gpu, model_tflops_per_gpu, mfu, hfu
    metrics: dict[str, float]
    #: hardware FLOPs over model FLOPs (recomputation's extra forward)
    hardware_per_model_flops: float
    peak_memory_bytes: float
    fits_in_memory: bool
    framework: str | None
    #: the busiest stage's largest part after the GEMMs and its share of the step
    largest_after_gemm: tuple[str, float]
    #: the microbatch counts simulated when the step was extrapolated (empty: simulated whole)
    extrapolated_from: tuple[int, ...] = ()


_RATES = ("tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "hfu")


def _figures(summary: dict[str, Any]) -> StepFigures:
    return StepFigures(
        metrics={"step_time_s": summary["step_time_s"], **{k: summary[k] for k in _RATES}},
        hardware_per_model_flops=summary["hardware_flops_per_step"] / summary["model_flops_per_step"],
        peak_memory_bytes=summary["peak_memory_bytes"]["max"],
        fits_in_memory=bool(summary["fits_in_memory"]),
        framework=summary.get("framework"),
        largest_after_gemm=largest_besides_gemm(summary),
    )


def fold_counts(ctx: Context) -> tuple[int, ...] | None:
    """The microbatch counts to simulate instead of the whole step (whole microbatch groups
    plus the step's remainder, so that the step is on their line), or None where that does not
    halve the work."""
    lay = ctx.layout
    if ctx.scenario.training.pipeline_flushes > 1:
        return None
    group = ctx.spec.group or lay.pp
    counts = tuple(k * group + lay.microbatches % group for k in POINTS)
    if 2 * sum(counts) > lay.microbatches:
        return None
    return counts


def on_one_line(points: list[tuple[int, float]]) -> bool:
    """Whether (microbatches, step seconds) points lie on one line to :data:`REL_TOL`."""
    (m1, s1), (m2, s2) = points[0], points[1]
    slope = (s2 - s1) / (m2 - m1)
    return all(abs(s - (s2 + slope * (m - m2))) <= REL_TOL * abs(s) for m, s in points[2:])


def _shorter(scenario: Scenario, ctx: Context, microbatches: int) -> Context:
    lay = ctx.layout
    training = scenario.training.model_copy(
        update={"global_batch": microbatches * lay.dp * lay.micro_batch, "grad_accum": None}
    )
    return build_context(scenario.model_copy(update={"training": training}))


def _extrapolated(summaries: list[dict[str, Any]], counts: tuple[int, ...], m: int) -> StepFigures | None:
    """The step of ``m`` microbatches on the line through the last two summaries (None when the
    summaries do not make one line)."""
    steps = [s["step_time_s"] for s in summaries]
    if not on_one_line(list(zip(counts, steps, strict=True))):
        return None
    if len({s["peak_memory_bytes"]["max"] for s in summaries[1:]}) > 1:
        return None
    (m2, a), (m3, b) = zip(counts[-2:], summaries[-2:], strict=True)

    def at_m(x2: float, x3: float) -> float:
        return x3 + (m - m3) * (x3 - x2) / (m3 - m2)

    step = at_m(a["step_time_s"], b["step_time_s"])
    # tokens and FLOPs per step grow with m: a rate at m is the rate at m3 scaled so
    scale = (m / m3) * (b["step_time_s"] / step)
    # every stage's parts, as the busiest stage at m need not be the busiest at m3
    per_stage = [
        {k: at_m(x.get(k, 0.0), v) for k, v in y.items()}
        for x, y in zip(a["time_breakdown_s"]["per_stage"], b["time_breakdown_s"]["per_stage"], strict=True)
    ]
    breakdown = {"stage": busiest_stage(per_stage), "per_stage": per_stage}
    return replace(
        _figures(b),
        metrics={"step_time_s": step, **{k: b[k] * scale for k in _RATES}},
        largest_after_gemm=largest_besides_gemm({"step_time_s": step, "time_breakdown_s": breakdown}),
        extrapolated_from=counts,
    )


def step_figures(scenario: Scenario, ctx: Context, extrapolate: bool = True) -> StepFigures:
    """The step's figures: extrapolated from three shorter steps where that is exact and
    saves work (``extrapolate``), else from simulating the whole step. ``scenario`` is the one
    ``ctx`` was built from."""
    from simcluster.engine import simulate

    counts = fold_counts(ctx) if extrapolate else None
    if counts is not None:
        try:
            shorter = [_shorter(scenario, ctx, m) for m in counts]
        except UserError:  # a schedule that takes the step's count but not these
            shorter = []
        if shorter:
            summaries = [simulate(c).summary for c in shorter]
            figures = _extrapolated(summaries, counts, ctx.layout.microbatches)
            if figures is not None:
                return figures
    return _figures(simulate(ctx).summary)
