"""A launch config's run length as tokens, for ``simcluster run --tokens`` (``budget.py``).

A scenario is one step; how many steps a run takes is outside it. Where the config states it
(Megatron-LM's ``--train-samples`` or ``--train-iters``, torchtitan's ``training.steps``), the
import says how many tokens that is, so the run's days are one command away.
"""

from __future__ import annotations

import re
from typing import Any


def whole(value: Any) -> int | None:
    """``value`` as a positive whole number, None for anything else (an unset shell variable:
    the run length is a note, never a reason to refuse the import)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    # underscores as Python's int() reads them: Megatron's int-typed flags take BigScience's
    # TRAIN_SAMPLES=220_000_000
    if isinstance(value, str) and re.fullmatch(r"\d+(_\d+)*", value.strip()):
        return int(value) or None
    return None


def run_tokens(
    seq_len: Any, global_batch: Any, samples: Any = None, iters: Any = None, names: tuple[str, str] = ("samples", "steps"),
    batch_note: str = "",
) -> tuple[int, str] | None:  # fmt: skip
    """The run's tokens and how they were read: ``samples`` x ``seq_len`` where samples are given,
    else ``iters`` x ``global_batch`` x ``seq_len`` (``names``: what the config calls them;
    ``batch_note``: said after the batch, where it was not read from the config)."""
    seq, batch = whole(seq_len), whole(global_batch)
    if seq is None:
        return None
    count = whole(samples)
    if count is not None:
        return count * seq, f"{names[0]} {count:,} x sequence {seq:,}"
    count = whole(iters)
    if count is not None and batch is not None:
        return count * batch * seq, f"{names[1]} {count:,} x global batch {batch:,}{batch_note} x sequence {seq:,}"
    return None


def ramp_clause(words: list[str], samples: Any) -> str | None:
    """What a Megatron batch ramp-up (``--rampup-batch-size START INCREMENT SAMPLES``) does to a
    run of ``samples``: its first SAMPLES train at batches from START up, which ``--tokens``
    counts at the full batch's step (a little fast: a smaller batch has more bubble and
    optimizer time per sample). None when the words are not three whole numbers."""
    values = [whole(word) for word in words]
    total = whole(samples)
    if len(values) != 3 or total is None:
        return None
    start, _, ramp = values
    if start is None or ramp is None:
        return None
    return (
        f"the first {ramp:,} samples, {100 * ramp / total:.1f}%, ramp the batch up from {start:,}: "
        "counted here at the full batch's step"
    )
