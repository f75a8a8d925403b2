"""Sliding-window (local) attention: ``model.sliding_window`` and ``model.global_every``.

A local layer's query attends to the ``w`` keys before it (Mistral 7B and StarCoder2 on every
layer; Gemma 2 and gpt-oss alternate local and global layers, Gemma 3 puts one global layer
after five local ones: Hugging Face ``Gemma3TextConfig.sliding_window_pattern`` = 6, ``is_sliding
= (layer_idx + 1) % pattern``). Its causal band holds s*w - w^2/2 scores instead of s^2/2, and
FlashAttention's windowed kernel walks it as unmasked tiles over w keys, every tile the band
touches computed whole (test_window_tiles.py).
"""

from __future__ import annotations

import json

import pytest
from engine_helpers import (
    attention_core_seconds,
    local_attention_model,
    local_attention_scenario,
    run,
)

from simcluster.compute import KernelModel
from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.flops import attention_flops_per_token
from simcluster.model import build_model, from_hf_config
from simcluster.parallelism.window_tiles import band_scores
from simcluster.scenario import scenario_from_dict

S, W = 32768, 4096


def _model(**extra: int) -> dict:
    return local_attention_model(12, **extra)


def _scenario(seq: int = S, cp: int = 1, cp_comm: str = "p2p", **model: int) -> dict:
    return local_attention_scenario("window", _model(**model), seq, cp, cp_comm)


_core_seconds = attention_core_seconds


def test_gemma3_pattern_makes_every_sixth_layer_global():
    m = build_model(_model(sliding_window=W, global_every=6))
    spans = [m.attention_span(i, S) for i in range(m.layers)]
    assert [i for i, span in enumerate(spans) if span == S] == [5, 11]
    assert all(span == W for i, span in enumerate(spans) if i not in (5, 11))
    assert m.attention_span(0, 2048) == 2048  # a window longer than the sequence changes nothing


def test_attention_flops_count_the_window_per_token():
    plain = build_model(_model())
    local = build_model(_model(sliding_window=W))
    half = build_model(_model(sliding_window=W, global_every=2))
    # 2 * span * heads * (d_qk + d_v) per token per layer, no causal discount (Megatron's count)
    per_key = 2.0 * 16 * (128 + 128)
    assert attention_flops_per_token(plain, S) == pytest.approx(12 * S * per_key)
    assert attention_flops_per_token(local, S) == pytest.approx(12 * W * per_key)
    assert attention_flops_per_token(half, S) == pytest.approx(6 * (S + W) * per_key)


def test_a_local_layer_costs_its_band_a_global_one_the_causal_square():
    data = _scenario(sliding_window=W, global_every=2)
    res = run(data)
    sc = scenario_from_dict(data)
    ctx = build_context(sc)
    km = KernelModel(ctx.profile, "bf16", None, sc.training.fp8_recipe)
    # the band's tiles (window_tiles.py): dgx-h100's default kernel, cuDNN, at 128 x 128
    # its query tiles fill the GPU as an equal-length call of S queries over 16 heads would
    share = km.attention_spread(16, S, 128)
    band = km.attention(1, S, W, 16, 128, 128, causal=False, backward=False) * band_scores(S, W, 128, 128) / (S * W) / share
    square = km.attention(1, S, S, 16, 128, 128, causal=True, backward=False)
    local, global_ = _core_seconds(res, 0), _core_seconds(res, 1)
    # the engine stretches tensor-core work (not the launch gap) by the slowest-GPU factor,
    # so compare the ratio
    assert local / global_ == pytest.approx(band / square, rel=1e-4)
    assert local < 0.3 * global_


def test_a_window_as_long_as_the_sequence_changes_nothing():
    plain = run(_scenario(seq=4096))
    windowed = run(_scenario(seq=4096, sliding_window=4096))
    assert windowed.summary["step_time_s"] == plain.summary["step_time_s"]


def test_global_every_needs_a_window():
    with pytest.raises(UserError) as err:
        build_model(_model(global_every=2))
    assert err.value.field == "model.global_every"


def test_ring_context_parallelism_refuses_local_layers_and_a2a_runs_them():
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(_scenario(cp=2, sliding_window=W)))
    assert err.value.field == "parallel.cp_comm"
    res = run(_scenario(cp=2, cp_comm="a2a", sliding_window=W))
    assert res.summary["step_time_s"] > 0


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"model_type": "mistral", "sliding_window": 4096}, {"sliding_window": 4096}),
        # Gemma2Config's soft-caps (refused unless null: test_hf_families.py)
        ({"model_type": "gemma2", "sliding_window": 4096, "attn_logit_softcapping": None,
          "final_logit_softcapping": None}, {"sliding_window": 4096, "global_every": 2}),
        (
            {"model_type": "gemma3_text", "sliding_window": 1024, "sliding_window_pattern": 6},
            {"sliding_window": 1024, "global_every": 6},
        ),
        (
            {"model_type": "gpt_oss", "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 6},
            {"sliding_window": 128, "global_every": 2},
        ),
        ({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False}, {}),
    ],
)
def test_hf_configs_give_their_window_pattern(tmp_path, config, expected):
    base = {
        "hidden_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 16,
        "intermediate_size": 8192, "vocab_size": 32000,
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, **config}))
    m = from_hf_config(path)
    assert m.sliding_window == expected.get("sliding_window", 0)
    assert m.global_every == expected.get("global_every", 0)


def test_a_non_periodic_layer_pattern_is_a_clear_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "gpt_oss", "hidden_size": 2048, "num_hidden_layers": 3, "num_attention_heads": 16,
        "intermediate_size": 8192, "vocab_size": 32000, "sliding_window": 128,
        "layer_types": ["full_attention", "sliding_attention", "sliding_attention"],
    }))  # fmt: skip
    with pytest.raises(UserError) as err:
        from_hf_config(path)
    assert err.value.field == "model.hf_config"
    assert "layer_types" in str(err.value)


def test_documents_as_long_as_the_window_never_cost_more_than_the_windowed_sequence():
    """Metamorphic seed 9945 (Mistral 7B at tp 8 on GH200): 8K tokens under a 4K window, or the
    same tokens packed as two 4K documents, whose causal squares hold a third fewer scores than
    the band. With two heads per GPU the documents' equal-length call took the attention grid's
    low-occupancy share while the window's call kept the curve, so the documents ran slower;
    the window's query tiles now take the share of an equal-length call of its queries
    (dgx-h100's grid, hardware/dgx-h100.yaml efficiency.attention_grid)."""
    windowed = local_attention_scenario("window", _model(sliding_window=4096), 8192)
    windowed["parallel"].update(tp=8, sequence_parallel=True)
    windowed["training"]["global_batch"] = 1
    packed = json.loads(json.dumps(windowed))
    packed["training"]["document_tokens"] = 4096
    band, squares = attention_core_seconds(run(windowed), 0), attention_core_seconds(run(packed), 0)
    assert squares < band
