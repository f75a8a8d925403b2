"""A sliding window's fused attention is computed in whole tiles (parallelism/window_tiles.py):
flash-attn 2's local kernel walks each block of M query rows over the key blocks from
floor((m*M - w) / N) to ceil((m+1)*M / N) (csrc/flash_attn/src/flash_fwd_kernel.h,
n_block_min / n_block_max), with 128 x 64 tiles at head dimension 128 and 128 x 128 at 64
(flash_fwd_launch_template.h), FA3's local kernel 128 x 128 at 128 and 192 x 128 at 64
(hopper/flash_fwd_launch_template.h)."""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder

from simcluster.parallelism.window_tiles import band_scores, tile


def test_flash_attn_2_tiles_by_head_dimension():
    assert tile("fa2", 128) == (128, 64) and tile("fa2", 64) == (128, 128)
    assert tile("fa3", 128) == (128, 128) and tile("fa3", 64) == (192, 128)


def test_band_counts_every_touched_tile():
    """s = 32768, w = 4096, 128 x 64 tiles: query blocks 0..31 start at key 0 and end at their
    own last row, (m + 1) * 128 keys; blocks 32..255 span keys m*128 - 4096 to (m + 1) * 128,
    4224 keys each."""
    start = sum(128 * 128 * (m + 1) for m in range(32))
    rest = 224 * 128 * 4224
    assert band_scores(32768, 4096, 128, 64) == start + rest
    # 3% over the band's s*w - w^2/2 scores; a window of one tile row would cost twice its band
    assert band_scores(32768, 4096, 128, 64) / (32768 * 4096 - 4096**2 / 2) == pytest.approx(1.0312, abs=1e-4)
    # a tile as fine as one score computes the band exactly
    assert band_scores(1000, 100, 1, 1) == sum(min(i, 100) + 1 for i in range(1000))


def test_a_local_layer_is_timed_on_its_tiles():
    def core(kernel: str, window: int) -> float:
        b = layer_builder({
            "model": {"layers": 2, "hidden": 2048, "heads": 32, "vocab": 32000, "sliding_window": window},
            "cluster": {"hardware": "dgx-h100", "gpus": 8},
            "training": {"seq_len": 8192, "micro_batch": 1, "global_batch": 8, "attention_kernel": kernel},
        })
        return b.attention_core("F", 0)

    # head dim 64: 128 x 128 tiles under flash-attn 2, 192 x 128 under FA3 at the same w = 128
    fa2, fa3 = core("fa2", 128), core("fa3", 128)
    km_rates = {}
    for kernel in ("fa2", "fa3"):
        b = layer_builder({
            "model": {"layers": 2, "hidden": 2048, "heads": 32, "vocab": 32000},
            "cluster": {"hardware": "dgx-h100", "gpus": 8},
            "training": {"seq_len": 8192, "micro_batch": 1, "global_batch": 8, "attention_kernel": kernel},
        })
        # the window's query tiles keep the occupancy share of an equal-length call of 8,192
        # queries over 32 heads (KernelModel.attention_spread)
        share = b.km.attention_spread(32, 8192, 64)
        km_rates[kernel] = b.km.attention(1, 8192, 128, 32, 64, 64, causal=False, backward=False) / share
    assert fa2 == pytest.approx(km_rates["fa2"] * band_scores(8192, 128, 128, 128) / (8192 * 128))
    assert fa3 == pytest.approx(km_rates["fa3"] * band_scores(8192, 128, 192, 128) / (8192 * 128))
