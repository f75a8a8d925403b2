"""What a user is told about a trace too large to open comfortably in ui.perfetto.dev.

The Perfetto UI parses a trace inside the browser, whose memory for the page is about 2 GB,
and the parsed trace takes several times the file (perfetto.dev/docs/visualization/large-traces,
"Visualising large traces"); ``trace_processor --httpd FILE`` parses it natively instead and
the UI offers to use it. chrome://tracing stopped at 256 MB of JSON (google/trace-viewer#627).
Measured here: an all-ranks run of Llama 3 70B on 64 H100 (1F1B, 64 microbatches) wrote
1,754,240 events as 362 MB of JSON, about 207 B per event, 20 MB gzipped.
"""

from __future__ import annotations

from pathlib import Path

from simcluster.units import format_bytes

#: GPUs from which an all-ranks run is announced before it starts (:func:`all_ranks_note`)
NOTE_GPUS = 256

#: events from which a trace gets the note: about 200 MB of JSON, where chrome://tracing was
#: near its limit and the browser's share of memory for Perfetto becomes the question
NOTE_EVENTS = 1_000_000


def trace_size_note(path: Path, events: int) -> str | None:
    """One line for a trace of ``events`` events written at ``path`` (trace.json or
    trace.json.gz), or None below :data:`NOTE_EVENTS`."""
    if events < NOTE_EVENTS:
        return None
    size = format_bytes(path.stat().st_size)
    smaller = "" if path.suffix == ".gz" else "; --gzip-trace writes it about 15x smaller, and Perfetto opens .json.gz as it is"
    return (
        f"{path.name} holds {events:,} events ({size}): ui.perfetto.dev parses it in the browser's memory "
        f"(about 2 GB, several times the file); if the tab gives up, run `trace_processor --httpd {path}` "
        f"and open ui.perfetto.dev (perfetto.dev/docs/visualization/large-traces){smaller}"
    )


def all_ranks_note(gpus: int) -> str | None:
    """One line before an all-ranks simulation of ``gpus`` GPUs (None below :data:`NOTE_GPUS`):
    its events, time and memory grow with the GPU count, where the default one GPU per stage
    does not. The reference is this module's measured run (64 GPUs, 1,754,240 events, 1.9 GB
    peak resident memory with --out, 2.9 GB before the trace was encoded in batches; 102 s of
    simulation on one loaded core), per GPU."""
    if gpus < NOTE_GPUS:
        return None
    return (
        f"simulating all {gpus:,} GPUs one by one: events, time and memory grow with the GPU count "
        "(measured on Llama 3 70B, 64 microbatches, 20 layers a stage: about 27,000 events and 30 MB "
        "per GPU, 1.9 GB on 64 GPUs); without --all-ranks (and stragglers) one GPU per stage stands "
        "for its identical peers"
    )
