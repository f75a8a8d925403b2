"""``simcluster compare``: two or more scenarios (or variants of one) side by side.

Each SCENARIO is a shipped name or a YAML path, optionally followed by ``@key=value``
overrides that apply to it alone (``llama3-70b-64xh100@parallel.schedule=zb-h1``); ``--set``
applies to all of them. The table puts the headline figures and, for each scenario's busiest
stage, where its step goes (seconds per step by category), so the row that differs most says
why one layout is faster. ``--out DIR`` writes compare.csv, compare.json and compare.png (one
stacked bar per scenario on a common time axis).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from simcluster.commands.common import add_price_argument, print_json, progress_bar, to_json
from simcluster.cost import Prices, check_priced, format_usd, parse_prices, usd_per_million_tokens
from simcluster.engine.breakdown import LABELS, busiest
from simcluster.errors import UserError
from simcluster.scenario import load_scenario, parse_set
from simcluster.units import format_bytes, format_time

if TYPE_CHECKING:  # matplotlib is imported only when --out draws
    from matplotlib.figure import Figure

HELP = "simulate two or more scenarios (or variants: NAME@key=value) and put them side by side"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenarios", nargs="+", metavar="SCENARIO",
        help="shipped scenario name or YAML path, optionally with @key=value overrides of its "
        "own, e.g. llama3-70b-64xh100@parallel.schedule=zb-h1",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="overrides", action="append", metavar="KEY=VALUE",
        help="override a field in every scenario (repeatable)",
    )  # fmt: skip
    parser.add_argument("--hardware", metavar="H", help="hardware profile for every scenario")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--out", metavar="DIR", help="write compare.csv, compare.json and compare.png")
    add_price_argument(
        parser,
        "adds what a million tokens cost; with prices per profile, every profile the scenarios "
        "run on needs one (an unpriced or unknown profile is an error)",
    )


def split_variant(text: str) -> tuple[str, list[str]]:
    """``NAME@a=1@b=2`` -> (``NAME``, [``a=1``, ``b=2``])."""
    name, *overrides = text.split("@")
    if not name:
        raise UserError("SCENARIO", f"'{text}' has no scenario before '@'")
    return name, overrides


def shared_overrides(texts: list[str]) -> list[str]:
    """The ``@key=value`` overrides that every scenario has, when all are variants of one."""
    variants = [split_variant(text) for text in texts]
    if any(name != variants[0][0] for name, _ in variants):
        return []
    return [o for o in variants[0][1] if all(o in own for _, own in variants)]


def short_labels(texts: list[str]) -> list[str]:
    """Column labels: a variant of the first scenario is named by its overrides alone, and when
    every scenario is a variant of one, the overrides they all share are left out (a variant
    with nothing of its own is named by the scenario)."""
    first, _ = split_variant(texts[0])
    variants = [split_variant(text) for text in texts]
    shared = set(shared_overrides(texts))
    out = []
    for text, (name, own) in zip(texts, variants, strict=True):
        kept = [o for o in own if o not in shared]
        if name != first or not own:
            out.append(text)
        else:
            out.append(" ".join(kept) if kept else name)
    return out


def run(args: argparse.Namespace) -> int:
    if len(args.scenarios) < 2:
        raise UserError("SCENARIO", "give at least two scenarios (or one and a variant NAME@key=value)")
    prices = parse_prices(args.price)
    common = parse_set(args.overrides)
    scenarios = []
    for text, label in zip(args.scenarios, short_labels(args.scenarios), strict=True):
        name, own = split_variant(text)
        scenarios.append((label, load_scenario(name, common + parse_set(own))))
    if args.out:
        from simcluster.output.atomic import check_writable

        check_writable(args.out)
    from simcluster.context import build_context
    from simcluster.engine import simulate

    contexts = [(label, build_context(sc, args.hardware)) for label, sc in scenarios]  # all checked first
    used: dict[str, str] = {}
    for label, ctx in contexts:
        used.setdefault(ctx.profile.name, label)
    check_priced(prices, used)  # before minutes of simulating, not a blank cost column after
    summaries = []
    with progress_bar("simulating", len(contexts)) as advance:
        for label, ctx in contexts:
            summaries.append((label, simulate(ctx).summary))
            advance(label)
    doc: dict[str, Any] = {"scenarios": [_record(label, s, prices) for label, s in summaries]}
    shared = shared_overrides(args.scenarios)
    if shared:
        doc["shared_overrides"] = shared
    if args.out:
        _write(args.out, doc, summaries, shared)
    if args.json:
        print_json(doc)
        return 0
    if shared:  # left out of the column labels
        print(f"every scenario: {' '.join(shared)}")
    _print(summaries, args.out, prices)
    return 0


def _record(label: str, s: dict[str, Any], prices: Prices | None = None) -> dict[str, Any]:
    """One scenario's row of the JSON/CSV: headline figures and its busiest stage's step."""
    priced = {"usd_per_million_tokens": usd_per_million_tokens(s, prices)} if prices else {}
    return {
        **priced,
        "label": label,
        "layout": s["layout"],
        "hardware": s["hardware"],
        "gpus": s["gpus"],
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
    }


def _keys(summaries: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Breakdown categories that any scenario spends time on, in the breakdown's order."""
    order = list(LABELS)
    present = {k for _, s in summaries for k, v in busiest(s).items() if v > 0}
    return [k for k in order if k in present]


def _print(summaries: list[tuple[str, dict[str, Any]]], out: str | None, prices: Prices | None = None) -> None:
    console = Console(width=max(Console().width, 100))
    table = Table(title="side by side (breakdown: each scenario's busiest stage, per step)")
    table.add_column("")
    for label, _ in summaries:
        table.add_column(label, justify="right", overflow="fold")
    rows: list[tuple[str, list[str]]] = [
        ("layout", [s["layout"] for _, s in summaries]),
        ("GPUs x hardware", [f"{s['gpus']} x {s['hardware']}" for _, s in summaries]),
        ("step time", [format_time(s["step_time_s"]) for _, s in summaries]),
        ("tokens/s per GPU", [f"{s['tokens_per_s_per_gpu']:,.0f}" for _, s in summaries]),
        ("MFU", [f"{100 * s['mfu']:.1f}%" for _, s in summaries]),
        ("pipeline bubble", [f"{100 * s['bubble_fraction']:.1f}%" for _, s in summaries]),
        ("peak memory", [_memory(s) for _, s in summaries]),
    ]
    if any(s.get("hfu", s["mfu"]) > s["mfu"] * 1.0005 for _, s in summaries):
        rows.insert(5, ("HFU (with recompute)", [f"{100 * s.get('hfu', s['mfu']):.1f}%" for _, s in summaries]))
    if prices:
        rows.append(("$ per 1M tokens", [format_usd(s, prices, digits=3) for _, s in summaries]))
    for label, cells in rows:
        table.add_row(label, *cells)
    table.add_section()
    for key in _keys(summaries):
        table.add_row(LABELS[key], *(_seconds(s, key) for _, s in summaries))
    console.print(table)
    if not all(s["fits_in_memory"] for _, s in summaries):
        console.print("[red]✗[/] does not fit in GPU memory (simulated anyway)")  # as sweep's legend
    console.print(_verdict(summaries))
    if out:
        console.print(f"wrote {out}/compare.csv, compare.json, compare.png")


def _memory(s: dict[str, Any]) -> str:
    text = format_bytes(s["peak_memory_bytes"]["max"])
    return text if s["fits_in_memory"] else f"[red]{text} ✗[/]"


def _misfit(s: dict[str, Any]) -> str:
    """'does not fit (190.48 GiB of 80.00 GiB)' for a scenario over its GPU memory, else ''."""
    if s["fits_in_memory"]:
        return ""
    return f"does not fit ({format_bytes(s['peak_memory_bytes']['max'])} of {format_bytes(s['capacity_bytes'])})"


def _seconds(s: dict[str, Any], key: str) -> str:
    value = busiest(s).get(key, 0.0)
    if value <= 0:
        return "—"
    return f"{format_time(value)} ({100 * value / s['step_time_s']:.0f}%)"


def _verdict(summaries: list[tuple[str, dict[str, Any]]]) -> str:
    """How each scenario compares with the first, and the part that moved most."""
    base_label, base = summaries[0]
    lines = [f"{base_label} (the baseline) {_misfit(base)}"] if _misfit(base) else []
    for label, s in summaries[1:]:
        ratio = s["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"] - 1
        misfit = f", but {_misfit(s)}" if _misfit(s) else ""
        deltas = {k: busiest(s).get(k, 0.0) - busiest(base).get(k, 0.0) for k in LABELS}
        key = max(deltas, key=lambda k: abs(deltas[k]))
        sign = "+" if deltas[key] >= 0 else "−"
        lines.append(
            f"{label}: {100 * ratio:+.1f}% tokens/s per GPU against {base_label}{misfit}; the largest "
            f"change is {LABELS[key]} ({sign}{format_time(abs(deltas[key]))} per step)"
        )
    return "\n".join(lines)


def _write(
    out: str, doc: dict[str, Any], summaries: list[tuple[str, dict[str, Any]]], shared: list[str]
) -> None:
    import pandas as pd

    from simcluster.output.report_files import write_report_files

    flat = []
    for rec in doc["scenarios"]:
        row = {k: v for k, v in rec.items() if k != "breakdown_s"}
        row.update({f"{k}_s": v for k, v in rec["breakdown_s"].items()})
        flat.append(row)
    figure = figure_of(summaries, shared)
    write_report_files(out, "compare", pd.DataFrame(flat), to_json(doc) + "\n", figure)


def figure_of(summaries: list[tuple[str, dict[str, Any]]], shared: list[str]) -> Figure:
    """compare.png: one bar per scenario on a common time axis, each part labelled by its share
    of that scenario's own step (as in the table); a scenario over its GPU memory is marked
    in its label."""
    from simcluster.output.breakdown_plot import Bar, draw_bars

    bars = [
        Bar(label if s["fits_in_memory"] else f"{label} ✗ does not fit", busiest(s), s["step_time_s"],
            flagged=not s["fits_in_memory"])
        for label, s in summaries
    ]  # fmt: skip
    title = "where each scenario's step goes (busiest stage)"
    if shared:
        title += "\nevery scenario: " + " ".join(shared)
    return draw_bars(bars, title)
