"""A validation case's ``measured:`` mapping read into one metric and its value.

The canonical metrics are :data:`METRICS`. Papers quote the same figures in other units, so a
few spellings are read as their canonical metric, each conversion exact: ``mfu_pct`` (percent),
``tflops_per_gpu`` (TFLOP/s per GPU; for a fully recomputed run validate compares such a
figure, not headed as model FLOPs, in the hardware count its sources use), ``tokens_per_s_per_gpu``
(times the scenario's GPU count), ``samples_per_s`` (sequences, times its sequence length) and
``step_time_ms``, and the names papers' tables give them (``iteration_time_s``,
``tokens_per_sec``, ``samples_per_second``, ``tflops``, ``tgs`` ...), headings written as
tables print them (``Tokens / sec / GPU``, ``MFU (%)``) included. ``hfu``, ``hfu_pct`` and
``hardware_tflops_per_gpu`` count the FLOPs recomputation adds: they are compared as ``mfu`` or
``model_tflops_per_gpu`` in the hardware count (``flops: hardware``). An ``mfu`` above 1 cannot be a fraction
of peak, so one up to 100 is read as percent. A case that gives several figures is compared on
the first one it lists; the others are kept in the note, not silently dropped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from simcluster.errors import UserError, did_you_mean
from simcluster.spellings import raw_precision

METRICS = ("step_time_s", "tokens_per_s", "model_tflops_per_gpu", "mfu")

#: other spellings: name -> (canonical metric, factor: a number, or the scenario field(s) it is
#: multiplied by, joined by '*')
ALIASES: dict[str, tuple[str, float | str]] = {
    "mfu_pct": ("mfu", 0.01),
    "tflops_per_gpu": ("model_tflops_per_gpu", 1.0),
    "tokens_per_s_per_gpu": ("tokens_per_s", "cluster.gpus"),
    "samples_per_s": ("tokens_per_s", "training.seq_len"),
    "step_time_ms": ("step_time_s", 1e-3),
    # the same figures as papers' tables and logs head them
    "iteration_time_s": ("step_time_s", 1.0),
    "iteration_time_ms": ("step_time_s", 1e-3),
    "seconds_per_step": ("step_time_s", 1.0),
    "seconds_per_iteration": ("step_time_s", 1.0),
    "tokens_per_sec": ("tokens_per_s", 1.0),
    "tokens_per_second": ("tokens_per_s", 1.0),
    "tokens_per_sec_per_gpu": ("tokens_per_s", "cluster.gpus"),
    "tokens_per_second_per_gpu": ("tokens_per_s", "cluster.gpus"),
    "samples_per_sec": ("tokens_per_s", "training.seq_len"),
    "samples_per_second": ("tokens_per_s", "training.seq_len"),
    "sequences_per_s": ("tokens_per_s", "training.seq_len"),
    # per GPU (the Zero Bubble paper's Table 4 "samples per GPU per second")
    "samples_per_s_per_gpu": ("tokens_per_s", "training.seq_len*cluster.gpus"),
    "samples_per_gpu_s": ("tokens_per_s", "training.seq_len*cluster.gpus"),
    "samples_per_sec_per_gpu": ("tokens_per_s", "training.seq_len*cluster.gpus"),
    "model_tflops_per_s_per_gpu": ("model_tflops_per_gpu", 1.0),
    # TFLOP/s in a training log or a paper's table is per GPU (an aggregate is quoted in PFLOP/s)
    "tflops": ("model_tflops_per_gpu", 1.0),
    "model_tflops": ("model_tflops_per_gpu", 1.0),
    "tflops_per_s_per_gpu": ("model_tflops_per_gpu", 1.0),
    "model_tflop_per_sec_per_gpu": ("model_tflops_per_gpu", 1.0),
    "tflop_per_s_per_gpu": ("model_tflops_per_gpu", 1.0),
    # tokens per GPU per second (TGS, InternEvo's and others' heading; torchtitan's per-rank wps)
    "tgs": ("tokens_per_s", "cluster.gpus"),
    "wps": ("tokens_per_s", "cluster.gpus"),
    # hardware FLOPs (recomputation included): compared as the flops: hardware count
    # a share of the peak with no count named (Narayanan et al. 2021's "% of theoretical peak")
    "pct_peak": ("mfu", 0.01), "percent_of_peak": ("mfu", 0.01), "pct_of_peak": ("mfu", 0.01),
    "hfu": ("mfu", 1.0),
    "hfu_pct": ("mfu", 0.01),
    "hardware_tflops_per_gpu": ("model_tflops_per_gpu", 1.0),
    # more headings as logs and tables print them: Megatron-LM's "elapsed time per iteration
    # (ms)", NeMo AutoModel's "Time per Global Step (s)", llm-foundry's "Throughput (T/s)",
    # "(T/s/GPU)" and "(S/s)" (T tokens, S samples), torchtitan's "TPS/GPU"
    "elapsed_time_per_iteration_ms": ("step_time_s", 1e-3),
    "time_per_global_step_s": ("step_time_s", 1.0),
    "time_per_step_s": ("step_time_s", 1.0), "step_time_sec": ("step_time_s", 1.0),
    "step_time_seconds": ("step_time_s", 1.0), "iteration_time_sec": ("step_time_s", 1.0),
    "iter_time_s": ("step_time_s", 1.0), "sec_per_iter": ("step_time_s", 1.0),
    "s_per_iter": ("step_time_s", 1.0), "seconds_per_iter": ("step_time_s", 1.0),
    "throughput_t_per_s": ("tokens_per_s", 1.0),
    "throughput_t_per_s_per_gpu": ("tokens_per_s", "cluster.gpus"),
    "throughput_s_per_s": ("tokens_per_s", "training.seq_len"),
    "tps_per_gpu": ("tokens_per_s", "cluster.gpus"),
    "tokens_per_gpu_per_s": ("tokens_per_s", "cluster.gpus"),
    "tokens_per_s_per_device": ("tokens_per_s", "cluster.gpus"),
    "tokens_per_second_per_device": ("tokens_per_s", "cluster.gpus"),
    "model_flops_utilization": ("mfu", 1.0),
    "mfu_percent": ("mfu", 0.01),
    "teraflops_per_gpu": ("model_tflops_per_gpu", 1.0), "tflops_per_device": ("model_tflops_per_gpu", 1.0),
}  # fmt: skip

#: spellings that count the FLOPs the GPUs run, recomputation included (Korthikanti et al.
#: 2022's HFU): the case is compared with ``flops: hardware``
HARDWARE_COUNTED = frozenset({"hfu", "hfu_pct", "hardware_tflops_per_gpu"})
#: a TFLOP/s figure (or share of peak) headed without "model": for a fully recomputed run, the sources that print
#: one count the recomputed forward (Narayanan et al. 2021's 96·B·s·l·h², MT-NLG's, BigScience's
#: Megatron-DeepSpeed logs: 4 passes, not 3), so validate compares it in hardware FLOPs there
BARE_TFLOPS = frozenset(
    {"tflops_per_gpu", "tflops", "tflops_per_s_per_gpu", "tflop_per_s_per_gpu", "pct_peak", "percent_of_peak", "pct_of_peak",
     "teraflops_per_gpu", "tflops_per_device"}
)  # fmt: skip


@dataclass(frozen=True)
class Measured:
    """The metric a case is compared on, its value in that metric's unit, and how it was read."""

    metric: str
    value: float
    note: str = ""
    #: the figure counts hardware FLOPs (an ``hfu`` spelling): compare with ``flops: hardware``
    hardware_flops: bool = False
    #: a TFLOP/s figure not headed as model FLOPs (:data:`BARE_TFLOPS`)
    bare_tflops: bool = False


#: what to do about a measured figure that is not a finite number above 0 (validation cases)
PUBLISHED_FIX = "give the figure as published, a number above 0"


def shown(value: Any) -> str:
    """``value`` as an error message quotes it: YAML's ``null`` for None, long ones cut at 60."""
    text = "null" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def positive_number(value: Any, where: str, fix: str = PUBLISHED_FIX) -> float:
    """``value`` as a float, or a one-line error naming ``where`` (and ``fix``, what to do) unless
    it is a finite number above 0: a measured figure of a validation case, a profile's measured
    table row (measured_tables.py), one wording for both."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise UserError(where, f"must be a finite number above 0, got {shown(value)}; {fix}")
    return float(value)


def _scenario_int(scenario: dict[str, Any], dotted: str, where: str, metric: str) -> int:
    section, key = dotted.split(".")
    values = scenario.get(section) if isinstance(scenario, dict) else None
    value = values.get(key) if isinstance(values, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(where, f"needs the scenario's {dotted} to become {metric}")
    return value


def metric_name(heading: str) -> str:
    """A table heading as a metric key: lower case, ``/`` as ``_per_``, ``%`` as ``pct``, spaces
    and dashes as underscores (``Tokens / sec / GPU`` is ``tokens_per_sec_per_gpu``,
    ``MFU (%)`` is ``mfu_pct``)."""
    text = heading.strip().lower().replace("%", "pct").replace("/", "_per_")
    words = [w for w in re.split(r"[^a-z0-9.]+", text) if w]
    return "_".join(words)


#: a peak-memory figure given among the measured ones (tables put it in the same row): read as
#: the case's peak_memory_gib, GB as GiB (PyTorch's memory counters divide by 2^30)
MEMORY_HEADINGS = frozenset({
    "peak_memory_gib", "peak_memory_gb", "peak_memory", "memory_gb", "memory_gib", "mem_gb", "mem_gib",
    "peak_mem_gb", "peak_mem_gib", "max_memory_allocated_gb",
})  # fmt: skip


def split_memory(measured: Any) -> tuple[Any, tuple[str, Any] | None]:
    """``measured`` without a peak-memory figure, and that figure (its heading and value) if any."""
    if not isinstance(measured, dict):
        return measured, None
    memory = [(k, v) for k, v in measured.items() if metric_name(str(k)) in MEMORY_HEADINGS]
    if not memory:
        return measured, None
    return {k: v for k, v in measured.items() if metric_name(str(k)) not in MEMORY_HEADINGS}, memory[0]


def _known_spelling(key: str) -> str:
    """``key`` as the metric or alias its heading names, or unchanged (for the error's hint)."""
    name = metric_name(key)
    return name if name in METRICS or name in ALIASES else key


_PERCENT = re.compile(r"\s*(\d+(\.\d*)?|\.\d+)\s*%\s*")


def _percent(key: str, raw: Any, where: str) -> Any:
    """A share of peak written with its sign ('41%') as the number its key reads: 41 for a
    percent key (mfu_pct), 0.41 for mfu; any other string is left for the number check."""
    match = _PERCENT.fullmatch(raw) if isinstance(raw, str) else None
    if match is None:
        return raw
    metric, factor = ALIASES.get(key, (key, 1.0))
    if metric != "mfu":
        raise UserError(where, f"a percent ({raw!r}) is a share of peak; give {key} as a number")
    number = float(match.group(1))
    return number if factor == 0.01 else number / 100


def _check_metric(key: str, where: str) -> None:
    """``key`` is a metric or a spelling of one; else the error says which unit to give."""
    if key in METRICS or key in ALIASES:
        return
    unit = (
        " (give the unit: step_time_s or step_time_ms)" if "time" in key
        else " (give the unit: tokens_per_s or samples_per_s)" if "throughput" in key
        else ""
    )  # fmt: skip
    hint = unit or did_you_mean(key, (*METRICS, *ALIASES))
    raise UserError(
        f"{where}.{key}",
        f"unknown metric{hint}; use one of {', '.join(METRICS)} or a spelling of them "
        "(simcluster/measured.py ALIASES: mfu_pct, hfu, tokens_per_s_per_gpu, samples_per_s, ...)",
    )


def _from_alias(
    key: str, raw: Any, value: float, where: str, scenario: dict[str, Any], notes: list[str]
) -> tuple[str, float]:
    """The metric ``key`` names and ``value`` in it: an alias's factor (a number, or scenario
    fields multiplied in) applied, with a note appended to ``notes``; a metric as given."""
    if key not in ALIASES:
        return key, value
    metric, factor = ALIASES[key]
    if isinstance(factor, str):
        for field in factor.split("*"):
            value *= _scenario_int(scenario, field, f"{where}.{key}", metric)
    else:
        value *= factor
    notes.append(f"{key} {raw:g} read as {metric} {value:.6g}")
    return metric, value


def read_measured(measured: Any, where: str, scenario: dict[str, Any]) -> Measured:
    """The first figure of ``measured`` as a canonical metric (see the module docstring)."""
    names = ", ".join(METRICS)
    if not isinstance(measured, dict) or not measured:
        raise UserError(where, f"must be a mapping with one of {names}; e.g. measured: {{step_time_s: 1.25}}")
    measured = {_known_spelling(str(k)): v for k, v in measured.items()}
    for key in measured:
        _check_metric(key, where)
    key, raw = next(iter(measured.items()))
    written, raw = raw, _percent(key, raw, f"{where}.{key}")
    value = positive_number(raw, f"{where}.{key}")
    notes = [f"{key} {written!r} read as {raw:g}"] if written is not raw else []
    metric, value = _from_alias(key, raw, value, where, scenario, notes)
    if metric == "mfu" and value > 1:
        if value > 100:
            raise UserError(f"{where}.{key}", f"must be a fraction of peak (0-1) or a percent, got {raw!r}")
        value /= 100
        notes.append(f"mfu {raw:g} read as percent ({value:.4g})")
    precision = raw_precision(scenario)
    if metric == "mfu" and precision in ("fp8", "nvfp4"):
        # sources differ: NVIDIA's quote FP8 runs against the FP8 peak, others against BF16's
        name, peak = ("FP8", "FP8 peak (twice BF16's)") if precision == "fp8" else ("NVFP4", "FP4 peak")
        notes.append(
            f"an {name} run's mfu is against the GPU's {peak} here; if the source "
            "divides by the BF16 peak, compare model_tflops_per_gpu or tokens_per_s instead"
        )
    for other in list(measured)[1:]:
        positive_number(measured[other], f"{where}.{other}")
        notes.append(f"compared on {key}, the first figure; {other} {measured[other]:g} not compared")
    return Measured(
        metric, value, "; ".join(notes), hardware_flops=key in HARDWARE_COUNTED, bare_tflops=key in BARE_TFLOPS
    )
