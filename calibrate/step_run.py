"""``calibrate measure-step``: run real training steps of a scenario here and set its simulation
beside them.

    torchrun --nproc-per-node 8 -m calibrate measure-step my-scenario.yaml --hardware my-cluster.yaml

Every rank builds the scenario's model (``calibrate/step_model.py``) and trains it on random
tokens as a plain PyTorch loop does (``calibrate/step_train.py``): under DistributedDataParallel
for ZeRO 0 (gradients reduced in the last micro-batch, ``no_sync`` before it) or FSDP2 for ZeRO 3
(``fully_shard`` on every layer and the root, gradients reduce-scattered every micro-batch, as
torchtitan runs it); the cross-entropy loss, ``clip_grad_norm_``, fused AdamW,
``zero_grad(set_to_none=True)``. After warm-up steps, each timed step runs between two device
synchronisations; a step's time is its slowest rank's, and the median step is the measurement.
Rank 0 then simulates the scenario under the framework entry that describes that loop
(``pytorch-ddp`` or ``torchtitan``) on the given profile, prints both with the error, and can
write the measurement as a case for ``simcluster validate`` (``--case-out``). With pipeline
stages (``parallel.pp`` > 1) the model is cut as the simulator cuts it and run by PyTorch's
schedule of ``parallel.schedule`` (``torch.distributed.pipelining``: 1f1b, afab, interleaved,
looped-bfs, interleaved-zb, zbv-fixed), data parallelism across the pipeline replicas. With
``parallel.tp`` > 1 every module gets torchtitan's DTensor tensor-parallel plan first
(``calibrate/step_tensor.py``). No context or expert parallelism: the loop has neither to run.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
from pathlib import Path
from typing import Any

import yaml

from simcluster.errors import UserError
from simcluster.progress import progress_bar

HELP = "run real training steps of a scenario here (PyTorch DDP or FSDP2, DTensor TP, pipelining) and compare them with its simulation"
#: the framework entry that describes the loop run, by ZeRO stage: DistributedDataParallel,
#: or FSDP2 (fully_shard per layer and on the root, as torchtitan applies it)
FRAMEWORKS = {0: "pytorch-ddp", 3: "torchtitan"}
LOOPS = {"pytorch-ddp": "DistributedDataParallel", "torchtitan": "FSDP2"}
PRECISIONS = ("fp32", "bf16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of the subcommand."""
    parser.add_argument("scenario", metavar="SCENARIO", help="shipped scenario name or YAML path")
    parser.add_argument(
        "--hardware",
        help="profile to simulate with (default: the scenario's cluster.hardware), e.g. the "
        "profile calibrate wrote on this machine",
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if available")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds a collective may wait (default 600)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--case-out", type=Path, metavar="CASE.yaml",
        help="write the measurement as a simcluster validate case",
    )  # fmt: skip
    parser.add_argument(
        "--trace-out", type=Path, metavar="TRACE.json",
        help="profile one more step (PyTorch profiler, rank 0's trace, for Perfetto) and print "
        "measured against simulated time per op kind",
    )  # fmt: skip


def _raw_scenario(name: str) -> dict[str, Any]:
    from simcluster.scenario.loading import read_scenario_file

    data, path = read_scenario_file(name)
    if not isinstance(data, dict):
        raise UserError("scenario", "must be a YAML mapping with model, cluster, parallel, training")
    data.setdefault("name", path.stem)
    return data


def _as_run(raw: dict[str, Any], hardware: str | None) -> dict[str, Any]:
    """The scenario as measure-step runs it: under the framework of the loop it runs (DDP for
    ZeRO 0, FSDP2 for ZeRO 3: :data:`FRAMEWORKS`), on ``hardware``."""
    from simcluster.frameworks import get_framework
    from simcluster.scenario import scenario_from_dict

    run = copy.deepcopy(raw)
    named = run.pop("framework", None)
    run.pop("framework_release", None)
    if hardware is not None:
        from simcluster.hardware import load_profile

        load_profile(hardware, field="--hardware")  # a bad one is named as the flag given
        run.setdefault("cluster", {})
        if isinstance(run["cluster"], dict):
            run["cluster"]["hardware"] = str(Path(hardware).resolve()) if Path(hardware).exists() else hardware
    if isinstance(run.get("parallel"), dict) and (run["parallel"].get("tp") or 1) > 1:
        run["parallel"].setdefault("sequence_parallel", True)  # torchtitan's TP plan is SP
    parallel = scenario_from_dict(run).parallel
    if parallel.zero not in FRAMEWORKS:
        raise UserError(
            "parallel.zero",
            f"measure-step runs DistributedDataParallel (zero 0) or FSDP2 (zero 3), got zero {parallel.zero}",
        )
    if parallel.zero_shard:
        raise UserError("parallel.zero_shard", "measure-step shards over every rank (FSDP2 without HSDP); drop zero_shard")
    framework = FRAMEWORKS[parallel.zero]
    if named is not None and get_framework(named).name != framework:
        raise UserError(
            "framework",
            f"measure-step runs a PyTorch {'FSDP2' if parallel.zero else 'DDP'} loop, not {named}; "
            f"set framework: {framework} or leave it unset",
        )
    run["framework"] = framework
    return run


def _checked(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """The raw scenario as run and its simulation context; every refusal is one line."""
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    for flag, value, least in (("--steps", args.steps, 1), ("--warmup", args.warmup, 0)):
        if value < least:
            raise UserError(flag, f"must be at least {least}, got {value}")
    if not (0 < args.timeout < math.inf):
        raise UserError("--timeout", f"must be a positive number of seconds, got {args.timeout:g}")
    raw = _as_run(_raw_scenario(args.scenario), args.hardware)
    scenario = scenario_from_dict(raw)
    if scenario.training.precision not in PRECISIONS:
        raise UserError(
            "training.precision",
            f"measure-step trains in fp32 or bf16 (autocast), got {scenario.training.precision}",
        )
    ctx = build_context(scenario)
    from calibrate.step_model import check_buildable

    check_buildable(ctx.model, ctx.layout.seq_len, scenario.training.recompute)
    from calibrate.step_pipeline import check_pipeline
    from calibrate.step_tensor import check_tensor_parallel

    check_pipeline(ctx)
    check_tensor_parallel(ctx)
    from calibrate.step_lora import check_lora

    check_lora(ctx.layout)
    return raw, ctx


def _result(ctx: Any, dctx: Any, times: list[float], simulated: float) -> dict[str, Any]:
    import torch

    from calibrate.provenance import device_name

    layout = ctx.layout
    measured = statistics.median(times)
    tokens = layout.global_batch * layout.seq_len
    return {
        "scenario": ctx.scenario.name,
        "layout": layout.describe(),
        "loop": _loop(ctx),
        "device": device_name(dctx.device),
        "ranks": dctx.world,
        "torch": str(torch.__version__),
        "hardware": ctx.profile.name,
        "framework": ctx.scenario.framework,
        "params": ctx.model.params_total(),
        # what the optimizer steps: every parameter, or a LoRA run's adapters alone
        "trained_params": _trained_params(ctx),
        "microbatches": layout.global_batch // (layout.micro_batch * layout.dp),
        "steps_s": times,
        "measured_step_s": measured,
        "simulated_step_s": simulated,
        "error_pct": 100.0 * (simulated - measured) / measured,
        "measured_tokens_per_s": tokens / measured,
        "simulated_tokens_per_s": tokens / simulated,
    }


def _trained_params(ctx: Any) -> float:
    """Parameters with gradients: the model's, or its LoRA adapters' (r (k + n) each)."""
    from simcluster.lora import layer_adapter_params

    lora = ctx.layout.lora
    if lora is None:
        return float(ctx.model.params_total())
    return float(ctx.model.layers * layer_adapter_params(ctx.model, lora, 1))


def _loop(ctx: Any) -> str:
    """What the measured loop ran, in PyTorch's terms."""
    from calibrate.step_pipeline import TORCH_SCHEDULES

    layout = ctx.layout
    # at dp 1 no data-parallel wrapper runs (calibrate/step_parallel.py::wrap_data_parallel)
    parts = [LOOPS[ctx.scenario.framework]] if layout.dp > 1 else []
    if layout.tp > 1:
        parts.append(f"DTensor tensor parallelism over {layout.tp} (sequence parallel)")
    if layout.pp > 1:
        name = TORCH_SCHEDULES[ctx.scenario.parallel.schedule]
        parts.append(f"torch.distributed.pipelining {name} over {layout.pp} stages")
    return ", ".join(parts) or "one process, no parallelism"


def _print(r: dict[str, Any]) -> None:
    from rich.table import Table

    from simcluster.commands.console import stdout_console
    from simcluster.units import format_time

    table = Table(title=f"{r['scenario']}: {r['ranks']} x {r['device']} (torch {r['torch']})")
    for column in ("", "measured", f"simulated on {r['hardware']} ({r['framework']})"):
        table.add_column(column, justify="right")
    spread = f"  ({format_time(min(r['steps_s']))}–{format_time(max(r['steps_s']))})"
    table.add_row("step time", format_time(r["measured_step_s"]) + spread, format_time(r["simulated_step_s"]))
    table.add_row("tokens/s", f"{r['measured_tokens_per_s']:,.0f}", f"{r['simulated_tokens_per_s']:,.0f}")
    # under torchrun stdout is a pipe, where Rich's own 80 columns broke the step-time cell
    console = stdout_console()
    console.print(table)
    console.print(
        f"error {r['error_pct']:+.1f}% (simulated - measured, in step time); median of "
        f"{len(r['steps_s'])} steps of {r['microbatches']} microbatches, {r['params']:,} parameters, "
        f"under {r['loop']}"
    )


def _path_from(case_dir: Path, text: str) -> str:
    """A file path of the scenario (as read: absolute, or from the working directory) written
    as validate reads it from the case file's folder: relative to that folder when the file lies
    under it, else absolute; names that are no file here (a shipped profile) stay as given."""
    path = Path(text)
    if not path.is_file():
        return text
    path = path.resolve()
    try:
        inside = path.relative_to(case_dir.resolve()).as_posix()
    except ValueError:
        return str(path)
    # a bare 'my-cluster' would read as a shipped profile's name, not the file beside the case
    return inside if "/" in inside or inside.endswith((".yaml", ".yml", ".json")) else f"./{inside}"


def _paths_from(case_dir: Path, raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with its file paths (hardware profile, HF config) as :func:`_path_from` writes
    them, so that the case validates from any working directory."""
    from simcluster.paths import PATH_FIELDS

    out = copy.deepcopy(raw)
    if isinstance(out.get("model"), str):  # the shorthand `model: llama/config.json`
        out["model"] = _path_from(case_dir, out["model"])
    for section, key in PATH_FIELDS:
        values = out.get(section)
        if isinstance(values, dict) and isinstance(values.get(key), str):
            values[key] = _path_from(case_dir, values[key])
    return out


def _write_case(path: Path, raw: dict[str, Any], r: dict[str, Any]) -> None:
    from simcluster.output.atomic import atomic_write_text

    case = {
        "cases": [
            {
                # the layout keeps two measurements of one scenario's layouts apart in validate
                "name": f"{r['scenario']}/measure-step {r['layout']}",
                "source": (
                    f"calibrate measure-step: median of {len(r['steps_s'])} PyTorch steps on "
                    f"{r['ranks']} x {r['device']} (torch {r['torch']}) under {r['loop']}"
                ),
                "scenario": _paths_from(path.parent, raw),
                "measured": {"step_time_s": r["measured_step_s"]},
            }
        ]
    }
    atomic_write_text(path, yaml.safe_dump(case, sort_keys=False), "--case-out")


def check_launch(ctx: Any, world: int, local_world: int) -> None:
    """The launched ranks are the scenario's GPUs, placed as the simulation places them."""
    gpus = ctx.layout.world
    if world != gpus:
        raise UserError(
            "cluster.gpus",
            f"the scenario trains on {gpus} GPUs but {world} rank(s) were launched; "
            f"run torchrun with {gpus} processes or set cluster.gpus",
        )
    gpn = ctx.scenario.cluster.gpus_per_node or ctx.profile.node.gpus_per_node
    if world > local_world and gpn != local_world:
        # the simulation would put other ranks in one node's NVLink domain than the run did
        raise UserError(
            "cluster.gpus_per_node",
            f"torchrun runs {local_world} rank(s) per node but the scenario places {gpn} on "
            f"each; set cluster.gpus_per_node: {local_world}",
        )


def check_memory(ctx: Any, device: str) -> None:
    """The step fits in one rank's memory by the simulator's memory model (``simcluster
    memory``), before a byte is allocated: a model too large for the machine is a one-line
    error, not the host's out-of-memory killer taking the ranks (and other processes) down
    mid-build, or a CUDA out-of-memory traceback."""
    from calibrate.cli import device_memory
    from simcluster.memory_report import memory_summary
    from simcluster.units import format_bytes

    capacity = device_memory(device)
    if capacity is None:
        return
    need = memory_summary(ctx)["total_bytes"]
    if need > capacity:
        raise UserError(
            "model",
            f"a step of {ctx.layout.describe()} takes {format_bytes(need)} per rank by the memory "
            f"model (simcluster memory), more than the {format_bytes(capacity)} of each {device} "
            "rank here; measure a smaller model, a shorter sequence or micro-batch, or more ranks",
        )


def run(args: argparse.Namespace) -> int:
    """Check, train, time, simulate, report."""
    from simcluster.output.atomic import check_file_writable

    raw, ctx = _checked(args)
    # before training: an existing directory or an unwritable folder is a one-line error, not
    # a lost measurement (missing folders are made when the file is written)
    from calibrate.dist import _env_int

    for flag, path, example in (("--case-out", args.case_out, "case.yaml"), ("--trace-out", args.trace_out, "trace.json")):
        if path is not None and _env_int("RANK", 0) == 0:  # rank 0 writes them, on its node
            check_file_writable(path, flag, example)
    import torch

    from calibrate.dist import init, shutdown
    from calibrate.step_train import train

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_memory(ctx, device)
    dctx = init(device, args.timeout)
    try:
        check_launch(ctx, dctx.world, dctx.local_world)
        show = None if dctx.is_main else False
        with progress_bar("measure-step", args.warmup + args.steps, show=show, unit="steps") as progress:
            times = train(ctx, dctx, args.steps, args.warmup, progress, args.trace_out)
    finally:
        shutdown(dctx)
    if not dctx.is_main:
        return 0
    import simcluster

    sim = simcluster.simulate(ctx.scenario)
    result = _result(ctx, dctx, times, sim.summary["step_time_s"])
    if args.case_out is not None:
        _write_case(args.case_out, raw, result)
    if args.json:
        from simcluster.commands.common import print_json

        print_json(result)
    else:
        _print(result)
        if args.trace_out is not None:
            _print_kinds(args.trace_out, sim)
        for path in (args.case_out, args.trace_out):
            if path is not None:
                print(f"wrote {path}")
    return 0


def _print_kinds(trace: Path, sim: Any) -> None:
    """Measured (the profiled step on rank 0) against simulated time per op kind."""
    from calibrate.compare import seconds_of, table
    from calibrate.kineto import load_trace

    print(table(load_trace(trace), seconds_of(sim)))
