"""User-facing errors.

Every bad input (a scenario field, a CLI argument, a hardware profile) raises
:class:`UserError`. The CLI prints ``error: <field>: <message>`` on one line and exits
with status 2, never a traceback.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable, Iterable


class UserError(Exception):
    """A bad input, explained in one line that names the field and the fix."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def one_line(self) -> str:
        """The message as printed by the CLI (newlines folded)."""
        return " ".join(str(self).split())


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' hint, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def exit_code_of(action: Callable[[], int | None]) -> int:
    """Run a command body; a UserError becomes one line on stderr and status 2, ^C status 130."""
    try:
        return int(action() or 0)
    except UserError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
