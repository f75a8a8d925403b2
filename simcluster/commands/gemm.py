"""``simcluster gemm M,N,K ... --hardware H``: how the kernel model times GEMMs of given shapes.

The compute side's counterpart of ``simcluster collective``: compare it with your own GEMM
benchmark (C[M, N] = A[M, K] @ B[K, N], 2·M·N·K FLOPs). Each shape's time and rate, and the
parts they come from: the size curve's efficiency at its FLOPs, the shape table's factor, the
plateau x tile/wave quantisation cap, and whether a calibrated profile timed that very shape
(``--role``: in the operand layout of a linear layer's forward, input or weight gradient).
"""

from __future__ import annotations

import argparse
import json
import re

from simcluster.commands.collective import parse_overrides
from simcluster.commands.listing import PRECISIONS
from simcluster.compute import KernelModel
from simcluster.errors import UserError
from simcluster.gemm_roles import ROLES
from simcluster.hardware import load_profile
from simcluster.units import parse_gemm_shape

NAME = "gemm"


# A shape with a minus sign ('-4096,4096,1024', '-4096x4096x1024') is a shape to be refused,
# not an option; argparse reads only plain negative numbers ('-4096') as arguments.
_NEGATIVE_SHAPE = re.compile(r"^-\d[\d,x×\s-]*$")
_BARE_INTEGER = re.compile(r"^[+-]?\d+$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI arguments of the command."""
    # argparse's own test for a negative number; the command has no option that looks like one
    parser._negative_number_matcher = _NEGATIVE_SHAPE  # type: ignore[attr-defined]
    parser.add_argument(
        "shapes", nargs="+", metavar="M,N,K",
        help="GEMM shapes, C[M,N] = A[M,K] @ B[K,N], e.g. 16384,4096,1024 or 16384x4096x1024 "
        "(one shape may also be given as three numbers: 16384 4096 1024)",
    )  # fmt: skip
    parser.add_argument("--hardware", default="dgx-h100", metavar="H", help="profile name or YAML path (default dgx-h100)")
    parser.add_argument(
        "--precision", default="bf16", metavar="P", help=f"one of {', '.join(PRECISIONS)} (default bf16)"
    )
    parser.add_argument(
        "--count", type=int, default=1, metavar="N", help="N GEMMs of the shape in one grouped kernel (experts; default 1)"
    )
    parser.add_argument(
        "--role", choices=ROLES,
        help="the GEMM's role in a linear layer (fwd x @ W.t(), dgrad dy @ W, wgrad dy.t() @ x): "
        "a calibrated profile's row timed in that layout, where it has one",
    )  # fmt: skip
    parser.add_argument("--set", action="append", default=[], metavar="cluster.KEY=VALUE",
                        help="override a hardware field, e.g. cluster.profile.efficiency.sustained=1")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """Run the command; UserError for bad input."""
    shapes = [parse_gemm_shape(s, "shapes") for s in _shape_texts(args.shapes)]
    if args.precision not in PRECISIONS:
        raise UserError("--precision", f"'{args.precision}' is not one of {', '.join(PRECISIONS)}")
    if args.count < 1:
        raise UserError("--count", f"must be >= 1, got {args.count}")
    overrides, patch = parse_overrides(args.set)
    profile = load_profile(args.hardware, overrides, field="--hardware", patch=patch)
    km = KernelModel(profile, args.precision)
    # fp8 and nvfp4 never fall back to another dtype here, as KernelModel would for fp8
    fallback = args.precision in ("fp8", "nvfp4") and km.gemm_dtype != args.precision
    if fallback or profile.gemm_rate_missing(km.gemm_dtype):
        raise UserError(
            "--precision", f"{profile.name} has no {args.precision} tensor-core rate; pick another precision or profile"
        )
    rows = []
    for m, n, k in shapes:
        b = km.gemm_breakdown(m, n, k, count=args.count, role=args.role)
        rows.append({
            "m": m, "n": n, "k": k, "count": args.count, "role": args.role, "dtype": b.dtype, "flops": b.flops,
            "time_s": b.seconds, "tflops": b.tflops, "of_peak": b.tflops * 1e12 / b.peak,
            "curve": b.curve, "shape_factor": b.shape_factor, "cap": b.cap, "timed": b.timed,
            "memory_bound": b.memory_bound,
        })  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    _print_table(rows, profile.name, km.gemm_dtype, km.launch_s)
    return 0


def _shape_texts(tokens: list[str]) -> list[str]:
    """The shapes given: three bare integers (``gemm 4096 4096 1024``) are one M N K shape,
    else each token is one shape (M,N,K or MxNxK)."""
    if len(tokens) == 3 and all(_BARE_INTEGER.match(t) for t in tokens):
        return [",".join(tokens)]
    return tokens


def _print_table(rows: list[dict[str, object]], hw: str, dtype: str, launch_s: float) -> None:
    from rich.table import Table

    from simcluster.commands.console import stdout_console

    table = Table(title=f"{dtype} GEMMs on {hw} (efficiencies are fractions of the datasheet peak)")
    notes = [
        [n for n, on in (("timed (calibrated)", r["timed"]), ("memory-bound", r["memory_bound"])) if on] for r in rows
    ]
    noted = any(notes)  # an empty "note" column only widens the table
    for col in ("M x N x K", "time (us)", "TFLOP/s", "of peak", "size curve", "shape", "cap", *(("note",) if noted else ())):
        table.add_column(col, justify="left" if col in ("M x N x K", "note") else "right")
    for r, row_notes in zip(rows, notes, strict=True):
        count = f" x{r['count']}" if r["count"] != 1 else ""
        table.add_row(
            f"{r['m']} x {r['n']} x {r['k']}{count}",
            f"{float(r['time_s']) * 1e6:.1f}",  # type: ignore[arg-type]
            f"{float(r['tflops']):.1f}",  # type: ignore[arg-type]
            f"{float(r['of_peak']):.3f}",  # type: ignore[arg-type]
            "-" if r["timed"] else f"{float(r['curve']):.3f}",  # type: ignore[arg-type]
            "-" if r["timed"] else f"{float(r['shape_factor']):.3f}",  # type: ignore[arg-type]
            "-" if r["cap"] is None else f"{float(r['cap']):.3f}",  # type: ignore[arg-type]
            *((", ".join(row_notes),) if noted else ()),
        )
    console = stdout_console(110)
    console.print(table)
    # the columns' relation, so a user can reproduce a row (KernelModel.gemm_breakdown)
    console.print(
        f"time = 2MNK / (peak x min(size curve x shape, cap)) + the {launch_s * 1e6:.1f} us launch gap, "
        "of peak its rate over the datasheet peak: size curve, the profile's GEMM efficiency at the "
        "shape's FLOPs; shape, the shape table's factor for M x N x K; cap, the curve's plateau x "
        "tile/wave quantisation on the SMs"
        + ("; a timed shape runs at its calibrated time" if any(r["timed"] for r in rows) else "")
    )
