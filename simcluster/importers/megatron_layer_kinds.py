"""Megatron-Core layers simcluster does not cost, refused at import.

simcluster costs transformers whose every layer is softmax attention over the whole sequence
followed by an MLP or MoE block. Imported flag by flag, a Megatron launch of another stack
would be simulated as such a transformer, so these are refused instead, each by the flag (or
program) that makes it:

- hybrid state-space models: ``pretrain_mamba.py`` builds a ``MambaModel`` whose layers are
  Mamba-2 mixers, attention and MLP (or MoE) blocks as ``--hybrid-override-pattern`` spells them
  (``M``, ``*``, ``-``, ``E``) or ``--hybrid-attention-ratio`` / ``--hybrid-mlp-ratio`` place
  them, the mixers shaped by ``--mamba-*`` (Megatron-Core ``ssm/mamba_mixer.py``,
  ``mamba_hybrid_layer_allocation.py``);
- ``--experimental-attention-variant``: Gated DeltaNet (``gated_delta_net``, Qwen3-Next's linear
  attention on three layers in four with ``--linear-attention-freq``), Kimi delta attention
  (``kda``), DeepSeek sparse attention (``dsa``, ``dsa_gqa``: an indexer picks the keys each query
  attends to);
- ``--heterogeneous-layers-config-path``: a block configuration per layer (attention or FFN
  replaced, skipped or resized layer by layer, as in Llama-Nemotron's searched architectures).
"""

from __future__ import annotations

from pathlib import PurePath

from simcluster.errors import UserError
from simcluster.importers.flags import Flags

#: the training program of Megatron-LM's hybrid (and pure Mamba) models
MAMBA_PROGRAM = "pretrain_mamba.py"
_NOT_MODELLED = "is not modelled; simcluster costs softmax attention over the whole sequence in every layer"
_HYBRID = (
    "Megatron-Core's hybrid Mamba model (MambaModel: Mamba-2 mixers beside attention and MLP layers) "
    f"{_NOT_MODELLED}, and would cost its Mamba layers as attention"
)
_VARIANTS = {
    "gated_delta_net": "Gated DeltaNet linear attention",
    "kda": "Kimi delta attention (linear)",
    "dsa": "DeepSeek sparse attention (indexer-selected keys)",
    "dsa_gqa": "DeepSeek sparse attention (indexer-selected keys)",
}
_HETEROGENEOUS = "heterogeneous-layers-config-path"
#: MambaModel's layer-allocation flags (not every --hybrid-* flag: --hybrid-context-parallel is
#: context parallelism for packed sequences)
_HYBRID_FLAGS = {"hybrid-override-pattern", "hybrid-attention-ratio", "hybrid-mlp-ratio", "is-hybrid-model"}


def _spelled(name: str) -> str:
    return name.replace("_", "-")  # a YAML recipe's keys, as Megatron's argparse would read them


def hybrid_flag(flags: Flags) -> str | None:
    """The first flag that describes a hybrid Mamba model's layers or mixers, None without one."""
    for name in flags.values:
        spelled = _spelled(name)
        if spelled.startswith("mamba-") or spelled in _HYBRID_FLAGS:
            return name
    return None


def refuse_unmodelled_layers(flags: Flags, program: str) -> None:
    """Refuse a launch whose layers are not a softmax-attention transformer's (module docstring)."""
    name = hybrid_flag(flags)
    if name is not None or PurePath(program).name == MAMBA_PROGRAM:
        raise UserError(f"--{name}" if name is not None else MAMBA_PROGRAM, _HYBRID)
    for name, values in flags.values.items():
        spelled = _spelled(name)
        if spelled == "experimental-attention-variant":
            variant = " ".join(values)
            kind = _VARIANTS.get(variant, "an experimental attention variant")
            raise UserError(f"--{name}", f"{variant}: {kind} {_NOT_MODELLED}")
        if spelled == _HETEROGENEOUS:
            raise UserError(
                f"--{name}",
                "Megatron-Core's heterogeneous layers (a block configuration per layer) is not modelled; "
                "simcluster costs every layer alike",
            )
