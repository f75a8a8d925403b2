"""A long step's figures from a few shorter ones: a pipeline's steady state repeats.

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

:func:`step_figures` uses this where it pays: it simulates q, 2q, 3q ... microbatches (plus
M mod q, so that M is a whole number of groups further on) until the last three lie on one
line (to :data:`REL_TOL` of the step) with one peak memory, and extrapolates from the last
two. The warm-up decides how many it takes: the Llama 3.1 405B row on 1,024 H100s (pp 8,
vpp 8) holds more activations at 8 microbatches than at 16, and its slope settles from 16 on.
When the shorter steps would add up to more than half the step's microbatches before that,
or the step is short (:data:`MIN_MICROBATCHES`), the whole step is simulated. The throughput
figures follow from the step time: tokens and model FLOPs per step are proportional to M.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from simcluster.context import Context, build_context
from simcluster.engine.breakdown import busiest_stage, largest_besides_gemm
from simcluster.errors import UserError
from simcluster.scenario import Scenario

#: how far the third point may be off the line of the first two, relative to the step
REL_TOL = 1e-9
#: below this many microbatches a step is simulated whole: building and summarising three
#: steps costs more than it saves (dgxc/llama3-8b-bf16-128gpu, 8 microbatches at pp 1: 1.0 s
#: whole, 1.3 s from 2, 3 and 4)
MIN_MICROBATCHES = 64


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


def first_counts(ctx: Context) -> tuple[int, int] | None:
    """The microbatch group and the step's remainder over it, for the shorter steps ``k *
    group + remainder``; None where even three of them would not halve the work."""
    lay = ctx.layout
    m = lay.microbatches
    if ctx.scenario.training.pipeline_flushes > 1 or m < MIN_MICROBATCHES:
        return None
    group = ctx.spec.group or lay.pp
    rest = m % group
    if 2 * (6 * group + 3 * rest) > m:  # k = 1, 2, 3
        return None
    return group, rest


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


def _extrapolated(points: list[tuple[int, dict[str, Any]]], m: int) -> StepFigures:
    """The step of ``m`` microbatches on the line through the last two (count, summary)
    points."""
    (m2, a), (m3, b) = points[-2:]

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
        extrapolated_from=tuple(count for count, _ in points),
    )


def _steady(points: list[tuple[int, dict[str, Any]]]) -> bool:
    """Whether the last three points are past the warm-up: one line, one peak memory."""
    last = points[-3:]
    return (
        len(last) == 3
        and on_one_line([(count, s["step_time_s"]) for count, s in last])
        and len({s["peak_memory_bytes"]["max"] for _, s in last}) == 1
    )


def _from_shorter_steps(scenario: Scenario, ctx: Context) -> StepFigures | None:
    """The step extrapolated from shorter ones once they are steady (None: not worth it, or not
    steady within half the step's microbatches)."""
    from simcluster.engine import simulate

    first = first_counts(ctx)
    if first is None:
        return None
    group, rest = first
    m = ctx.layout.microbatches
    points: list[tuple[int, dict[str, Any]]] = []
    k = 1
    while not _steady(points):
        count = k * group + rest
        if 2 * (sum(c for c, _ in points) + count) > m:
            return None
        try:
            shorter = _shorter(scenario, ctx, count)
        except UserError:  # a schedule that takes the step's count but not this one
            return None
        points.append((count, simulate(shorter).summary))
        k += 1
    return _extrapolated(points, m)


def step_figures(scenario: Scenario, ctx: Context, extrapolate: bool = True) -> StepFigures:
    """The step's figures: extrapolated from shorter steps where that is exact and saves work
    (``extrapolate``), else from simulating the whole step. ``scenario`` is the one ``ctx`` was
    built from."""
    from simcluster.engine import simulate

    figures = _from_shorter_steps(scenario, ctx) if extrapolate else None
    return figures if figures is not None else _figures(simulate(ctx).summary)
