"""What an importer gives back: the raw scenario, and what it did not take and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from simcluster.errors import UserError

#: the first line's start of every scenario the importer writes: what marks a file it may
#: overwrite without --force (commands/importing.py)
IMPORTED_MARK = "# imported by `simcluster import`"


@dataclass
class Imported:
    """A scenario read from a launch config.

    ``scenario`` is a raw scenario mapping in the schema's names; ``skipped`` holds one line per
    setting of the config the importer did not take (``--lr (optimizer hyperparameter: ...)``),
    never silently dropped; ``notes`` how a setting was read where that needs saying (the
    framework chosen, a default the framework's code applies)."""

    scenario: dict[str, Any]
    source: str
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: dotted fields the config cannot give, each with how to give it (``--set``)
    needs: dict[str, str] = field(default_factory=dict)
    #: the settings not imported, by reason, in the order first met
    by_reason: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, setting: str, reason: str) -> None:
        """Record a setting not imported."""
        self.skipped.append(f"{setting} ({reason})")
        self.by_reason.setdefault(reason, []).append(setting)

    def skipped_lines(self) -> list[str]:
        """The settings not imported, one line per reason: a launch script sets twenty
        hyperparameters and I/O paths for every flag that shapes the step, and one line each
        would bury the few that matter."""
        return [f"{', '.join(names)} ({reason})" for reason, names in self.by_reason.items()]

    def check_needs(self) -> None:
        """A one-line error for the first needed field still missing (after ``--set``)."""
        for dotted, fix in self.needs.items():
            node: Any = self.scenario
            for part in dotted.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                raise UserError(dotted, fix)

    def yaml_text(self) -> str:
        """The scenario as YAML, headed by comments: its source, the notes and every setting
        not imported."""
        lines = [f"{IMPORTED_MARK} from {self.source}"]
        lines += [f"# note: {n}" for n in self.notes]
        lines += [f"# not imported: {s}" for s in self.skipped_lines()]
        body = yaml.safe_dump(self.scenario, sort_keys=False, default_flow_style=False, width=100)
        return "\n".join(lines) + "\n" + body
