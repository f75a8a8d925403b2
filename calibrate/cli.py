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
from simcluster.errors import UserError, did_you_mean, exit_code_of
from simcluster.output.atomic import check_file_writable
from simcluster.units import format_bytes

# subcommand -> module exposing HELP, add_arguments(parser), run(args) -> int
SUBCOMMANDS: dict[str, str] = {
    "import-nccl-tests": "calibrate.nccl_tests_import",
    "compare-trace": "calibrate.compare",
    "measure-step": "calibrate.step_run",
}


LAUNCH = """\
one process times one device's kernels only; collectives need a rank per GPU, launched by torchrun:
  one node of 8 GPUs:  torchrun --nproc-per-node 8 -m calibrate --out my-node.yaml
  N nodes (on each):   torchrun --nnodes N --nproc-per-node 8 --rdzv-backend c10d \\
                         --rdzv-endpoint HOST:29500 -m calibrate --out my-cluster.yaml
rank 0 writes the profile; until it is done, the measurements so far are in OUT.partial.yaml.

subcommands (python -m calibrate SUBCOMMAND --help):
""" + "\n".join(f"  {name}" for name in SUBCOMMANDS)


def _measure_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="calibrate",
        description="Time GEMMs, attention, memory-bound kernels and collectives into a "
        "hardware profile.",
        epilog=LAUNCH,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if available")
    p.add_argument("--quick", action="store_true", help="small grids (a CPU run in seconds)")
    p.add_argument(
        "--scenario",
        help="also time this scenario's per-layer GEMM shapes, and its MoE layer's grouped "
        "expert GEMMs, permutes, router and dispatch",
    )
    p.add_argument(
        "--shapes",
        help="extra GEMM shapes 'M,N,K;M,N,K' (positive integers; A, B and C in fp32 must fit "
        "in the device's memory)",
    )
    p.add_argument(
        "--dtypes",
        help="GEMM precisions to time, comma-separated, of bf16, fp16, fp32 and fp8 (default "
        "bf16,fp16,fp32 on a GPU, and fp8 where it runs: Ada, Hopper and later, through "
        "torch._scaled_mm, the MoE layers' grouped expert GEMMs too; bf16,fp32 on a CPU); a CPU without native bf16 (AVX2 only: torch's bf16 matmul 20-90x "
        "slower than fp32) takes over an hour on the bf16 grid, so time fp32 there",
    )
    p.add_argument("--base", help="profile to start from (name or YAML); default: this machine")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds one measurement (one step of the progress bar: a GEMM shape, a "
        "collective size) may take before the run stops as hung, keeping the partial file; also "
        "the collectives' own timeout (default 600)",
    )
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        help="profile YAML to write (missing folders are made; checked before measuring)",
    )
    return p


def _measure(argv: Sequence[str]) -> int:
    from calibrate.moe_shapes import check_moe_fits, default_moe_shapes, scenario_moe_shapes
    from calibrate.precisions import parse_dtypes
    from calibrate.profile_writer import partial_path
    from calibrate.shapes import (
        check_fits,
        cube_shapes,
        default_grid,
        parse_shapes,
        scenario_shapes,
    )
    from simcluster.hardware import load_profile

    args = _measure_parser().parse_args(argv)
    if not (0 < args.timeout < math.inf):
        raise UserError("--timeout", f"must be a positive number of seconds, got {args.timeout:g}")
    if _writes_files():  # before measuring, not after it (rank 0 writes, on its node)
        check_file_writable(args.out, "--out", "profile.yaml")
        partial = partial_path(args.out)
        if partial.exists() and not partial.is_file():
            raise UserError(
                "--out",
                f"'{partial}', where the run keeps its measurements until it is done, is not a "
                "file; remove it or choose another --out",
            )
    if args.base:
        load_profile(args.base, field="--base")  # a malformed base fails before measuring
    dtypes = tuple(parse_dtypes(args.dtypes)) if args.dtypes is not None else ()
    given = parse_shapes(args.shapes) if args.shapes else []
    of_scenario = scenario_shapes(args.scenario) if args.scenario else []
    moe = scenario_moe_shapes(args.scenario) if args.scenario else []
    import torch  # the optional extra; only the measuring run needs it

    from calibrate.runner import RunConfig, run

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    capacity = device_memory(device)
    if capacity is not None:  # before measuring, not an out-of-memory error mid-run
        limit = f"the {format_bytes(capacity)} of this {device} device"
        check_fits(given, capacity, limit, "--shapes")
        check_fits(of_scenario, capacity, limit, "--scenario")
        check_moe_fits(moe, capacity, limit)
    extra = given + of_scenario
    grid = default_grid(device, args.quick)
    shapes = tuple(grid + [s for s in dict.fromkeys(extra) if s not in grid])
    cube = tuple(cube_shapes(device, args.quick))
    moe_grid = default_moe_shapes(device, args.quick)
    moe_shapes = tuple(moe_grid + [s for s in dict.fromkeys(moe) if s not in moe_grid])
    reference = max(grid, key=lambda s: s.flops)
    cfg = RunConfig(
        device, args.quick, args.out, args.base, args.timeout, shapes, cube, moe_shapes, reference, dtypes
    )
    return run(cfg)


def _writes_files() -> bool:
    """Whether this process is the one that writes --out: rank 0 of a torchrun launch, or a
    single process."""
    from calibrate.dist import _env_int

    return _env_int("RANK", 0) == 0


def device_memory(device: str) -> int | None:
    """Bytes of memory one rank of a measuring run has on ``device`` (CPU ranks of a node
    share the host's); None where it cannot be read, or where the run's own start-up reports
    the problem (no CUDA, a local rank without a GPU)."""
    import torch

    from calibrate.dist import _env_int
    from calibrate.provenance import device_memory_bytes

    local_rank = _env_int("LOCAL_RANK", 0)  # torchrun's variables, read as dist.init reads them
    ranks_per_node = max(_env_int("LOCAL_WORLD_SIZE", _env_int("WORLD_SIZE", 1)), 1)
    if device == "cuda":
        if not torch.cuda.is_available() or local_rank >= torch.cuda.device_count():
            return None
        return device_memory_bytes(torch.device("cuda", local_rank), ranks_per_node)
    return device_memory_bytes(torch.device(device), ranks_per_node)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m calibrate``."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        if argv and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
            raise UserError(
                "calibrate",
                f"unknown subcommand '{argv[0]}'{did_you_mean(argv[0], SUBCOMMANDS)}; the "
                f"subcommands are {', '.join(SUBCOMMANDS)}, or options alone (--out P.yaml) to "
                "measure",
            )
        if argv and argv[0] in SUBCOMMANDS:
            module = importlib.import_module(SUBCOMMANDS[argv[0]])
            parser = _Parser(prog=f"calibrate {argv[0]}", description=module.HELP)
            module.add_arguments(parser)
            return int(module.run(parser.parse_args(argv[1:])) or 0)
        return _measure(argv)

    return exit_code_of(body)
