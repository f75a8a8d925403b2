"""Model FLOPs (what MFU counts): forward, backward-input and backward-weight per token.

Matmul FLOPs are 2 x (active weights touched per token); attention adds 2*s*heads*(d_qk + d_v)
per token per layer counted without the causal mask, as Megatron-LM (Narayanan et al. 2021:
72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) per step without recompute) and PaLM count. Backward-input
= matmul + 2x attention; backward-weight = matmul (the weight-gradient GEMMs), so the total is
3x forward. MFU uses these model FLOPs, never recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.model import ModelSpec


@dataclass(frozen=True)
class TokenFlops:
    """FLOPs per token of one pass over the whole model."""

    forward: float
    backward_input: float
    backward_weight: float

    @property
    def total(self) -> float:
        return self.forward + self.backward_input + self.backward_weight


def matmul_weights_per_token(model: ModelSpec) -> float:
    """Weights multiplied per token: active layer weights (no norms/biases) + the LM head, and
    each MTP module's projection, layer and pass through the shared head."""
    norms = model.attention_params() - _attention_weights(model) + model.mlp_norm_params()
    total = sum(model.layer_params(i, active=True) - norms for i in range(model.layers))
    for d in range(model.mtp_layers):
        layer = model.layer_params(model.mtp_layer_index(d), active=True) - norms
        total += 2 * model.hidden * model.hidden + layer + model.vocab * model.hidden
    return total + model.vocab * model.hidden


def _attention_weights(model: ModelSpec) -> float:
    # attention_params() includes its input norm and biases; strip to the weight matrices
    h = model.hidden
    norm = 2 * h if model.norm == "layernorm" else h
    return model.attention_params() - norm


def attention_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Score and value matmuls per token over all layers, no causal discount."""
    if model.mla is not None:
        d_qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
        d_v = model.mla.v_head_dim
    else:
        d_qk = d_v = model.d_head
    return (model.layers + model.mtp_layers) * 2.0 * seq_len * model.heads * (d_qk + d_v)


def token_flops(model: ModelSpec, seq_len: int) -> TokenFlops:
    """Forward / backward-input / backward-weight model FLOPs per token."""
    mm = 2.0 * matmul_weights_per_token(model)
    att = attention_flops_per_token(model, seq_len)
    return TokenFlops(forward=mm + att, backward_input=mm + 2 * att, backward_weight=mm)


def megatron_flops_per_step(batch: int, seq: int, layers: int, hidden: int, vocab: int, recompute: bool) -> float:
    """Narayanan et al. 2021, eq. (3): 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) with full recompute;
    72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) without."""
    if recompute:
        return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    return 72.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))
