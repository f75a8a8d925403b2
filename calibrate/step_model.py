"""A scenario's dense model as a PyTorch module, for ``calibrate measure-step``.

It is written the way the Llama reference code (meta-llama/llama ``model.py``) and torchtitan
write theirs, so that ``framework: pytorch-ddp`` (``training.elementwise: eager``) describes the
kernels it runs: RMSNorm as fp32 ops, the rotary embedding through complex numbers, grouped-query
K and V repeated to the query heads, PyTorch's SDPA with a causal mask, the attention output made
contiguous, SwiGLU as ``silu(gate) * up``. The QKV and gate/up projections are one Linear each, as
the simulator counts them (one GEMM). Its parameter count is the simulator's
(``ModelSpec.params_total``; tested).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from simcluster.errors import UserError
from simcluster.model import ModelSpec

DROPOUT = 0.1  # GPT-2/GPT-3's hidden dropout, when the model has it (model.dropout)
ROPE_THETA = 10000.0  # the rate of the sinusoids moves no time


def check_buildable(model: ModelSpec, seq_len: int, recompute: str) -> None:
    """A one-line error for what this module does not build."""
    refusals = (
        (model.is_moe, "model.experts", "mixture-of-experts models"),
        (model.mla is not None, "model.mla", "multi-head latent attention"),
        (model.sliding_window > 0, "model.sliding_window", "sliding-window attention"),
        (model.mtp_layers > 0, "model.mtp_layers", "multi-token prediction"),
        (model.position == "alibi", "model.position", "ALiBi positions"),
        # its layer is the Llama reference code's sequential block
        (model.parallel_block, "model.parallel_block", "parallel attention + MLP blocks"),
    )
    for refused, field, what in refusals:
        if refused:
            raise UserError(field, f"measure-step builds dense decoder models only, not {what}")
    if model.position == "learned" and model.max_positions < seq_len:
        raise UserError(
            "model.max_positions",
            f"{model.max_positions} learned positions are fewer than training.seq_len {seq_len}",
        )
    if recompute not in ("none", "full"):
        raise UserError(
            "training.recompute",
            f"measure-step recomputes none or full (each layer checkpointed), got {recompute}",
        )


class RMSNorm(nn.Module):
    """The Llama reference RMSNorm: upcast, mean of squares, rsqrt, downcast, scale."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def _norm(model: ModelSpec, dim: int) -> nn.Module:
    return RMSNorm(dim) if model.norm == "rmsnorm" else nn.LayerNorm(dim, bias=model.norm_bias)


def rotary_table(head_dim: int, seq_len: int) -> torch.Tensor:
    """The rotations of each position, as complex numbers (seq_len x head_dim / 2)."""
    freqs = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq_len).float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def _rotate(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * table[None, :, None, :]).flatten(3).type_as(x)


class Attention(nn.Module):
    """Self-attention with grouped-query heads (kv_heads <= heads)."""

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = model.heads, model.kv_heads, model.d_head
        width = (model.heads + 2 * model.kv_heads) * model.d_head
        self.qkv = nn.Linear(model.hidden, width, bias=model.has_bias("qkv"))
        self.out = nn.Linear(model.heads * model.d_head, model.hidden, bias=model.has_bias("attn_out"))
        # a head_dim norm stands for every kind of model.qk_norm: the same pass over Q and K
        self.q_norm = RMSNorm(model.d_head) if model.has_qk_norm else None
        self.k_norm = RMSNorm(model.d_head) if model.has_qk_norm else None

    def forward(self, x: torch.Tensor, rotary: torch.Tensor | None) -> torch.Tensor:
        b, s, _ = x.shape
        qkv = self.qkv(x)
        # under tensor parallelism the projection's output is this rank's 1/tp of the heads:
        # its slice is read as its own query, key and value heads, as a Megatron-ordered fused
        # QKV weight gives them (the weights are random, so the order is only a convention)
        shards = (self.heads + 2 * self.kv_heads) * self.head_dim // qkv.shape[-1]
        a, kv, d = self.heads // shards, self.kv_heads // shards, self.head_dim
        q, k, v = qkv.split([a * d, kv * d, kv * d], dim=-1)
        q, k, v = q.view(b, s, a, d), k.view(b, s, kv, d), v.view(b, s, kv, d)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            q, k = _rotate(q, rotary), _rotate(k, rotary)
        if kv < a:  # repeat_kv: K and V materialised at the query heads
            k, v = k.repeat_interleave(a // kv, dim=2), v.repeat_interleave(a // kv, dim=2)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        out: torch.Tensor = self.out(o.transpose(1, 2).contiguous().view(b, s, a * d))
        return out


class MLP(nn.Module):
    """SwiGLU (gate and up in one Linear), GeLU or squared ReLU."""

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        self.kind = model.mlp
        self.up = nn.Linear(model.hidden, int(model.up_width(model.ffn)), bias=model.has_bias("mlp"))
        self.down = nn.Linear(model.ffn, model.hidden, bias=model.has_bias("mlp"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # nn.Module's __call__ is typed to return Any
        out: torch.Tensor
        if self.kind == "swiglu":
            gate, up = self.up(x).chunk(2, dim=-1)
            out = self.down(F.silu(gate) * up)
        else:
            y = self.up(x)
            out = self.down(F.gelu(y) if self.kind == "gelu" else F.relu(y).square())
        return out


class Block(nn.Module):
    """A pre-norm transformer layer."""

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        self.attn_norm, self.attn = _norm(model, model.hidden), Attention(model)
        self.mlp_norm, self.mlp = _norm(model, model.hidden), MLP(model)
        self.dropout = DROPOUT if model.dropout else 0.0

    def forward(self, x: torch.Tensor, rotary: torch.Tensor | None) -> torch.Tensor:
        x = x + F.dropout(self.attn(self.attn_norm(x), rotary), self.dropout, self.training)
        return x + F.dropout(self.mlp(self.mlp_norm(x)), self.dropout, self.training)


class ModelChunk(nn.Module):
    """A run of the model's layers, with the embedding when it holds the first and the final
    norm and LM head when it holds the last: a pipeline stage's share, or (all of them) the
    whole model. It takes token ids when it holds the embedding, hidden states otherwise, and
    returns logits when it holds the head."""

    def __init__(
        self,
        model: ModelSpec,
        seq_len: int,
        layers: range,
        embedding: bool,
        head: bool,
        recompute: str = "none",
    ) -> None:
        super().__init__()
        check_buildable(model, seq_len, recompute)
        self.embed = nn.Embedding(model.vocab, model.hidden) if embedding else None
        learned = embedding and model.position == "learned"
        self.positions = nn.Embedding(model.max_positions, model.hidden) if learned else None
        self.blocks = nn.ModuleList(Block(model) for _ in layers)
        self.norm = _norm(model, model.hidden) if head else None
        self.head = nn.Linear(model.hidden, model.vocab, bias=model.has_bias("lm_head")) if head else None
        if model.tied_embeddings and self.head is not None:
            if self.embed is None:
                raise UserError(
                    "model.tied_embeddings",
                    "measure-step keeps a tied embedding on one stage only; untie it or hold the "
                    "embedding and the head on the same stage",
                )
            self.head.weight = self.embed.weight
        self.recompute = recompute == "full"
        rotary = rotary_table(model.d_head, seq_len) if model.position == "rope" else None
        self.register_buffer("rotary", rotary, persistent=False)
        self.dropout = DROPOUT if model.dropout else 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            tokens = x
            x = self.embed(tokens)
            if self.positions is not None:
                x = x + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
            x = F.dropout(x, self.dropout, self.training)
        rotary = self.rotary
        for block in self.blocks:
            if self.recompute:
                x = checkpoint(block, x, rotary, use_reentrant=False)
            else:
                x = block(x, rotary)
        if self.head is not None and self.norm is not None:
            logits: torch.Tensor = self.head(self.norm(x))
            return logits
        return x


class Transformer(ModelChunk):
    """Embedding, the layers, the final norm and the LM head (tied or not); returns logits."""

    def __init__(self, model: ModelSpec, seq_len: int, recompute: str = "none") -> None:
        super().__init__(model, seq_len, range(model.layers), True, True, recompute)
