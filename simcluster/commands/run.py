"""``simcluster run``: simulate one training step and report time, throughput, MFU, bubble, memory."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from simcluster.accuracy_table import accuracy_line, small_expert_line
from simcluster.budget import Budget, budget_text, parse_tokens, training_budget
from simcluster.commands.common import (
    add_every_microbatch_argument,
    add_price_argument,
    add_scenario_arguments,
    add_tokens_argument,
    out_path,
    print_json,
    print_notes,
    scenario_from_args,
)
from simcluster.commands.console import stdout_console
from simcluster.commands.memory import hint_line, offload_backlog_line, tight_fit_line
from simcluster.context import Context, build_context
from simcluster.cost import Prices, check_priced, parse_prices, usd_per_million_tokens, usd_text
from simcluster.engine import simulate
from simcluster.engine.breakdown import busiest_shares
from simcluster.engine.result import SimResult
from simcluster.errors import UserError
from simcluster.inert import InertNote, inert_settings, note_lines
from simcluster.names import run_heading
from simcluster.output.trace_size import all_ranks_note, trace_size_note
from simcluster.scenario import Scenario
from simcluster.speed_hints import Rerun, busiest_share, speed_hints
from simcluster.stragglers import Stragglers
from simcluster.units import format_bytes, format_time

#: a recompute share of the step from which `run` says what lighter recomputation fits
RECOMPUTE_HINT = 0.05

NAME = "run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser)
    parser.add_argument(
        "--out", metavar="DIR", type=out_path,
        help="write summary.json, events.csv (and events.parquet with pyarrow), trace.json (Perfetto), "
        "timeline.png, memory.png and breakdown.png",
    )  # fmt: skip
    parser.add_argument("--svg", action="store_true", help="also write timeline.svg (with --out)")
    parser.add_argument(
        "--window", metavar="START,END",
        help="draw the timeline from START to END seconds after the step starts, e.g. 2.5,2.8 (with --out; default: the step)",
    )  # fmt: skip
    parser.add_argument(
        "--gzip-trace", action="store_true",
        help="write trace.json.gz instead of trace.json (with --out): about 15x smaller, and ui.perfetto.dev opens it as it is",
    )  # fmt: skip
    parser.add_argument("--all-ranks", action="store_true", help="simulate every GPU instead of one per pipeline stage")
    add_every_microbatch_argument(parser)  # --out, which draws every microbatch, implies it
    add_tokens_argument(parser, "adds how long a run of that many tokens takes on this layout and its GPU-hours")
    add_price_argument(parser, "adds what a million tokens cost (and with --tokens, the run)")


def _window(text: str) -> tuple[float, float]:
    """``START,END`` in seconds, END after START."""
    parts = text.split(",")
    try:
        start, end = (float(p) for p in parts) if len(parts) == 2 else (None, None)
    except ValueError:
        start = end = None
    if start is not None and end is not None and math.isfinite(end) and start < 0 < end:
        # the timeline's seconds count from the step's start (output/gantt.py's x axis)
        raise UserError(
            "--window", f"'{text}' starts before the step (0 s); START and END are seconds from the step's "
            f"start, 0 <= START < END: write e.g. 0,{end:g}"
        )
    if start is None or end is None or not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
        raise UserError("--window", f"'{text}' is not START,END in seconds with 0 <= START < END; write e.g. 2.5,2.8")
    return start, end


def run(args: argparse.Namespace) -> int:
    window = _output_options(args)  # checked before minutes of simulating
    tokens, prices = parse_tokens(args.tokens), parse_prices(args.price)
    scenario, ctx, inert = _prepared(args, prices)
    summary, result = _simulated(args, scenario, ctx)
    caveat = small_expert_line(ctx.model, ctx.scenario.training.cuda_graphs)
    rerun = _rerun_arguments(args)
    _annotate(summary, args, scenario, ctx, caveat=caveat, inert=inert, rerun=rerun)
    if prices is not None:
        summary["usd_per_gpu_hour"] = prices.of(ctx.profile.name)
        summary["usd_per_million_tokens"] = usd_per_million_tokens(summary, prices)
    if tokens is not None:
        summary["training_run"] = training_budget(summary, tokens, prices).record()
    if args.overrides:  # the figures and the trace say what was simulated, as the table does
        summary["overrides"] = list(args.overrides)
    written: list[str] = []
    if args.out:
        assert result is not None  # --out simulates the whole step, for its timeline
        written = _write_outputs(args, result, window)
    if args.json:
        print_json(summary)
        return 0
    if args.overrides:  # the title names the scenario, whose model or batch --set may have replaced
        stdout_console().print(f"with --set {' '.join(args.overrides)}")
    _print(
        summary, args.out, gpu=ctx.profile.gpu.name, precision=ctx.scenario.training.precision,
        caveat=caveat, written=written, rerun=rerun, hints=summary["speed_hints"],
    )  # fmt: skip
    return 0


def _prepared(args: argparse.Namespace, prices: Prices | None) -> tuple[Scenario, Context, list[InertNote]]:
    """The scenario and its context, every input checked and every note printed before the
    simulation starts; returns the settings that do nothing too."""
    scenario = scenario_from_args(args)
    if args.all_ranks:  # as simulation.all_ranks: a long step is still read off shorter ones
        simulation = scenario.simulation.model_copy(update={"all_ranks": True})
        scenario = scenario.model_copy(update={"simulation": simulation})
    ctx = build_context(scenario, args.hardware)
    check_priced(prices, {ctx.profile.name: scenario.name})
    if args.out:
        from simcluster.output.atomic import check_writable

        check_writable(args.out)
    inert = inert_settings(ctx)
    print_notes(note_lines(inert))  # before minutes of simulating a setting that does nothing
    print_notes([f"note: {n}" for n in ctx.notes])
    sim = ctx.scenario.simulation
    if sim.all_ranks or sim.stragglers:
        ahead = all_ranks_note(ctx.scenario.cluster.gpus)
        if ahead:
            print(f"simcluster run: {ahead}", file=sys.stderr)
    return scenario, ctx, inert


def _annotate(
    summary: dict, args: argparse.Namespace, scenario: Scenario, ctx: Context, *,
    caveat: str | None, inert: list[InertNote], rerun: Rerun,
) -> None:  # fmt: skip
    """The summary's advice beside the figures: caveats, notes, memory advice, speed hints."""
    if caveat:
        summary["accuracy_caveat"] = caveat
    summary["inert_settings"] = [n.text for n in inert]
    if ctx.notes:
        summary["notes"] = list(ctx.notes)
    add_memory_advice(summary, scenario, args.hardware)
    summary["speed_hints"] = speed_hints(summary, ctx, rerun)


def _output_options(args: argparse.Namespace) -> tuple[float, float] | None:
    """The options that shape what ``--out`` writes, refused without it; returns the window."""
    window = _window(args.window) if args.window else None
    if window and not args.out:
        raise UserError("--window", "zooms the timeline that --out writes; add --out DIR")
    if args.svg and not args.out:
        raise UserError("--svg", "writes timeline.svg beside the files --out writes; add --out DIR")
    if args.gzip_trace and not args.out:
        raise UserError("--gzip-trace", "compresses the trace that --out writes; add --out DIR")
    return window


def add_memory_advice(summary: dict, scenario: Scenario, hardware: str | None) -> None:
    """What a layout that does not fit could change (one field, else several together), and
    for one that fits while recomputing a good share of its step, the least recomputation
    that still fits."""
    if not summary["fits_in_memory"]:
        from simcluster.fit_hints import fit_advice

        summary.update(fit_advice(scenario, hardware))
    elif busiest_share(summary, "recompute") >= RECOMPUTE_HINT:
        from simcluster.commands.memory import TIGHT_SHARE
        from simcluster.fit_hints import lighter_recompute

        lighter = lighter_recompute(scenario, hardware, TIGHT_SHARE)
        if lighter is not None:
            summary["lighter_recompute"] = lighter.record()


def _write_outputs(args: argparse.Namespace, result: SimResult, window: tuple[float, float] | None) -> list[str]:
    """``--out``'s files, written atomically under a progress bar; returns their names."""
    if args.overrides:
        result.title += f"\nwith --set {' '.join(args.overrides)}"
    from simcluster.output.writer import WRITE_STEPS
    from simcluster.progress import progress_bar

    # a large run's figures, trace and events take a while (DeepSeek-V3 on 2,048 GPUs: 20 s)
    with progress_bar(f"writing {args.out}", WRITE_STEPS, delay_s=1.0, unit="parts") as advance:
        paths = result.write(args.out, svg=args.svg, window=window, gzip_trace=args.gzip_trace, progress=advance)
    trace = paths.get("trace.json.gz" if args.gzip_trace else "trace.json")
    note = trace_size_note(trace, len(result.events)) if trace else None
    if note:
        print(f"simcluster run: {note}", file=sys.stderr)
    return sorted(paths)


def _rerun_arguments(args: argparse.Namespace) -> Rerun:
    """What a command comparing this run needs: the SCENARIO as given (a file's path, not its
    name: `compare` finds only shipped names), then ``--hardware`` and every ``--set``, quoted
    for a shell."""
    options = [f"--hardware {shlex.quote(args.hardware)}"] if args.hardware else []
    options += [f"--set {shlex.quote(o)}" for o in args.overrides or ()]
    return Rerun(args.scenario, " ".join(options), args.hardware)


def _simulated(args: argparse.Namespace, scenario: Scenario, ctx: Context) -> tuple[dict, SimResult | None]:
    """The step's summary, and its whole simulation where it ran one: without a timeline to draw
    (no ``--out``) a long step is read off shorter ones, as sweep and validate do."""
    if not (args.out or args.every_microbatch):
        from simcluster.steady_state import from_shorter_steps

        summary = from_shorter_steps(scenario, ctx, args.hardware, progress=None)
        if summary is not None:
            return summary, None
    result = simulate(ctx, progress=None)
    return result.summary, result


def _simulation_text(s: dict) -> str:
    """The simulation row: its events and wall time, and the shorter steps a long step was read
    off where it was (``steady_state.py``)."""
    counts = s.get("extrapolated_from_microbatches")
    if not counts:
        return f"{s['events']:,} events in {s['sim_wall_s']:.2f} s"
    steps = ", ".join(map(str, counts[:-1])) + f" and {counts[-1]}"
    return (
        f"{s['events']:,} events, read off steps of {steps} of its {s['microbatches']} microbatches "
        f"simulated in {s['sim_wall_s']:.2f} s (exact once the steady state repeats; "
        "--every-microbatch or --out: every one)"
    )


def _summary_table(s: dict) -> Table:
    """The run's table: the step's figures, where its time goes, its memory, the simulation."""
    release = f" {s['framework_release']}" if s.get("framework_release") else ""
    under = f" under {s['framework']}{release}" if s.get("framework") else ""
    title = f"{run_heading(s['scenario'], s.get('model'))} — {s['layout']} on {s['gpus']} x {s['hardware']}{under}"
    table = Table(title=title, show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    step = format_time(s["step_time_s"])
    if s.get("optimizer_post_validation"):
        step += "  (steady state: steps overlap across stages, post-validation)"
    table.add_row("step time", step)
    table.add_row("tokens/s", f"{s['tokens_per_s']:,.0f}  ({s['tokens_per_s_per_gpu']:,.0f} per GPU)")
    tflops = s["model_tflops_per_gpu"]
    # three significant figures below 100: a calibrated CPU runs at hundredths of a TFLOP/s
    table.add_row("model TFLOP/s per GPU", f"{tflops:.1f}" if tflops >= 100 else f"{tflops:.3g}")
    hfu = s.get("hfu", s["mfu"])
    recomputed = f"  (HFU {100 * hfu:.1f}% with recomputation)" if hfu > s["mfu"] * 1.0005 else ""
    table.add_row("MFU", f"{100 * s['mfu']:.1f}%{recomputed}")
    flushes = s.get("pipeline_flushes", 1)
    in_flushes = f" in {flushes} flushes" if flushes > 1 else ""
    # the count in words: "m" is the pipeline papers' symbol, not every reader's
    count = s["microbatches"]
    word = "microbatch" if count == 1 else "microbatches"
    table.add_row("pipeline bubble", f"{100 * s['bubble_fraction']:.1f}%  ({count} {word}{in_flushes})")
    named = {"host": "host copies"}  # activation copies to and from host memory
    exposed = (
        ", ".join(f"{named.get(k, k)} {format_time(v)}" for k, v in s["exposed_comm_s"].items() if v > 0) or "none"
    )
    table.add_row("exposed communication (worst GPU)", exposed)
    per = s["compute_per_microbatch_s"]
    table.add_row(
        "compute per microbatch",
        # named as the timeline's legend names them: F/B/W alone are the Zero Bubble paper's letters
        f"forward (F) {format_time(per['forward'])}, backward input (B) {format_time(per['backward_input'])}, "
        f"backward weight (W) {format_time(per['backward_weight'])}",
    )
    slow = s["slowest_gpu"]
    if slow["tensor_core_slowdown"] > 1.0:
        table.add_row(
            "slowest GPU",
            f"GEMMs and attention +{100 * (slow['tensor_core_slowdown'] - 1):.1f}% (the slowest of "
            f"{s['gpus']:,} GPUs, per-GPU spread {100 * slow['speed_spread']:.1f}%)",
        )
    stragglers = Stragglers.from_dict(s.get("stragglers") or {})
    if stragglers:
        table.add_row("stragglers", "; ".join(stragglers.describe()))
    table.add_row(_breakdown_label(s), _breakdown_text(s))
    peak = s["peak_memory_bytes"]
    memory_text = f"{format_bytes(peak['max'])} of {format_bytes(s['capacity_bytes'])}"
    if peak.get("loss_transient"):
        memory_text += f" (loss logits {format_bytes(peak['loss_transient'])})"
    if not s["fits_in_memory"]:  # in the row itself: the table is what a reader looks at first
        memory_text += "  [bold red]does not fit[/]"
    table.add_row("peak memory per GPU", memory_text)
    if "usd_per_gpu_hour" in s:
        cost = usd_text(s["usd_per_million_tokens"])
        table.add_row("cost per 1M tokens", f"{cost}  (at ${s['usd_per_gpu_hour']:g} per GPU-hour)")
    if "training_run" in s:
        table.add_row("training run", budget_text(Budget.from_record(s["training_run"]), s["gpus"]))
    # the simulator's own cost, apart from the simulated step's figures above
    table.add_row("simulation", _simulation_text(s))
    return table


def _print(
    s: dict,
    out: str | None,
    gpu: str | None = None,
    precision: str | None = None,
    caveat: str | None = None,
    written: Sequence[str] = (),
    rerun: Rerun | None = None,
    hints: Sequence[str] = (),
) -> None:
    """The run's table and hints (``hints``: :func:`speed_hints`'); ``rerun``: what a command
    re-running this scenario needs (the lighter-recomputation hint's compare command)."""
    console = stdout_console()
    console.print(_summary_table(s))
    if not s.get("framework"):
        console.print(
            "[dim]the scenario names no framework: unset overlaps, buckets and kernels are simcluster's defaults "
            "(Megatron-LM's flags, FlashAttention); `simcluster list frameworks` names the presets[/]"
        )
    if gpu:
        console.print(f"[dim]{accuracy_line(gpu, precision)}[/]")
    if caveat:
        console.print(f"[yellow]{caveat}[/]")
    for hint in hints:
        # a command to copy: the terminal wraps it, Rich would break it with newlines
        console.print(hint, markup=False, soft_wrap=True)
    _print_memory_verdict(console, s)
    if "lighter_recompute" in s:  # memory to spare, spent on rerunning the forward
        _print_lighter_recompute(console, s, rerun)
    if out:
        console.print(f"wrote {Path(out)}/{', '.join(written)}", soft_wrap=True, markup=False)


def _print_memory_verdict(console: Console, s: dict) -> None:
    """Whether the peak fits: DOES NOT FIT with what would (the loss's copies, a layout), or
    how close to the capacity it runs."""
    peak = s["peak_memory_bytes"]
    if not s["fits_in_memory"]:
        console.print(
            f"[bold red]DOES NOT FIT[/]: peak {format_bytes(peak['max'])} exceeds the "
            f"{format_bytes(s['capacity_bytes'])} per GPU (simulated anyway; see `simcluster memory`)"
        )
        loss = peak.get("loss_transient") or 0.0
        if loss and peak["max"] - loss <= s["capacity_bytes"]:
            console.print(
                f"  the peak is the loss: its logit copies are {format_bytes(loss)}; a fused "
                "cross-entropy (training.fused_cross_entropy: true) or a smaller micro-batch would fit"
            )
        if "would_fit" in s:
            console.print(hint_line(s["would_fit"], s.get("would_fit_together")), soft_wrap=True)
    tight = tight_fit_line(peak["max"], s["capacity_bytes"])
    if tight:
        console.print(tight)
    backlog = offload_backlog_line(peak["max"], s.get("offload_backlog_bytes", 0.0), s["capacity_bytes"])
    if backlog:
        console.print(backlog)


def _print_lighter_recompute(console: Console, s: dict, rerun: Rerun | None) -> None:
    """Memory to spare while recomputation costs time: the lighter setting that fits, with a
    compare command that runs what this run ran."""
    from simcluster.commands.memory import set_items

    lighter, spare = s["lighter_recompute"], s["capacity_bytes"] - s["peak_memory_bytes"]["max"]
    share = busiest_share(s, "recompute")
    # the compare runs what this run ran (its file, hardware and --set on both sides; a
    # variant's @ overrides apply after --set)
    scenario, options = (rerun.scenario, rerun.options) if rerun else (s["scenario"], "")
    variant = shlex.quote(scenario + set_items(lighter, "@", ""))
    console.print(
        f"recomputation is {100 * share:.0f}% of the step with {format_bytes(spare)} "
        f"of GPU memory to spare: {set_items(lighter)} fits ({format_bytes(lighter['total_bytes'])} by "
        f"the memory walk; compare: simcluster compare {shlex.quote(scenario)} {variant}"
        f"{' ' + options if options else ''})",
        markup=False,
        soft_wrap=True,
    )


def _breakdown_label(s: dict) -> str:
    b = s["time_breakdown_s"]
    return "where the time goes" + (f" (stage {b['stage']})" if len(b["per_stage"]) > 1 else "")


def _breakdown_text(s: dict, most: int = 6) -> str:
    """The busiest stage's step as shares: 'GEMMs 65%, attention 17%, ...'."""
    parts = busiest_shares(s)[:most]
    return ", ".join(f"{label} {100 * f:.0f}%" for label, f in parts)
