"""What an importer gives back: the raw scenario, and what it did not take and why."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from simcluster.errors import UserError

#: the first line's start of every scenario the importer writes: what marks a file it may
#: overwrite without --force (commands/importing.py)
IMPORTED_MARK = "# imported by `simcluster import`"
#: the end of that first line: a digest of every line after it, so that a file the importer
#: wrote and the user then edited by hand is told from one it may replace
_DIGEST = re.compile(r" \(sha256 of the lines below: ([0-9a-f]{16})\)\r?$")


def body_digest(body: bytes) -> str:
    """The digest the mark line records of ``body`` (the file after its first line): the first
    16 hex digits of its SHA-256, enough to tell an edit from chance."""
    return hashlib.sha256(body).hexdigest()[:16]


def mark_line(source: str, body: str) -> str:
    """The first line of a scenario the importer writes from ``source`` with ``body`` below."""
    return f"{IMPORTED_MARK} from {source} (sha256 of the lines below: {body_digest(body.encode('utf-8'))})"


def recorded_digest(first_line: str) -> str | None:
    """The digest an importer-written first line records, None if it records none."""
    found = _DIGEST.search(first_line)
    return found.group(1) if found else None


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
    #: the tokens the config's run trains, where it states its length, and how that was read
    #: (``--train-iters 1000 x global batch 512 x 4,096``); the length stays outside the
    #: scenario, which is one step: ``simcluster run --tokens`` takes it
    run_tokens: tuple[int, str] | None = None
    #: a run stated in steps without the batch they take (Megatron's micro-batch x dp default,
    #: no --global-batch-size): the steps and the flag, for the import to finish with the
    #: layout's global batch
    run_steps: tuple[int, str] | None = None

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
        """The scenario as YAML, headed by comments: its source (with a digest of the rest of
        the file), the notes and every setting not imported."""
        lines = [f"# note: {n}" for n in self.notes]
        lines += [f"# not imported: {s}" for s in self.skipped_lines()]
        body = yaml.safe_dump(self.scenario, sort_keys=False, default_flow_style=False, width=100)
        rest = "".join(f"{line}\n" for line in lines) + body
        text: str = mark_line(self.source, rest) + "\n" + rest
        return text
