"""Chrome Trace Event JSON that ui.perfetto.dev (and chrome://tracing) opens.

Laid out like a PyTorch profiler (Kineto) GPU trace so simulated and measured traces read the
same way: one process per simulated GPU (``pid`` = rank), one thread per stream (``tid``),
complete events ``ph: "X"`` with ``cat: "kernel"`` for compute and communication alike
(Kineto shows NCCL kernels as ``kernel`` too). p2p transfers get flow arrows (``ph: s`` on
the send, ``ph: f`` with ``bp: e`` on the recv) and memory per stage is a counter
track by category beside one of its total.

Timestamps are microseconds. They are put on an integer-nanosecond grid first: Perfetto
converts ``ts``/``dur`` to integer ns, so events that touch in seconds still touch (not
overlap by a rounding nanosecond) once imported.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from json.encoder import encode_basestring_ascii
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from simcluster.errors import UserError
from simcluster.output.atomic import atomic_write_bytes, atomic_write_text
from simcluster.output.events import COMPUTE_KINDS, FLOW_COLUMN, STREAMS, validate_events
from simcluster.output.memory_plot import MEMORY_CATEGORIES, validate_memory
from simcluster.units import GiB

# tid per stream; 1-based because some viewers treat tid 0 as "no thread".
STREAM_TID: dict[str, int] = {stream: index + 1 for index, stream in enumerate(STREAMS)}
FLOW_CATEGORY = "p2p"
T = TypeVar("T")


def _us(ns: int) -> float:
    # ns / 1000 prints with at most 3 decimals, which Perfetto rounds back to the same ns.
    return ns / 1000


def _to_ns(seconds: np.ndarray) -> np.ndarray:
    return np.rint(seconds * 1e9).astype(np.int64)


def _metadata(rank_labels: Mapping[int, str], lanes: list[tuple[int, str]]) -> list[dict]:
    out: list[dict] = []
    for rank in sorted({r for r, _ in lanes}):
        label = rank_labels.get(rank, f"rank {rank}")
        out.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": rank,
                "tid": 0,
                "args": {"name": f"GPU {rank}: {label}"},
            }
        )
        out.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": rank,
                "tid": 0,
                "args": {"sort_index": rank},
            }
        )
    for rank, stream in lanes:
        tid = STREAM_TID[stream]
        out.append(
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": stream}}
        )
        out.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": rank,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )
    return out


def _args(
    kind: str, stage: int, rank: int, stream: str, group: str, mb: int, chunk: int, layer: int, nbytes: float
) -> dict[str, Any]:
    args: dict[str, Any] = {
        "op": kind,
        "stage": int(stage),
        "device": int(rank),
        "stream": STREAM_TID[stream],
    }
    if group:
        args["group"] = group
    for key, value in (("microbatch", int(mb)), ("chunk", int(chunk)), ("layer", int(layer))):
        if value >= 0:
            args[key] = value
    if nbytes > 0:
        args["bytes"] = int(nbytes)
    return args


_SLICE_COLUMNS = ("kind", "stage", "rank", "stream", "group", "microbatch", "chunk", "layer", "bytes")


def _slices(frame: pd.DataFrame, start_ns: np.ndarray, end_ns: np.ndarray) -> Iterator[dict]:
    """One complete event per row, made as they are asked for: an all-ranks trace has millions,
    and their dicts took several times the JSON text's memory held all at once."""
    # plain Python values, column by column: iterating pandas' Arrow-backed string columns is
    # ~10x slower, and a named tuple per row (itertuples) cost as much as the rest together
    columns = [frame[c].tolist() for c in _SLICE_COLUMNS]
    names = frame["name"].tolist()
    for values, name, t0, t1 in zip(
        zip(*columns, strict=True), names, start_ns.tolist(), end_ns.tolist(), strict=True
    ):
        kind, _, rank, stream = values[:4]
        yield {
            "ph": "X",
            "cat": "kernel",
            "name": name or kind,
            "pid": int(rank),
            "tid": STREAM_TID[stream],
            "ts": _us(t0),
            "dur": _us(t1 - t0),
            "args": _args(*values),
        }


def _slice_texts(frame: pd.DataFrame, start_ns: np.ndarray, end_ns: np.ndarray) -> Iterator[str]:
    """:func:`_slices`' events as their compact JSON text, written directly: the same bytes
    ``json.dumps`` makes of each dict (keys in the same order, strings through its own ASCII
    escaping, numbers through ``repr``), without a dict and an encoder pass per event, which
    were most of a big trace's time. ``test_output_perfetto`` holds the two equal."""
    quoted: dict[str, str] = {}

    def q(text: str) -> str:
        hit = quoted.get(text)
        if hit is None:
            hit = quoted[text] = encode_basestring_ascii(text)
        return hit

    columns = [frame[c].tolist() for c in _SLICE_COLUMNS]
    names = frame["name"].tolist()
    for values, name, t0, t1 in zip(
        zip(*columns, strict=True), names, start_ns.tolist(), end_ns.tolist(), strict=True
    ):
        kind, stage, rank, stream, group, mb, chunk, layer, nbytes = values
        tid = STREAM_TID[stream]
        args = f'{{"op":{q(kind)},"stage":{int(stage)!r},"device":{int(rank)!r},"stream":{tid!r}'
        if group:
            args += f',"group":{q(group)}'
        for key, value in (("microbatch", int(mb)), ("chunk", int(chunk)), ("layer", int(layer))):
            if value >= 0:
                args += f',"{key}":{value!r}'
        if nbytes > 0:
            args += f',"bytes":{int(nbytes)!r}'
        yield (
            f'{{"ph":"X","cat":"kernel","name":{q(name or kind)},"pid":{int(rank)!r},"tid":{tid!r},'
            f'"ts":{_us(t0)!r},"dur":{_us(t1 - t0)!r},"args":{args}}}}}'
        )


def _flows(frame: pd.DataFrame, start_ns: np.ndarray, end_ns: np.ndarray) -> list[dict]:
    """Arrows from each send to its recv; bound to the slices by a timestamp inside each."""
    if FLOW_COLUMN not in frame:
        return []
    mid = (start_ns + end_ns) // 2
    ends: dict[str, dict[int, int]] = {"send": {}, "recv": {}}
    for index, (kind, flow) in enumerate(zip(frame["kind"].tolist(), frame[FLOW_COLUMN].tolist(), strict=True)):
        if flow >= 0 and kind in ends:
            if int(flow) in ends[kind]:
                raise UserError("events.flow_id", f"flow_id {flow} is used by two {kind} events")
            ends[kind][int(flow)] = index
    out = []
    # whole columns once: a row looked up through .iloc per arrow end took most of a big
    # trace's time (two per pipeline transfer: 200,000 in a 405B step)
    ranks, streams = frame["rank"].tolist(), frame["stream"].tolist()
    for flow in sorted(ends["send"].keys() & ends["recv"].keys()):
        for phase, index in (("s", ends["send"][flow]), ("f", ends["recv"][flow])):
            event = {
                "ph": phase,
                "id": flow,
                "cat": FLOW_CATEGORY,
                "name": "p2p",
                "pid": int(ranks[index]),
                "tid": STREAM_TID[streams[index]],
                "ts": _us(int(mid[index])),
            }
            if phase == "f":
                event["bp"] = "e"  # bind to the enclosing recv slice, not the next one
            out.append(event)
    return out


def _counters(memory: pd.DataFrame, stage_pid: Mapping[int, int]) -> list[dict]:
    """Two counter tracks per stage, in the process of the stage's first simulated GPU: its
    memory by category, and its total on a track of its own. The legacy chrome://tracing
    viewer stacks the series of one counter event, so a ``total`` beside its parts was drawn
    on top of them at twice the height; Perfetto draws each series as its own track either way.
    """
    out = []
    frame = validate_memory(memory)
    times = _to_ns(frame["time_s"].to_numpy())
    for row, t in zip(frame.itertuples(index=False), times, strict=True):
        pid = stage_pid.get(int(row.stage))
        if pid is None:
            continue
        parts = {cat: getattr(row, cat) / GiB for cat in MEMORY_CATEGORIES}
        for name, values in (
            (f"memory stage {row.stage} (GiB)", parts),
            (f"memory stage {row.stage} total (GiB)", {"total": row.total / GiB}),
        ):
            out.append({"ph": "C", "name": name, "pid": pid, "ts": _us(int(t)), "args": values})
    return out


def build_trace(
    events: pd.DataFrame,
    rank_labels: Mapping[int, str] | None = None,
    memory: pd.DataFrame | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The trace as a JSON-able dict ``{"traceEvents": [...], "otherData": {...}}``."""
    trace_events, other = _trace_parts(events, rank_labels, memory, metadata)
    return {"traceEvents": list(trace_events), "otherData": other}


def trace_text(
    events: pd.DataFrame,
    rank_labels: Mapping[int, str] | None = None,
    memory: pd.DataFrame | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> str:
    """``trace_json(build_trace(...))``, the same text, without holding every event's dict at
    once: the events are encoded :data:`_ENCODE_BATCH` at a time (a compact JSON list's items
    are the items' own compact texts joined by commas), the complete events written as text
    directly (:func:`_slice_texts`)."""
    head, (frame, start_ns, end_ns), tail, other = _sections(events, rank_labels, memory, metadata)
    pieces = [trace_json(batch)[1:-1] for batch in _batches(head, _ENCODE_BATCH)]
    pieces += [",".join(texts) for texts in _batches(_slice_texts(frame, start_ns, end_ns), _ENCODE_BATCH)]
    pieces += [trace_json(batch)[1:-1] for batch in _batches(tail, _ENCODE_BATCH)]
    return '{"traceEvents":[' + ",".join(pieces) + '],"otherData":' + trace_json(other) + "}"


_ENCODE_BATCH = 10_000  # events per json.dumps call in trace_text


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _trace_parts(
    events: pd.DataFrame,
    rank_labels: Mapping[int, str] | None,
    memory: pd.DataFrame | None,
    metadata: Mapping[str, Any] | None,
) -> tuple[Iterable[dict], dict[str, Any]]:
    """The trace's events, in order (the complete events made as they are read), and its
    ``otherData``."""
    head, slices, tail, other = _sections(events, rank_labels, memory, metadata)
    return itertools.chain(head, _slices(*slices), tail), other


def _sections(
    events: pd.DataFrame,
    rank_labels: Mapping[int, str] | None,
    memory: pd.DataFrame | None,
    metadata: Mapping[str, Any] | None,
) -> tuple[list[dict], tuple[pd.DataFrame, np.ndarray, np.ndarray], list[dict], dict[str, Any]]:
    """The trace in its order: the metadata events, what the complete events are made of (the
    frame and its nanosecond starts and ends), the flow arrows and memory counters, and the
    ``otherData``."""
    frame = validate_events(events)
    labels = dict(rank_labels or {})
    lanes = sorted(
        {(int(r), s) for r, s in frame[["rank", "stream"]].drop_duplicates().itertuples(index=False)},
        key=lambda lane: (lane[0], STREAM_TID[lane[1]]),
    )
    start_ns = _to_ns(frame["start_s"].to_numpy())
    end_ns = np.maximum(_to_ns(frame["end_s"].to_numpy()), start_ns)
    flows = _flows(frame, start_ns, end_ns)  # its errors (a reused flow id) before any event
    counters: list[dict] = []
    if memory is not None:
        stage_pid = frame.groupby("stage")["rank"].min().astype(int).to_dict()
        counters = _counters(memory, stage_pid)
    other = {"generator": "simcluster", "compute_kinds": list(COMPUTE_KINDS)}
    other.update(metadata or {})
    # No "displayTimeUnit": some Perfetto versions read it as the unit of ts itself.
    return _metadata(labels, lanes), (frame, start_ns, end_ns), flows + counters, other


def write_trace(
    path: str | os.PathLike[str],
    events: pd.DataFrame,
    rank_labels: Mapping[int, str] | None = None,
    memory: pd.DataFrame | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Write ``trace.json`` atomically (compact JSON, keys in a fixed order); a path ending in
    ``.gz`` gets the text gzipped (:func:`trace_gzip`), which Perfetto opens as it is."""
    text = trace_text(events, rank_labels, memory, metadata)
    if os.fspath(path).endswith(".gz"):
        atomic_write_bytes(path, trace_gzip(text))
    else:
        atomic_write_text(path, text)


def trace_gzip(text: str) -> bytes:
    """The trace text as one gzip member, which ui.perfetto.dev and trace_processor open as
    they open the JSON (Perfetto maintainers in google/perfetto#584 and #847; a multi-member
    gzip is what they do not read, #872). No file name and an mtime of 0 in the header, so the
    same trace compresses to the same bytes. Level 6 is gzip's default: a 362 MB all-ranks
    trace of 64 GPUs became 20 MB in 12 s (level 1: 27 MB in 4 s)."""
    return gzip.compress(text.encode(), compresslevel=6, mtime=0)


def trace_json(trace: Any) -> str:
    """The trace as compact JSON text. NaN and infinities are refused: JSON has no such
    numbers, and Perfetto's JSON importer rejects the whole file over one ``NaN``."""
    try:
        return json.dumps(trace, separators=(",", ":"), default=jsonable, allow_nan=False)
    except ValueError as exc:
        raise UserError("trace", f"cannot be written as JSON: {exc}") from exc


def jsonable(value: Any) -> Any:
    """``json.dumps``'s ``default`` for the outputs: numpy scalars as Python numbers, paths as
    text; anything else is a TypeError."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
