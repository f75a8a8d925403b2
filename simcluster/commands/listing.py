"""``simcluster list``: shipped scenarios, hardware profiles, model presets and schedules."""

from __future__ import annotations

import argparse

from simcluster.hardware import shipped_profiles
from simcluster.model import preset_names
from simcluster.scenario import shipped_scenarios

NAME = "list"
HELP = "list shipped scenarios, hardware profiles, model presets and pipeline schedules"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "what", nargs="?", choices=["scenarios", "hardware", "presets", "schedules"]
    )


def run(args: argparse.Namespace) -> int:
    from simcluster.schedules import SCHEDULES

    tables = {
        "scenarios": shipped_scenarios(),
        "hardware": shipped_profiles(),
        "presets": preset_names(),
        "schedules": sorted(SCHEDULES),
    }
    for what, names in tables.items():
        if args.what in (None, what):
            print(f"{what}: {', '.join(names)}")
    return 0
