"""The outcome of one simulated step: summary, events, memory timeline, and ways to look at it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the CLI's parser and error paths stay free of pandas
    import pandas as pd


@dataclass
class SimResult:
    """Summary dict (the ``--json`` document), events DataFrame and memory timeline."""

    summary: dict[str, Any]
    events: pd.DataFrame
    memory: pd.DataFrame
    capacity_bytes: float
    rank_labels: dict[int, str]
    title: str

    def plot_gantt(self, path: str | Path, window: tuple[float, float] | None = None) -> Any:
        """Write the Gantt chart (PNG/SVG/PDF by suffix)."""
        from simcluster.output.gantt import describe_step, plot_gantt

        return plot_gantt(
            self.events,
            Path(path),
            rank_labels=self.rank_labels,
            title=self.title,
            subtitle=describe_step(self.summary, self.title),
            step_time_s=self.summary["step_time_s"],
            window=window,
        )

    def to_perfetto(self, path: str | Path) -> None:
        """Write a Chrome-trace JSON that ui.perfetto.dev opens (gzipped for a ``.gz`` path)."""
        from simcluster.output.perfetto import write_trace

        write_trace(
            Path(path),
            self.events,
            rank_labels=self.rank_labels,
            memory=self.memory,
            metadata={
                "scenario": self.summary.get("scenario"),
                "layout": self.summary.get("layout"),
            },
        )

    def plot_memory(self, path: str | Path) -> Any:
        """Write the memory-over-time plot."""
        from simcluster.output.memory_plot import plot_memory

        return plot_memory(
            self.memory,
            self.capacity_bytes,
            Path(path),
            title=self.title,
            end_s=self.summary["step_time_s"],
            backlog=self.summary.get("offload_backlog_per_stage"),
        )

    def write(
        self,
        out_dir: str | Path,
        svg: bool = False,
        window: tuple[float, float] | None = None,
        gzip_trace: bool = False,
        progress: Callable[..., None] | None = None,
    ) -> dict[str, Path]:
        """Write every output file atomically into ``out_dir`` (``window``, in seconds, zooms
        the timeline; ``gzip_trace`` writes trace.json.gz instead of trace.json; ``progress``:
        a progress bar's ``advance``, told each of ``writer.WRITE_STEPS``)."""
        from simcluster.output.writer import write_all

        return write_all(
            Path(out_dir),
            self.events,
            self.memory,
            self.capacity_bytes,
            self.summary,
            rank_labels=self.rank_labels,
            title=self.title,
            svg=svg,
            window=window,
            gzip_trace=gzip_trace,
            progress=progress,
        )
