"""``training.global_batch_tokens``: a global batch given in tokens, as papers state it.

Llama 3's "16M tokens per batch" or a "4M-token batch" is ``global_batch`` sequences of
``seq_len`` tokens. Expanded on the raw scenario, before validation, so every later stage sees
``training.global_batch`` only; the token count must be a whole number of sequences, and given
together with ``global_batch`` the two must agree. Written as an exact count (``16777216``) or
with a binary suffix as papers round them (``16M`` = 16 x 2^20, ``4Mi``, ``512K``).
"""

from __future__ import annotations

import re
from typing import Any

from simcluster.errors import UserError

_FIELD = "training.global_batch_tokens"
_SUFFIX = {"": 1, "k": 2**10, "ki": 2**10, "m": 2**20, "mi": 2**20, "g": 2**30, "gi": 2**30}


def _count(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+)\s*([kmg]i?)?\s*(tokens?)?\s*", value.lower())
        if match and int(match.group(1)) > 0:
            return int(match.group(1)) * _SUFFIX[match.group(2) or ""]
    raise UserError(_FIELD, f"must be a token count such as 4194304 or 4M (2^20 tokens per M), got {value!r}")


def expand_batch_tokens(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``training.global_batch_tokens`` turned into ``training.global_batch``."""
    training = data.get("training")
    if not isinstance(training, dict) or "global_batch_tokens" not in training:
        return data
    training = dict(training)
    tokens = _count(training.pop("global_batch_tokens"))
    seq_len = training.get("seq_len")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise UserError(_FIELD, "needs training.seq_len to count sequences; give it, or give global_batch")
    if tokens % seq_len:
        raise UserError(
            _FIELD,
            f"{tokens} tokens is not a whole number of {seq_len}-token sequences "
            f"({tokens / seq_len:g}); give training.global_batch in sequences",
        )
    given = training.get("global_batch")
    if given is not None and given != tokens // seq_len:
        raise UserError(
            _FIELD,
            f"{tokens} tokens / {seq_len} = {tokens // seq_len} sequences, but training.global_batch is "
            f"{given!r}; give one of them",
        )
    training["global_batch"] = tokens // seq_len
    return {**data, "training": training}
