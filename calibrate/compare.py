"""``calibrate compare-trace``: measured (Kineto trace) vs simulated time per op kind.

The simulated side is one representative rank of ``simcluster.simulate(scenario).events``
(columns rank, stream, kind, name, start_s, end_s, ...; docs/architecture.md): communication
kinds → ``comm``; compute time as the engine's own breakdown splits it (``time_breakdown_s``:
GEMMs, attention, and the rest — memory-bound kernels, loss, optimizer, recomputation — as
``other``), since one simulated block (a layer's MLP) holds GEMMs and memory-bound kernels
alike; ``idle`` = the rank's step span not covered by any event. The simulated GEMM and
attention times are the job's slowest GPU's (``gpu.speed_spread``); a trace from a typical rank
runs its kernels faster and waits longer, so set ``cluster.speed_spread: 0`` in the scenario to
compare kernel times alone. The scenario is simulated as given (``--hardware`` and ``--set`` as
``simcluster run`` takes them), under the framework it names: a trace of ``measure-step``'s loop
compares with ``--set framework=pytorch-ddp`` (``torchtitan`` for FSDP2), as that command
simulates it; the last line says what was simulated.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

from calibrate.kineto import KINDS, Breakdown, classify, load_trace, union_length
from simcluster.errors import UserError

HELP = "compare a PyTorch profiler (Kineto) trace with a simulated step, per op kind"

COMM_KINDS = frozenset(
    {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send", "recv"}
)
# Simulator op names that carry no kernel-like name still say what they are.
_SIM_NAME_HINTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("attn", "attention", "sdpa")),
    ("gemm", ("gemm", "matmul", "linear", "qkv", "proj", "mlp", "fc1", "fc2", "expert")),
)


def sim_kind(event_kind: str, name: str) -> str:
    """The op kind of a simulated event."""
    if event_kind in COMM_KINDS:
        return "comm"
    found = classify(name)
    if found:
        return found
    lowered = name.lower()
    for kind, hints in _SIM_NAME_HINTS:
        if any(h in lowered for h in hints):
            return kind
    return "other"


# the engine's compute categories (simcluster/engine/breakdown.py) read as trace kinds; what
# recomputation reruns is counted as other, since the engine does not split it by kernel
_COMPUTE_KINDS = {"gemm": "gemm", "attention": "attention"}


def simulated_seconds(
    events: Any, rank: int | None = None, compute: dict[str, float] | None = None
) -> dict[str, float]:
    """Seconds per kind on one rank (the lowest by default) of a SimResult events DataFrame.

    With ``compute`` (the rank's stage in the summary's ``time_breakdown_s``), the compute
    stream's time is split as the engine split it, GEMMs and attention apart from the
    memory-bound kernels of the same block; without it, by the events' names."""
    if events.empty:
        raise UserError("SCENARIO", "the simulation produced no events")
    rank = int(events["rank"].min()) if rank is None else rank
    mine = events[events["rank"] == rank]
    seconds = dict.fromkeys(KINDS, 0.0)
    for kind, name, start, end in zip(
        mine["kind"], mine["name"], mine["start_s"], mine["end_s"], strict=True
    ):
        found = sim_kind(str(kind), str(name))
        if compute is None or found == "comm":
            seconds[found] += float(end) - float(start)
    if compute is not None:
        for category, value in compute.items():
            if category == "idle" or category.startswith("comm_"):
                continue
            seconds[_COMPUTE_KINDS.get(category, "other")] += float(value)
    intervals = [(float(s), float(e)) for s, e in zip(mine["start_s"], mine["end_s"], strict=True)]
    span = max(e for _, e in intervals) - min(s for s, _ in intervals)
    seconds["idle"] = span - union_length(intervals)
    return seconds


def simulate_scenario(
    scenario: str, overrides: list[str] | None = None, hardware: str | None = None
) -> dict[str, float]:
    """Simulate a scenario (name or path, ``--set`` items, a profile overriding its
    ``cluster.hardware``): seconds per kind of :func:`seconds_of`."""
    return seconds_of(simulate_result(scenario, overrides, hardware))


def simulate_result(
    scenario: str, overrides: list[str] | None = None, hardware: str | None = None
) -> Any:
    """The SimResult of a scenario; looked up lazily, as calibrate predates the engine."""
    try:
        simulate = importlib.import_module("simcluster").simulate
        loading = importlib.import_module("simcluster.scenario")
    except (AttributeError, ModuleNotFoundError):
        raise UserError(
            "SCENARIO", "this simcluster has no simulate() yet; only the trace side is available"
        ) from None
    return simulate(loading.load_scenario(scenario, loading.parse_set(overrides)), hardware)


def simulated_as(result: Any) -> str:
    """What was simulated, in one line: scenario, layout, profile and framework entry."""
    s = result.summary
    framework = s.get("framework") or "none (simcluster's defaults)"
    return f"(simulated: {s['scenario']}, {s['layout']} on {s['hardware']}, framework {framework})"


def seconds_of(result: Any) -> dict[str, float]:
    """Seconds per kind on the lowest rank of a SimResult, its compute split as the engine's
    breakdown splits it (the first stage's, where the lowest rank is)."""
    stages = result.summary.get("time_breakdown_s", {}).get("per_stage") or [None]
    return simulated_seconds(result.events, compute=stages[0])


def table(measured: Breakdown, simulated: dict[str, float] | None) -> str:
    """The comparison as aligned text: kind, measured ms, simulated ms, simulated/measured."""
    lines = [f"{'kind':<10} {'measured ms':>12} {'simulated ms':>13} {'sim/meas':>9}"]
    for kind in KINDS:
        meas = measured.seconds[kind] * 1e3
        if simulated is None:
            lines.append(f"{kind:<10} {meas:12.3f} {'-':>13} {'-':>9}")
            continue
        sim = simulated[kind] * 1e3
        ratio = f"{sim / meas:9.2f}" if meas > 0 else f"{'-':>9}"
        lines.append(f"{kind:<10} {meas:12.3f} {sim:13.3f} {ratio}")
    lines.append(f"(measured: {measured.level} events, per step over {measured.steps} step(s))")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of the subcommand."""
    parser.add_argument("trace", type=Path, metavar="KINETO_TRACE")
    parser.add_argument("scenario", metavar="SCENARIO", help="shipped scenario name or YAML path")
    parser.add_argument(
        "--hardware", metavar="H",
        help="profile to simulate with (overrides cluster.hardware), e.g. the one calibrate wrote",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="overrides", action="append", metavar="KEY=VALUE",
        help="override a scenario field (repeatable), e.g. --set framework=pytorch-ddp to "
        "simulate measure-step's DDP loop",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Print the comparison table and what was simulated."""
    measured = load_trace(args.trace)
    try:
        result = simulate_result(args.scenario, args.overrides, args.hardware)
    except UserError:
        print(table(measured, None))  # the measured side is still worth showing
        raise
    print(table(measured, seconds_of(result)))
    print(simulated_as(result))
    return 0
