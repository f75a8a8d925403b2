"""``simcluster list``: shipped scenarios, hardware profiles, model presets, schedules, training
frameworks (``framework:``), the styles of memory-bound work (``training.elementwise``), the
context-parallel attention algorithms (``parallel.cp_comm``), TransformerEngine userbuffers
presets (``overlap.tp_comm_cfg``), the training precisions with the profiles that run them, and
every scenario field (``fields``, from the schema)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from simcluster.errors import UserError
from simcluster.hardware import HardwareProfile, shipped_profiles
from simcluster.model import preset_names
from simcluster.scenario import shipped_scenarios

NAME = "list"

#: training.precision -> what its GEMMs run as (the profile's peak_tflops key is PEAK_KEYS')
PRECISIONS = {
    "fp32": "fp32 training, GEMMs on TF32 tensor cores where the GPU has them",
    "bf16": "bf16 mixed precision (fp32 master weights)",
    "fp16": "fp16 mixed precision with loss scaling",
    "fp8": "TransformerEngine FP8 GEMMs (training.fp8_recipe: delayed, current, block = MXFP8 / 1x128)",
    "nvfp4": "TransformerEngine NVFP4 GEMMs (Blackwell), attention and the LM head at 16 bits",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "what", nargs="?", choices=[
            "scenarios", "hardware", "presets", "schedules", "frameworks", "elementwise", "cp", "userbuffers",
            "precisions", "fields",
        ],  # fmt: skip
    )
    parser.add_argument(
        "profiles", nargs="*", metavar="PROFILE|SECTION",
        help="with 'hardware': also these profiles (a calibrated YAML's path), beside the shipped ones; "
        "with 'fields': only these sections or keys (parallel, dp.bucket_mb)",
    )  # fmt: skip


def _names() -> dict[str, list[str]]:
    """Every kind's names, for the bare ``simcluster list``."""
    from simcluster.frameworks import FRAMEWORKS
    from simcluster.parallelism import context
    from simcluster.parallelism.elementwise import STYLES
    from simcluster.schedules import SCHEDULES
    from simcluster.userbuffers import PRESETS

    return {
        "scenarios": shipped_scenarios(),
        "hardware": shipped_profiles(),
        "presets": preset_names(),
        "schedules": sorted(SCHEDULES),
        "frameworks": sorted(FRAMEWORKS),
        "elementwise": list(STYLES),
        "cp": list(context.algorithms()),
        "userbuffers": list(PRESETS),
        "precisions": list(PRECISIONS),
    }


def run(args: argparse.Namespace) -> int:
    if args.what == "fields":  # every key a scenario may write, from the schema
        _print_fields(args.profiles)
        return 0
    if args.profiles and args.what != "hardware":
        raise UserError("PROFILE", f"profiles are listed with 'simcluster list hardware {' '.join(args.profiles)}'")
    if args.what == "hardware":  # one row each: what a buyer compares
        _print_hardware(args.profiles)
        return 0
    detailed = _DETAILED.get(args.what)
    if detailed is not None:
        detailed()
        return 0
    for what, names in _names().items():
        if args.what in (None, what):
            print(f"{what}: {', '.join(names)}")
    return 0


def _print_fields(wanted: list[str]) -> None:
    """Each scenario key with its values and default, its meaning wrapped under it, by section
    (``simcluster/field_reference.py``; docs/scenario-fields.md is the same as a table)."""
    import shutil
    import textwrap

    from simcluster.field_reference import field_docs, select

    docs = select(field_docs(), wanted)
    width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 120))
    section = None
    for doc in docs:
        if doc.section != section:
            if section is not None:
                print()  # a blank line between sections
            section = doc.section
            print(f"{section}:")
        default = "required" if doc.default == "required" else f"default {doc.default}"
        print(f"  {doc.key}  {doc.kind}, {default}")
        also = f" (also read as: {', '.join(doc.aliases)})" if doc.aliases else ""
        for line in textwrap.wrap(doc.description + also, width=width - 6):
            print(f"      {line}")


def _print_schedules() -> None:
    """One line each: what the schedule is (its class docstring's first line)."""
    from simcluster.schedules import SCHEDULES

    width = max(map(len, SCHEDULES))
    for name in sorted(SCHEDULES):
        doc = (type(SCHEDULES[name]).__doc__ or "").strip().splitlines()
        print(f"{name:<{width}}  {doc[0] if doc else ''}")


def _print_cp() -> None:
    """One line each: how the context-parallel algorithm shares K and V."""
    from simcluster.parallelism import context

    width = max(map(len, context.algorithms()))
    for name in context.algorithms():
        print(f"{name:<{width}}  {context.describe(name)}")


def _print_frameworks() -> None:
    """One line each: what the framework does, and its releases that ran differently."""
    from simcluster.framework_releases import describe as describe_releases
    from simcluster.frameworks import FRAMEWORKS

    width = max(map(len, FRAMEWORKS))
    for name in sorted(FRAMEWORKS):
        entry = FRAMEWORKS[name]
        runs = f"; pipeline schedules: {', '.join(entry.schedules)}" if entry.schedules else ""
        print(f"{name:<{width}}  {entry.summary}{describe_releases(name)}{runs}")


def _print_scenarios() -> None:
    """Each shipped scenario with its ``description:``, which says the model, cluster and
    layout its name abbreviates (``mpt-7b-8xa100-fsdp1``: as llm-foundry trains it)."""
    from simcluster.scenario.loading import read_scenario_file

    names = shipped_scenarios()
    width = max(map(len, names))
    for name in names:
        data, _ = read_scenario_file(name)
        description = data.get("description", "") if isinstance(data, dict) else ""
        print(f"{name:<{width}}  {' '.join(str(description).split())}".rstrip())


def _billions(count: float) -> str:
    """A parameter count as model cards write it: 8.03B, 70.6B, 1,026B."""
    billions = count / 1e9
    return f"{billions:.2f}B" if billions < 10 else f"{billions:.1f}B" if billions < 1000 else f"{billions:,.0f}B"


def _print_presets() -> None:
    """Each model preset with its parameters (active ones for a mixture of experts: what a
    token's FLOPs scale with) and shape, so a name can be checked against its model card."""
    from simcluster.model import load_preset

    names = preset_names()
    width = max(map(len, names))
    for name in names:
        m = load_preset(name)
        total, active = m.params_total(), m.params_active()
        size = _billions(total) + (f" ({_billions(active)} active)" if active != total else "")
        experts = f", {m.experts} experts top-{m.top_k}" if m.experts else ""
        kv = f" ({m.kv_heads} KV)" if m.kv_heads != m.heads else ""
        print(f"{name:<{width}}  {size}: {m.layers} layers, hidden {m.hidden}, {m.heads} heads{kv}{experts}")


def _print_precisions() -> None:
    from simcluster.hardware import PEAK_KEYS, load_profile

    profiles = {name: load_profile(name) for name in shipped_profiles()}
    width = max(map(len, PRECISIONS))
    for name, what in PRECISIONS.items():
        key = PEAK_KEYS.get(name, name)
        # fp32 runs everywhere: on TF32 tensor cores where the GPU has them, else fp32 units
        have = [p for p, prof in profiles.items() if name == "fp32" or key in prof.gpu.peak_tflops]
        where = "every profile" if len(have) == len(profiles) else ", ".join(have)
        print(f"{name:<{width}}  {what}; {where}")


def _num(x: float) -> str:
    """A profile's figure as its datasheet writes it (989.4, 3.35, 1978.9), and a measured one
    to four significant figures: a calibrated CPU's 11.7703 GiB and 0.0139924 TB/s are
    measurements, not more digits of precision."""
    return f"{x:g}" if x >= 100 else f"{x:.4g}"


def _rate(tflops: float) -> str:
    """A sustained GEMM rate: whole TFLOP/s on a GPU, three significant figures below 10 (a
    calibrated CPU's 0.153 read '0')."""
    return f"{tflops:.0f}" if tflops >= 10 else f"{tflops:.3g}"


def _scale_up(p: HardwareProfile) -> str:
    node = p.node
    if node.scale_up == "mesh":
        links = node.gpus_per_node - 1
        return f"mesh {links}x{_num(node.nvlink_GBps / links)} GB/s"
    domain = node.nvlink_domain or node.gpus_per_node
    nvls = " NVLS" if node.nvls else ""
    return f"switch {_num(node.nvlink_GBps)} GB/s{nvls}, {domain} GPUs"


#: a GEMM large enough to sit at a profile's plateau (tile quantisation exact on every GPU here)
_LARGE_GEMM = 16384


def _peak_and_gemm(p: HardwareProfile, precision: str, key: str) -> str:
    """'peak (large GEMM)' TFLOP/s: the datasheet figure and what the profile gives a 16384^3
    GEMM at the rate it sustains, or '-' where the GPU has no such tensor-core peak."""
    from simcluster.compute import KernelModel

    peak = p.gpu.peak_tflops.get(key)
    if peak is None or p.gemm_rate_missing(precision):
        return "-" if peak is None else _num(peak)
    km = KernelModel(p, precision)
    flops = 2.0 * _LARGE_GEMM**3
    return f"{_num(peak)} ({_rate(flops / km.gemm(_LARGE_GEMM, _LARGE_GEMM, _LARGE_GEMM) / 1e12)})"


def _16bit(p: HardwareProfile) -> str:
    """The BF16 column; a GPU without BF16 (V100) shows its FP16 tensor cores, marked so."""
    if "bf16" in p.gpu.peak_tflops or "fp16" not in p.gpu.peak_tflops:
        return _peak_and_gemm(p, "bf16", "bf16")
    return _peak_and_gemm(p, "fp16", "fp16") + " fp16"


def _attention(p: HardwareProfile) -> str:
    """The fused-attention kernels a profile has curves for (training.attention_kernel), its
    default marked *, an FP8 twin (training.fp8_attention) as +fp8: 'cudnn*+fp8, cudnn-9.13+fp8'."""
    from simcluster.fp8_attention import SUFFIX

    kernels = p.attention_kernels
    default = p.attention_kernel_in_use(None)
    names = [
        f"{k}{'*' if k == default else ''}{'+fp8' if k + SUFFIX in kernels else ''}"
        for k in sorted(kernels, key=lambda k: (k != default, k))
        if not k.endswith(SUFFIX)
    ]
    return ", ".join(names) or "-"


_ATTENTION_NOTE = (
    "attention kernels with curves (training.attention_kernel; * the profile's default, +fp8: FP8 curves "
    "too, training.fp8_attention; a release in the name, cudnn-9.13, is that cuDNN's kernels):"
)

#: the hardware table's columns; a terminal narrower than the table lists each profile as a block
_HW_COLUMNS = ("profile", "GPU", "memory GiB", "HBM TB/s", "BF16 TFLOP/s", "FP8 TFLOP/s", "FP4 TFLOP/s",
               "scale-up", "scale-out", "measured")  # fmt: skip


def _hardware_row(name: str, p: HardwareProfile, extra: list[str]) -> tuple[str, ...]:
    """One profile's cells in :data:`_HW_COLUMNS` order (``p`` the profile ``name`` loads)."""
    shown = f"{p.name} ({Path(name).name})" if name in extra else name
    nics = f"{p.node.nics_per_node}x{_num(p.node.nic_gbps)} Gb/s per {p.node.gpus_per_node} GPUs"
    # a table counts its rows; a calibrated profile's scalars (launch and host op times)
    # and host figures are named alone
    measured = ", ".join(f"{k} {len(v)}" if isinstance(v, list) else k for k, v in sorted(p.measured.items()) if v)
    return (
        shown, p.gpu.name, _num(p.gpu.memory_gib), _num(p.gpu.hbm_tbps), _16bit(p),
        *(_peak_and_gemm(p, prec, key) for prec, key in (("fp8", "fp8"), ("nvfp4", "fp4"))),
        _scale_up(p), nics, measured or "-",
    )  # fmt: skip


def _hardware_block(row: tuple[str, ...], attention: str) -> str:
    """A profile as a few lines, for a terminal too narrow for the table: the table cut its
    profile names to 'alps-g…' and its figures to '1978…' below about 170 columns."""
    name, gpu, mem, hbm, bf16, fp8, fp4, up, out, measured = row
    # a GPU without BF16 (V100) shows its FP16 tensor cores in the BF16 column, marked ' fp16'
    first = ("FP16", bf16.removesuffix(" fp16")) if bf16.endswith(" fp16") else ("BF16", bf16)
    rates = ", ".join(f"{label} {v}" for label, v in (first, ("FP8", fp8), ("FP4", fp4)) if v != "-")
    return (
        f"[bold]{name}[/]  {gpu}\n  memory {mem} GiB, HBM {hbm} TB/s\n  TFLOP/s: {rates}\n"
        f"  scale-up: {up}; scale-out: {out}\n  attention kernels: {attention}\n  measured: {measured}"
    )


def _print_hardware(extra: list[str] | None = None) -> None:
    """The shipped profiles side by side (per GPU; bandwidths per direction), then ``extra``
    (paths of the user's profiles: a calibrated one beside the reference it was measured for);
    one block per profile where the terminal is narrower than the table."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from simcluster.commands.console import stdout_console
    from simcluster.hardware import load_profile

    title = (
        "hardware profiles (per GPU, bandwidth per direction; TFLOP/s: datasheet peak "
        f"(a {_LARGE_GEMM}^3 GEMM as the profile runs it, at the rate it sustains))"
    )
    names = [*shipped_profiles(), *(extra or [])]
    profiles = [load_profile(name, field="PROFILE") for name in names]
    rows = [_hardware_row(name, p, extra or []) for name, p in zip(names, profiles, strict=True)]
    kernels = [_attention(p) for p in profiles]
    table = Table(title=title)
    for col in _HW_COLUMNS:
        table.add_column(col, justify="right" if "/s" in col or "GiB" in col else "left")
    for row in rows:
        table.add_row(*row)
    console = stdout_console()
    with console.capture() as drawn:
        console.print(table)
    text = drawn.get()
    # Rich shrinks a table wider than the terminal by wrapping cells and then by cutting words
    # ('alps-g…', '1978…'), which no measurement of it predicts: drawn with a cut, it gives way
    if "…" not in text and max(Text.from_ansi(line).cell_len for line in text.splitlines()) <= console.width:
        console.out(text, end="", highlight=False)
        console.print(escape(_ATTENTION_NOTE), highlight=False)
        width = max(len(row[0]) for row in rows)
        for row, attention in zip(rows, kernels, strict=True):
            console.print(escape(f"  {row[0]:<{width}}  {attention}"), highlight=False)
        return
    console.print(escape(title), highlight=False)
    for row, attention in zip(rows, kernels, strict=True):
        console.print(_hardware_block(tuple(escape(cell) for cell in row), escape(attention)), highlight=False)


def _print_userbuffers() -> None:
    """Each preset's overlaps in TransformerEngine's terms (num_sm, m = set_sm_margin)."""
    from simcluster.userbuffers import PRESETS, UbOverlap

    def cell(o: UbOverlap) -> str:
        kind = {"ring_exchange": "ring", "pipeline": "pipe", "bulk": "bulk", "nccl": "nccl"}[o.method]
        return f"{kind} {o.num_sm}{'m' if o.set_sm_margin else ''}"

    names = ("proj_fprop", "fc2_fprop", "qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")
    width = max(map(len, PRESETS))
    print(f"{'preset':<{width}}  " + "  ".join(f"{n:<10}" for n in names) + "  (ring exchanges elsewhere; m: set_sm_margin)")
    for name, (source, cfg) in PRESETS.items():
        print(f"{name:<{width}}  " + "  ".join(f"{cell(cfg[n]):<10}" for n in names) + f"  {source}")


#: the kinds listed one line each with what they are (the others are listed by name); hardware
#: takes the extra profiles and is listed apart
_DETAILED: dict[str | None, Callable[[], None]] = {
    "precisions": _print_precisions,  # what it runs as, and which profiles have its peak
    "schedules": _print_schedules,
    "presets": _print_presets,  # the model's size and shape
    "scenarios": _print_scenarios,  # what the scenario runs (its description)
    "cp": _print_cp,
    "userbuffers": _print_userbuffers,  # the SMs each overlap takes, and the source
    "frameworks": _print_frameworks,
}
