"""A long step's figures from a few shorter ones: a pipeline's steady state repeats.

A step of M microbatches per pipeline is a warm-up, a steady state and a cool-down. Once the
schedule has filled the pipeline, each further group of q microbatches (q: the schedule's
microbatch group, pp unless an interleaved schedule is told otherwise) runs the same pattern
of forwards, backwards and transfers on every stage, while the step's ends (parameter gathers
before the first forward, the gradient reduction and optimizer after the last backward) do not
grow with M. A deterministic simulation of such a step is therefore affine in M once it has
settled (unless slack left by the warm-up is still being used up, :func:`_settled`): the
Llama 3.1 405B GB200 case of 384 microbatches (pp 16, vpp 4) simulates to
5.3728, 7.7568 and 10.1408 s at 32, 48 and 64 microbatches, slopes equal to 1e-13, and the
line's value at 384 is the full simulation's 57.8208 s to 2e-13 (for 45 s of simulation
instead of 102 s).

:func:`step_summary` uses this where it pays (``validate``, ``sweep``, ``compare``, and ``run``
without ``--out``: a timeline draws every microbatch): it simulates 1, 2, 3 ... groups of q microbatches (plus M mod q,
so that M is a whole number of groups further on) until the last three lie on one line (to
:data:`REL_TOL` of the step) with one peak memory, and extrapolates from the last two, unless
a part of a stage's time shrinks along them (:func:`_settled`). The warm-up decides how many
it takes: the Llama 3.1 405B row on 256 GB200s (pp 16, vpp 4) settles from 32 microbatches,
the one on 1,024 H100s (pp 8, vpp 8) holds more activations at 8 microbatches than at 16 and
settles from 24. When the first three shorter steps would add up to more than half the step's
microbatches, or all of them to more than :data:`MAX_SHARE` of it before they settle, the step
is short (:data:`MIN_MICROBATCHES`), or its schedule holds every microbatch's activations at
once (GPipe's, looped BFS: memory grows with M), the whole step is simulated. Settings whose effect depends on M up to a horizon move the first shorter
step past it (:func:`first_counts`). The summary at M is the run summary's: the step time,
each stage's time breakdown and pipeline span and busy time, the exposed communication and
the event count on the line; tokens and FLOPs per step in proportion to M, the rates and the
bubble worked out from those; the memory and the rest as at the last point.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from simcluster.context import Context, build_context
from simcluster.engine.breakdown import busiest_stage
from simcluster.engine.metrics import bubble_of
from simcluster.errors import UserError
from simcluster.scenario import Scenario

#: how far the third point may be off the line of the first two, relative to the step
REL_TOL = 1e-9
#: below this many microbatches a step is simulated whole: building and summarising three
#: steps costs more than it saves (dgxc/llama3-8b-bf16-128gpu, 32 microbatches at pp 1: 1.0 s
#: whole, 1.3 s from steps of 2, 3 and 4)
MIN_MICROBATCHES = 64
#: the shorter steps may add up to this share of the step's microbatches before the whole step
#: is simulated instead (their worst case then costs 5/3 of the step). Half was too little for
#: warm-ups of three groups: Megatron-Bridge's Llama 3.1 405B on 1,024 H100 (pp 8, vpp 8, 192
#: microbatches), NVIDIA's Grok-1 rows on 512 H100 and Llama 3 70B on 64 (128 and 64) settle
#: at the fifth or fourth step, 5/8 of theirs, and were simulated whole after the shorter ones
MAX_SHARE = Fraction(2, 3)  # exact: a step at the bound is not decided by rounding

#: summary rates: per-step tokens or FLOPs (in proportion to M) over the step time
_RATES = ("tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "hfu")


def first_counts(ctx: Context) -> tuple[int, int, int] | None:
    """The microbatch group, the step's remainder over it and the first multiple k of the
    group to simulate (steps of ``k * group + remainder`` microbatches, k, k+1, k+2 ...); None
    where the first three would not halve the work.

    Past Megatron's wgrad deferral limit (``parallel.head_wgrad_deferral_limit``: the first L
    microbatches' LM-head weight gradients wait for the flush, and their inputs stay in memory)
    a step is another step than below it, so the shorter steps start beyond L; with no limit
    every microbatch's inputs stay, and memory grows with the step. MLPerf v5.0's Llama 3.1
    405B on 512 H100s (L = 50, pp 8, vpp 8) is on one line from 8 to 40 microbatches, and its
    peak memory and slope change from there on.
    """
    lay = ctx.layout
    m = lay.microbatches
    par = ctx.scenario.parallel
    deferred = par.defer_head_wgrad and lay.pp > 1
    if ctx.scenario.training.pipeline_flushes > 1 or m < MIN_MICROBATCHES or ctx.schedule.holds_every_microbatch:
        return None
    if deferred and par.head_wgrad_deferral_limit == 0:
        return None
    group = ctx.spec.group or lay.pp
    rest = m % group
    beyond = par.head_wgrad_deferral_limit if deferred else 0
    k = max(1, (beyond - rest) // group + 1)
    return (group, rest, k) if halves_the_work(m, group, rest, k) else None


def halves_the_work(m: float, group: float, rest: float = 0, k: int = 1) -> bool:
    """Whether the first three shorter steps (``k``, ``k + 1``, ``k + 2`` groups, each plus the
    remainder) take at most half the microbatches of a step of ``m``."""
    return 2 * sum(j * group + rest for j in range(k, k + 3)) <= m


def on_one_line(points: list[tuple[int, float]]) -> bool:
    """Whether (microbatches, step seconds) points lie on one line to :data:`REL_TOL`."""
    (m1, s1), (m2, s2) = points[0], points[1]
    slope = (s2 - s1) / (m2 - m1)
    return all(abs(s - (s2 + slope * (m - m2))) <= REL_TOL * abs(s) for m, s in points[2:])


def _shorter(scenario: Scenario, ctx: Context, microbatches: int, hardware: str | None) -> Context:
    lay = ctx.layout
    training = scenario.training.model_copy(
        update={"global_batch": microbatches * lay.dp * lay.micro_batch, "grad_accum": None}
    )
    return build_context(scenario.model_copy(update={"training": training}), hardware)


def _extrapolated(points: list[tuple[int, dict[str, Any]]], m: int) -> dict[str, Any]:
    """The run summary of ``m`` microbatches on the line through the last two (count, summary)
    points."""
    (m2, a), (m3, b) = points[-2:]

    def at_m(x2: float, x3: float) -> float:
        return x3 + (m - m3) * (x3 - x2) / (m3 - m2)

    def each(x2: list[float], x3: list[float]) -> list[float]:
        return [at_m(u, v) for u, v in zip(x2, x3, strict=True)]

    step = at_m(a["step_time_s"], b["step_time_s"])
    grow = m / m3
    # a rate at m: the rate at m3 with its tokens or FLOPs grown and its step lengthened
    scale = grow * b["step_time_s"] / step
    spans = {k: each(a["pipeline_spans_s"][k], v) for k, v in b["pipeline_spans_s"].items()}
    bubble, per_stage_bubble = bubble_of(spans["span"], spans["busy"])
    # every stage's parts, as the busiest stage at m need not be the busiest at m3
    per_stage = [
        {k: at_m(x.get(k, 0.0), v) for k, v in y.items()}
        for x, y in zip(a["time_breakdown_s"]["per_stage"], b["time_breakdown_s"]["per_stage"], strict=True)
    ]
    return {
        **b,
        "microbatches": m,
        "step_time_s": step,
        **{k: b[k] * scale for k in _RATES},
        "model_flops_per_step": b["model_flops_per_step"] * grow,
        "hardware_flops_per_step": b["hardware_flops_per_step"] * grow,
        "bubble_fraction": bubble,
        "bubble_fraction_per_stage": per_stage_bubble,
        "pipeline_spans_s": spans,
        "exposed_comm_s": {k: at_m(a["exposed_comm_s"].get(k, 0.0), v) for k, v in b["exposed_comm_s"].items()},
        "time_breakdown_s": {"stage": busiest_stage(per_stage), "per_stage": per_stage},
        "events": round(at_m(a["events"], b["events"])),
        "sim_wall_s": sum(s["sim_wall_s"] for _, s in points),
        "extrapolated_from_microbatches": [count for count, _ in points],
    }


def _settled(points: list[tuple[int, dict[str, Any]]]) -> bool | None:
    """Whether the last three points are past the warm-up: True when they lie on one line with
    one peak memory; None while they do not (yet); False when they do but some part of a
    stage's time shrinks as the step grows. Such a part is slack the warm-up left (a stage's
    lead on the next, the host's lead on the GPU) being used up at a steady rate: it runs out
    at some longer step, where the slope changes, and the line would miss the step. Nanotron's
    80B row on 8 nodes (pp 16, 256 microbatches) has stage 0's idle fall by 0.6 ms a
    microbatch, on one line from 16 to 224 microbatches; after that the slope rises by 7e-5."""
    last = points[-3:]
    if len(last) < 3 or not on_one_line([(count, s["step_time_s"]) for count, s in last]):
        return None
    if len({s["peak_memory_bytes"]["max"] for _, s in last}) > 1:
        return None
    if len({s.get("offload_backlog_bytes") for _, s in last}) > 1:  # copies still falling behind
        return None
    for (_, a), (_, b) in zip(last[:-1], last[1:], strict=True):
        least = -REL_TOL * b["step_time_s"]
        for x, y in zip(a["time_breakdown_s"]["per_stage"], b["time_breakdown_s"]["per_stage"], strict=True):
            if any(v - x.get(k, 0.0) < least for k, v in y.items()):
                return False
    return True


def from_shorter_steps(
    scenario: Scenario, ctx: Context, hardware: str | None = None, progress: bool | None = False
) -> dict[str, Any] | None:
    """The summary extrapolated from shorter steps once they have settled (None: not worth it,
    a drift, or not settled within :data:`MAX_SHARE` of the step's microbatches). ``progress``:
    each shorter step's bar, as :func:`simcluster.engine.simulate` shows it."""
    from simcluster.engine import simulate

    first = first_counts(ctx)
    if first is None:
        return None
    group, rest, k = first
    m = ctx.layout.microbatches
    points: list[tuple[int, dict[str, Any]]] = []
    while (settled := _settled(points)) is None:
        count = k * group + rest
        if sum(c for c, _ in points) + count > MAX_SHARE * m:
            return None
        try:
            shorter = _shorter(scenario, ctx, count, hardware)
        except UserError:  # a schedule that takes the step's count but not this one
            return None
        points.append((count, simulate(shorter, progress=progress).summary))
        k += 1
    return _extrapolated(points, m) if settled else None


def step_summary(
    scenario: Scenario, ctx: Context | None = None, hardware: str | None = None, extrapolate: bool = True
) -> dict[str, Any]:
    """The step's run summary (:func:`simcluster.engine.simulate`'s): extrapolated from shorter
    steps where that is exact and saves work (``extrapolate``; the summary then lists them as
    ``extrapolated_from_microbatches``), else from simulating the whole step. ``ctx``: the
    scenario's context, when the caller built it (with ``hardware`` overriding
    cluster.hardware)."""
    from simcluster.engine import simulate

    ctx = ctx if ctx is not None else build_context(scenario, hardware)
    summary = from_shorter_steps(scenario, ctx, hardware) if extrapolate else None
    return summary if summary is not None else simulate(ctx).summary
