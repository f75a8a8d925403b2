"""Per-GPU token counts and activation sizes under TP / SP / CP sharding."""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.layout import Layout
from simcluster.memory import act_bytes
from simcluster.model import ModelSpec
from simcluster.scenario import TrainingSection


@dataclass(frozen=True)
class Shapes:
    """Sizes one GPU sees for one microbatch."""

    model: ModelSpec
    layout: Layout
    training: TrainingSection

    @property
    def tokens(self) -> float:
        """Tokens of this rank's sequence shard (all TP ranks process them): b*s/cp."""
        return self.training.micro_batch * self.training.seq_len / self.layout.cp

    @property
    def elt(self) -> int:
        return act_bytes(self.training.precision)

    @property
    def hidden_bytes(self) -> float:
        """b*s*h*bytes/cp: one full hidden-state tensor of the microbatch on this rank."""
        return self.tokens * self.model.hidden * self.elt

    @property
    def p2p_bytes(self) -> float:
        """Pipeline send/recv of activations or gradients (SP keeps them sharded by tp)."""
        shard = self.layout.tp if self.layout.sequence_parallel else 1
        return self.hidden_bytes / shard

    @property
    def tp_collective_bytes(self) -> float:
        """nccl-tests size of one TP collective (AG output / RS input / AR buffer): b*s*h*bytes/cp."""
        return self.hidden_bytes

    @property
    def moe_tokens(self) -> float:
        """Tokens one rank routes through the MoE block: its tp-th share of the sequence shard."""
        return self.tokens / self.layout.tp
