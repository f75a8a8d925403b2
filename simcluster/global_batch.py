"""The global batch stated the other ways papers and tables state it.

- ``training.global_batch_tokens``: Llama 3's "16M tokens per batch" is ``global_batch``
  sequences of ``seq_len`` tokens; the token count must be a whole number of sequences, and
  given together with ``global_batch`` the two must agree. Written as an exact count
  (``16777216``) or with a binary suffix as papers round them (``16M`` = 16 x 2^20, ``4Mi``,
  ``512K``: ``token_counts.py``).
- ``training.grad_accum``: a table's GA column, microbatches per data-parallel rank per step.
  Without ``global_batch`` it sets it (GA x micro-batch x dp); with it and no
  ``micro_batch``, it sets the micro-batch (global batch / (GA x dp), when that divides); with
  both, the layout check (``layout.py``) holds them to agree.

Expanded on the raw scenario, before validation, so every later stage sees
``training.global_batch``.
"""

from __future__ import annotations

from typing import Any

from simcluster.errors import UserError
from simcluster.raw_sections import take, whole
from simcluster.token_counts import token_count

_FIELD = "training.global_batch_tokens"


def _count(value: Any) -> int:
    count = token_count(value)
    if count is None:
        raise UserError(_FIELD, f"must be a token count such as 4194304 or 4M (2^20 tokens per M), got {value!r}")
    return count


def expand_global_batch(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``training.global_batch`` from tokens or gradient accumulation steps."""
    return _from_grad_accum(_from_tokens(data))


def _from_grad_accum(data: dict[str, Any]) -> dict[str, Any]:
    training, cluster = data.get("training"), data.get("cluster")
    if not isinstance(training, dict) or not isinstance(cluster, dict):
        return data
    steps, dp = whole(training.get("grad_accum")), _dp(data.get("parallel"), cluster)
    if steps is None or dp is None:
        return data  # the schema or the layout check names what is missing
    if "global_batch" not in training:
        mbs = whole(training.get("micro_batch", 1))
        if mbs is None:
            return data
        return {**data, "training": {**training, "global_batch": steps * mbs * dp}}
    batch = whole(training["global_batch"])
    if "micro_batch" not in training and batch is not None and batch % (steps * dp) == 0:
        # a table's GBS and GA columns without an MBS one: the micro-batch is what they leave
        return {**data, "training": {**training, "micro_batch": batch // (steps * dp)}}
    return data


def _dp(given: Any, cluster: dict[str, Any]) -> int | None:
    """The data-parallel degree stated, or the GPUs over tp x pp x cp."""
    parallel: dict[str, Any] = given if isinstance(given, dict) else {}
    dp = whole(parallel.get("dp"))
    if dp is None and whole(cluster.get("gpus")):
        split = 1
        for key in ("tp", "pp", "cp"):
            split *= whole(parallel.get(key, 1)) or 0
        dp = cluster["gpus"] // split if split and cluster["gpus"] % split == 0 else None
    return dp


def _from_tokens(data: dict[str, Any]) -> dict[str, Any]:
    taken = take(data, "training", "global_batch_tokens")
    if taken is None:
        return data
    training, written = taken
    tokens = _count(written)
    seq_len = whole(training.get("seq_len"))
    if seq_len is None:
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
