"""Global layers without positions (``model.nope_global``): Llama 4's NoPE layers, every fourth,
global (transformers' Llama4TextAttention: ``use_rope`` false there, and its ``qk_norm`` only
with rope), and Cohere2's global layers (Cohere2Attention rotates only with a sliding window):
no rotary pass and no query/key norm on those layers."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import layer_builder

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.memory import layer_activation_bytes
from simcluster.model import build_model, from_hf_config, load_preset
from simcluster.scenario import scenario_from_dict

SEQ, H, HEADS, KV, D = 4096, 2048, 16, 4, 128
MODEL = {"name": "m", "layers": 8, "hidden": H, "heads": HEADS, "kv_heads": KV, "ffn": 8192, "vocab": 32000,
         "attention_chunk": 2048, "global_every": 4, "qk_norm": True, "nope_global": True}  # fmt: skip


def _data(**model) -> dict:
    return {
        "model": {**MODEL, **model},
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "training": {"seq_len": SEQ, "micro_batch": 1, "global_batch": 8, "elementwise": "fused"},
    }


def test_a_nope_layer_has_no_rotary_or_qk_norm_pass():
    ops = layer_builder(_data()).ops
    # fused style: the rotary kernel reads and writes Q, K and V (TE's fused RoPE on the QKV
    # output), each query/key norm reads and writes its input
    rotary = 2 * 2 * (HEADS + 2 * KV) * D
    qk_norm = 2 * 2 * (HEADS + KV) * D
    assert ops.attention_inputs(0).bytes_per_token == rotary + qk_norm
    assert ops.attention_inputs(3).bytes_per_token == 0
    plain = layer_builder(_data(nope_global=False)).ops
    assert plain.attention_inputs(3).bytes_per_token == rotary + qk_norm


def test_a_nope_layer_keeps_no_qk_norm_inputs():
    ctx = build_context(scenario_from_dict(_data()))
    tr = ctx.scenario.training
    local, nope = (layer_activation_bytes(ctx.model, ctx.layout, tr, i) for i in (0, 3))
    assert local - nope == 2 * SEQ * (HEADS + KV) * D  # the pre-norm Q and K, 16-bit


def test_llama4_and_cohere2_configs_and_presets():
    for name in ("llama4-scout", "llama4-maverick"):
        assert load_preset(name).nope_global
    assert from_hf_config(Path(__file__).parent / "fixtures" / "hf" / "llama4-scout.json").nope_global
    from simcluster.hf_import import fields_from_config

    # CohereForAI/c4ai-command-a-03-2025 style: sliding window 4096, one global layer in four
    cohere2 = {"model_type": "cohere2", "num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 8,
               "intermediate_size": 4096, "vocab_size": 1000, "sliding_window": 4096, "sliding_window_pattern": 4}  # fmt: skip
    fields = fields_from_config(cohere2)
    assert (fields["sliding_window"], fields["global_every"], fields["nope_global"]) == (4096, 4, True)


def test_nope_global_needs_global_layers_among_rotary_ones():
    with pytest.raises(UserError) as err:
        build_model({**MODEL, "global_every": 0, "attention_chunk": 0})
    assert err.value.field == "model.nope_global"
