"""Megatron's context-parallel flags as ``parallel.cp_comm`` and ``parallel.cp_a2a``.

``--cp-comm-type`` picks how the ranks of a context-parallel group share keys and values, passed
to TransformerEngine's attention as its ``cp_comm_type``: ``p2p`` (the ring, Megatron's default),
``all_gather``, ``a2a`` (Ulysses) or ``a2a+p2p`` (all-to-all inside groups, the ring across them,
whose sizes ``--hierarchical-context-parallel-sizes A2A P2P`` gives). Its help text spells the
second "allgather"; TransformerEngine takes ``all_gather``, so both are read. One value per layer
is allowed there; simcluster runs one kind in every layer. Megatron-DeepSpeed's
``--ds-sequence-parallel-size N`` is DeepSpeed-Ulysses: the sequence split over N ranks that
all-to-all it over heads around attention (DeepSpeed's ``DistributedAttention``), gradients reduced
over the data- and sequence-parallel ranks together: ``parallel.cp`` N with ``cp_comm`` a2a.
"""

from __future__ import annotations

from typing import Any

from simcluster.errors import UserError
from simcluster.importers.flags import Flags
from simcluster.importers.result import Imported

_KINDS = {"p2p": "p2p", "a2a": "a2a", "all_gather": "all_gather", "allgather": "all_gather", "a2a+p2p": "a2a+p2p"}


def context_parallel(flags: Flags, parallel: dict[str, Any], out: Imported) -> None:
    """``parallel.cp_comm`` (and with a2a+p2p ``cp_a2a``) from the context-parallel flags."""
    ulysses = flags.integer("ds-sequence-parallel-size")
    if ulysses is not None and ulysses > 1:
        parallel.update(cp=ulysses, cp_comm="a2a")
        out.notes.append(
            f"--ds-sequence-parallel-size {ulysses}: DeepSpeed-Ulysses, parallel.cp {ulysses} with cp_comm a2a"
        )
    kinds = flags.words("cp-comm-type")
    sizes = flags.words("hierarchical-context-parallel-sizes")
    if not kinds and not sizes:
        return
    cp = parallel.get("cp", 1)
    if cp == 1:
        out.notes.append("--cp-comm-type / --hierarchical-context-parallel-sizes at context parallel size 1: no effect")
        return
    unknown = [k for k in kinds if k not in _KINDS]
    if unknown:
        raise UserError("--cp-comm-type", f"'{unknown[0]}' is not one of p2p, a2a, all_gather, a2a+p2p")
    distinct = sorted({_KINDS[k] for k in kinds})
    if len(distinct) > 1:
        raise UserError(
            "--cp-comm-type",
            f"gives layers different kinds ({', '.join(distinct)}); simcluster runs one in every layer: "
            "give one, or --set parallel.cp_comm=KIND",
        )
    kind = distinct[0] if distinct else "p2p"
    parallel["cp_comm"] = kind
    if kind == "a2a+p2p":
        parallel["cp_a2a"] = _a2a_size(sizes, cp)
    elif sizes:
        out.notes.append(f"--hierarchical-context-parallel-sizes: read only with --cp-comm-type a2a+p2p, not {kind}")


def _a2a_size(sizes: list[str], cp: int) -> int:
    """The all-to-all groups' size: the first of the hierarchical sizes, whose product is cp."""
    if not sizes:
        raise UserError(
            "--hierarchical-context-parallel-sizes",
            "--cp-comm-type a2a+p2p builds its all-to-all and ring groups from it: give both sizes (e.g. 2 4)",
        )
    if not all(s.isdigit() and int(s) > 0 for s in sizes) or len(sizes) != 2:
        raise UserError("--hierarchical-context-parallel-sizes", f"'{' '.join(sizes)}' is not two whole sizes, A2A P2P")
    a2a, ring = int(sizes[0]), int(sizes[1])
    if a2a * ring != cp:
        raise UserError(
            "--hierarchical-context-parallel-sizes",
            f"{a2a} x {ring} is not the context parallel size {cp}",
        )
    return a2a
