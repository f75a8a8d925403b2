"""Arguments and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from simcluster.budget import ASSUMPTION
from simcluster.scenario import Scenario, load_scenario, parse_set


def add_scenario_arguments(
    parser: argparse.ArgumentParser,
    hardware_help: str = "hardware profile name or path (overrides the scenario's cluster.hardware)",
) -> None:
    """SCENARIO, --set, --hardware, --json."""
    parser.add_argument(
        "scenario", metavar="SCENARIO", help="shipped scenario name or path to a YAML file"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set parallel.tp=4 (repeatable; a mapping such as "
        "'parallel={tp: 4, pp: 2}' merges into its section; KEY=null unsets it: its default)",
    )
    parser.add_argument("--hardware", metavar="H", help=hardware_help)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def out_path(text: str) -> str:
    """An ``--out`` value (argparse ``type``): an empty one (``--out "$DIR"`` with DIR unset)
    read as no --out at all and wrote nothing, without a word."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give the path to write to, or drop --out")
    return text


def add_every_microbatch_argument(parser: argparse.ArgumentParser) -> None:
    """``--every-microbatch``: no step extrapolated from shorter ones (``steady_state.py``)."""
    parser.add_argument(
        "--every-microbatch", action="store_true",
        help="simulate each step whole; by default a step of 64 or more microbatches is read off "
        "the line through shorter steps of 1, 2, 3 ... microbatch groups once three lie on it to 1e-9",
    )  # fmt: skip


def read_off_legend(where: str) -> str:
    """The line under a table whose ``*`` marks a figure read off shorter steps; ``where``:
    the output that lists those steps."""
    return (
        f"*: read off shorter steps (exact once the steady state repeats; which ones: {where}); "
        "--every-microbatch simulates every step whole"
    )


def add_price_argument(parser: argparse.ArgumentParser, effect: str) -> None:
    """``--price``: dollars per GPU-hour, one for all or per hardware profile (``cost.py``)."""
    parser.add_argument(
        "--price", metavar="USD",
        help=f"dollars per GPU-hour, one for all (2.5) or per profile (dgx-h100=2.5,dgx-a100=1.2): {effect}",
    )  # fmt: skip


def add_tokens_argument(parser: argparse.ArgumentParser, effect: str) -> None:
    """``--tokens``: a training run's token budget (``budget.py``)."""
    parser.add_argument(
        "--tokens", metavar="N",
        help=f"a training run's tokens, e.g. 15T, 300B or 2e12: {effect} ({ASSUMPTION})",
    )  # fmt: skip


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    overrides = parse_set(args.overrides)
    check_hardware_given_once(getattr(args, "hardware", None), overrides)
    return load_scenario(args.scenario, overrides)


def check_hardware_given_once(hardware: str | None, overrides: list[tuple[str, Any]]) -> None:
    """Refuse ``--hardware H`` beside an override that sets ``cluster.hardware`` to another
    profile (``--set cluster.hardware=X``, ``NAME@cluster.hardware=X``, ``--set 'cluster={hardware:
    X}'``): --hardware wins, so the override was dropped without a word, and a compare variant
    labelled with the other hardware ran on --hardware's ("no difference"). The same profile
    twice, by any of its names, is fine."""
    if hardware is None:
        return
    from simcluster.errors import UserError
    from simcluster.hardware import resolve_profile_path

    for key, value in overrides:
        given = value.get("hardware") if key == "cluster" and isinstance(value, dict) else value
        if key not in ("cluster", "cluster.hardware") or given is None:
            continue
        if "," not in hardware:
            same = resolve_profile_path(str(given)).resolve() == resolve_profile_path(hardware, "--hardware").resolve()
            if same:
                continue
        raise UserError(
            "--hardware",
            f"'{hardware}' and the override cluster.hardware={given} name different hardware, and "
            "--hardware replaces it; give the hardware once (drop one of them)",
        )


def print_notes(lines: list[str]) -> None:
    """Notes on stderr, one plain line each, so that ``--json`` output stays one document."""
    for line in lines:
        print(line, file=sys.stderr)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def to_json(doc: dict[str, Any]) -> str:
    """Stable JSON text (sorted keys, no NaN)."""
    return json.dumps(_clean(doc), indent=2, sort_keys=True)


def print_json(doc: dict[str, Any]) -> None:
    sys.stdout.write(to_json(doc) + "\n")
