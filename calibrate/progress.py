"""Progress display: a rich bar on rank 0, nothing on other ranks."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RankProgress:
    """A context manager counting finished measurements; silent unless ``enabled``."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._progress: Progress | None = None
        self._task = None
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]calibrate[/bold] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._task = self._progress.add_task("", total=total)

    def __enter__(self) -> RankProgress:
        if self._progress:
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress:
            self._progress.stop()

    def describe(self, text: str) -> None:
        """Show what is being measured now."""
        if self._progress and self._task is not None:
            self._progress.update(self._task, description=text)

    def advance(self) -> None:
        """One measurement done."""
        if self._progress and self._task is not None:
            self._progress.advance(self._task)
