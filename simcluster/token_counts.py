"""Token counts as papers and launch scripts round them: ``8K``, ``128K``, ``16M``.

A sequence length of "8K" is 8192 tokens and "128K" 131072 (Llama 3.1's context), a batch of
"16M" tokens 16 x 2^20 (Llama 3's): the suffixes are binary, K = 2^10, M = 2^20, G = 2^30
(``Ki``, ``Mi``, ``Gi`` too), case-insensitive, optionally followed by "tokens". Read by
``training.seq_len`` and ``training.global_batch_tokens`` on the raw scenario, before
validation.
"""

from __future__ import annotations

import re
from typing import Any

from simcluster.errors import UserError
from simcluster.raw_sections import whole

_SUFFIX = {"": 1, "k": 2**10, "ki": 2**10, "m": 2**20, "mi": 2**20, "g": 2**30, "gi": 2**30}
_COUNT = re.compile(r"\s*(\d+)\s*([kmg]i?)?\s*(tokens?)?\s*")


def token_count(value: Any) -> int | None:
    """``value`` as a whole number of tokens above 0 (an integer, or a string such as '8K'),
    or None when it is neither."""
    if whole(value) is not None:
        return int(value)
    match = _COUNT.fullmatch(value.lower()) if isinstance(value, str) else None
    if match and int(match.group(1)) > 0:
        return int(match.group(1)) * _SUFFIX[match.group(2) or ""]
    return None


def expand_seq_len(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with a ``training.seq_len`` written with a suffix ('8K') as its token count."""
    training = data.get("training")
    if not isinstance(training, dict) or not isinstance(training.get("seq_len"), str):
        return data  # a number, or nothing: the schema checks it
    count = token_count(training["seq_len"])
    if count is None:
        raise UserError(
            "training.seq_len",
            f"must be a token count such as 8192 or 8K (2^10 tokens per K), got {training['seq_len']!r}",
        )
    return {**data, "training": {**training, "seq_len": count}}
