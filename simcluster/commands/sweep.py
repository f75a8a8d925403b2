"""``simcluster sweep``: simulate many layouts of one scenario and rank them."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from simcluster.budget import budget_cell, format_count, parse_tokens, training_budget
from simcluster.commands.common import (
    add_every_microbatch_argument,
    add_price_argument,
    add_scenario_arguments,
    add_tokens_argument,
    out_path,
    print_json,
    print_notes,
    read_off_legend,
    scenario_from_args,
    to_json,
)
from simcluster.commands.console import stdout_console
from simcluster.cost import Prices, check_priced, format_usd, parse_prices
from simcluster.cost_hint import cost_hint
from simcluster.engine.breakdown import SHORT, largest_besides_gemm
from simcluster.errors import UserError
from simcluster.executors import Executor
from simcluster.hardware import load_profile, resolve_profile_path
from simcluster.inert import InertNote, common_notes, inert_settings, note_lines
from simcluster.progress import progress_bar
from simcluster.sweep import (
    AXES,
    MEMORY_FIELD,
    Candidate,
    SweepRow,
    candidates,
    parse_axis,
    run_sweep,
    show_value,
    skip_reasons,
)
from simcluster.units import format_bytes, format_time

NAME = "sweep"

_AXIS_HELP = {
    "gpus": "GPU counts (cluster sizes), e.g. 64,128,256; dp follows, the global batch stays",
    "tp": "tensor-parallel sizes, e.g. 1,2,4,8 or auto",
    "pp": "pipeline stages, e.g. 1,2,4 or auto",
    "cp": "context-parallel sizes or auto",
    "ep": "expert-parallel sizes or auto",
    "etp": "expert tensor-parallel sizes (each routed expert split over etp ranks), e.g. 1,4",
    "vpp": "virtual stages per GPU (interleaved schedules)",
    "zero": "ZeRO stages, e.g. 0,1,3",
    "zero_shard": "ranks sharding the ZeRO state (hybrid sharding, HSDP), e.g. 8,64,node (a node's data-parallel ranks)",
    "schedule": "pipeline schedules, e.g. 1f1b,interleaved,zb-h1",
    "activation_limit": "schedule v-auto's activation limits, fractions of 1F1B's, e.g. 0.4,0.5,0.75,1",
    "sequence_parallel": "sequence parallelism with TP: true,false",
    "micro_batch": "micro-batch sizes, e.g. 1,2,4",
    "recompute": "activation recomputation: none,selective,full",
    "precision": "GEMM precisions, e.g. bf16,fp8,nvfp4 (FP8-CS / FP8-MX set fp8 and its recipe)",
    "ep_comm": "Megatron-Core's MoE all-to-all overlap (overlap.ep_comm): true,false",
    "dispatcher": "MoE token dispatchers (moe.dispatcher), e.g. alltoall,deepep,hybridep",
    "dispatch_sms": "SMs DeepEP's or HybridEP's kernels run on (moe.dispatch_sms), e.g. 16,24,32",
    "optimizer_offload": "share of the optimizer on the host CPU (training.optimizer_offload), e.g. 0,0.5,1",
    "activation_offload_layers": "layers per chunk whose activations wait in host memory, e.g. 0,8,16",
    "pipeline_flushes": "pipeline schedules each step's microbatches run in (gradient accumulation "
    "around the pipeline, torchtitan's), e.g. 1,2,4",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(
        parser,
        hardware_help="hardware profile name or path (overrides cluster.hardware); a comma list "
        "(e.g. dgx-a100,dgx-h100) makes it an axis",
    )
    group = parser.add_argument_group("axes (comma-separated values; the others keep the scenario's)")
    for axis in AXES:
        if axis == "hardware":  # the common --hardware option takes a list here
            continue
        flag = "--" + axis.replace("_", "-")
        group.add_argument(flag, dest=f"axis_{axis}", metavar="LIST", help=_AXIS_HELP[axis])
    parser.add_argument(
        "--jobs", "-j", type=int, default=None, metavar="N",
        help="simulate N layouts at once in worker processes (default: number of CPUs)",
    )  # fmt: skip
    parser.add_argument(
        "--dask", metavar="ADDRESS",
        help="run the layouts on a Dask cluster: 'local' starts one here with --jobs workers, "
        "tcp://host:8786 joins a running scheduler (pip install 'simcluster[dask]')",
    )  # fmt: skip
    parser.add_argument(
        "--top", type=int, default=15, metavar="K", help="rows shown in the table (default 15)"
    )
    parser.add_argument(
        "--max-layouts", type=int, default=500, metavar="N",
        help="refuse sweeps of more than N combinations (default 500)",
    )  # fmt: skip
    parser.add_argument(
        "--fitting-only", action="store_true",
        help="skip, without simulating, the layouts whose peak memory (simcluster memory) exceeds the GPU's: "
        "at thousands of GPUs each simulation takes a while",
    )  # fmt: skip
    add_every_microbatch_argument(parser)
    parser.add_argument("--out", metavar="DIR", type=out_path, help="write sweep.csv, sweep.json and sweep.png")
    add_price_argument(
        parser,
        "adds what a million tokens cost and ranks by it; with prices per profile, every "
        "profile of the sweep needs one (an unpriced or unknown profile is an error)",
    )
    add_tokens_argument(parser, "adds how long a run of that many tokens takes on each layout (and with --price, its cost)")


def _check_counts(args: argparse.Namespace) -> None:
    """``--jobs``, ``--top`` and ``--max-layouts``, when given, are at least 1."""
    for flag, value in (("--jobs", args.jobs), ("--top", args.top), ("--max-layouts", args.max_layouts)):
        if value is not None and value < 1:
            raise UserError(flag, f"must be at least 1, got {value}")


def run(args: argparse.Namespace) -> int:
    _check_counts(args)
    jobs = args.jobs or max(os.cpu_count() or 1, 1)
    prices, tokens = parse_prices(args.price), parse_tokens(args.tokens)
    scenario = scenario_from_args(args)
    base = scenario.as_written()  # each layout gets its framework's preset for that layout
    base["name"] = scenario.name
    axes, hardware = _axes(args, scenario.cluster.gpus)
    # as compare: a mistyped or missing per-profile price is an error, not rows ranked last;
    # prices are keyed by the profile's own name (a YAML path's `name:`), as the rows are
    if prices is not None:
        profiles = axes.get("hardware") or [hardware or scenario.cluster.hardware]
        check_priced(prices, {load_profile(str(p)).name: scenario.name for p in profiles})
    cands = candidates(base, axes)
    if len(cands) > args.max_layouts:
        raise UserError(
            "--max-layouts",
            f"{len(cands)} combinations exceed {args.max_layouts}; narrow the axes or raise it",
        )
    if args.out:
        from simcluster.output.atomic import check_writable

        check_writable(args.out)
    executor = Executor("dask", jobs, args.dask) if args.dask else Executor("processes", jobs)
    rows = _run_with_progress(cands, hardware, executor, prices, args.fitting_only, not args.every_microbatch)
    document = _document(scenario.name, axes, rows, prices, tokens)
    inert = _inert_notes(rows, scenario.written, hardware)
    document["inert_settings"] = [n.text for n in inert]
    print_notes(note_lines(inert))
    text = to_json(document)
    shared = f"every layout: {' '.join(args.overrides)}" if args.overrides else ""
    if args.out:
        from simcluster.output.sweep_output import write_sweep

        title = f"{scenario.name}: layout sweep" + (f"\n{shared}" if shared else "")
        write_sweep(args.out, rows, text + "\n", title=title, prices=prices, tokens=tokens)
    if args.json:
        print_json(document)
    else:
        if shared:  # the title names the scenario, whose model or batch --set may have replaced
            stdout_console().print(shared)
        _print(scenario.name, rows, args.top, args.out, prices, tokens)
        _print_folded(axes, len(cands))
    if not any(r.ran for r in rows):
        raise _none_ran(rows)
    return 0


def _axes(args: argparse.Namespace, gpus: int) -> tuple[dict[str, list], str | None]:
    """The swept axes' values, and the one hardware profile when it is not an axis (a comma
    list in ``--hardware`` makes it one); every profile named is checked before anything runs."""
    texts = {axis: getattr(args, f"axis_{axis}", None) for axis in AXES}
    hardware = args.hardware
    if hardware is not None and "," in hardware:
        texts["hardware"], hardware = hardware, None
    if texts["gpus"] is not None:
        gpus = max(parse_axis("gpus", texts["gpus"], gpus))  # 'auto' tp/pp/... up to the largest
    axes = {axis: parse_axis(axis, text, gpus) for axis, text in texts.items() if text is not None}
    for name in axes.get("hardware", []):
        resolve_profile_path(name, field="--hardware")  # a typo is an error, not a skipped row
    return axes, hardware


def _print_folded(axes: dict[str, list], candidates: int) -> None:
    """How many combinations ran as others (--schedule 1f1b,interleaved --vpp 1,3: 1F1B runs
    once, at vpp 1), and why."""
    folded = math.prod(len(v) for v in axes.values()) - candidates
    if folded:
        why = [
            *(["a schedule that takes no virtual stages runs once, at vpp 1"] if "vpp" in axes else []),
            *(["a schedule other than v-auto runs once, without a limit"] if "activation_limit" in axes else []),
        ]
        stdout_console().print(f"{folded} combination(s) folded into others: {'; '.join(why)}")


def _none_ran(rows: list[SweepRow]) -> UserError:
    """The error of a sweep none of whose layouts could run: the commonest reason, with how many
    layouts it stands for ('e.g.': their numbers differ)."""
    field, count, first = skip_reasons(rows)[0]
    reason = first.removeprefix(field + ": ")  # the field leads the line once
    if len(rows) > 1:
        share = f"{count}" if count == len(rows) else f"{count} of {len(rows)}"
        reason = f"{share} skipped, e.g. {reason}" if count > 1 else f"{share} skipped as {reason}"
    return UserError(field, f"no layout of the sweep can run: {reason}")


def _inert_notes(rows: list[SweepRow], written: frozenset[str], hardware: str | None) -> list[InertNote]:
    """The settings the swept scenario wrote that do nothing in any layout it ran (judged on
    the scenario's own keys: each candidate's mapping also holds its framework's preset)."""
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    per_layout = [
        inert_settings(build_context(scenario_from_dict(r.candidate.scenario), hardware), written)
        for r in rows
        if r.ran
    ]
    return common_notes(per_layout)


def _run_with_progress(
    cands: list[Candidate],
    hardware: str | None,
    executor: Executor,
    prices: Prices | None = None,
    fitting_only: bool = False,
    extrapolate: bool = True,
) -> list[SweepRow]:
    def advance(row: SweepRow) -> None:
        # a layout the checks skipped took no simulation (wall_s 0): its cost never comes
        step(row.candidate.label, cost_hint(row.candidate.scenario, extrapolate), ran=row.wall_s > 0)

    total = sum(cost_hint(c.scenario, extrapolate) for c in cands)
    with progress_bar("sweep", len(cands), total, executor.workers) as step:
        return run_sweep(
            cands, hardware, progress=advance, prices=prices, executor=executor, fitting_only=fitting_only,
            extrapolate=extrapolate,
        )  # fmt: skip


def _document(
    name: str, axes: dict[str, list[Any]], rows: list[SweepRow], prices: Prices | None = None,
    tokens: float | None = None,
) -> dict[str, Any]:
    ran = [r for r in rows if r.ran]
    best = next((r for r in ran if r.fits), None)
    return {
        "scenario": name,
        "axes": axes,
        "rows": [r.to_dict(prices, tokens) for r in rows],
        "summary": {
            "combinations": len(rows),
            "simulated": len(ran),
            "fit": sum(1 for r in ran if r.fits),
            "skipped": len(rows) - len(ran),
            "best": best.candidate.label if best else None,
        },
    }


_SHORT = {"activation_limit": "act limit", "sequence_parallel": "sp", "micro_batch": "mb", "ep_comm": "ep ovl", "dispatcher": "disp", "dispatch_sms": "disp SMs", "optimizer_offload": "opt host", "activation_offload_layers": "act host"}


def _print(
    name: str, rows: list[SweepRow], top: int, out: str | None, prices: Prices | None = None,
    tokens: float | None = None,
) -> None:
    """The table of the layouts run with its legends, and a line per reason others were
    skipped (:func:`_print_skips`)."""
    console = stdout_console(120)
    ran = [r for r in rows if r.ran]
    if ran:  # an empty table says nothing the skip lines below do not
        console.print(_table(name, rows, ran[:top], prices, tokens))
        # the column's heading alone read as 'what runs after the GEMMs'
        console.print("after GEMMs: the largest part of the busiest stage's step besides its GEMMs, what to look at first")
    if any(r.summary and r.summary.get("extrapolated_from_microbatches") for r in ran[:top]):
        console.print(read_off_legend("extrapolated_from_microbatches in --out's files"))
    if any(not r.fits for r in ran[:top]):
        console.print("[red]✗[/] does not fit in GPU memory (simulated anyway)")
    if len(ran) > top:
        console.print(f"{len(ran) - top} more simulated layout(s) not shown (--top K, or --out for all)")
    _print_skips(console, rows, any_ran=bool(ran))
    if ran and not any(r.fits for r in ran):
        console.print("[bold red]no layout fits in memory[/]: all were simulated anyway")
    if out:
        console.print(f"wrote {Path(out)}/sweep.csv, sweep.json, sweep.png", soft_wrap=True, markup=False)


def _table(
    name: str, rows: list[SweepRow], shown: list[SweepRow], prices: Prices | None, tokens: float | None
) -> Table:
    """The ranked table: a column per swept axis, then the figures of each shown layout."""
    axes = [axis for axis, _ in rows[0].candidate.settings]
    ran = sum(1 for r in rows if r.ran)
    table = Table(title=f"{name}: {ran} layouts simulated, best first (those that fit before the others)")
    table.add_column("#", justify="right")
    for axis in axes:
        table.add_column(_SHORT.get(axis, axis), justify="right")
    total = "gpus" in axes  # cluster sizes differ: show what the whole job does as well
    for col in ("dp", "step", *(("tokens/s",) if total else ()), "tokens/s/GPU", "MFU", "bubble",
                "exposed comm", "after GEMMs", *(("$/1M tok",) if prices else ()),
                *((f"{format_count(tokens)} tok",) if tokens is not None else ()), "peak memory"):  # fmt: skip
        table.add_column(col, justify="right")
    for index, row in enumerate(shown, start=1):
        s = row.summary
        assert s is not None
        exposed = sum(s["exposed_comm_s"].values())
        memory = format_bytes(s["peak_memory_bytes"]["max"])
        key, share = largest_besides_gemm(s)
        table.add_row(
            str(index),
            *(show_value(value) for _, value in row.candidate.settings),
            str(s["parallel"]["dp"]),
            format_time(s["step_time_s"]) + ("*" if s.get("extrapolated_from_microbatches") else ""),
            *((f"{s['tokens_per_s']:,.0f}",) if total else ()),
            f"{s['tokens_per_s_per_gpu']:,.0f}",
            f"{100 * s['mfu']:.1f}%",
            f"{100 * s['bubble_fraction']:.1f}%",
            format_time(exposed) if exposed > 0 else "—",
            f"{SHORT.get(key, key)} {100 * share:.0f}%" if key else "—",
            *((format_usd(s, prices),) if prices else ()),
            *((budget_cell(training_budget(s, tokens, prices)),) if tokens is not None else ()),
            memory if row.fits else f"[red]{memory} ✗[/]",
        )
    return table


def _print_skips(console: Console, rows: list[SweepRow], *, any_ran: bool) -> None:
    """A line per reason layouts were skipped; when none ran the first reason is left to the
    error that follows (``run``), unless it is memory's, whose line lists the layouts left out
    and their peaks."""
    for index, (field, count, first) in enumerate(skip_reasons(rows)):
        if not any_ran and index == 0 and field != MEMORY_FIELD:
            continue
        if field == MEMORY_FIELD:
            # one capacity for all (a --hardware axis can mix GPUs: then each peak stands alone)
            sizes = {m.group(1) for r in rows if r.skipped and (m := re.search(r"exceeds (\S+ \S+)", r.skipped))}
            console.print(
                f"left out {count} layout(s) over the GPU's memory"
                + (f" of {next(iter(sizes))}" if len(sizes) == 1 else "")
                + f", unsimulated (--fitting-only): {_left_out(rows)}; `simcluster memory` shows where the bytes go"
            )
        else:
            console.print(f"skipped {count} layout(s) that cannot run ({field}), e.g. {first}")


def _left_out(rows: Sequence[SweepRow], most: int = 6) -> str:
    """The layouts ``--fitting-only`` left out, each with its peak: which ones, not only how many
    (a grid's corner that does not fit is often the one the user meant to see)."""
    over = [r for r in rows if r.skipped and r.skipped.startswith(f"{MEMORY_FIELD}:")]
    items = []
    for r in over[:most]:
        peak = re.search(r"peak (\S+ \S+)", r.skipped or "")
        items.append(f"{r.candidate.label}" + (f" (peak {peak.group(1)})" if peak else ""))
    return ", ".join(items) + (f" and {len(over) - most} more" if len(over) > most else "")
