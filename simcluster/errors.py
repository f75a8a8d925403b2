"""User-facing errors.

Every bad input (a scenario field, a CLI argument, a hardware profile) raises
:class:`UserError`. The CLI prints ``error: <field>: <message>`` on one line and exits
with status 2, never a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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
