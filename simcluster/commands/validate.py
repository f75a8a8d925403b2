"""``simcluster validate``: simulate published runs and report the prediction error."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from simcluster.commands.common import (
    add_every_microbatch_argument,
    out_path,
    print_json,
    read_off_legend,
    to_json,
)
from simcluster.commands.console import stdout_console
from simcluster.cost_hint import cost_hint
from simcluster.errors import UserError, did_you_mean
from simcluster.executors import Executor
from simcluster.progress import progress_bar
from simcluster.validate import CaseResult, load_cases, run_cases
from simcluster.validate_gate import broken_gates, percent
from simcluster.validate_report import (
    beyond,
    by_family,
    by_gpu,
    memory_summary,
    ordering_checks,
    ordering_line,
    report,
    summarize,
)

NAME = "validate"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "cases", nargs="*", metavar="CASES.yaml", help="cases files (default: every shipped case)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--filter", metavar="SUBSTR", help="only cases whose name or family contains SUBSTR (e.g. nanotron, zero-bubble-v-a100)")
    parser.add_argument(
        "--quick", action="store_true", help="skip the cases marked slow (minutes each)"
    )
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=None,
        metavar="N",
        help="simulate N cases at once in worker processes (default: number of CPUs)",
    )
    parser.add_argument(
        "--dask", metavar="ADDRESS",
        help="run the cases on a Dask cluster: 'local' starts one here with --jobs workers, "
        "tcp://host:8786 joins a running scheduler (pip install 'simcluster[dask]')",
    )  # fmt: skip
    parser.add_argument(
        "--out", metavar="DIR", type=out_path, help="write validate.csv, validate.json and validate.png (errors by family)"
    )
    parser.add_argument(
        "--notes", action="store_true",
        help="list each setting a case wrote that has no effect in its layout, with the cases "
        "(default: one line naming them; --json has them per case as inert_settings)",
    )  # fmt: skip
    add_every_microbatch_argument(parser)
    parser.add_argument(
        "--max-mape", metavar="PCT",
        help="exit with status 1 when the cases' MAPE is above PCT (a CI gate on your own cases)",
    )  # fmt: skip
    parser.add_argument(
        "--max-error", metavar="PCT",
        help="exit with status 1 when any case's absolute error is above PCT; with either gate "
        "a case that cannot be simulated fails it too",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    jobs = args.jobs if args.jobs is not None else max(os.cpu_count() or 1, 1)
    if jobs < 1:
        raise UserError("--jobs", f"must be at least 1, got {jobs}")
    max_mape = percent("--max-mape", args.max_mape) if args.max_mape is not None else None
    max_error = percent("--max-error", args.max_error) if args.max_error is not None else None
    cases = load_cases(args.cases, args.filter, quick=args.quick)
    if not cases:
        every = load_cases(args.cases)
        if not every:  # the files themselves hold none: no flag to blame
            named = ", ".join(str(c) for c in args.cases)
            raise UserError("CASES", f"{named} has no cases; add items to its cases: list")
        flags = [f for f, on in (("--filter", args.filter), ("--quick", args.quick)) if on]
        # a filter matches a case's name or family: name the families it could have matched
        families = sorted({c.family for c in every})
        hint = did_you_mean(str(args.filter), families) if args.filter else ""
        listed = f"; families: {', '.join(families)}" if args.filter else ""
        raise UserError(flags[0], f"no case left after {' and '.join(flags)}{hint}; drop or change it{listed}")
    if args.out:
        from simcluster.output.atomic import check_writable

        check_writable(args.out)
    executor = Executor("dask", jobs, args.dask) if args.dask else Executor("processes", jobs)
    results = _run_with_progress(cases, executor, extrapolate=not args.every_microbatch)
    document = report(results)
    if args.out:
        from simcluster.output.validate_output import write_validation

        write_validation(args.out, results, to_json(document) + "\n", title="simcluster validate")
    if args.json:
        print_json(document)
    else:
        _print(results, notes=args.notes)
        if args.out:
            stdout_console().print(f"wrote {Path(args.out)}/validate.csv, validate.json, validate.png", soft_wrap=True, markup=False)
    broken = broken_gates(results, max_mape, max_error)
    for line in broken:
        print(f"simcluster validate: {line}", file=sys.stderr)
    return 1 if broken else 0


def _run_with_progress(cases: list, executor: Executor, extrapolate: bool) -> list[CaseResult]:
    total = sum(cost_hint(case.scenario, extrapolate) for case in cases)  # the time left weighs each case
    with progress_bar("validate", len(cases), total, executor.workers) as advance:
        return run_cases(
            cases,
            progress=lambda r: advance(r.case.name, cost_hint(r.case.scenario, extrapolate)),
            executor=executor,
            extrapolate=extrapolate,
        )


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1f}%"


def _num(x: float | None) -> str:
    if x is None or x != x:  # NaN: the measured value of a malformed case
        return "—"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _memory_cell(r: CaseResult) -> str:
    if r.case.peak_memory_gib is None or r.predicted_memory_gib is None:
        return "—"
    return f"{r.predicted_memory_gib:.1f} / {r.case.peak_memory_gib:.1f} ({_pct(r.memory_error_pct)})"


#: scenario sections in which a case spells out what its framework did
STACK_SECTIONS = frozenset({"overlap", "dp", "zero3"})


def _names(results: list[CaseResult], most: int = 5) -> str:
    names = [r.case.name for r in results]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _states_micro_batch(scenario: object) -> bool:
    """Whether a case's inline scenario gives its micro-batch, directly or by its accumulation
    steps (a scenario named by file or shipped name is the file's to state)."""
    if not isinstance(scenario, dict):
        return True
    training = scenario.get("training")
    return not isinstance(training, dict) or bool({"micro_batch", "grad_accum"} & set(training))


def inert_lines(results: list[CaseResult]) -> list[str]:
    """One note per setting that does nothing in a case's layout (``inert.py``), with the
    cases that wrote it, as the micro-batch note names them; in first-case order."""
    cases: dict[str, list[CaseResult]] = {}
    for r in results:
        for text in r.inert:
            cases.setdefault(text, []).append(r)
    return [f"note: {text} in {len(rs)} case(s) ({_names(rs)})" for text, rs in cases.items()]


def inert_summary(results: list[CaseResult], most: int = 4) -> list[str]:
    """The inert settings in one line: the shipped cases transcribe their recipes' flags as
    written, and at degree 1 (pp 1, tp 1) several do nothing, which said case by case buried
    the table under notes that call for no action; ``--notes`` lists them (:func:`inert_lines`)."""
    settings = list(dict.fromkeys(text.split()[0] for r in results for text in r.inert))
    if not settings:
        return []
    cases = sum(bool(r.inert) for r in results)
    named = ", ".join(settings[:most]) + (f" and {len(settings) - most} more" if len(settings) > most else "")
    return [
        f"note: {len(settings)} setting(s) written by {cases} case(s) have no effect in their layouts "
        f"({named}); --notes says where and why"
    ]


def _print_setting_notes(console: Console, results: list[CaseResult]) -> None:
    """What a case's scenario leaves to simcluster, where it matters for the error."""
    ran = [r for r in results if r.error is None]
    unfit = [r for r in ran if r.fits_in_memory is False]
    if unfit:
        console.print(
            f"{len(unfit)} case(s) do not fit in GPU memory as simulated ({_names(unfit)}): the published "
            "runs did, so a setting is likely missing (training.recompute, parallel.zero, micro_batch); "
            "`simcluster memory` shows where the bytes go"
        )
    # the micro-batch sets the accumulation steps and every GEMM's size: a default of 1 can be
    # far from the run (Shoeybi et al. 2019 ran 8 per GPU without accumulation)
    unstated = [r for r in ran if not _states_micro_batch(r.case.scenario)]
    if unstated:
        console.print(
            f"{len(unstated)} case(s) state no micro-batch ({_names(unstated)}): 1 sequence per GPU per "
            "microbatch was assumed, the rest of the global batch as accumulation steps; give "
            "training.micro_batch (or grad_accum) where the source states it"
        )
    # a case that names no framework and spells out none of a stack's behaviour either
    bare = [r for r in ran if r.framework is None and not STACK_SECTIONS & set(r.case.scenario)]
    if bare:
        console.print(
            f"[dim]{len(bare)} case(s) name no framework and set no overlap, dp or zero3 section "
            f"({_names(bare)}): their overlaps, buckets and "
            "kernels are simcluster's defaults; `framework:` sets a stack's (simcluster list frameworks; "
            "docs/accuracy.md, 'How much the settings a paper leaves out matter')[/]"
        )


def _cases_table(results: list[CaseResult]) -> Table:
    """One row per case: its metric, the prediction, the measurement, the error (and the peak
    memory beside the published one, where a case gives it)."""
    table = Table(title="validation cases (error: (predicted - measured) / measured of the metric; a step time's - is a faster simulated step)")
    with_memory = any(r.case.peak_memory_gib is not None for r in results)
    columns = [
        ("case", "left"), ("metric", "left"), ("predicted", "right"), ("measured", "right"),
        ("error", "right"),
    ]
    if with_memory:
        columns.append(("peak memory GiB: sim / published", "right"))
    for col, just in columns:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in results:
        err = _pct(r.error_pct) if r.error is None else f"[red]failed[/]: {r.error}"
        # as in sweep's table: a * marks a step read off shorter ones (steady_state.py)
        predicted = _num(r.predicted) + ("*" if r.extrapolated_from else "")
        row = [r.case.name, r.case.metric, predicted, _num(r.case.measured), err]
        if with_memory:
            row.append(_memory_cell(r))
        table.add_row(*row)
    return table


def _family_table(results: list[CaseResult]) -> Table:
    """The error by family, by GPU (when there are several) and over all cases."""
    fam = Table(title="error by family and by GPU (absolute %; bias: mean speed error, + = simulated faster)")
    for col in ("family", "n", "MAPE", "median", "max", "bias", "failed"):
        fam.add_column(col, justify="left" if col == "family" else "right")
    gpus = by_gpu(results)
    sections = [by_family(results), {f"on {g}": v for g, v in gpus.items()} if len(gpus) > 1 else {}]
    sections.append({"all": summarize(results)})
    for section in (sec for sec in sections if sec):
        for i, (name, s) in enumerate(section.items()):
            cells = [
                f"{s[k]:.1f}" if s[k] is not None else "—"
                for k in ("mape_pct", "median_ape_pct", "max_ape_pct")
            ]
            cells.append(f"{s['speed_bias_pct']:+.1f}" if s["speed_bias_pct"] is not None else "—")
            fam.add_row(name, str(s["n"]), *cells, str(s["failed"]), end_section=i == len(section) - 1)
    return fam


def _print_ordering(console: Console, results: list[CaseResult]) -> None:
    """The schedule-ordering rows (Zero Bubble's tables): how many hold, and each that does not."""
    checks = ordering_checks(results)
    if not checks:
        return
    console.print(ordering_line(checks), markup=False, highlight=False)
    for c in checks:
        if not c.predicted_ok:
            console.print(f"  {c.group}: {', '.join(c.violations)}")


def _print(results: list[CaseResult], notes: bool = False) -> None:
    console = stdout_console(120)
    console.print(_cases_table(results))
    if any(r.extrapolated_from for r in results):
        console.print(read_off_legend("extrapolated_from_microbatches in --json"))
    for r in results:
        if r.case.note:
            console.print(f"{r.case.name}: {r.case.note}")
    for line in inert_lines(results) if notes else inert_summary(results):
        console.print(line, markup=False, highlight=False)
    _print_setting_notes(console, results)

    console.print(_family_table(results))
    worst = beyond(results, 25.0)
    if worst:
        names = ", ".join(f"{r.case.name} ({r.error_pct:+.0f}%)" for r in worst)
        console.print(f"{len(worst)} case(s) beyond ±25%: {names}")

    mem = memory_summary(results)
    if mem["n"]:
        console.print(
            f"peak memory against the {mem['n']} published figures: MAPE {mem['mape_pct']:.1f}%, "
            f"median {mem['median_ape_pct']:.1f}%, max {mem['max_ape_pct']:.1f}%"
        )
    _print_ordering(console, results)
    s = summarize(results)
    if s["failed"]:
        print(f"{s['failed']} case(s) failed; see the table", file=sys.stderr)
