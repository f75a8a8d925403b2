"""``simcluster compare``: two or more scenarios (or variants of one) side by side.

Each SCENARIO is a shipped name or a YAML path, optionally followed by ``@key=value``
overrides that apply to it alone (``llama3-70b-64xh100@parallel.schedule=zb-h1``); ``--set``
applies to all of them. The table puts the headline figures and, for each scenario's busiest
stage, where its time goes by category, so the row that differs most says why one layout is
faster: seconds per step when every step does the same work (tokens) on as many GPUs, else GPU
time per million tokens, the one measure whose parts add up to the inverse of tokens/s per GPU
(compare_parts.py). A long step is read off shorter ones as in ``sweep`` (``steady_state.py``;
``--every-microbatch``: simulated whole). ``--out DIR`` writes compare.csv, compare.json and
compare.png (one stacked bar per scenario on a common axis).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from simcluster.budget import (
    format_count,
    format_duration,
    format_usd_total,
    parse_tokens,
    tokens_per_step,
    training_budget,
)
from simcluster.commands.common import (
    add_every_microbatch_argument,
    add_price_argument,
    add_tokens_argument,
    check_hardware_given_once,
    out_path,
    print_json,
    print_notes,
    to_json,
)
from simcluster.commands.compare_parts import Basis, Summaries, verdict
from simcluster.commands.compare_variants import (
    naming,
    shared_overrides,
    short_labels,
    split_variant,
    variant_overrides,
)
from simcluster.commands.console import stdout_console
from simcluster.cost import Prices, check_priced, format_usd, parse_prices, usd_per_million_tokens
from simcluster.engine.breakdown import LABELS, busiest
from simcluster.errors import UserError
from simcluster.progress import progress_bar
from simcluster.scenario import Scenario, load_scenario, parse_set
from simcluster.units import format_bytes, format_time

if TYPE_CHECKING:  # matplotlib is imported only when --out draws; the others when simulating
    from matplotlib.figure import Figure

    from simcluster.context import Context
    from simcluster.inert import InertNote


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenarios", nargs="+", metavar="SCENARIO",
        help="shipped scenario name or YAML path, optionally with @key=value overrides of its "
        "own (each key once), e.g. llama3-70b-64xh100@parallel.schedule=zb-h1",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="overrides", action="append", metavar="KEY=VALUE",
        help="override a field in every scenario (repeatable; KEY=null unsets it: its default)",
    )  # fmt: skip
    parser.add_argument("--hardware", metavar="H", help="hardware profile for every scenario")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--out", metavar="DIR", type=out_path, help="write compare.csv, compare.json and compare.png")
    add_every_microbatch_argument(parser)
    parser.epilog = (
        "The breakdown rows are each scenario's busiest stage, seconds per step; when the "
        "scenarios' steps process different token counts (global batch x sequence length) or run "
        "on different GPU counts, a step's parts are not comparable (a smaller step is shorter in "
        "every part), so the rows, the plot and the largest change are given in GPU time per "
        "million tokens (seconds x GPUs / tokens per step x 1e6), which add up to "
        "1e6 / (tokens/s per GPU). A percentage is of the scenario's own step. ✗: does not fit "
        "in GPU memory (simulated anyway). 'microbatches simulated' (shown when a step was "
        "read off shorter ones): the steps, in microbatches per pipeline, whose line gives the "
        "figures; --every-microbatch simulates every step whole."
    )
    add_price_argument(
        parser,
        "adds what a million tokens cost; with prices per profile, every profile the scenarios "
        "run on needs one (an unpriced or unknown profile is an error)",
    )
    add_tokens_argument(parser, "adds how long a run of that many tokens takes on each (and with --price, its cost)")


def run(args: argparse.Namespace) -> int:
    if len(args.scenarios) < 2:
        raise UserError("SCENARIO", "give at least two scenarios (or one and a variant NAME@key=value)")
    prices, tokens = parse_prices(args.price), parse_tokens(args.tokens)
    scenarios = _loaded(args)
    if args.out:
        from simcluster.output.atomic import check_writable

        check_writable(args.out)
    from simcluster.steady_state import step_summary

    contexts, inert = _checked(args, scenarios, prices)
    summaries = []
    with progress_bar("simulating", len(contexts)) as advance:
        for (label, ctx), (_, sc) in zip(contexts, scenarios, strict=True):
            summaries.append((label, step_summary(sc, ctx, args.hardware, extrapolate=not args.every_microbatch)))
            advance(label)
    doc: dict[str, Any] = {
        "scenarios": [_record(label, s, prices, tokens) for label, s in summaries],
        "compared_per": Basis.of(summaries).name,  # the table's and the plot's basis
    }
    doc["inert_settings"] = {label: [n.text for n in notes] for label, notes in inert.items() if notes}
    # --set applies to every scenario as a shared @override does: said once, above the table
    shared = shared_overrides(args.scenarios) + list(args.overrides or [])
    if shared:
        doc["shared_overrides"] = shared
    if args.out:
        _write(args.out, doc, summaries, shared)
    if args.json:
        print_json(doc)
        return 0
    if shared:  # left out of the column labels
        print(f"every scenario: {' '.join(shared)}")
    _print(summaries, args.out, prices, tokens)
    return 0


def _loaded(args: argparse.Namespace) -> list[tuple[str, Scenario]]:
    """Each scenario with its column label, the variants' and --set's overrides applied; every
    variant's syntax is checked before any file is read."""
    common = parse_set(args.overrides)
    own = [variant_overrides(text) for text in args.scenarios]
    scenarios = []
    for text, label, mine in zip(args.scenarios, short_labels(args.scenarios), own, strict=True):
        with naming(text):
            check_hardware_given_once(args.hardware, common + mine)
            scenarios.append((label, load_scenario(split_variant(text)[0], common + mine)))
    return scenarios


def _checked(
    args: argparse.Namespace, scenarios: list[tuple[str, Scenario]], prices: Prices | None
) -> tuple[list[tuple[str, Context]], dict[str, list[InertNote]]]:
    """Every scenario's context, built (and so checked) before any is simulated, with its
    settings that do nothing; their notes printed, the prices checked against the hardware."""
    from simcluster.context import build_context
    from simcluster.inert import inert_settings, note_lines

    contexts = []
    for text, (label, sc) in zip(args.scenarios, scenarios, strict=True):
        with naming(text):
            contexts.append((label, build_context(sc, args.hardware)))
    inert = {label: inert_settings(ctx) for label, ctx in contexts}
    for label, notes in inert.items():
        print_notes(note_lines(notes, prefix=f"{label}: "))
    for label, ctx in contexts:
        print_notes([f"note: {label}: {n}" for n in ctx.notes])
    used: dict[str, str] = {}
    for label, ctx in contexts:
        used.setdefault(ctx.profile.name, label)
    check_priced(prices, used)  # before minutes of simulating, not a blank cost column after
    return contexts, inert


def _record(label: str, s: dict[str, Any], prices: Prices | None = None, tokens: float | None = None) -> dict[str, Any]:
    """One scenario's row of the JSON/CSV: headline figures and its busiest stage's step
    (``breakdown_s``: seconds per step, whatever the table's basis), and with ``tokens`` the
    training run's (``training_run``, :mod:`simcluster.budget`)."""
    priced: dict[str, Any] = {"usd_per_million_tokens": usd_per_million_tokens(s, prices)} if prices else {}
    if tokens is not None:
        priced["training_run"] = training_budget(s, tokens, prices).record()
    return {
        **priced,
        "label": label,
        "layout": s["layout"],
        "hardware": s["hardware"],
        "gpus": s["gpus"],
        "tokens_per_step": tokens_per_step(s),
        "step_time_s": s["step_time_s"],
        "tokens_per_s": s["tokens_per_s"],
        "tokens_per_s_per_gpu": s["tokens_per_s_per_gpu"],
        "mfu": s["mfu"],
        "hfu": s.get("hfu", s["mfu"]),
        "bubble_fraction": s["bubble_fraction"],
        "peak_memory_bytes": s["peak_memory_bytes"]["max"],
        "capacity_bytes": s["capacity_bytes"],
        "fits_in_memory": s["fits_in_memory"],
        "busiest_stage": s["time_breakdown_s"]["stage"],
        "breakdown_s": busiest(s),
        # the shorter steps the figures were read off (steady_state.py); None: simulated whole
        "extrapolated_from_microbatches": s.get("extrapolated_from_microbatches"),
    }


def _keys(summaries: Summaries, basis: Basis) -> list[str]:
    """Breakdown categories that any scenario spends time on, in the breakdown's order (a
    category all spend none of, or only rounding residue of, gets no row)."""
    present = {k for _, s in summaries for k, v in basis.parts(s).items() if v > 0}
    return [k for k in LABELS if k in present]


def _print(summaries: Summaries, out: str | None, prices: Prices | None = None, tokens: float | None = None) -> None:
    basis = Basis.of(summaries)
    runs = [training_budget(s, tokens, prices) for _, s in summaries] if tokens is not None else []
    budget = f"{format_count(tokens)} tokens" if tokens is not None else ""
    console = stdout_console(100)
    per = "GPU time per million tokens, as the steps differ in tokens or GPUs" if basis.per_token else "per step"
    table = Table(title=f"side by side (breakdown: each scenario's busiest stage, {per})")
    table.add_column("")
    for label, _ in summaries:
        # a list value (@training.cuda_graphs=[attn,mlp]) is text, not Rich markup
        table.add_column(escape(label), justify="right", overflow="fold")
    hfu = any(_hfu(s) > s["mfu"] * 1.0005 for _, s in summaries)
    rows: list[tuple[str, list[str]]] = [
        ("layout", [s["layout"] for _, s in summaries]),
        ("GPUs x hardware", [f"{s['gpus']} x {s['hardware']}" for _, s in summaries]),
        ("tokens per step", [f"{tokens_per_step(s):,}" for _, s in summaries]),
        ("step time", [format_time(s["step_time_s"]) for _, s in summaries]),
        ("tokens/s per GPU", [f"{s['tokens_per_s_per_gpu']:,.0f}" for _, s in summaries]),
        # what the breakdown's rows add up to when they are per token
        *([("GPU time per 1M tokens", [format_time(basis.total(s)) for _, s in summaries])] if basis.per_token else []),
        ("MFU", [f"{100 * s['mfu']:.1f}%" for _, s in summaries]),
        *([("HFU (with recompute)", [f"{100 * _hfu(s):.1f}%" for _, s in summaries])] if hfu else []),
        ("pipeline bubble", [f"{100 * s['bubble_fraction']:.1f}%" for _, s in summaries]),
        ("peak memory", [_memory(s) for _, s in summaries]),
        *([("$ per 1M tokens", [format_usd(s, prices) for _, s in summaries])] if prices else []),
        *([(f"{budget} take", [format_duration(b.wall_s) for b in runs])] if runs else []),
        *([(f"{budget} cost", [format_usd_total(b.usd) if b.usd is not None else "—" for b in runs])] if runs and prices else []),
        # which figures were read off shorter steps (steady_state.py), as the JSON/CSV say
        *([("microbatches simulated", [_simulated(s) for _, s in summaries])] if _any_read_off(summaries) else []),
    ]  # fmt: skip
    for label, cells in rows:
        table.add_row(label, *cells)
    table.add_section()
    for key in _keys(summaries, basis):
        table.add_row(LABELS[key], *(_part(basis, s, key) for _, s in summaries))
    console.print(table)
    if not all(s["fits_in_memory"] for _, s in summaries):
        console.print("[red]✗[/] does not fit in GPU memory (simulated anyway)")  # as sweep's legend
    if _any_read_off(summaries):
        console.print(
            "microbatches simulated: a long step's figures are read off the line through shorter "
            "steps (exact once its steady state repeats); --every-microbatch simulates it whole"
        )
    console.print(verdict(summaries, basis), markup=False)  # labels may hold [lists]
    if out:
        console.print(f"wrote {Path(out)}/compare.csv, compare.json, compare.png", soft_wrap=True, markup=False)


def _any_read_off(summaries: Summaries) -> bool:
    return any(s.get("extrapolated_from_microbatches") for _, s in summaries)


def _simulated(s: dict[str, Any]) -> str:
    """The steps a scenario's figures come from: its own (every microbatch), or the shorter
    ones its step was read off (``steady_state.py``)."""
    counts = s.get("extrapolated_from_microbatches")
    if not counts:
        return f"all {s['microbatches']}"
    return f"{', '.join(map(str, counts))} (of {s['microbatches']})"


def _hfu(s: dict[str, Any]) -> float:
    """Hardware FLOPs utilisation (MFU where a summary has none: nothing recomputed)."""
    return float(s.get("hfu", s["mfu"]))


def _memory(s: dict[str, Any]) -> str:
    text = format_bytes(s["peak_memory_bytes"]["max"])
    return text if s["fits_in_memory"] else f"[red]{text} ✗[/]"


def _part(basis: Basis, s: dict[str, Any], key: str) -> str:
    """One cell of the breakdown: the time and its share of the scenario's own step."""
    value = basis.parts(s).get(key, 0.0)
    if value <= 0:
        return "—"
    return f"{format_time(value)} ({100 * value / basis.total(s):.0f}%)"


def _write(out: str, doc: dict[str, Any], summaries: Summaries, shared: list[str]) -> None:
    import pandas as pd

    from simcluster.output.report_files import write_report_files

    flat = []
    for rec in doc["scenarios"]:
        row = {k: v for k, v in rec.items() if k not in ("breakdown_s", "training_run")}
        row.update({f"{k}_s": v for k, v in rec["breakdown_s"].items()})
        row.update({f"run_{k}": v for k, v in rec.get("training_run", {}).items()})
        flat.append(row)
    figure = figure_of(summaries, shared)
    write_report_files(out, "compare", pd.DataFrame(flat), to_json(doc) + "\n", figure)


def figure_of(summaries: Summaries, shared: list[str]) -> Figure:
    """compare.png: one bar per scenario on a common axis, in the table's basis (per step, or
    GPU time per million tokens), each part labelled by its share of that scenario's own
    step (as in the table); a scenario over its GPU memory is marked in its label."""
    from simcluster.output.breakdown_plot import Bar, draw_bars

    basis = Basis.of(summaries)
    bars = [
        Bar(label if s["fits_in_memory"] else f"{label} ✗ does not fit", basis.parts(s), basis.total(s),
            flagged=not s["fits_in_memory"], detail=_layout_line(s), end=_end_text(basis, s))
        for label, s in summaries
    ]  # fmt: skip
    if basis.per_token:
        title = "where each scenario's GPU time per million tokens goes (busiest stage)"
        xlabel = "GPU time per 1M tokens"
    else:
        title, xlabel = "where each scenario's step goes (busiest stage)", "time per training step"
    names = {str(s.get("scenario", "")) for _, s in summaries}
    if len(names) == 1 and "" not in names:  # variants of one scenario, labelled by their overrides alone
        title = f"{names.pop()}: {title.replace('each scenario', 'each variant')}"
    if shared:
        title += "\nevery scenario: " + " ".join(shared)
    return draw_bars(bars, title, xlabel)


def _layout_line(s: dict[str, Any]) -> str:
    """A bar's second line: the layout it ran and on what ('dp8 tp1 pp1 zero2 1f1b, 8 x dgx-h100')."""
    layout = s.get("layout")
    if not layout:
        return ""
    return f"{layout}, {s['gpus']} x {s['hardware']}" if "gpus" in s and "hardware" in s else str(layout)


def _end_text(basis: Basis, s: dict[str, Any]) -> str:
    """What a bar adds up to, written after it: its length on the axis (the table's basis)
    and the throughput the verdict compares ('6.380 s, 10,272 tokens/s/GPU')."""
    rate = s.get("tokens_per_s_per_gpu")
    return format_time(basis.total(s)) + (f", {rate:,.0f} tokens/s/GPU" if rate else "")

