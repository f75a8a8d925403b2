"""The events table: schema, validation, CSV and Parquet files.

One row per simulated event (see docs/architecture.md, "Events"). Times are seconds, sizes
bytes. ``microbatch``, ``chunk`` and ``layer`` are -1 when they do not apply. An optional
``flow_id`` column (int, -1 for none) pairs a p2p ``send`` with its ``recv``.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING

import numpy as np

from simcluster.errors import UserError
from simcluster.output.atomic import atomic_write_bytes

if TYPE_CHECKING:  # imported where frames are read: the recorder's column names stay free of pandas
    import pandas as pd

EVENT_COLUMNS: tuple[str, ...] = (
    "rank",
    "stage",
    "stream",
    "kind",
    "group",
    "name",
    "microbatch",
    "chunk",
    "layer",
    "start_s",
    "end_s",
    "bytes",
)
FLOW_COLUMN = "flow_id"

COMPUTE_KINDS: tuple[str, ...] = (
    "forward",
    "backward_input",
    "backward_weight",
    "backward",
    "recompute",
    "optimizer",
    "host",
)
COMM_KINDS: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "send",
    "recv",
    "copy",  # activations to and from host memory (training.activation_offload_layers, offload_modules)
)
KINDS: tuple[str, ...] = COMPUTE_KINDS + COMM_KINDS
GROUPS: tuple[str, ...] = ("tp", "cp", "dp", "ep", "pp", "embd", "host", "")
# Order is the display order of a GPU's lanes (Gantt rows, Perfetto threads).
STREAMS: tuple[str, ...] = (
    "compute", "comm_tp", "comm_cp", "comm_ep", "comm_dp", "comm_dp_ar", "comm_amax", "comm_pp", "comm_pp_recv",
    "copy_d2h", "copy_h2d",
)

_INT_COLUMNS = ("rank", "stage", "microbatch", "chunk", "layer")
_STR_COLUMNS = ("stream", "kind", "group", "name")
_FLOAT_COLUMNS = ("start_s", "end_s", "bytes")

# Slack for "events on one lane never overlap": float sums in the engine may leave an end a
# few ulps past the next start.
_OVERLAP_TOL_S = 1e-12


def _check_values(frame: pd.DataFrame, column: str, allowed: tuple[str, ...]) -> None:
    bad = sorted(set(frame[column].unique()) - set(allowed))
    if bad:
        raise UserError(
            f"events.{column}", f"unknown value(s) {bad}; expected one of {list(allowed)}"
        )


def _check_no_overlap(frame: pd.DataFrame) -> None:
    ordered = frame.sort_values(["rank", "stream", "start_s", "end_s"], kind="stable")
    same_lane = (ordered["rank"].values[1:] == ordered["rank"].values[:-1]) & (
        ordered["stream"].values[1:] == ordered["stream"].values[:-1]
    )
    overlap = ordered["start_s"].values[1:] < ordered["end_s"].values[:-1] - _OVERLAP_TOL_S
    hits = np.flatnonzero(same_lane & overlap)
    if hits.size:
        row = ordered.iloc[hits[0] + 1]
        raise UserError(
            "events",
            f"events overlap on rank {row['rank']} stream {row['stream']} at "
            f"{row['start_s']:.9g} s; one stream runs one event at a time",
        )


def validate_events(events: pd.DataFrame) -> pd.DataFrame:
    """A checked copy with canonical dtypes and column order, sorted by (rank, stream, start).

    Raises :class:`UserError` naming the column for missing columns, unknown kinds, groups or
    streams, non-finite or reversed times, and overlapping events on one (rank, stream).
    """
    import pandas as pd

    if not isinstance(events, pd.DataFrame):
        raise UserError("events", f"expected a pandas DataFrame, got {type(events).__name__}")
    missing = [c for c in EVENT_COLUMNS if c not in events.columns]
    if missing:
        raise UserError("events", f"missing column(s) {missing}; required: {list(EVENT_COLUMNS)}")
    columns = list(EVENT_COLUMNS) + ([FLOW_COLUMN] if FLOW_COLUMN in events.columns else [])
    frame = events.loc[:, columns].copy()
    for col in _STR_COLUMNS:
        frame[col] = frame[col].fillna("").astype(str)
    try:
        for col in _INT_COLUMNS + ((FLOW_COLUMN,) if FLOW_COLUMN in frame else ()):
            frame[col] = frame[col].astype("int64")
        for col in _FLOAT_COLUMNS:
            frame[col] = frame[col].astype("float64")
    except (TypeError, ValueError) as exc:
        raise UserError("events", f"non-numeric value in a numeric column: {exc}") from exc
    _check_values(frame, "kind", KINDS)
    _check_values(frame, "group", GROUPS)
    _check_values(frame, "stream", STREAMS)
    times = frame[["start_s", "end_s"]].to_numpy()
    if not np.isfinite(times).all():
        raise UserError("events.start_s", "times must be finite numbers of seconds")
    if (frame["end_s"] < frame["start_s"]).any():
        raise UserError("events.end_s", "an event ends before it starts; end_s must be >= start_s")
    _check_no_overlap(frame)
    frame = frame.sort_values(["rank", "stream", "start_s", "end_s"], kind="stable")
    return frame.reset_index(drop=True)


def busy_time(events: pd.DataFrame) -> pd.Series:
    """Seconds each (rank, stream) lane is busy: the sum of its event durations.

    Events on one lane never overlap, so summing durations is the busy time.
    """
    duration = events["end_s"] - events["start_s"]
    return duration.groupby([events["rank"], events["stream"]]).sum().sort_index()


def events_to_csv_bytes(events: pd.DataFrame) -> bytes:
    """CSV text of a validated frame; floats written with round-trip precision."""
    buffer = io.StringIO()
    events.to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue().encode("utf-8")


def write_events_csv(events: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write ``events.csv`` atomically."""
    atomic_write_bytes(path, events_to_csv_bytes(validate_events(events)))


def read_events_csv(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read an ``events.csv`` back with the schema's dtypes (empty group stays "")."""
    import pandas as pd

    dtypes = {c: str for c in _STR_COLUMNS}
    frame = pd.read_csv(path, dtype=dtypes, keep_default_na=False, na_values={})
    return validate_events(frame)


def parquet_available() -> bool:
    """True when pyarrow can be imported (Parquet output is optional)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def events_to_parquet_bytes(events: pd.DataFrame) -> bytes:
    """Parquet bytes of a validated frame (requires pyarrow)."""
    buffer = io.BytesIO()
    events.to_parquet(buffer, engine="pyarrow", index=False)
    return buffer.getvalue()


def write_events_parquet(events: pd.DataFrame, path: str | os.PathLike[str]) -> bool:
    """Write ``events.parquet`` atomically; False (nothing written) without pyarrow."""
    if not parquet_available():
        return False
    atomic_write_bytes(path, events_to_parquet_bytes(validate_events(events)))
    return True


def span(events: pd.DataFrame) -> tuple[float, float]:
    """(first start, last end) of the events, in seconds; (0, 0) when empty."""
    if events.empty:
        return 0.0, 0.0
    return float(events["start_s"].min()), float(events["end_s"].max())
