"""``simcluster memory``: per-GPU memory of a scenario (params, grads, optimizer, activations)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TypeVar

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simcluster.commands.common import (
    add_scenario_arguments,
    out_path,
    print_json,
    print_notes,
    scenario_from_args,
    to_json,
)
from simcluster.commands.console import stdout_console
from simcluster.context import Context, build_context
from simcluster.fit_hints import fit_advice
from simcluster.held_microbatches import Held
from simcluster.inert import inert_settings, note_lines
from simcluster.memory import layer_activation_bytes
from simcluster.memory_report import memory_summary
from simcluster.names import run_heading
from simcluster.peak_parts import PEAK_PARTS, STASH
from simcluster.units import format_bytes

NAME = "memory"

#: what the table's cells are, for its title: each cell names its binary unit (format_bytes)
UNITS_PER_GPU = "per GPU, binary units: 1 GiB = 2^30 bytes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser)
    parser.add_argument(
        "--out", metavar="DIR", type=out_path,
        help="write memory_stages.png (each stage's memory at its peak, stacked), .csv and .json",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    ctx = build_context(scenario, args.hardware)
    inert = inert_settings(ctx)
    print_notes(note_lines(inert))
    print_notes([f"note: {n}" for n in ctx.notes])
    doc = memory_summary(ctx)
    doc["inert_settings"] = [n.text for n in inert]
    if not doc["fits"]:
        doc.update(fit_advice(scenario, args.hardware))
    if args.out:
        written = _write_out(args.out, doc, run_heading(doc["scenario"], doc["model"]), args.overrides)
    if args.json:
        print_json(doc)
        return 0
    console = stdout_console()
    if args.overrides:  # the title names the scenario, whose model or batch --set may have replaced
        console.print(f"with --set {' '.join(args.overrides)}")
    console.print(_table(doc))
    _print_parts(console, doc, ctx)
    _print_host(console, doc, ctx)
    _print_verdict(console, doc)
    if args.out:
        console.print(f"wrote {', '.join(str(path) for path in written.values())}", soft_wrap=True, markup=False)
    return 0


def _fp8_weight_line(nbytes: float, ctx: Context) -> str:
    """What the quantised weights add to (or take from) the parameters column."""
    if ctx.scenario.training.fp4_param:
        return f"params: NVFP4 parameters (training.fp4_param) take {format_bytes(-nbytes)} less than 16-bit ones"
    if ctx.scenario.training.fp8_param_gather:
        more, amount = ("more", nbytes) if nbytes > 0 else ("less", -nbytes)
        return (
            f"params: FP8 parameters (training.fp8_param_gather), with any transposed copy their GEMMs "
            f"need, take {format_bytes(amount)} {more} than 16-bit ones"
        )
    return (
        f"params include TransformerEngine's quantised weight copies: {format_bytes(nbytes)}, cast on each "
        "step's first microbatch and kept (training.fp8_weight_cache: false casts every microbatch instead)"
    )


def _fp8_activation_line(ctx: Context) -> str | None:
    """What FP8 attention and the FP8 SwiGLU store take off a layer's kept activations (the
    first layer of one microbatch against the same layer with both off); None with neither."""
    tr = ctx.scenario.training
    named = [f for f in ("fp8_attention", "activation_fp8_store") if getattr(tr, f)]
    if not named:
        return None
    off = tr.model_copy(update={f: False for f in named})
    saved = layer_activation_bytes(ctx.model, ctx.layout, off, 0) - layer_activation_bytes(ctx.model, ctx.layout, tr, 0)
    parts = {"fp8_attention": ["Q", "K", "V", "the attention output"], "activation_fp8_store": ["the SwiGLU input"]}
    items = [item for f in named for item in parts[f]]
    what = ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else items[0]
    fields = ", ".join(f"training.{f}" for f in named)
    return f"activations: {what} kept in FP8 ({fields}): {format_bytes(saved)} less per layer and microbatch"


def _table(doc: dict) -> Table:
    """The per-stage table: one row per run of stages with equal cells."""
    heading = run_heading(doc["scenario"], doc["model"])  # the model --set put in, not only the file's name
    # the cells are format_bytes's binary units (GiB, MiB), not a count of bytes
    table = Table(title=f"{heading} — {doc['layout']} on {doc['hardware']} ({UNITS_PER_GPU})")
    table.add_column("stage", justify="right")
    columns = _columns(doc)
    for col in columns:
        table.add_column(col.replace("_", " "), justify="right")
    for first, last, cells in _stage_runs(doc["per_stage"], columns):
        table.add_row(_stages(first, last), *cells)
    return table


def _print_parts(console: Console, doc: dict, ctx: Context) -> None:
    """The lines under the table: what "other" is, the buffers, the held microbatches, the
    transients beyond the stash and the parameters."""
    console.print(
        "[dim]other: training.memory_overhead_gib (CUDA context, cuBLAS workspace, NCCL buffers); "
        f"per parameter the GPU computes with: {_bytes_per_param(doc)}[/]"
    )
    if doc["comm_buffers_bytes"] > 0:
        console.print(f"[dim]comm buffers: {_buffer_line(doc['comm_buffers'])}[/]")
    if doc["fp8_weight_bytes"]:
        console.print(f"[dim]{_fp8_weight_line(doc['fp8_weight_bytes'], ctx)}[/]")
    if fp8_kept := _fp8_activation_line(ctx):
        console.print(f"[dim]{fp8_kept}[/]")
    if ctx.layout.pp > 1:
        unit = "chunk passes" if ctx.schedule.chunks(ctx.spec) > 1 else "microbatches"
        held = [Held(**st["held"]) for st in doc["per_stage"]]
        console.print(f"[dim]{held_line(held, unit)}[/]")
    beyond = transient_line(doc["per_stage"])
    if beyond:
        console.print(f"[dim]{beyond}[/]")
    console.print(
        f"model parameters: {doc['params_total'] / 1e9:.2f} B total"
        + (
            f", {doc['params_active'] / 1e9:.2f} B active"
            if doc["params_active"] != doc["params_total"]
            else ""
        )
        + f"; most loaded GPU (stage {doc['worst_stage']}) {_params_held(doc, ctx)}"
    )


def _print_host(console: Console, doc: dict, ctx: Context) -> None:
    """What is offloaded to the host's memory, and whether the host holds it."""
    if doc["host_optimizer_bytes"] > 0:
        per_node = doc["host_optimizer_bytes"] * ctx.profile.node.gpus_per_node
        console.print(
            f"optimizer on the host (training.optimizer_offload): {format_bytes(doc['host_optimizer_bytes'])} "
            f"per GPU, {format_bytes(per_node)} per node of {ctx.profile.node.gpus_per_node} GPUs"
        )
    if doc["host_activation_bytes_per_microbatch"] > 0:
        console.print(
            "activations on the host (training.activation_offload_layers or offload_modules): "
            f"{format_bytes(doc['host_activation_bytes_per_microbatch'])} per GPU per microbatch in flight"
        )
    host, cap = doc["host_bytes_per_node"], doc["host_capacity_bytes"]
    if host > 0 and cap:
        over = host > cap
        console.print(
            f"{'[bold red]HOST MEMORY SHORT[/]: ' if over else ''}offloaded state per node up to "
            f"{format_bytes(host)} of the host's {format_bytes(cap)}"
        )


def _print_verdict(console: Console, doc: dict) -> None:
    """Fits or not, with the layouts that would fit and a warning when the fit is tight."""
    verdict = "fits" if doc["fits"] else "DOES NOT FIT"
    style = "green" if doc["fits"] else "bold red"
    console.print(
        f"[{style}]{verdict}[/]: {format_bytes(doc['total_bytes'])} of {format_bytes(doc['capacity_bytes'])}"
    )
    if not doc["fits"]:
        console.print(hint_line(doc["would_fit"], doc.get("would_fit_together")), soft_wrap=True)  # commands to copy, unbroken
    tight = tight_fit_line(doc["total_bytes"], doc["capacity_bytes"])
    if tight:
        console.print(tight)


def _write_out(out: str, doc: dict, heading: str, overrides: Sequence[str]) -> dict:
    """memory_stages.png/.csv/.json into ``out`` (atomically), titled as the table is."""
    from simcluster.output.atomic import check_writable
    from simcluster.output.memory_stages import write_memory_stages

    check_writable(out)
    title = f"{heading} — {doc['layout']} on {doc['hardware']}"
    if overrides:
        title += f"\nwith --set {' '.join(overrides)}"
    return write_memory_stages(out, doc, to_json(doc) + "\n", title)


#: headroom below which a layout that fits is called tight: CUDA shows a little less than the
#: datasheet's memory (an H100 80GB reports about 79.6 GiB to nvidia-smi) and the caching
#: allocator fragments, which the walk's fixed training.memory_overhead_gib does not follow
TIGHT_SHARE = 0.02


def tight_fit_line(peak: float, capacity: float) -> str | None:
    """A caution when a peak that fits leaves under :data:`TIGHT_SHARE` of the GPU free."""
    if not 0 < capacity - peak < TIGHT_SHARE * capacity:
        return None
    return (
        f"[yellow]tight[/]: {format_bytes(capacity - peak)} to spare of {format_bytes(capacity)}; CUDA "
        "shows a little less than the datasheet's memory and the allocator fragments, so a real run may "
        "not fit (training.memory_overhead_gib, 1 GiB by default, allows for the CUDA context, cuBLAS "
        "workspace and NCCL buffers only)"
    )


def offload_backlog_line(peak: float, backlog: float, capacity: float) -> str | None:
    """A caution when the offloads' moved bytes, as the copies' timing leaves them on the GPU,
    take the memory above the walked peak (``offload_backlog_bytes``,
    :mod:`simcluster.engine.offload`)."""
    if backlog <= 0:
        return None
    over = peak + backlog > capacity >= peak
    return (
        f"[yellow]offload backlog[/]: the copies to host memory fall behind, and the offloaded activations "
        f"still on the GPU (a tensor is freed once its copy out is done; a copy back holds its buffer until "
        f"the layer's backward) take the memory {format_bytes(backlog)} above the peak shown, to "
        f"{format_bytes(peak + backlog)}" + (f", more than the {format_bytes(capacity)}" if over else "")
        + "; a faster host link (node.host_link_GBps), fewer offloaded layers or modules, or "
        "training.offload_max_inflight shrink it"
    )


def set_items(hint: dict, flag: str = "--set ", between: str = " ") -> str:
    """A fit hint record's change (and those made with it) as ``--set`` items, with the nulls
    of the keys it unsets (``flag="@", between=""``: a compare variant's suffix)."""
    items = [hint["change"], *hint.get("also", ()), *(f"{key}=null" for key in hint.get("unset", ()))]
    return between.join(flag + item for item in items)


#: what the fit hints try, as the no-fit line names them
_TRIED = "recompute, zero, micro-batch, loss, tp, pp, moments or offloading"


def hint_line(hints: list[dict], together: dict | None = None) -> str:
    """'would fit with: --set a=b (61.2 GiB), ...'; with no single change, the changes that fit
    together (``together``: :func:`simcluster.fit_hints.fitting_combination`'s record), or
    that not even those do."""
    if hints:
        # escaped: a list value's brackets ([expert_fc1,moe_act]) are not console markup
        listed = ", ".join(f"{escape(set_items(h))} ({format_bytes(h['total_bytes'])}{_batch(h)})" for h in hints)
        return f"  would fit with: {listed}"
    if together:
        return (
            f"  no single change of {_TRIED} fits; together these do: {escape(set_items(together))} "
            f"({format_bytes(together['total_bytes'])} by the memory walk{_batch(together)})"
        )
    return (
        f"  no change of {_TRIED} fits, alone or up to three together: try more GPUs (cluster.gpus), "
        "GPUs with more memory (cluster.hardware) or simcluster sweep --fitting-only over several axes"
    )


def _batch(hint: dict) -> str:
    """A hint's effect on the batch after its memory ('; global batch 128 kept: ...'), if any."""
    return f"; {hint['batch']}" if hint.get("batch") else ""


def _params_held(doc: dict, ctx: Context) -> str:
    """What the most loaded GPU's parameters are: its model-parallel share, and under ZeRO-3 the
    shard of it that stays resident between the layers' gathers."""
    share, frozen = doc["params_per_gpu"], doc.get("frozen_params_per_gpu", 0.0)
    if frozen:
        return f"computes with {(share + frozen) / 1e9:.3f} B params, trains {share / 1e6:.2f} M of them (LoRA adapters; the rest frozen)"
    text = f"computes with {share / 1e9:.3f} B params"
    if ctx.layout.zero == 3 and ctx.layout.zero_group > 1:
        group = ctx.layout.zero_group
        text += f", {share / group / 1e9:.3f} B of them resident (ZeRO-3 shards them over {group} ranks)"
    return text


T = TypeVar("T")

_COLUMNS = ("params", "grads", "optimizer", "activations", "other", "total")


def _columns(doc: dict) -> tuple[str, ...]:
    """The table's columns: the TP overlaps' buffers before the total when the run holds any."""
    if doc["comm_buffers_bytes"] <= 0:
        return _COLUMNS
    return (*_COLUMNS[:-1], "comm_buffers", _COLUMNS[-1])


def _buffer_line(buffers: dict[str, float]) -> str:
    """The TP overlaps' persistent buffers by holder: TransformerEngine's userbuffers (one per
    overlap, qkv_fprop ...) and the extra cuBLAS workspace copies, or PyTorch's symmetric-memory
    workspace (simcluster.tp_overlap_buffers)."""
    # an overlap run through NCCL (method nccl) holds no userbuffer: 0 bytes, not counted
    ub = {k: v for k, v in buffers.items() if k not in ("cublas_workspace", "symmetric_memory") and v > 0}
    parts = []
    if ub:
        count = f"{len(ub)} overlap" + ("s" if len(ub) > 1 else "")
        parts.append(f"TransformerEngine userbuffers {format_bytes(sum(ub.values()))} ({count})")
    if buffers.get("cublas_workspace"):
        parts.append(f"cuBLAS workspace copies {format_bytes(buffers['cublas_workspace'])}")
    if buffers.get("symmetric_memory"):
        parts.append(f"PyTorch async-TP symmetric memory {format_bytes(buffers['symmetric_memory'])}")
    return ", ".join(parts)


def _runs(values: Sequence[T]) -> list[tuple[int, int, T]]:
    """Consecutive stages (0, 1, ...) whose values are equal, as (first, last, value)."""
    runs: list[tuple[int, int, T]] = []
    for stage, value in enumerate(values):
        if runs and runs[-1][2] == value:
            runs[-1] = (runs[-1][0], stage, value)
        else:
            runs.append((stage, stage, value))
    return runs


def _stages(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def _stage_runs(stages: list[dict], columns: tuple[str, ...] = _COLUMNS) -> list[tuple[int, int, tuple[str, ...]]]:
    """Consecutive stages whose cells read the same, as (first, last, cells): DeepSeek-V3's 16
    stages print as a handful of rows, not 14 copies of one."""
    return _runs([tuple(format_bytes(st[f"{c}_bytes"]) for c in columns) for st in stages])


def held_line(held: Sequence[Held], unit: str) -> str:
    """The stages' holdings (``held_microbatches.held_at_peak``) as one line, consecutive
    stages that hold alike together: ``0: 4, 1: 3`` or, with weight passes deferred,
    ``1-2: 1 + 2``."""
    parts = []
    for first, last, h in _runs(held):
        count = f"{h.forward} + {h.for_weights}" if h.for_weights else str(h.forward)
        parts.append(f"{_stages(first, last)}: {count}")
    weights = " + held for their weight gradients" if any(h.for_weights for h in held) else ""
    return f"activations held where each stage's stash peaks (stage: {unit} stashed by their forward{weights}): {', '.join(parts)}"


def transient_line(stages: list[dict]) -> str | None:
    """Where the activations column peaks on something held beside the stash (``walk_peak``),
    one entry per run of stages alike: ``stages 2-10: a gradient bucket's flat copy or cast
    (6.89 GiB) on 0 B stashed``; None where every stage peaks on its stash alone."""
    peaks = [(st["peak_part"], st["activations_bytes"] - st["peak_stash_bytes"], st["peak_stash_bytes"]) for st in stages]
    shown = [(part, format_bytes(extra), format_bytes(stash)) for part, extra, stash in peaks]
    parts = [
        f"{'stage' if first == last else 'stages'} {_stages(first, last)}: {PEAK_PARTS[part]} ({extra}) on {stash} stashed"
        for first, last, (part, extra, stash) in _runs(shown)
        if part != STASH
    ]
    return f"activations peak with more than the stash — {'; '.join(parts)}" if parts else None


def _bytes_per_param(doc: dict) -> str:
    """Weights, gradients and optimizer bytes over the parameters the most loaded GPU computes
    with (2 / 4 / 12 unsharded in bf16 with fp32 gradients and Adam; less where ZeRO shards)."""
    n, frozen = doc["params_per_gpu"], doc.get("frozen_params_per_gpu", 0.0)
    if n <= 0:
        return "-"
    if frozen:  # LoRA: the weights over everything held, the rest over the trained adapters
        trained = ", ".join(f"{name} {doc[f'{key}_bytes'] / n:.2f} B" for name, key in
                            (("gradients", "grads"), ("optimizer", "optimizer")))  # fmt: skip
        return f"weights {doc['params_bytes'] / (n + frozen):.2f} B; per trained parameter: {trained}"
    return ", ".join(f"{name} {doc[f'{key}_bytes'] / n:.2f} B" for name, key in
                     (("weights", "params"), ("gradients", "grads"), ("optimizer", "optimizer")))  # fmt: skip
