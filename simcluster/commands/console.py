"""The console the subcommands print their tables on."""

from __future__ import annotations

import os

from rich.console import Console

#: the width used when stdout is a file or a pipe and COLUMNS is unset: Rich's own default
#: there is 80 columns, which cuts a sweep's or a hardware list's columns to "prof…" in a log
PIPE_WIDTH = 200


def stdout_console(min_width: int = 0) -> Console:
    """A console on stdout: a terminal's own width (at least ``min_width``, the widest tables
    wrap rather than truncate), or :data:`PIPE_WIDTH` when the output is redirected."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        return Console(width=max(PIPE_WIDTH, min_width))
    return Console(width=max(console.width, min_width)) if min_width else console
