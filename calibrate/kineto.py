"""PyTorch profiler (Kineto) chrome traces → time per op kind (gemm, attention, comm, other, idle).

GPU traces: the ``kernel``/``gpu_memcpy``/``gpu_memset`` events, one lane per CUDA stream.
CPU-only traces: the ``cpu_op`` events, one lane per thread, where ops nest (``aten::linear`` →
``aten::matmul`` → ``aten::mm``): the outermost classified op owns its whole duration, so nothing
is counted twice. Gloo runs a collective on its own worker threads, which the profiler records
only as a ``gloo:<op>`` ``user_annotation`` there (the training thread's ``c10d::allreduce_`` is
just the call that queues it, a fraction of a millisecond); those annotations are lanes too, the
CPU's counterpart of the NCCL kernels' stream, so ``comm`` is the collectives' time as the
simulator counts it and the training thread's wait for them is not ``idle``. ``other`` is busy lane time no classified op owns; ``idle`` is the span during
which no lane is busy. Pure Python: no torch.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simcluster.engine.metrics import union_length as _union_array
from simcluster.errors import UserError, read_text

KINDS: tuple[str, ...] = ("gemm", "attention", "comm", "other", "idle")

# Ordered registry, first match wins: comm before attention before gemm, because NCCL and
# cutlass-based attention kernels also carry GEMM-like names.
CLASSIFIERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("comm", re.compile(r"nccl|^c10d::|gloo|record_param_comms", re.I)),
    ("attention", re.compile(r"flash|fmha|sdpa|scaled_dot_product|attention", re.I)),
    (
        "gemm",
        re.compile(
            r"gemm|cutlass|xmma|cublas|^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$",
            re.I,
        ),
    ),
)
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
#: the name prefix of the profiling title ProcessGroupGloo's AsyncWork records on the worker
#: thread that runs it ("gloo:all_reduce", "gloo:broadcast", ...: the titles each Async*Work
#: passes in torch/csrc/distributed/c10d/ProcessGroupGlooDetail.hpp)
_GLOO_WORK = "gloo:"


def _cpu_lane_event(e: dict[str, Any]) -> bool:
    """A CPU trace's timed work: an op, or a gloo collective on its worker thread."""
    if e.get("cat") == "cpu_op":
        return True
    return e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(_GLOO_WORK)


def classify(name: str) -> str | None:
    """The kind of a kernel or op name, or None when it is none of gemm/attention/comm."""
    for kind, pattern in CLASSIFIERS:
        if pattern.search(name):
            return kind
    return None


@dataclass(frozen=True)
class Breakdown:
    """Seconds per kind (summed over lanes) and the traced span, per profiled step."""

    seconds: dict[str, float]
    span_s: float
    level: str  # 'kernel' (GPU) or 'cpu_op'
    steps: int


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping (start, end) intervals (engine's helper)."""
    return _union_array(np.asarray(intervals, dtype=float).reshape(-1, 2))


def breakdown(events: list[dict[str, Any]]) -> Breakdown:
    """Per-kind times of a list of chrome-trace events (``ts``/``dur`` in microseconds)."""
    _check_events(events)
    complete = [e for e in events if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))]
    gpu = [e for e in complete if e.get("cat") in _GPU_CATS]
    level = "kernel" if gpu else "cpu_op"
    chosen = gpu or [e for e in complete if _cpu_lane_event(e)]
    if not chosen:
        raise UserError("KINETO_TRACE", "no GPU kernel or cpu_op events; is this a profiler trace?")
    seconds = dict.fromkeys(KINDS, 0.0)
    lanes: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in chosen:
        lanes.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    busy_all: list[tuple[float, float]] = []
    for lane in lanes.values():
        busy_all += _classify_lane(lane, seconds)
    start = min(s for s, _ in busy_all)
    span = max(e for _, e in busy_all) - start
    seconds["idle"] = (span - union_length(busy_all)) * 1e-6
    steps = len({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})
    steps = max(1, steps)
    return Breakdown({k: v / steps for k, v in seconds.items()}, span * 1e-6 / steps, level, steps)


def _check_events(events: list[Any]) -> None:
    """Refuse, naming the event and field, a trace whose events are not objects or whose
    complete events' ``ts`` or ``dur`` is not a finite number."""
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise UserError(
                f"KINETO_TRACE traceEvents[{i}]", f"{e!r} is not an event object; is this a profiler trace?"
            )
        if e.get("ph") == "X" and "dur" in e:
            for key in ("ts", "dur"):
                value = e.get(key)
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise UserError(
                        f"KINETO_TRACE traceEvents[{i}].{key}",
                        f"{value!r} is not a number of microseconds; is this a profiler trace?",
                    )


def _classify_lane(lane: list[dict[str, Any]], seconds: dict[str, float]) -> list[tuple[float, float]]:
    """Add one lane's (pid, tid) event times to ``seconds`` by kind, an event inside a
    classified one counted with it and the rest of the busy time as ``other``; returns the
    lane's top-level (start, end) intervals in microseconds. Sorts ``lane`` in place."""
    lane.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack: list[tuple[float, bool]] = []  # (end, owned by a classified ancestor or itself)
    top: list[tuple[float, float]] = []
    classified = 0.0
    for e in lane:
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        while stack and stack[-1][0] <= start:
            stack.pop()
        if not stack:
            top.append((start, end))
        owned = bool(stack) and stack[-1][1]
        kind = None if owned else classify(str(e.get("name", "")))
        if kind:
            seconds[kind] += e["dur"] * 1e-6
            classified += e["dur"]
        stack.append((end, owned or kind is not None))
    # Owners never overlap within a lane, so the rest of the busy time is unclassified.
    seconds["other"] += max(0.0, union_length(top) - classified) * 1e-6
    return top


#: the first bytes of a gzip stream (RFC 1952): torch.profiler.tensorboard_trace_handler's
#: ``use_gzip=True`` writes its traces as ``*.pt.trace.json.gz``
GZIP_MAGIC = b"\x1f\x8b"


def _trace_text(path: Path) -> str:
    """The trace's JSON text, gunzipped first if it was saved compressed."""
    try:
        with path.open("rb") as f:
            packed = f.read(2) == GZIP_MAGIC
    except OSError:
        packed = False  # read_text reports the unreadable file in one line
    if not packed:
        return read_text(path, "KINETO_TRACE", "trace")
    try:
        return gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise UserError("KINETO_TRACE", f"trace '{path}' is not a whole gzipped text file ({exc})") from None


def load_trace(path: Path) -> Breakdown:
    """Read a Kineto chrome trace (``prof.export_chrome_trace``, or a ``.json.gz`` written by
    ``tensorboard_trace_handler(use_gzip=True)``) and break it down."""
    try:
        doc = json.loads(_trace_text(path))
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}:{exc.lineno}",
            f"invalid JSON: {exc.msg}; give a PyTorch profiler trace (export_chrome_trace's .json, "
            "or tensorboard_trace_handler's .json.gz)",
        ) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise UserError(str(path), "no 'traceEvents' list; is this a PyTorch profiler trace?")
    return breakdown(events)
