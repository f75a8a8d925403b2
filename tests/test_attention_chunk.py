"""Chunked local attention (``model.attention_chunk``, Llama 4's ``attention_chunk_size``):
transformers' Llama4TextAttention masks a rotary layer's queries to the keys of their own
aligned chunk (masking_utils' ``create_chunked_causal_mask``: block-diagonal, causal within
each block), so the kernel's work is that of s/c independent causal attentions over c tokens;
every ``global_every``-th layer (Llama 4's NoPE layers) attends to the whole sequence."""

from __future__ import annotations

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
from simcluster.model import build_model
from simcluster.scenario import scenario_from_dict

S, C = 32768, 8192


def _model(**extra: int) -> dict:
    return local_attention_model(8, **extra)


def _scenario(seq: int = S, cp: int = 1, cp_comm: str = "p2p", **model: int) -> dict:
    return local_attention_scenario("chunk", _model(**model), seq, cp, cp_comm)


_core_seconds = attention_core_seconds


def test_every_fourth_layer_attends_globally():
    m = build_model(_model(attention_chunk=C, global_every=4))
    assert [m.attention_span(i, S) for i in range(8)] == [C, C, C, S, C, C, C, S]


def test_attention_flops_count_the_chunk_per_token():
    # 2 * span * heads * (d_qk + d_v) per token and layer without the causal discount (Megatron's
    # count): a chunked layer's span is its chunk, as a window's is the window
    per_key = 2.0 * 16 * (128 + 128)
    m = build_model(_model(attention_chunk=C, global_every=4))
    assert attention_flops_per_token(m, S) == pytest.approx((6 * C + 2 * S) * per_key)


def test_a_chunked_layer_runs_s_over_c_causal_blocks():
    data = _scenario(attention_chunk=C, global_every=4)
    res = run(data)
    sc = scenario_from_dict(data)
    km = KernelModel(build_context(sc).profile, "bf16", None, sc.training.fp8_recipe)
    blocks = km.attention(S // C, C, C, 16, 128, 128, causal=True, backward=False)
    square = km.attention(1, S, S, 16, 128, 128, causal=True, backward=False)
    chunked, global_ = _core_seconds(res, 0), _core_seconds(res, 3)
    # the engine stretches tensor-core work by the slowest-GPU factor: compare the ratio
    assert chunked / global_ == pytest.approx(blocks / square, rel=1e-4)
    # s/c = 4 causal blocks of c^2/2 scores: c/s = a quarter of the causal square's, at the
    # kernel's (lower) rate on 8,192-token blocks
    assert 0.25 < chunked / global_ < 0.35


def test_a_last_partial_chunk_is_its_own_block():
    data = _scenario(seq=12288, attention_chunk=C)
    res = run(data)
    sc = scenario_from_dict(data)
    km = KernelModel(build_context(sc).profile, "bf16", None, sc.training.fp8_recipe)
    full = km.attention(1, 12288, 12288, 16, 128, 128, causal=True, backward=False)
    split = km.attention(1, C, C, 16, 128, 128, causal=True, backward=False) + km.attention(
        1, 4096, 4096, 16, 128, 128, causal=True, backward=False
    )
    plain = run(_scenario(seq=12288))
    # two launches against one, which the slowest-GPU factor does not stretch: rel 5e-4
    assert _core_seconds(res, 0) / _core_seconds(plain, 0) == pytest.approx(split / full, rel=5e-4)


def test_a_chunk_as_long_as_the_sequence_changes_nothing():
    """Llama 4 at 8,192 tokens: every chunked layer sees the whole sequence."""
    assert run(_scenario(seq=C, attention_chunk=C)).summary["step_time_s"] == run(_scenario(seq=C)).summary["step_time_s"]


def test_a_window_and_a_chunk_together_are_refused():
    with pytest.raises(UserError) as err:
        build_model(_model(attention_chunk=C, sliding_window=4096))
    assert err.value.field == "model.attention_chunk"


def test_ring_context_parallelism_refuses_chunked_layers_by_name():
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(_scenario(cp=2, attention_chunk=C)))
    assert err.value.field == "parallel.cp_comm" and "model.attention_chunk=8192" in str(err.value)


def test_llama4s_config_name_is_an_alias():
    """``attention_chunk_size`` (Llama 4's config.json) written in a scenario's model section."""
    sc = scenario_from_dict(_scenario(attention_chunk_size=C, global_every=4))
    assert (sc.model.attention_chunk, sc.model.global_every) == (C, 4)
