"""``simcluster list``: shipped scenarios, hardware profiles, model presets, schedules, training
frameworks (``framework:``), the styles of memory-bound work (``training.elementwise``) and the
context-parallel attention algorithms (``parallel.cp_comm``)."""

from __future__ import annotations

import argparse

from simcluster.hardware import shipped_profiles
from simcluster.model import preset_names
from simcluster.scenario import shipped_scenarios

NAME = "list"
HELP = (
    "list shipped scenarios, hardware profiles, model presets, pipeline schedules, frameworks "
    "elementwise styles and context-parallel algorithms"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "what", nargs="?", choices=["scenarios", "hardware", "presets", "schedules", "frameworks", "elementwise", "cp"]
    )


def run(args: argparse.Namespace) -> int:
    from simcluster.frameworks import FRAMEWORKS
    from simcluster.parallelism import context
    from simcluster.parallelism.elementwise import STYLES
    from simcluster.schedules import SCHEDULES

    tables = {
        "scenarios": shipped_scenarios(),
        "hardware": shipped_profiles(),
        "presets": preset_names(),
        "schedules": sorted(SCHEDULES),
        "frameworks": sorted(FRAMEWORKS),
        "elementwise": list(STYLES),
        "cp": list(context.algorithms()),
    }
    if args.what == "schedules":  # one line each: what the schedule is (its class docstring)
        width = max(map(len, SCHEDULES))
        for name in sorted(SCHEDULES):
            doc = (type(SCHEDULES[name]).__doc__ or "").strip().splitlines()
            print(f"{name:<{width}}  {doc[0] if doc else ''}")
        return 0
    if args.what == "cp":  # one line each: how the algorithm shares K and V
        width = max(map(len, context.algorithms()))
        for name in context.algorithms():
            print(f"{name:<{width}}  {context.describe(name)}")
        return 0
    if args.what == "frameworks":  # one line each: what the framework does
        width = max(map(len, FRAMEWORKS))
        for name in sorted(FRAMEWORKS):
            print(f"{name:<{width}}  {FRAMEWORKS[name].summary}")
        return 0
    for what, names in tables.items():
        if args.what in (None, what):
            print(f"{what}: {', '.join(names)}")
    return 0
