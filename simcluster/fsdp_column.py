"""``parallel.fsdp``: fully sharded data parallelism as performance tables write it.

NeMo's and Megatron-Bridge's summaries have an FSDP column ("FSDP = 1: use FSDP, 0: DDP");
NeMo AutoModel's gives the sharding degree (FSDP 32 on 64 GPUs with CP 2). Both mean ZeRO-3
over the data-parallel (x context-parallel) ranks: ``fsdp: true`` or ``1`` is ``zero: 3``,
a degree above 1 is ``zero: 3`` with ``zero_shard`` of that many ranks (hybrid sharding when
it is less than dp x cp; the layout check says when it does not divide them), and ``false`` or
``0`` leaves the scenario's ZeRO stage alone. Expanded on the raw scenario, before validation;
a ZeRO stage other than 3 given with it is a one-line error.
"""

from __future__ import annotations

from typing import Any

from simcluster.errors import UserError
from simcluster.raw_sections import take


def expand_fsdp(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``parallel.fsdp`` turned into ``parallel.zero`` (and ``zero_shard``)."""
    taken = take(data, "parallel", "fsdp")
    if taken is None:
        return data
    parallel, value = taken
    if value is False or value == 0:
        return {**data, "parallel": parallel}
    if not (value is True or (isinstance(value, int) and value > 0)):
        raise UserError("parallel.fsdp", f"must be true/false or a sharding degree (FSDP 32), got {value!r}")
    zero = parallel.get("zero")
    if zero is not None and zero != 3:
        raise UserError("parallel.fsdp", f"is ZeRO-3, but parallel.zero is {zero!r}; give one of them")
    parallel["zero"] = 3
    if value is not True and value > 1:
        shard = parallel.get("zero_shard")
        if shard is not None and shard != value:
            raise UserError("parallel.fsdp", f"shards over {value} ranks, but parallel.zero_shard is {shard!r}")
        parallel["zero_shard"] = value
    return {**data, "parallel": parallel}
