"""LoRA adapters on ``calibrate measure-step``'s PyTorch model (the scenario's ``lora:``).

Each targeted Linear becomes its frozen self plus a rank-r pair as the LoRA paper writes it and
PEFT runs it eagerly: ``base(x) + B(A(dropout(x))) * scale``, A (k -> r) and B (r -> n) without
bias, B zero-initialised; every other parameter (embedding, norms, LM head, the base weights) is
frozen, so autograd runs no weight gradient for them and DDP reduces the adapters alone. The
simulator prices the same kernels (``simcluster/parallelism/lora_blocks.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from simcluster.errors import UserError
from simcluster.layout import Layout
from simcluster.lora import Adapters

#: where each target sits in a calibrate.step_model Block: (sub-module, its Linear)
TARGET_PATHS = {"qkv": ("attn", "qkv"), "proj": ("attn", "out"), "fc1": ("mlp", "up"), "fc2": ("mlp", "down")}
#: alpha / r as MLPerf's llama2_70b_lora sets it (alpha 32, rank 16); the scale moves no time
SCALE = 2.0


class LoraLinear(nn.Module):
    """A frozen Linear with a trained rank-``rank`` adapter beside it."""

    def __init__(self, base: nn.Linear, rank: int, dropout: float) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_a = nn.Linear(base.in_features, rank, bias=False)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False)
        nn.init.zeros_(self.lora_b.weight)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        adapted = self.lora_b(self.lora_a(F.dropout(x, self.dropout, self.training)))
        out: torch.Tensor = self.base(x) + adapted * SCALE
        return out


def check_lora(layout: Layout) -> None:
    """A one-line refusal of what the adapters are not built for: tensor parallelism (the
    DTensor plan names the plain Linears)."""
    if layout.lora is not None and layout.tp > 1:
        raise UserError("lora.rank", "measure-step builds LoRA adapters without tensor parallelism; set parallel.tp: 1")


def apply_lora(module: nn.Module, adapters: Adapters) -> nn.Module:
    """Freeze every parameter of ``module`` (a Transformer or a pipeline ModelChunk) and put
    the adapters beside the targeted Linears of each of its blocks; returns ``module``."""
    module.requires_grad_(False)
    for block in getattr(module, "blocks", []):
        for target in adapters.targets:
            part, name = TARGET_PATHS[target]
            holder = getattr(block, part)
            setattr(holder, name, LoraLinear(getattr(holder, name), adapters.rank, adapters.dropout))
    return module


def trained(module: nn.Module) -> list[nn.Parameter]:
    """The parameters the optimizer steps: those that need a gradient."""
    return [p for p in module.parameters() if p.requires_grad]
