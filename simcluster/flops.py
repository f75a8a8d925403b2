"""Model FLOPs (what MFU counts): forward, backward-input and backward-weight per token.

Matmul FLOPs are 2 x (active weights touched per token); attention adds 2*s*heads*(d_qk + d_v)
per token per layer (s the tokens it attends over: the sequence, a sliding window, or its
document in a packed sequence, ``training.attended_tokens``) counted without the causal mask,
as Megatron-LM (Narayanan et al. 2021: 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) per step without
recompute) and PaLM count. Backward-input = matmul + 2x attention; backward-weight = matmul
(the weight-gradient GEMMs), so the total is 3x forward. MFU uses these model FLOPs, never recomputation; HFU (hardware FLOPs utilisation,
Korthikanti et al. 2022 Sec. 6) adds the matmul FLOPs that recomputation reruns, counted the same
way (:func:`recompute_flops_per_token`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcluster.lora import Adapters, layer_adapter_params
from simcluster.model import ModelSpec

if TYPE_CHECKING:
    from simcluster.scenario import TrainingSection


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
    total = sum(layer_matmul_weights(model, i) for i in range(model.layers))
    for d in range(model.mtp_layers):
        layer = model.layer_params(model.mtp_layer_index(d), active=True) - norms
        total += 2 * model.hidden * model.hidden + layer + model.vocab * model.hidden
    return total + model.vocab * model.hidden


def layer_matmul_weights(model: ModelSpec, index: int) -> float:
    """Weights one token multiplies in layer ``index`` (its active experts for MoE)."""
    norms = model.attention_params() - _attention_weights(model) + model.mlp_norm_params()
    return model.layer_params(index, active=True) - norms


def _attention_weights(model: ModelSpec) -> float:
    # attention_params() includes its input norm (and output norm), biases and sinks; strip to
    # the weight matrices (a sink is added to a softmax denominator, not multiplied by a token)
    return model.attention_params() - model.norm_params() - model.post_norm_params() - model.sink_params()


def attention_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Score and value matmuls per token over all layers, no causal discount (a sliding-window
    layer counts its window instead of the sequence)."""
    return sum(
        layer_attention_flops_per_token(model, seq_len, i) for i in range(model.layers + model.mtp_layers)
    )


def layer_attention_flops_per_token(model: ModelSpec, seq_len: int, index: int) -> float:
    """Score and value matmuls per token of layer ``index``, no causal discount."""
    d_qk, d_v = model.qk_v_head_dims
    return 2.0 * model.attention_span(index, seq_len) * model.heads * (d_qk + d_v)


def token_flops(model: ModelSpec, seq_len: int, lora: Adapters | None = None) -> TokenFlops:
    """Forward / backward-input / backward-weight model FLOPs per token. With LoRA adapters
    the frozen weights take no weight gradient: the backward's weight part is the adapters'
    alone, and each pass adds their GEMMs (MLPerf's llama2_70b_lora counts forward and
    input gradient of the base model, as here less the adapters)."""
    mm = 2.0 * matmul_weights_per_token(model)
    att = attention_flops_per_token(model, seq_len)
    if lora is not None:
        extra = 2.0 * model.layers * layer_adapter_params(model, lora, 1)
        return TokenFlops(forward=mm + att + extra, backward_input=mm + 2 * att + extra, backward_weight=extra)
    return TokenFlops(forward=mm + att, backward_input=mm + 2 * att, backward_weight=mm)


#: how a source counts the model FLOPs behind its MFU or TFLOP/s: ``megatron`` as above
#: (attention without the causal mask, Narayanan et al. 2021, PaLM); ``causal`` halves the
#: attention (Megatron-Bridge's summaries from 25.09, FlashAttention's benchmarks; NeMo's own
#: summaries through 25.07 count it whole); ``6n`` is
#: 6 FLOPs per matmul weight per token, no attention (Kaplan et al. 2020's C = 6N)
FLOP_CONVENTIONS = ("megatron", "causal", "6n")


def convention_factor(model: ModelSpec, seq_len: int, convention: str) -> float:
    """Model FLOPs per token under ``convention`` over those this module counts (megatron)."""
    if convention not in FLOP_CONVENTIONS:
        raise ValueError(f"unknown FLOP convention {convention!r}")
    per_token = token_flops(model, seq_len).total
    attention = 3.0 * attention_flops_per_token(model, seq_len)  # forward 1x, backward 2x
    dropped = {"megatron": 0.0, "causal": 0.5 * attention, "6n": attention}[convention]
    return (per_token - dropped) / per_token


def recompute_flops_per_token(
    model: ModelSpec, seq_len: int, training: TrainingSection, full_layers: Iterable[int]
) -> float:
    """FLOPs per token that recomputation reruns, in the model-FLOPs convention (matmuls and
    attention scores without the causal discount), mirroring what the step plan reruns:

    - ``full``: the whole forward of each layer in ``full_layers`` (embedding, LM head and loss
      run once), which turns Narayanan et al.'s 72 into 96 in eq. (3);
    - ``selective``: ``core_attn`` the attention scores and values of every layer (Korthikanti
      et al. 2022 Sec. 5), ``mla_up_proj`` the MLA up-projections, ``mlp`` each dense MLP;
      ``layernorm`` and ``moe_act`` are memory-bound and add none;
    - ``op``: half of each layer's attention and dense-MLP matmuls (torchtitan's op-level policy).
    """
    if training.recompute == "full":
        return sum(
            2.0 * layer_matmul_weights(model, i) + layer_attention_flops_per_token(model, seq_len, i)
            for i in full_layers
        )
    if training.recompute == "op":
        per_layer = 0.5 * 2.0 * (_attention_weights(model) + _dense_mlp_weights(model))
        return model.layers * per_layer
    redo = training.recomputed
    total = 0.0
    if "core_attn" in redo:
        total += sum(layer_attention_flops_per_token(model, seq_len, i) for i in range(model.layers))
    if "mla_up_proj" in redo and model.mla is not None:
        a = model.mla
        up = a.kv_lora_rank * model.heads * (a.qk_nope_head_dim + a.v_head_dim)
        if a.q_lora_rank:
            up += a.q_lora_rank * model.heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
        total += model.layers * 2.0 * up
    if "mlp" in redo:
        dense = sum(1 for i in range(model.layers) if not model.is_moe_layer(i))
        total += dense * 2.0 * _dense_mlp_weights(model)
    return total


def _dense_mlp_weights(model: ModelSpec) -> float:
    return model.hidden * model.up_width(model.ffn) + model.ffn * model.hidden


def megatron_flops_per_step(batch: int, seq: int, layers: int, hidden: int, vocab: int, recompute: bool) -> float:
    """Narayanan et al. 2021, eq. (3): 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) with full recompute;
    72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) without."""
    if recompute:
        return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    return 72.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))
