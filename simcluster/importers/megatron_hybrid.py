"""Megatron-Core's hybrid state-space models, refused at import.

``pretrain_mamba.py`` builds a ``MambaModel``: a stack whose layers are Mamba-2 mixers, attention
and MLP (or MoE) blocks as ``--hybrid-override-pattern`` spells them (``M``, ``*``, ``-``, ``E``)
or ``--hybrid-attention-ratio`` / ``--hybrid-mlp-ratio`` place them, with the mixers shaped by
``--mamba-state-dim``, ``--mamba-head-dim``, ``--mamba-num-groups`` and ``--mamba-num-heads``
(Megatron-Core ``ssm/mamba_mixer.py``, ``mamba_hybrid_layer_allocation.py``). simcluster costs
softmax-attention transformers only: imported flag by flag, such a script would be simulated as
a transformer with an attention and an MLP in every layer, so it is refused instead.
"""

from __future__ import annotations

from pathlib import PurePath

from simcluster.errors import UserError
from simcluster.importers.flags import Flags

#: the training program of Megatron-LM's hybrid (and pure Mamba) models
MAMBA_PROGRAM = "pretrain_mamba.py"


def hybrid_flag(flags: Flags) -> str | None:
    """The first flag that describes a hybrid Mamba model's layers or mixers, None without one."""
    for name in flags.values:
        spelled = name.replace("_", "-")
        if spelled.startswith(("hybrid-", "mamba-")) or spelled == "is-hybrid-model":
            return name
    return None


def refuse_hybrid(flags: Flags, program: str) -> None:
    """Refuse a launch of Megatron-Core's hybrid Mamba model (by its flags or its program)."""
    name = hybrid_flag(flags)
    if name is None and PurePath(program).name != MAMBA_PROGRAM:
        return
    field = f"--{name}" if name is not None else MAMBA_PROGRAM
    raise UserError(
        field,
        "Megatron-Core's hybrid Mamba model (MambaModel: Mamba-2 mixers beside attention and MLP "
        "layers) is not modelled; simcluster costs softmax-attention transformers only and would "
        "cost its Mamba layers as attention",
    )
