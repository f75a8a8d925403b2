"""The console the subcommands print their tables on, and what a closed pipe does to it."""

from __future__ import annotations

import os

from rich.console import Console

#: the width used when stdout is a file or a pipe and COLUMNS is unset: Rich's own default
#: there is 80 columns, which cuts a sweep's or a hardware list's columns to "prof…" in a log
PIPE_WIDTH = 200


class PipeSafeConsole(Console):
    """A Rich console that lets a closed pipe (``simcluster run X | head``) end the command
    through :func:`simcluster.cli.main`'s quiet exit: Rich's own handler exits with status 1,
    which fails a ``set -o pipefail`` script for output its reader chose not to read."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def stdout_console(min_width: int = 0) -> Console:
    """A console on stdout: a terminal's own width (at least ``min_width``, the widest tables
    wrap rather than truncate), or :data:`PIPE_WIDTH` when the output is redirected."""
    console = PipeSafeConsole()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        return PipeSafeConsole(width=max(PIPE_WIDTH, min_width))
    return PipeSafeConsole(width=max(console.width, min_width)) if min_width else console
