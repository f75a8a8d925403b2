"""``simcluster collective OP SIZE --gpus N``: one collective alone, reported as nccl-tests does.

time, algbw = S / t and busbw = algbw x factor(op, n) (GB = 1e9 bytes); ``--sweep`` prints the
nccl-tests table from 8 B doubling up to SIZE; ``--set cluster.nic_gbps=200`` overrides a
hardware field (keys of hardware.CLUSTER_OVERRIDES).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable

from simcluster import yamlio
from simcluster.divisors import divisors, one_of
from simcluster.errors import UserError, did_you_mean
from simcluster.hardware import CLUSTER_OVERRIDES, load_profile
from simcluster.limits import MAX_GPUS
from simcluster.nccl_ctas import MAX_CHANNELS, CtaLimit, channels
from simcluster.network import bandwidths, check_op, collective_time, describe
from simcluster.network.algorithms import check_redop
from simcluster.topology import Cluster, build_cluster
from simcluster.units import parse_size

NAME = "collective"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI arguments of the command."""
    parser.add_argument(
        "op", metavar="OP",
        help="all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv (any case; "
        "dashes, no separator and nccl-tests' binary names too: all-reduce, allreduce, all_reduce_perf)",
    )
    parser.add_argument(
        "size", metavar="SIZE",
        help="nccl-tests size of the op in whole bytes (B, KB, MB, GB, TB, KiB..TiB), e.g. 8, 1MiB, 1GiB: "
        "the buffer for all_reduce, broadcast and send_recv, the gathered output for all_gather, the "
        "input for reduce_scatter, each rank's whole send buffer for all_to_all (nccl-tests' size "
        "column: max of send and receive bytes per rank)",
    )
    parser.add_argument("--gpus", type=int, required=True, metavar="N", help="ranks in the group (GPUs 0..N-1)")
    parser.add_argument(
        "--gpus-per-node", type=int, default=None, metavar="G", help="GPUs per node of the cluster (default: the profile's)"
    )
    parser.add_argument(
        "--per-node", type=int, default=None, metavar="K",
        help="place the group as K GPUs on each of N/K nodes (e.g. 1 = a DP group of a TP-8 "
        "layout); default: GPUs 0..N-1",
    )  # fmt: skip
    parser.add_argument("--hardware", default="dgx-h100", metavar="H", help="profile name or YAML path (default dgx-h100)")
    parser.add_argument(
        "--algo", default=None,
        help="ring, tree, nvls, nvls_tree, hierarchical, direct (any case, NCCL_ALGO's names too: Ring, "
        "NVLS, NVLSTree; default: as NCCL)",
    )
    parser.add_argument(
        "--reduce-op", default="sum", metavar="OP",
        help="the reduction, as nccl-tests' -o: sum (their default), avg, or premul_sum (mulsum); NCCL "
        "runs NVLS and NVLS_TREE for sum only",
    )  # fmt: skip
    parser.add_argument(
        "--max-ctas", type=int, default=None, metavar="N",
        help="the communicator's NCCL maxCTAs (Megatron's max_ctas, NCCL_MAX_CTAS): its channels "
        "are the profile's collective_sms clamped to N, and what N CTAs move caps it "
        "(efficiency.channel_busbw)",
    )  # fmt: skip
    parser.add_argument("--set", action="append", default=[], metavar="cluster.KEY=VALUE",
                        help="override a hardware field, e.g. cluster.nic_gbps=200")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--sweep", action="store_true", help="sizes from 8 B doubling up to SIZE")


def parse_overrides(items: list[str]) -> tuple[dict[str, object], dict[str, object]]:
    """``cluster.KEY=VALUE`` strings -> ({KEY: value}, profile patch); values are YAML scalars.

    ``cluster.profile.a.b=V`` patches any profile field, as in a scenario's ``cluster.profile``.
    """
    out: dict[str, object] = {}
    patch: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if sep and key.startswith("cluster.profile.") and len(key) > len("cluster.profile."):
            parsed = yamlio.parse_set_value(value, item)
            if parsed is None:  # null: the profile's own value, as --set KEY=null on a scenario
                continue
            node = patch
            *parents, leaf = key.removeprefix("cluster.profile.").split(".")
            for part in parents:
                node = node.setdefault(part, {})  # type: ignore[assignment]
            node[leaf] = parsed
            continue
        short = key.removeprefix("cluster.")
        if not sep or not key.startswith("cluster.") or short not in CLUSTER_OVERRIDES:
            raise UserError(
                "--set",
                f"'{item}' is not cluster.KEY=VALUE with KEY one of {', '.join(sorted(CLUSTER_OVERRIDES))}"
                f"{did_you_mean(short, CLUSTER_OVERRIDES)}",
            )
        out[short] = yamlio.parse_set_value(value, item)
    return out, patch


def _group(gpus: int, per_node: int | None, gpus_per_node: int) -> tuple[list[int], int]:
    """The group's GPU ids and the cluster size that holds it."""
    if per_node is None:
        return list(range(gpus)), gpus
    if per_node < 1 or per_node > gpus_per_node or gpus % per_node:
        raise UserError(
            "--per-node",
            f"must divide --gpus {gpus} and be 1..{gpus_per_node} (GPUs per node), got {per_node}; "
            f"use {one_of(divisors(gpus, lambda d: d <= gpus_per_node))}",
        )
    nodes = gpus // per_node
    group = [node * gpus_per_node + i for node in range(nodes) for i in range(per_node)]
    return group, nodes * gpus_per_node


def _row(
    op: str, nbytes: int, group: list[int], cluster: Cluster, algo: str | None, redop: str = "sum",
    channels: int = 0,
) -> dict[str, object]:
    n = len(group)
    t = collective_time(op, nbytes, cluster, group, algo, redop, channels)
    algbw, busbw = bandwidths(op, nbytes, n, t) if t > 0 else (0.0, 0.0)
    recipe = describe(op, nbytes, cluster, group, algo, redop, channels) if nbytes > 0 and n > 1 else None
    return {
        "op": op,
        "bytes": nbytes,
        "gpus": n,
        "nodes": len({cluster.node_of(g) for g in group}),
        "time_s": t,
        "algbw_GBps": algbw / 1e9,
        "busbw_GBps": busbw / 1e9,
        "algo": recipe.algo if recipe else None,
        "proto": recipe.proto if recipe else None,
        "measured_ratio": recipe.measured_ratio if recipe else None,
    }


def op_name(text: str) -> str:
    """The op as the model names it, from the ways people write it: ``all-reduce``,
    ``AllReduce``, ``allreduce`` or nccl-tests' ``all_reduce_perf``; a UserError otherwise."""
    from simcluster.network.ops import OPS

    spelled = text.strip().lower().replace("-", "_").removesuffix("_perf")
    return check_op(_named(spelled, OPS), "op")


def _named(spelled: str, names: Iterable[str]) -> str:
    """The one of ``names`` that ``spelled`` (lower case, '_' for '-') writes with or without
    its underscores ('allreduce', 'nvlstree'); ``spelled`` itself when none does."""
    bare = {name.replace("_", ""): name for name in names}
    return bare.get(spelled.replace("_", ""), spelled)


def algo_name(text: str | None) -> str | None:
    """``--algo`` as the model names it, from NCCL_ALGO's spellings too (``Ring``, ``NVLS``,
    ``NVLSTree``, ``nvls-tree``), as OP takes any case; a UserError naming --algo otherwise."""
    if text is None:
        return None
    from simcluster.network.algorithms import ALGORITHMS

    spelled = text.strip().lower().replace("-", "_")
    name = _named(spelled, ALGORITHMS)
    if name not in ALGORITHMS:
        names = sorted(ALGORITHMS)
        raise UserError(
            "--algo", f"unknown algorithm '{text}'{did_you_mean(spelled, names)}; one of {', '.join(names)}"
        )
    return name


def run(args: argparse.Namespace) -> int:
    """Run the command; UserError for bad input."""
    op = op_name(args.op)
    args.algo = algo_name(args.algo)
    size = parse_size(args.size, "size")
    spelled = args.reduce_op.strip().lower()
    redop = check_redop("premul_sum" if spelled == "mulsum" else spelled, "--reduce-op")
    _check_counts(args, op)
    overrides, patch = parse_overrides(args.set)
    profile = load_profile(args.hardware, overrides, field="--hardware", patch=patch)
    gpn = args.gpus_per_node or profile.node.gpus_per_node
    group, cluster_gpus = _group(args.gpus, args.per_node, gpn)
    if cluster_gpus > MAX_GPUS:
        raise UserError(
            "--per-node",
            f"{args.gpus} GPUs at {args.per_node} per node span a {cluster_gpus}-GPU cluster, more "
            f"than the {MAX_GPUS:,} simcluster can simulate; raise --per-node or lower --gpus",
        )
    try:
        cluster = build_cluster(profile, cluster_gpus, args.gpus_per_node)
    except UserError as exc:  # the cluster is sized by --gpus here, not by a scenario's field
        if exc.field != "cluster.gpus":
            raise
        raise UserError(
            "--gpus", f"{exc.message}, or place the group with --per-node K (K GPUs on each node)"
        ) from None
    sizes = _sizes(size) if args.sweep else [size]
    channels = _channels(args.max_ctas, profile.efficiency.collective_sms)
    try:
        rows = [_row(op, s, group, cluster, args.algo, redop, channels) for s in sizes]
    except UserError as exc:  # the planner names the model's 'algo'; here the user gave --algo
        if exc.field != "algo":
            raise
        raise UserError("--algo", exc.message) from None
    if args.json:
        print(json.dumps(rows if args.sweep else rows[0], indent=2))
        return 0
    _print_table(rows, profile.name, args.sweep)
    return 0


def _channels(max_ctas: int | None, search: int) -> int:
    """The channels ``--max-ctas`` leaves the communicator (0: the profile's, unchanged)."""
    if max_ctas is None:
        return 0
    if not 1 <= max_ctas <= MAX_CHANNELS:
        raise UserError("--max-ctas", f"must be 1..{MAX_CHANNELS} (NCCL's MAXCHANNELS), got {max_ctas}")
    if search <= 0:
        raise UserError(
            "--max-ctas", "the profile's efficiency.collective_sms is 0 (its channels unknown); "
            "set it with --set cluster.profile.efficiency.collective_sms=N",
        )  # fmt: skip
    n = channels(search, CtaLimit(max_ctas=max_ctas))
    return 0 if n == search else n


def _check_counts(args: argparse.Namespace, op: str) -> None:
    """--gpus and --gpus-per-node in range, and two GPUs for a send/recv."""
    if args.gpus < 1:
        raise UserError("--gpus", f"must be >= 1, got {args.gpus}")
    if args.gpus > MAX_GPUS:
        raise UserError("--gpus", f"{args.gpus} is more than the {MAX_GPUS:,} GPUs simcluster can simulate")
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        raise UserError("--gpus-per-node", f"must be >= 1, got {args.gpus_per_node}")
    if op == "send_recv" and args.gpus != 2:
        raise UserError(
            "--gpus", "send_recv runs between 2 GPUs (0 -> N-1 is not defined); use --gpus 2"
        )


def _sizes(largest: int) -> list[int]:
    """--sweep's sizes: 8 B doubling up to ``largest`` (at least 8 B), as nccl-tests' ``-b 8 -f 2``."""
    sizes, s = [], 8
    while s <= max(largest, 8):
        sizes.append(s)
        s *= 2
    return sizes


def _print_table(rows: list[dict[str, object]], hw: str, sweep: bool) -> None:
    from rich.table import Table

    from simcluster.commands.console import stdout_console

    first = rows[0]
    nodes = first["nodes"]
    table = Table(title=f"{first['op']} on {first['gpus']} GPUs ({nodes} node{'' if nodes == 1 else 's'}) of {hw}")
    measured = any(r["measured_ratio"] is not None for r in rows)
    cols = ("size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algo")
    for col in cols + (("measured/model",) if measured else ()):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["bytes"]),
            f"{float(r['time_s']) * 1e6:.2f}",  # type: ignore[arg-type]
            f"{float(r['algbw_GBps']):.2f}",  # type: ignore[arg-type]
            f"{float(r['busbw_GBps']):.2f}",  # type: ignore[arg-type]
            f"{r['algo']}/{r['proto']}" if r["algo"] else "-",
            *((f"{r['measured_ratio']:.2f}" if r["measured_ratio"] else "-",) if measured else ()),
        )
    console = stdout_console(100)
    console.print(table)
    if measured:
        console.print(
            "measured/model: the profile's measured nccl-tests time over the model's at this size "
            "and group shape; the time shown is the measured one (the model's times this ratio)"
        )
