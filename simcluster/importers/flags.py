"""A launch line's words as ``--flag value`` pairs, and the reasons a flag is not imported."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from simcluster.errors import UserError

T = TypeVar("T")


@dataclass
class Flags:
    """``--flag value...`` and ``--flag=value`` words, in order; the last of a repeated flag
    wins, as argparse keeps it. ``taken`` records the flags an importer used."""

    values: dict[str, list[str]]
    taken: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, words: list[str]) -> Flags:
        """Words that start with ``--`` are flags; the words up to the next flag its values."""
        values: dict[str, list[str]] = {}
        current: list[str] | None = None
        for word in words:
            if word.startswith("--") and len(word) > 2:
                name, eq, value = word[2:].partition("=")
                current = values[name] = [value] if eq else []
                if eq:
                    current = None  # --flag=value takes no further words
            elif current is not None:
                # quotes a script kept literal ('a|b' inside "..."), which the shell that runs
                # the command (bash -c, srun) removes
                if len(word) > 1 and word[0] == word[-1] and word[0] in "'\"":
                    word = word[1:-1]
                current.append(word)
        return cls(values)

    def has(self, name: str) -> bool:
        """Whether ``--name`` is given (marked as used)."""
        if name in self.values:
            self.taken.add(name)
            return True
        return False

    def words(self, name: str) -> list[str]:
        """Every value of ``--name`` (a flag taking a list, e.g. ``--recompute-modules``), none
        when absent (marked as used when given)."""
        return list(self.values[name]) if self.has(name) else []

    def text(self, name: str) -> str | None:
        """The one value of ``--name``, or None when absent; a missing value is an error."""
        if not self.has(name):
            return None
        given = [v for v in self.values[name] if v]
        if len(given) != 1:
            raise UserError(
                f"--{name}",
                f"takes one value, the launch line gives {len(given)} (an unset shell variable? "
                "set it with --var NAME=VALUE)",
            )
        return given[0]

    def integer(self, name: str) -> int | None:
        """``--name``'s whole number, or None when absent."""
        value = self.text(name)
        if value is None:
            return None
        if not re.fullmatch(r"\d+", value):
            raise UserError(f"--{name}", f"'{value}' is not a whole number")
        return int(value)

    def number(self, name: str) -> float | None:
        """``--name``'s number, or None when absent."""
        value = self.text(name)
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            raise UserError(f"--{name}", f"'{value}' is not a number") from None

    def choice(self, name: str, mapping: Mapping[str, T]) -> T | None:
        """``--name``'s value through ``mapping``; a value it lacks is an error listing them."""
        value = self.text(name)
        if value is None:
            return None
        if value not in mapping:
            raise UserError(
                f"--{name}", f"'{value}' cannot be imported; known: {', '.join(mapping)}"
            )
        return mapping[value]

    def left(self) -> list[str]:
        """The flags no importer used, in the order given."""
        return [name for name in self.values if name not in self.taken]


#: flags that change nothing a step's simulation reads, by why (prefixes end in '-')
NOT_STEP = {
    "a training hyperparameter: a step's work and memory do not depend on it": (
        "lr",
        "min-lr",
        "lr-",
        "weight-decay",
        "start-weight-decay",
        "end-weight-decay",
        "adam-",
        "sgd-momentum",
        "clip-grad",
        "loss-scale",
        "initial-loss-scale",
        "min-loss-scale",
        "loss-scale-window",
        "hysteresis",
        "init-method-std",
        "norm-epsilon",
        "rotary-base",
        "seed",
        "warmup",
        "override-opt-param-scheduler",
        "use-checkpoint-opt-param-scheduler",
    ),
    "data, tokenizer or checkpoint input/output: not part of a training step": (
        "data-path",
        "train-data-path",
        "valid-data-path",
        "test-data-path",
        "split",
        "vocab-file",
        "merge-file",
        "tokenizer-",
        "data-cache-path",
        "data-impl",
        "data-args-path",
        "data-sharding",
        "save",
        "save-",
        "load",
        "load-",
        "no-save-",
        "no-load-",
        "finetune",
        "dataloader-type",
        "num-workers",
        "mock-data",
        "ckpt-",
        "use-dist-ckpt",
        "auto-detect-ckpt-format",
        "async-save",
        "dist-ckpt-",
        "pretrained-checkpoint",
    ),
    "logging, evaluation or run length: outside the step": (
        "log-",
        "tensorboard-",
        "wandb-",
        "eval-",
        "train-iters",
        "train-samples",
        "exit-",
        "timing-log-",
        "profile",
        "profile-",
        "distributed-timeout-minutes",
        "use-checkpoint-args",
        "no-log-",
        "logging-",
    ),
}


def not_step_reason(name: str) -> str | None:
    """Why ``--name`` changes nothing a step simulates, or None when it is not such a flag."""
    for reason, names in NOT_STEP.items():
        for entry in names:
            if name == entry or (entry.endswith("-") and name.startswith(entry)):
                return reason
    return None
