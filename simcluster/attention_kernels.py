"""Fused-attention kernel throughput by implementation, head dimension and sequence length.

A profile may carry published benchmark curves of fused attention kernels (FlashAttention-2,
cuDNN, FlashAttention-3, ...) under ``efficiency.attention_kernels``; a scenario picks one with
``training.attention_kernel`` (or the profile's ``efficiency.attention_kernel``). Kernels differ
by up to 2x on the same GPU (H100, head dim 128, 4K tokens: FA2 319 vs cuDNN 518 TFLOP/s causal
forward), and all of them lose efficiency at short sequences and small head dims, which one
scalar cannot express.

Throughputs follow the benchmarks' convention: forward FLOPs 4·b·h·s²·d, halved when causal;
backward 2.5x forward. Lookup: log-linear in sequence length, linear in head dimension, clamped
at both ends. A causal curve without backward points borrows the non-causal backward scaled by
the forward's causal / non-causal ratio at the same length (the published backward benchmarks
are non-causal only).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator


class AttentionCurve(BaseModel):
    """One benchmark series: a kernel at one head dimension, causal or not."""

    model_config = ConfigDict(extra="forbid")

    head_dim: int = Field(gt=0)
    causal: bool
    fwd_tflops: list[tuple[float, float]] = Field(description="[[sequence length, TFLOP/s], ...]")
    bwd_tflops: list[tuple[float, float]] | None = Field(default=None)

    @model_validator(mode="after")
    def _sorted_positive(self) -> AttentionCurve:
        for name in ("fwd_tflops", "bwd_tflops"):
            points = getattr(self, name)
            if points is None:
                continue
            if not points or any(s <= 0 or t <= 0 for s, t in points):
                raise ValueError(f"{name} needs [sequence length, TFLOP/s] pairs, all positive")
            setattr(self, name, sorted(points))
        return self


def _log_seq_interp(points: list[tuple[float, float]], seq: float) -> float:
    """TFLOP/s at ``seq``: linear in log(sequence length), clamped to the measured range."""
    if seq <= points[0][0]:
        return points[0][1]
    if seq >= points[-1][0]:
        return points[-1][1]
    for (s0, t0), (s1, t1) in zip(points, points[1:], strict=False):
        if s0 <= seq <= s1:
            w = (math.log(seq) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return t0 + w * (t1 - t0)
    return points[-1][1]  # unreachable: the range checks above cover every seq


def _curve_tflops(curves: list[AttentionCurve], causal: bool, seq: float, backward: bool) -> float | None:
    """TFLOP/s of one head dimension's curves (None when that variant is missing)."""
    same = next((c for c in curves if c.causal == causal), None)
    if same is None:
        return None
    if not backward:
        return _log_seq_interp(same.fwd_tflops, seq)
    if same.bwd_tflops is not None:
        return _log_seq_interp(same.bwd_tflops, seq)
    other = next((c for c in curves if c.causal != causal and c.bwd_tflops is not None), None)
    if other is None:
        return None
    ratio = _log_seq_interp(same.fwd_tflops, seq) / _log_seq_interp(other.fwd_tflops, seq)
    return _log_seq_interp(other.bwd_tflops, seq) * ratio


def kernel_tflops(
    curves: list[AttentionCurve], head_dim: float, seq: float, causal: bool, backward: bool
) -> float:
    """Achieved TFLOP/s of a kernel at this head dimension, sequence length and mask."""
    by_dim: dict[int, list[AttentionCurve]] = {}
    for c in curves:
        by_dim.setdefault(c.head_dim, []).append(c)
    points = []
    for dim in sorted(by_dim):
        t = _curve_tflops(by_dim[dim], causal, seq, backward)
        if t is None:
            t = _curve_tflops(by_dim[dim], not causal, seq, backward)
        if t is not None:
            points.append((dim, t))
    if not points:
        raise ValueError("attention kernel has no usable curve")
    if head_dim <= points[0][0]:
        return points[0][1]
    if head_dim >= points[-1][0]:
        return points[-1][1]
    for (d0, t0), (d1, t1) in zip(points, points[1:], strict=False):
        if d0 <= head_dim <= d1:
            return t0 + (head_dim - d0) / (d1 - d0) * (t1 - t0)
    return points[-1][1]  # unreachable
