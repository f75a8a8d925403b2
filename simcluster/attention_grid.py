"""Fused attention's rate by how many (sequence, head) pairs one call spreads over the SMs.

A fused-attention kernel launches one CTA per (batch x head, 128-row tile of the sequence):
at a fixed sequence length, fewer heads (tensor parallelism divides them) or a smaller
micro-batch leave fewer CTAs per SM, so their per-tile start and finish (loading Q, writing
O and the softmax statistics) and the last wave's idle SMs weigh more. NVIDIA's
cudnn-frontend prefill sweep on an H200 (the H100's GH100 SMs; batch 1, causal, head dim 128,
the same sequence at 64, 32, 16 and 8 query heads) measures it: at 4K tokens 599, 545, 474 and
378 TFLOP/s (hardware/dgx-h100.yaml, efficiency.attention_grid).

The published curves of ``efficiency.attention_kernels`` were each measured at one such
spread, stated per profile: the FlashAttention-3 paper's H100 figures hold batch x sequence at
16K tokens and the width at 2048 (16 heads of 128), i.e. 262,144 / sequence (batch x head)
pairs at head dim 128. A call with ``units`` pairs runs at the curve's rate times this table's
rate at ``units`` over its rate at the curves' own count, both at the call's sequence length
(log-log interpolation; clamped to the table's range, so a call at or beyond the curves'
spread keeps the curve's rate: the table has nothing above 64 heads).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from simcluster.strict_numbers import NumbersNotBooleans


class AttentionGrid(NumbersNotBooleans):
    """Measured forward rates of one fused-attention kernel at batch 1 by sequence length and
    query heads, and the batch x sequence tokens and heads x head-dim width the profile's
    published curves were measured at."""

    model_config = ConfigDict(extra="forbid")

    curve_tokens: float = Field(gt=0, description="batch x sequence of the published curves' benchmark")
    curve_width: float = Field(gt=0, description="query heads x head dim of the published curves' benchmark")
    fwd_tflops: list[tuple[float, float, float]] = Field(
        min_length=4, description="[[sequence length, query heads at batch 1, TFLOP/s], ...] on a full grid"
    )

    @model_validator(mode="after")
    def _full_grid(self) -> AttentionGrid:
        if any(s <= 0 or h <= 0 or t <= 0 for s, h, t in self.fwd_tflops):
            raise ValueError("fwd_tflops needs [sequence length, heads, TFLOP/s] rows, all positive")
        seqs = sorted({s for s, _, _ in self.fwd_tflops})
        heads = sorted({h for _, h, _ in self.fwd_tflops})
        cells = {(s, h) for s, h, _ in self.fwd_tflops}  # a repeated row must not stand in for a hole
        if len(seqs) < 2 or len(heads) < 2 or len(cells) != len(self.fwd_tflops) or len(cells) != len(seqs) * len(heads):
            raise ValueError(
                "fwd_tflops needs one row for every sequence length x head count, at least two of each"
            )
        return self

    def _log_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        seqs = sorted({s for s, _, _ in self.fwd_tflops})
        heads = sorted({h for _, h, _ in self.fwd_tflops})
        table = np.zeros((len(seqs), len(heads)))
        for s, h, t in self.fwd_tflops:
            table[seqs.index(s), heads.index(h)] = math.log(t)
        return np.log2(seqs), np.log2(heads), table

    def _log_rate(self, seq: float, units: float) -> float:
        xs, ys, table = self._log_table()
        x = float(np.clip(math.log2(seq), xs[0], xs[-1]))
        y = float(np.clip(math.log2(units), ys[0], ys[-1]))
        i = min(int(np.searchsorted(xs, x, side="right")) - 1, len(xs) - 2)
        j = min(int(np.searchsorted(ys, y, side="right")) - 1, len(ys) - 2)
        fx = (x - xs[i]) / (xs[i + 1] - xs[i])
        fy = (y - ys[j]) / (ys[j + 1] - ys[j])
        low = table[i, j] * (1 - fy) + table[i, j + 1] * fy
        high = table[i + 1, j] * (1 - fy) + table[i + 1, j + 1] * fy
        return float(low * (1 - fx) + high * fx)

    def curve_units(self, seq: float, head_dim: float) -> float:
        """(batch x head) pairs the published curves ran at this sequence length and head dim."""
        return self.curve_tokens / seq * self.curve_width / head_dim

    def factor(self, units: float, seq: float, head_dim: float) -> float:
        """A call's rate over the curve's at ``units`` (batch x heads per GPU) pairs of ``seq``
        tokens: at most 1 (more pairs than the curves' keep the curve's rate)."""
        if units <= 0 or seq <= 0 or head_dim <= 0:
            return 1.0
        ref = self.curve_units(seq, head_dim)
        if units >= ref:
            return 1.0
        return min(1.0, math.exp(self._log_rate(seq, units) - self._log_rate(seq, ref)))
