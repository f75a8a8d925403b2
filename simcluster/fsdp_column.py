"""``parallel.fsdp``: fully sharded data parallelism as performance tables write it.

NeMo's and Megatron-Bridge's summaries have an FSDP column ("FSDP = 1: use FSDP, 0: DDP");
NeMo AutoModel's gives the sharding degree (FSDP 32 on 64 GPUs with CP 2). Both mean ZeRO-3
over the data-parallel (x context-parallel) ranks: ``fsdp: true`` or ``1`` is ``zero: 3``,
a degree above 1 is ``zero: 3`` with ``zero_shard`` of that many ranks (hybrid sharding when
it is less than dp x cp; the layout check says when it does not divide them), and ``false`` or
``0`` leaves the scenario's ZeRO stage alone. Expanded on the raw scenario, before validation;
a ZeRO stage other than 3 given with it is a one-line error.

PyTorch FSDP1's ``sharding_strategy`` names are read too (``fsdp: HYBRID_SHARD``;
``torch/distributed/fsdp/api.py`` ShardingStrategy): FULL_SHARD is ``zero: 3``;
SHARD_GRAD_OP (parameters kept gathered from the forward to the backward: the unit is not
resharded after its forward, ``RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES`` leaves it out) adds
``zero3.reshard_after_forward: false``; HYBRID_SHARD shards inside a node and all-reduces across
nodes (``zero_shard: node``), _HYBRID_SHARD_ZERO2 both. NO_SHARD (DDP-like: each unit's
gradient all-reduced in its post-backward hook, every microbatch) has no ZeRO stage of its own
here: an error pointing to ``zero: 0``.
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
    if isinstance(value, str) and value.upper() in STRATEGIES:
        return _strategy(data, parallel, value.upper())
    if value is False or value == 0:
        return {**data, "parallel": parallel}
    if not (value is True or (isinstance(value, int) and value > 0)):
        raise UserError(
            "parallel.fsdp",
            f"must be true/false, a sharding degree (FSDP 32) or an FSDP1 sharding strategy "
            f"({', '.join(STRATEGIES)}), got {value!r}",
        )
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


#: FSDP1's ShardingStrategy names: (zero_shard, reshard_after_forward) each stands for
STRATEGIES: dict[str, tuple[str | None, bool]] = {
    "FULL_SHARD": (None, True),
    "SHARD_GRAD_OP": (None, False),
    "HYBRID_SHARD": ("node", True),
    "_HYBRID_SHARD_ZERO2": ("node", False),
    "NO_SHARD": (None, True),
}


def _strategy(data: dict[str, Any], parallel: dict[str, Any], name: str) -> dict[str, Any]:
    """``data`` with FSDP1's sharding strategy ``name`` as ZeRO-3 settings."""
    zero = parallel.get("zero")
    if name == "NO_SHARD":
        raise UserError(
            "parallel.fsdp",
            "NO_SHARD replicates parameters, gradients and optimizer state; write parallel.zero: 0 "
            "(framework pytorch-ddp for DDP's buckets)",
        )
    if zero is not None and zero != 3:
        raise UserError("parallel.fsdp", f"{name} is ZeRO-3, but parallel.zero is {zero!r}; give one of them")
    parallel["zero"] = 3
    shard, reshard = STRATEGIES[name]
    if shard is not None:
        given = parallel.get("zero_shard")
        if given is not None and given != shard:
            # a degree given beside HYBRID_SHARD is a custom intra-node group (process_group=(intra, inter))
            shard = given
        parallel["zero_shard"] = shard
    out = {**data, "parallel": parallel}
    if not reshard:
        zero3 = data.get("zero3")
        zero3 = dict(zero3) if isinstance(zero3, dict) else {}
        if zero3.get("reshard_after_forward") is True:
            raise UserError("parallel.fsdp", f"{name} keeps parameters gathered for the backward, but zero3.reshard_after_forward is true")
        zero3["reshard_after_forward"] = False
        out["zero3"] = zero3
    return out
