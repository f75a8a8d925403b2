"""The scores a fused attention kernel computes for a sliding window: whole tiles.

A windowed FlashAttention kernel walks each block of ``M`` query rows over the blocks of ``N``
keys that the band touches, from ``floor((m*M - w) / N)`` to ``ceil((m+1)*M / N)``
(flash-attn 2's ``n_block_min`` / ``n_block_max`` for a local mask, csrc/flash_attn/src/
flash_fwd_kernel.h; the same bounds in FA3's hopper/block.h), and masks the scores outside the
band inside those tiles. So a query row past the first window costs about ``w + M`` keys of
work, not ``w`` (``w + M + N/2`` when ``N`` does not divide ``w``): against the band's
s*w - w^2/2, +3% for a 4096-token window (Gemma 2, Mistral) and +12.5% for Gemma 3's 1024 at
32K tokens under flash-attn 2, x2 for gpt-oss's 128 (head dimension 64: 128 x 128 tiles),
x3 under FA3's 192-row tiles. A causal kernel's diagonal tiles are already inside the causal
benchmark rates (timed against s^2/2 FLOPs); the window's tiles run at the unmasked rate, so
their extra work is counted here.

Tile shapes (``M`` x ``N``, forward, BF16, by head dimension):

- ``fa2``: flash-attn 2's ``run_mha_fwd_hdim64`` 128 x 128, ``run_mha_fwd_hdim128`` and
  ``hdim256`` (A100 and H100, no dropout) 128 x 64 (csrc/flash_attn/src/flash_fwd_launch_template.h); its backward's
  ``run_mha_bwd_hdim128`` 64 x 128 tiles the band along the keys with the same w + 128 + 32
  per key;
- ``fa3``: FlashAttention-3's local kernels (hopper/flash_fwd_launch_template.h
  ``run_mha_fwd_hdim64`` 192 x 128, ``hdim128`` 128 x 128 when causal or local, ``hdim256``
  128 x 80);
- any other kernel (cuDNN's, a calibrated profile's, the scalar efficiencies): 128 x 128,
  ASSUMPTION (cuDNN does not publish its tiles).

The backward is charged the forward's tiles (ASSUMPTION; exact for flash-attn 2 at head
dimension 128, above).
"""

from __future__ import annotations

import math
from functools import lru_cache

_DEFAULT = (128, 128)


def tile(kernel: str | None, head_dim: float) -> tuple[int, int]:
    """(query rows, keys) of one tile of the fused kernel ``kernel`` at ``head_dim``."""
    if kernel == "fa2":
        return (128, 128) if head_dim <= 64 else (128, 64)
    if kernel == "fa3":
        if head_dim <= 64:
            return (192, 128)
        return (128, 128) if head_dim <= 128 else (128, 80)
    return _DEFAULT


@lru_cache(maxsize=256)  # one loop over query blocks per shape, not per layer and phase
def band_scores(seq: int, window: int, rows: int, keys: int) -> float:
    """Scores (query x key pairs) the kernel computes for a causal sliding window of ``window``
    keys over ``seq`` tokens, every touched tile whole (the module docstring)."""
    total = 0
    for m in range(math.ceil(seq / rows)):
        q0, q1 = m * rows, min(seq, (m + 1) * rows)
        lo = max(0, (q0 - window) // keys * keys)
        hi = min(seq, math.ceil(q1 / keys) * keys)
        total += (q1 - q0) * (hi - lo)
    return float(total)
