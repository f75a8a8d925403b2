"""Measurements → a hardware profile YAML that ``simcluster.hardware.load_profile`` reads.

Start from ``--base`` (a shipped profile name or a YAML path) and replace its efficiencies by
measured ones, or — without a base — describe the measured machine itself: peak FLOP/s per dtype
= the best measured GEMM, HBM = the best memory-bound kernel at its largest size, NVLink/NIC = the best
measured intra/inter-node all_reduce busbw, their per-hop latencies = the smallest message's
time per ring step if that message is latency-bound. Fields a run cannot measure (e.g. the NIC on one
node) come from :data:`FALLBACK_BASE` and their ``sources:`` entry says so. Pure Python: no torch.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from calibrate.busbw import bus_factor
from calibrate.channels import channel_curve
from calibrate.spread import spread
from simcluster import yamlio
from simcluster.attention_kernels import MEASURED, curves_from_rows
from simcluster.compute import median_curve
from simcluster.errors import UserError
from simcluster.gpu_names import reference_node
from simcluster.hardware import (
    EfficiencySpec,
    load_profile,
    profile_from_dict,
    resolve_profile_path,
)
from simcluster.memory_rate import SOURCE as STREAMING
from simcluster.memory_rate import streaming_rate
from simcluster.output.atomic import atomic_write_text

FALLBACK_BASE = "dgx-h100"
Row = dict[str, Any]


@dataclass
class Measurements:
    """Raw tables in the ``measured:`` layout of docs/architecture.md."""

    gemm: list[Row] = field(default_factory=list)
    attention: list[Row] = field(default_factory=list)
    memory: list[Row] = field(default_factory=list)
    collectives: list[Row] = field(default_factory=list)
    launch_s: float | None = None
    # host seconds of one small torch.nn.Linear forward issued from Python (membw.measure_host_op)
    host_op_s: float | None = None
    # the largest reference GEMM's rate on every rank (calibrate/spread.py), when >= 2 ranks
    gemm_ranks: Row | None = None
    # the reference GEMM alone and under in-flight all-reduces (calibrate/interference.py)
    interference: Row | None = None
    # an all-reduce on communicators held to 1, 2, 4, 8 CTAs (calibrate/channels.py)
    channels: list[Row] = field(default_factory=list)
    # device <-> pinned host copies and one rank's CPU AdamW step (calibrate/hostlink.py)
    host_link: Row | None = None
    host_update: Row | None = None
    # the MoE kernels (calibrate/moe.py, moe_alltoall.py): ``measured.moe``
    moe_grouped_gemm: list[Row] = field(default_factory=list)
    moe_permute: list[Row] = field(default_factory=list)
    moe_router: list[Row] = field(default_factory=list)
    moe_all_to_all: list[Row] = field(default_factory=list)
    moe_count_read_s: float | None = None
    #: what the run could not time, and why (no torch._grouped_mm, one process)
    moe_notes: list[str] = field(default_factory=list)

    def moe(self) -> dict[str, Any]:
        """The ``measured.moe`` map (simcluster/moe_kernels.py reads it); empty when the run
        timed no MoE kernel."""
        out: dict[str, Any] = {
            name: rows
            for name, rows in (
                ("grouped_gemm", self.moe_grouped_gemm),
                ("permute", self.moe_permute),
                ("router", self.moe_router),
                ("all_to_all", self.moe_all_to_all),
            )
            if rows
        }
        if self.moe_count_read_s is not None:
            out["count_read_s"] = self.moe_count_read_s
        if out and self.moe_notes:
            out["notes"] = list(self.moe_notes)
        return out

    def as_dict(self) -> dict[str, Any]:
        """The ``measured:`` map (empty tables left out)."""
        out: dict[str, Any] = {
            name: rows
            for name, rows in (
                ("gemm", self.gemm),
                ("attention", self.attention),
                ("memory", self.memory),
                ("collectives", self.collectives),
                ("channels", self.channels),
            )
            if rows
        }
        if self.launch_s is not None:
            out["kernel_launch_s"] = self.launch_s
        if self.host_op_s is not None:
            out["host_op_s"] = self.host_op_s
        if self.gemm_ranks is not None:
            out["gemm_ranks"] = self.gemm_ranks
        if self.interference is not None:
            out["interference"] = self.interference
        if self.host_link is not None:
            out["host_link"] = self.host_link
        if self.host_update is not None:
            out["host_update"] = self.host_update
        if self.moe():
            out["moe"] = self.moe()
        return out


@dataclass(frozen=True)
class Machine:
    """What the run knows about the device it measured (used when there is no base)."""

    name: str
    memory_bytes: int | None
    gpus_per_node: int
    sm_count: int | None = None  # None: a CPU
    #: CUDA compute capability (torch.cuda.get_device_capability); None on a CPU or ROCm
    compute_capability: float | None = None
    #: host CPU vendor/architecture ('intel', 'amd', 'arm'), None when /proc/cpuinfo says neither
    host_cpu: str | None = None
    #: the node's host memory (rank 0's /proc/meminfo MemTotal), where offloads keep their state
    host_memory_bytes: int | None = None


def raw_profile(name_or_path: str) -> dict[str, Any]:
    """The base profile's YAML mapping; a malformed one is a one-line error naming --base."""
    path = resolve_profile_path(name_or_path, field="--base")
    load_profile(path, field="--base")  # unreadable, not YAML, not a mapping, a bad field
    raw: dict[str, Any] = yamlio.safe_load(path.read_text())  # the loader load_profile just read it with
    return raw


def _note(data: dict[str, Any], path: str, text: str) -> None:
    data.setdefault("sources", {})[path] = text


def _forget(data: dict[str, Any], *paths: str) -> None:
    """Drop the sources of fields taken out of the profile."""
    for path in paths:
        data.get("sources", {}).pop(path, None)


def _holds(data: dict[str, Any], path: str) -> bool:
    """Whether the profile mapping has the dotted field ``path``."""
    node: Any = data
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _write_defaults(data: dict[str, Any]) -> None:
    """Fields the base leaves at the schema's default but gives a source for (the GEMM tile of
    its GPU) are written out, so that the source names a field the profile holds."""
    eff = data.get("efficiency", {})
    if "efficiency.gemm_tile" in data.get("sources", {}) and "gemm_tile" not in eff:
        eff["gemm_tile"] = list(EfficiencySpec.model_fields["gemm_tile"].default)


def _settle_sources(data: dict[str, Any]) -> None:
    """Every ``sources:`` entry names a field the profile holds (a field dropped on the way,
    such as a CPU's SM count, leaves no source behind)."""
    sources = data.get("sources", {})
    for path in [p for p in sources if not _holds(data, p)]:
        del sources[path]


def _within(text: str, raw: float, value: float, cap: str = "1") -> str:
    """A measured fraction's source, saying so when the value written is not the raw one."""
    return text if raw == value else f"{text}; measured {raw:.4g}, written as {value:.4g} (capped at {cap})"


def _describe_sms(data: dict[str, Any], sm_count: int | None) -> None:
    """The measured device's SM count, or, on a CPU, none and nothing that depends on SMs.
    The starting profile's CTA curve is another GPU's: dropped (the run's sweep, if any, sets
    its own)."""
    data["efficiency"].pop("channel_busbw", None)
    _forget(data, "efficiency.channel_busbw")
    if sm_count:
        data["gpu"]["sm_count"] = sm_count
        _note(
            data, "gpu.sm_count", "measured device's multiprocessor count (torch device properties)"
        )
        return
    # a CPU has no SMs: no wave quantisation, and no SMs for collectives to take from compute
    data["gpu"].pop("sm_count", None)
    eff = data["efficiency"]
    eff.pop("gemm_tile", None)  # tiles quantise over SMs: unused without them
    _forget(data, "gpu.sm_count", "efficiency.gemm_tile")
    eff["collective_sms"] = 0
    _note(data, "efficiency.collective_sms", "0: a CPU device has no SMs to lend to communication")


def _describe_generation(data: dict[str, Any], machine: Machine) -> None:
    """The measured device's compute capability and rank 0's host CPU, each dropped (with its
    note) where the run could not tell it."""
    gpu, node = data["gpu"], data["node"]
    # NCCL's protocol caps follow the GPU generation and the host CPU (simcluster/network/
    # nccl_caps.py): the fallback's describe its machine, not this one
    for section, key, value, what in (
        (gpu, "compute_capability", machine.compute_capability, "torch.cuda.get_device_capability"),
        (node, "host_cpu", machine.host_cpu, "/proc/cpuinfo vendor_id, or the machine architecture"),
    ):
        path = f"{'gpu' if section is gpu else 'node'}.{key}"
        if value is None:
            section.pop(key, None)
            _forget(data, path)
        else:
            section[key] = value
            _note(data, path, f"measured: {what} of rank 0 (calibrate)")


def _describe_machine(data: dict[str, Any], m: Measurements, machine: Machine) -> None:
    for key in ("gpu", "node", "fabric", "efficiency"):
        for sub in data.get(key, {}):
            _note(data, f"{key}.{sub}", f"not measured; copied from {FALLBACK_BASE}")
    gpu, node = data["gpu"], data["node"]
    gpu["name"] = machine.name
    _note(data, "gpu.name", "the measured device's name (torch device name / CPU model)")
    if machine.memory_bytes:
        gpu["memory_gib"] = machine.memory_bytes / 2**30
        _note(
            data, "gpu.memory_gib", "device memory (CPU: /proc/meminfo MemTotal / ranks per node)"
        )
    _describe_sms(data, machine.sm_count)
    _describe_generation(data, machine)
    node["gpus_per_node"] = machine.gpus_per_node
    if machine.host_memory_bytes:
        node["host_memory_gib"] = machine.host_memory_bytes / 2**30
        _note(data, "node.host_memory_gib", "measured: /proc/meminfo MemTotal of rank 0's node (calibrate)")
    node["nvls"] = False
    _note(
        data, "node.nvls", "off: torch cannot detect NVLink SHARP; use --base for NVSwitch systems"
    )
    _note(data, "node.gpus_per_node", "ranks per node of the calibration run")
    # the fallback's published attention curves describe its GPU, not the one measured here
    data["efficiency"].pop("attention_kernels", None)
    data["efficiency"].pop("attention_kernel", None)
    _forget(data, "efficiency.attention_kernels", "efficiency.attention_kernel")
    peaks: dict[str, float] = {}
    for row in m.gemm:
        peaks[row["dtype"]] = max(peaks.get(row["dtype"], 0.0), row["tflops"])
    if peaks:
        _set_peaks(data, peaks, machine.name)
    if m.memory:
        gpu["hbm_tbps"] = streaming_rate(m.memory) / 1e12
        _note(data, "gpu.hbm_tbps", f"measured: {STREAMING} (calibrate)")


def _datasheet(name: str) -> tuple[str, dict[str, float]]:
    """(the shipped profile of the GPU ``name`` names, its datasheet peak TFLOP/s by dtype), or
    ("", {}) for a device no shipped profile describes (a CPU, an unknown board)."""
    try:
        shipped = reference_node(name, field="--base")
    except UserError:
        shipped = None
    if shipped is None:
        return "", {}
    return shipped, dict(raw_profile(shipped)["gpu"]["peak_tflops"])


def _set_peaks(data: dict[str, Any], best: dict[str, float], name: str) -> None:
    """``gpu.peak_tflops`` of a profile without --base, for the dtypes timed: the datasheet's
    where a shipped profile describes this GPU, so that MFU and the efficiencies are fractions
    of the peak papers and NVIDIA's tables divide by (PaLM's MFU: theoretical peak), not of the
    best GEMM this run happened to time (an H100's best, ~0.8 of it: 797.5 of 989.4 TFLOP/s
    for 8192^3 in dgx-h100.yaml's sources, would read every MFU 1.25 times too high); the best
    timed rate where none does, or where it beats the datasheet (a board the name does not
    single out)."""
    shipped, sheet = _datasheet(name)
    peaks = {d: sheet[d] if sheet.get(d, 0.0) >= rate else rate for d, rate in best.items()}
    # the precisions not timed keep the datasheet's peak: without it an FP8 run would fall
    # back to BF16's peak and a TF32 one to FP32's (simcluster/compute.py gemm_dtype)
    untimed = sorted(set(sheet) - set(best))
    data["gpu"]["peak_tflops"] = dict(sorted({**{d: sheet[d] for d in untimed}, **peaks}.items()))
    kept = sorted(d for d in peaks if peaks[d] != best[d])
    if not kept and not untimed:
        _note(data, "gpu.peak_tflops", "measured: the best GEMM throughput per dtype (calibrate)")
        return
    measured = sorted(set(peaks) - set(kept))
    said = []
    if kept:
        said.append(
            f"{', '.join(kept)}: the datasheet's, from {shipped} (the shipped profile of '{name}'), "
            "so that MFU is a fraction of it; the best GEMMs timed: "
            + ", ".join(f"{d} {best[d]:.4g}" for d in kept)
            + " TFLOP/s"
        )
    if untimed:
        said.append(f"{', '.join(untimed)}: the datasheet's, from {shipped} (not timed)")
    if measured:
        said.append(f"{', '.join(measured)}: the best GEMM throughput timed (calibrate)")
    _note(data, "gpu.peak_tflops", "; ".join(said))


def _lift_peaks(data: dict[str, Any], m: Measurements, origin: str) -> None:
    """A GEMM timed faster than the base's peak of its dtype lifts that peak to it: a peak is a
    ceiling, and the efficiency curve (a fraction in (0, 1]) could not hold the row otherwise.
    It happens when the base's peak was itself a best timed rate (a CPU or an unlisted board
    calibrated before, on a busier machine), or a datasheet of another board."""
    peaks = data["gpu"]["peak_tflops"]
    best: dict[str, float] = {}
    for row in m.gemm:
        if row["dtype"] in peaks:
            best[row["dtype"]] = max(best.get(row["dtype"], 0.0), row["tflops"])
    lifted = {d: rate for d, rate in sorted(best.items()) if rate > peaks[d]}
    if not lifted:
        return
    said = ", ".join(f"{d} {peaks[d]:.4g} -> {rate:.4g}" for d, rate in lifted.items())
    peaks.update(lifted)
    before = data.get("sources", {}).get("gpu.peak_tflops", f"from {origin}")
    _note(data, "gpu.peak_tflops", f"{before}; lifted to the best GEMM timed where it was faster: {said} (calibrate)")


def _gemm_curve(m: Measurements, peaks: dict[str, float]) -> tuple[str, list[list[float]]] | None:
    """(dtype, curve) of ``efficiency.gemm``: bf16's where timed, else another precision's but
    fp8, whose curve is ``efficiency.gemm_fp8`` (:func:`_dtype_curve`)."""
    dtypes = sorted({r["dtype"] for r in m.gemm if r["dtype"] in peaks and r["dtype"] != "fp8"})
    if not dtypes:
        return None
    ref = "bf16" if "bf16" in dtypes else dtypes[0]
    return ref, _dtype_curve(m, peaks, ref)


def _dtype_curve(m: Measurements, peaks: dict[str, float], dtype: str) -> list[list[float]]:
    """The size curve of the GEMMs timed in ``dtype``: per FLOP count the median rate over
    ``gpu.peak_tflops[dtype]``."""
    points = [(2.0 * r["m"] * r["n"] * r["k"], r["tflops"] / peaks[dtype]) for r in m.gemm if r["dtype"] == dtype]
    return [[f, e] for f, e in median_curve(points)]


def _shape_cube(m: Measurements, ref: str) -> dict[str, Any] | None:
    """The largest cube of sizes whose every M x N x K was timed in ``ref``, as an inline GEMM
    shape table (``{grid, tflops: {ref: [m][n][k]}}``), or None."""
    # plain A @ B rows only: a scenario's GEMM timed in its role's layout is not the grid's
    rates = {(r["m"], r["n"], r["k"]): r["tflops"] for r in m.gemm if r["dtype"] == ref and not r.get("role")}
    sizes = sorted({s[0] for s in rates} & {s[1] for s in rates} & {s[2] for s in rates})
    while len(sizes) >= 2:
        if all((a, b, c) in rates for a in sizes for b in sizes for c in sizes):
            nested = [[[float(f"{rates[(a, b, c)]:.4g}") for c in sizes] for b in sizes] for a in sizes]
            return {"grid": sizes, "tflops": {ref: nested}}
        sizes.pop()  # the sweep's largest squares are timed alone, not in the cube
    return None


def _fraction(value: float) -> float:
    """Efficiencies live in (0, 1]: a measurement above a datasheet peak caps at 1."""
    return min(1.0, max(value, 1e-6))


#: the schema's largest gpu.speed_spread: beyond it a GPU is broken, not slow
SPREAD_CAP = 0.2


def _apply_host(data: dict[str, Any], m: Measurements) -> None:
    """node.host_link_GBps and node.host_memory_GBps from the host-side measurements."""
    node = data["node"]
    if m.host_link is not None:
        r = m.host_link
        node["host_link_GBps"] = min(r["d2h_bytes_per_s"], r["h2d_bytes_per_s"]) / 1e9
        _note(
            data,
            "node.host_link_GBps",
            f"measured: the slower direction of a {r['bytes']} B device <-> pinned host copy (calibrate)",
        )
    if m.host_update is not None:
        node["host_memory_GBps"] = m.host_update["bytes_per_s"] * node["gpus_per_node"] / 1e9
        _note(
            data,
            "node.host_memory_GBps",
            "measured: one rank's CPU AdamW step over fp32 host tensors (7 x 4 B per parameter), "
            "every rank stepping at once, times the ranks per node (calibrate)",
        )


def _apply_compute(data: dict[str, Any], m: Measurements, origin: str) -> None:
    """Compute and host fields from the measurements; ``origin`` is the profile the others
    were copied from (--base, or the fallback)."""
    peaks = data["gpu"]["peak_tflops"]
    _lift_peaks(data, m, origin)
    _apply_gemm(data, m, origin, peaks)
    _apply_attention(data, m, peaks)
    eff = data["efficiency"]
    if m.memory:
        raw = streaming_rate(m.memory) / (data["gpu"]["hbm_tbps"] * 1e12)
        eff["hbm"] = _fraction(raw)
        _note(data, "efficiency.hbm", _within(f"measured: {STREAMING} / gpu.hbm_tbps (calibrate)", raw, eff["hbm"]))
    rates = (m.gemm_ranks or {}).get("tflops_per_rank") or []
    if len(rates) >= 2:
        r = m.gemm_ranks or {}
        raw = spread(rates)
        data["gpu"]["speed_spread"] = min(raw, SPREAD_CAP)
        text = (
            f"measured: std / mean of the {r['m']}x{r['n']}x{r['k']} {r['dtype']} GEMM rate over "
            f"{len(rates)} ranks timed together (calibrate)"
        )
        cap = f"the schema's {SPREAD_CAP}: a GPU that much slower is broken, not slow"
        _note(data, "gpu.speed_spread", _within(text, raw, data["gpu"]["speed_spread"], cap))
    if m.launch_s is not None:
        eff["kernel_launch_us"] = m.launch_s * 1e6
        _note(data, "efficiency.kernel_launch_us", "measured one-element add (calibrate)")
    _apply_host(data, m)
    if m.host_op_s is not None:
        eff["host_op_us"] = m.host_op_s * 1e6
        _note(data, "efficiency.host_op_us", "measured: host time of a small torch.nn.Linear forward issued from Python (calibrate)")
    sms = data["gpu"].get("sm_count")
    if m.interference is not None and sms:
        r = m.interference
        eff["collective_sms"] = collective_sms(r["rate"], sms)
        _note(
            data,
            "efficiency.collective_sms",
            f"measured: the {r['m']}x{r['n']}x{r['k']} {r['dtype']} GEMM ran at {r['rate']:.3f} of "
            f"its speed under {r['bytes']} B all-reduces on {r['gpus']} ranks, read as SMs taken "
            "from compute (calibrate)",
        )
    if m.channels:
        eff["channel_busbw"] = channel_curve(m.channels)
        r = m.channels[0]
        _note(
            data,
            "efficiency.channel_busbw",
            f"measured: {r['bytes']} B all-reduce bus bandwidth on {r['gpus']} ranks of a node, each "
            f"communicator held to {', '.join(str(x['channels']) for x in m.channels)} CTAs "
            "(ncclConfig minCTAs = maxCTAs; calibrate)",
        )


def _apply_gemm(data: dict[str, Any], m: Measurements, origin: str, peaks: dict[str, float]) -> None:
    """efficiency.gemm (with its shape cube) and gemm_fp8 from the timed GEMMs."""
    eff = data["efficiency"]
    timed_fp8 = "fp8" in peaks and any(r["dtype"] == "fp8" for r in m.gemm)
    curve = _gemm_curve(m, peaks)
    if curve:
        eff["gemm"] = curve[1]
        _note(data, "efficiency.gemm", f"measured {curve[0]} GEMMs / gpu.peak_tflops (calibrate)")
        # calibrate heat-soaks the GPU before timing, so the measured curve is a sustained
        # rate already; the base's sustained share stays only on the curves still copied
        share = float(eff.pop("sustained", 1.0))
        # an FP8 table the base timed at the settled clock keeps its own share (1)
        fp8_share = eff.pop("sustained_fp8", None)
        fp8_share, fp8_field = (share, "sustained") if fp8_share is None else (float(fp8_share), "sustained_fp8")
        _forget(data, "efficiency.sustained")
        _forget(data, "efficiency.sustained_fp8")
        if fp8_share != 1.0 and eff.get("gemm_fp8") and not timed_fp8:
            eff["gemm_fp8"] = [[f, e * fp8_share] for f, e in eff["gemm_fp8"]]
            _note(
                data,
                "efficiency.gemm_fp8",
                f"not measured: {origin}'s curve times its sustained share {fp8_share} (efficiency."
                f"{fp8_field}, left out: the measured efficiency.gemm is a sustained rate already)",
            )
        # the base's shape table describes its GPU against its own size curve, which the
        # measured one replaces: this machine's cube, if timed, takes its place
        if eff.pop("gemm_shapes", None) is not None:
            data.get("sources", {}).pop("efficiency.gemm_shapes", None)
        cube = _shape_cube(m, curve[0])
        if cube:
            eff["gemm_shapes"] = cube
            _note(
                data,
                "efficiency.gemm_shapes",
                f"measured {curve[0]} GEMMs on every M x N x K of {cube['grid']}, TFLOP/s (calibrate)",
            )
    if timed_fp8:
        eff["gemm_fp8"] = _dtype_curve(m, peaks, "fp8")
        _note(
            data,
            "efficiency.gemm_fp8",
            "measured fp8 GEMMs (torch._scaled_mm: E4M3 operands, per-tensor scales, a bf16 "
            "result) / gpu.peak_tflops (calibrate)",
        )


def _apply_attention(data: dict[str, Any], m: Measurements, peaks: dict[str, float]) -> None:
    """efficiency.attention_fwd/bwd and the measured attention kernel from the timed SDPA."""
    eff = data["efficiency"]
    att = [r for r in m.attention if r["dtype"] in peaks]
    if att:
        for key, col in (("attention_fwd", "fwd_tflops"), ("attention_bwd", "bwd_tflops")):
            raw = statistics.median(r[col] / peaks[r["dtype"]] for r in att)
            eff[key] = _fraction(raw)
            text = "measured: median causal GQA SDPA rate / gpu.peak_tflops (calibrate)"
            _note(data, f"efficiency.{key}", _within(text, raw, eff[key]))
        # The rate by head dimension and sequence length, not one number: short sequences and
        # small heads run far below a kernel's best (FlashAttention-3 paper, Fig. 5/6).
        curves = curves_from_rows(att)
        if curves:
            eff.setdefault("attention_kernels", {})[MEASURED] = [
                c.model_dump(exclude_none=True, mode="json") for c in curves
            ]
            eff["attention_kernel"] = MEASURED
            _note(
                data,
                "efficiency.attention_kernel",
                f"measured: this run's SDPA curves (efficiency.attention_kernels.{MEASURED}) are "
                "the profile's default kernel (calibrate)",
            )
            _note(
                data,
                f"efficiency.attention_kernels.{MEASURED}",
                "measured SDPA forward/backward TFLOP/s per head dimension and sequence length "
                "(calibrate; the default kernel of this profile, a scenario may name another)",
            )


def collective_sms(rate: float, sm_count: int) -> int:
    """SMs a collective takes from compute, as the simulator's rule reads a measured rate
    (``simcluster/engine/interference.py``): compute next to an in-flight collective runs at
    (sm_count - collective_sms) / sm_count of its speed."""
    taken = round(sm_count * (1.0 - min(1.0, max(rate, 0.0))))
    return max(0, min(sm_count - 1, taken))


# Sequential ring steps of each op over n ranks: the small-message time divided by this is the
# per-hop latency (NCCL ring algorithms; broadcast/send_recv pipeline through one hop).
RING_STEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "all_gather": lambda n: n - 1,
    "reduce_scatter": lambda n: n - 1,
    "all_to_all": lambda n: n - 1,
    "broadcast": lambda n: 1,
    "send_recv": lambda n: 1,
}


# A row is latency-bound when moving its bytes at the best measured busbw would take at most this
# share of its time; only such a row's time says what one ring step costs (a 32 MiB all-reduce,
# nccl-tests' -b in many scripts, is mostly transfer: its time per step is no latency).
LATENCY_BOUND = 0.1


@dataclass(frozen=True)
class _Link:
    """What a set of collective rows says of a link: its best busbw (``best`` row) and, if the
    smallest row is latency-bound, the time per ring step (``small`` row)."""

    busbw: float  # B/s
    best: Row
    small: Row
    latency: float | None  # s per ring step; None: the smallest row is bandwidth-bound


def _link(rows: list[Row]) -> _Link | None:
    """The link all_reduce rows (else rows of any op) with >1 rank describe."""
    rows = [r for r in rows if r["gpus"] > 1]
    chosen = [r for r in rows if r["op"] == "all_reduce"] or rows
    if not chosen:
        return None
    best = max(chosen, key=lambda r: r["busbw_GBps"])
    small = min(chosen, key=lambda r: (r["bytes"], r["time_s"]))
    bw = best["busbw_GBps"] * 1e9
    transfer = small["bytes"] * bus_factor(small["op"], small["gpus"]) / bw
    steps = RING_STEPS[small["op"]](small["gpus"])
    latency = small["time_s"] / steps if transfer <= LATENCY_BOUND * small["time_s"] else None
    return _Link(bw, best, small, latency)


def _row_text(row: Row) -> str:
    nodes = int(row.get("nodes") or 1)
    where = f"{row['gpus']} GPUs" + (f", {nodes} nodes" if nodes > 1 else "")
    return f"{row['op']} of {row['bytes']} B on {where}"


def _latency_notes(data: dict[str, Any], key: str, link: _Link, origin: str, described: bool) -> None:
    """Set ``key`` (a per-hop latency) from the smallest row if it is latency-bound, else keep the
    base's value and say why in its source if the base is a stand-in."""
    small = link.small
    if link.latency is not None:
        data["node"][key.split(".")[1]] = link.latency * 1e6
        steps = RING_STEPS[small["op"]](small["gpus"])
        _note(
            data,
            key,
            f"measured ({origin}): the smallest {_row_text(small)} took "
            f"{small['time_s'] * 1e6:.2f} us, over its {steps} ring steps",
        )
    elif described:
        _note(
            data,
            key,
            f"not measured: the smallest {_row_text(small)} is bandwidth-bound; copied from "
            f"{FALLBACK_BASE}",
        )


def _apply_network(data: dict[str, Any], m: Measurements, described: bool, origin: str) -> None:
    node, eff = data["node"], data["efficiency"]
    cols = m.collectives
    # One node: 'world' is intra-node. Several: 'world' crosses nodes and the NIC limits it.
    intra = _link([r for r in cols if r["scope"] == "intra"]) or _link(
        [r for r in cols if r["scope"] == "world" and r["nodes"] == 1]
    )
    inter = _link([r for r in cols if r["scope"] == "inter"]) or _link(
        [r for r in cols if r["scope"] == "world" and r["nodes"] > 1]
    )
    if intra:
        best = f"the best intra-node busbw, {intra.busbw / 1e9:.2f} GB/s ({_row_text(intra.best)})"
        if described:
            node["nvlink_GBps"], eff["nvlink"] = intra.busbw / 1e9, 1.0
            _note(data, "node.nvlink_GBps", f"measured ({origin}): {best}")
            _note(data, "efficiency.nvlink", f"measured ({origin}): 1, node.nvlink_GBps being the measured busbw itself")
        else:
            line = node["nvlink_GBps"]
            eff["nvlink"] = _fraction(intra.busbw / (line * 1e9))
            capped = ", capped at 1" if intra.busbw > line * 1e9 else ""
            _note(data, "efficiency.nvlink", f"measured ({origin}): {best} / node.nvlink_GBps {line:g}{capped}")
        _latency_notes(data, "node.nvlink_latency_us", intra, origin, described)
    if inter:
        best = f"the best inter-node busbw, {inter.busbw / 1e9:.2f} GB/s per GPU ({_row_text(inter.best)})"
        if described:
            node["nics_per_node"] = node["gpus_per_node"]  # assumed rail-optimized: a NIC per GPU
            _note(data, "node.nics_per_node", "ASSUMPTION, not measured: one NIC per GPU (rail-optimized)")
        # Every local rank runs its inter-node ring at once, sharing the node's NICs.
        gpn, nics = node["gpus_per_node"], node["nics_per_node"]
        per_nic = inter.busbw * gpn / nics * 8 / 1e9  # Gb/s
        share = f"{best} x {gpn} GPUs / {nics} NICs per node = {per_nic:.1f} Gb/s per NIC"
        if described:
            node["nic_gbps"], eff["nic"] = per_nic, 1.0
            _note(data, "node.nic_gbps", f"measured ({origin}): {share}")
            _note(data, "efficiency.nic", f"measured ({origin}): 1, node.nic_gbps being the measured rate itself")
        else:
            line = node["nic_gbps"]
            eff["nic"] = _fraction(per_nic / line)
            capped = ", capped at 1" if per_nic > line else ""
            _note(data, "efficiency.nic", f"measured ({origin}): {share}, / node.nic_gbps {line:g}{capped}")
        _latency_notes(data, "node.nic_latency_us", inter, origin, described)


def _fabric(row: Row) -> str:
    """Which fabric a collective row describes: inside one node, or across nodes."""
    return "single-node" if int(row.get("nodes") or 1) == 1 else "multi-node"


def _which(tables: set[tuple[str, str]]) -> str:
    """'single-node all_reduce and send_recv, multi-node all_reduce': the (fabric, op) tables."""
    fabrics = sorted({fabric for fabric, _ in tables})
    return ", ".join(
        f"{fabric} {' and '.join(sorted(op for f, op in tables if f == fabric))}" for fabric in fabrics
    )


def _merged_measured(
    data: dict[str, Any], m: Measurements, base: str | None, origin: str = "calibrate"
) -> dict[str, Any]:
    """The profile's ``measured:`` map: this run's tables, plus what the base measured that this
    run did not (a whole table, or the collective rows of an op on a fabric it did not reach).

    A one-node calibration on ``--base aws-p5`` keeps p5's published multi-node tables, whose
    mid-size collapse the network model alone lacks; its own rows replace p5's single-node ones.
    An import of all_reduce and all_gather logs on a calibrated base keeps the base's
    reduce_scatter, all_to_all and send_recv rows of the same fabric (the simulator would
    otherwise borrow the all-reduce's ratio for them, or model them alone).
    Without a base the fallback's tables describe another machine and are dropped.
    """
    sources = data.setdefault("sources", {})
    base_note = sources.pop("measured.collectives", None)
    old: dict[str, Any] = dict(data.get("measured") or {}) if base else {}
    out = m.as_dict()
    how = "measured by this run (provenance)" if origin == "calibrate" else f"from {origin} (provenance.source)"
    for key in out:
        if key != "collectives":
            # this run's table replaces the base's, and so does its source (a table is a number
            # like any other: simcluster notes one without a source, profile_sources.py)
            for stale in [s for s in sources if s.startswith(f"measured.{key}.")]:
                del sources[stale]
            sources[f"measured.{key}"] = f"{key} {how}"
    for key, value in old.items():
        if key != "collectives":
            out.setdefault(key, value)
    measured = {(_fabric(r), r["op"]) for r in m.collectives}
    kept = [r for r in old.get("collectives") or [] if (_fabric(r), r["op"]) not in measured]
    notes = []
    if m.collectives:
        notes.append(f"{_which(measured)} rows {how}")
    if kept:
        which = _which({(_fabric(r), r["op"]) for r in kept})
        record = " (provenance.base)" if data.get("provenance") else ""
        notes.append(f"{which} rows kept from {base}{record}: {base_note or 'no source given'}")
        out["collectives"] = m.collectives + kept
    if notes:
        sources["measured.collectives"] = "; ".join(notes)
    return out


def build_profile(
    m: Measurements,
    provenance: dict[str, Any],
    base: str | None,
    machine: Machine | None,
    origin: str = "calibrate",
) -> dict[str, Any]:
    """The profile dict; validated by ``profile_from_dict`` (raises UserError if inconsistent).
    ``origin`` names what took the measurements in the ``sources:`` notes."""
    described = base is None
    base_name = base or FALLBACK_BASE
    data = copy.deepcopy(raw_profile(base_name))
    _write_defaults(data)
    if described:
        if machine is None:
            raise ValueError("a profile without --base needs the measured machine")
        _describe_machine(data, m, machine)
        data["name"] = "calibrated-" + "-".join(machine.name.lower().split())[:60]
        data["description"] = f"calibrated on {machine.name} ({provenance.get('backend')})"
    else:  # once: a calibrated base calibrated again is not '...-calibrated-calibrated'
        name = str(data["name"])
        data["name"] = name if name.endswith("-calibrated") or name.startswith("calibrated-") else f"{name}-calibrated"
    _apply_compute(data, m, base_name)
    _apply_network(data, m, described, origin)
    data["measured"] = _merged_measured(data, m, base, origin)
    if m.moe():
        fp8 = any(r["dtype"] == "fp8" for r in m.moe_grouped_gemm)
        _note(
            data,
            "measured.moe",
            "measured: grouped expert GEMMs (per-expert torch.mm loop and torch._grouped_mm"
            + (", and in fp8 a loop of torch._scaled_mm over rows padded to 16" if fp8 else "")
            + ", each over the sum of its GEMMs timed singly), token permute/unpermute, router softmax + "
            "top-k, the counts' read-back and the uneven all-to-all (calibrate)",
        )
    _settle_sources(data)
    # a calibrated or imported base keeps its own record: its kernels and tables stay in the
    # profile, and so does what measured them
    earlier = data.get("provenance") if base else None
    data["provenance"] = provenance | ({"base": earlier} if earlier else {})
    profile_from_dict(data, field="--out", origin="calibrated profile")
    return data


class _Dumper(yaml.SafeDumper):
    """Block style for sections, one flow-style line per table row or number pair."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(not isinstance(v, (dict, list)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=False)


class _Row(dict):  # type: ignore[type-arg]
    """A table row: written on one line."""


def _represent_row(dumper: yaml.SafeDumper, data: _Row) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=True)


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(dict, _represent_dict)
_Dumper.add_representer(_Row, _represent_row)


def _rows_inline(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rows_inline(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_Row(v) if isinstance(v, dict) else _rows_inline(v) for v in value]
    return value


def write_yaml_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write YAML so readers never see a half-written file (temp file + fsync + rename); an
    unwritable path (a directory, a read-only or missing parent) is a one-line ``--out`` error."""
    text = yaml.dump(_rows_inline(data), Dumper=_Dumper, sort_keys=False, width=120)
    atomic_write_text(path, text)


def partial_path(out: Path) -> Path:
    """``p.yaml`` → ``p.partial.yaml``: where measurements so far are kept on failure."""
    return out.with_name(f"{out.stem}.partial{out.suffix or '.yaml'}")
