"""The ``python -m calibrate`` command.

``python -m calibrate [--device ...] --out P.yaml`` measures (under torchrun for collectives);
``import-nccl-tests`` and ``compare-trace`` are subcommands (registry below). Any UserError is
printed as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from simcluster.cli import _Parser  # argparse reporting bad arguments in one line, exit 2
from simcluster.errors import UserError, exit_code_of

# subcommand -> module exposing HELP, add_arguments(parser), run(args) -> int
SUBCOMMANDS: dict[str, str] = {
    "import-nccl-tests": "calibrate.nccl_tests_import",
    "compare-trace": "calibrate.compare",
}


def _measure_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="calibrate",
        description="Time GEMMs, attention, memory-bound kernels and collectives into a "
        "hardware profile. Subcommands: " + ", ".join(SUBCOMMANDS) + ".",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if available")
    p.add_argument("--quick", action="store_true", help="small grids (a CPU run in seconds)")
    p.add_argument("--scenario", help="also time this scenario's per-layer GEMM shapes")
    p.add_argument("--shapes", help="extra GEMM shapes 'M,N,K;M,N,K'")
    p.add_argument("--base", help="profile to start from (name or YAML); default: this machine")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per step (default 600)")
    p.add_argument("--out", required=True, type=Path, help="profile YAML to write")
    return p


def _measure(argv: Sequence[str]) -> int:
    from calibrate.shapes import default_grid, parse_shapes, scenario_shapes
    from simcluster.hardware import load_profile

    args = _measure_parser().parse_args(argv)
    if not (0 < args.timeout < math.inf):
        raise UserError("--timeout", f"must be a positive number of seconds, got {args.timeout:g}")
    if args.base:
        load_profile(args.base, field="--base")  # a malformed base fails before measuring
    extra = parse_shapes(args.shapes) if args.shapes else []
    if args.scenario:
        extra += scenario_shapes(args.scenario)
    import torch  # the optional extra; only the measuring run needs it

    from calibrate.runner import RunConfig, run

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    grid = default_grid(device, args.quick)
    shapes = tuple(grid + [s for s in dict.fromkeys(extra) if s not in grid])
    cfg = RunConfig(device, args.quick, args.out, args.base, args.timeout, shapes)
    return run(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m calibrate``."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        if argv and argv[0] in SUBCOMMANDS:
            module = importlib.import_module(SUBCOMMANDS[argv[0]])
            parser = _Parser(prog=f"calibrate {argv[0]}", description=module.HELP)
            module.add_arguments(parser)
            return int(module.run(parser.parse_args(argv[1:])) or 0)
        return _measure(argv)

    return exit_code_of(body)
