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
are non-causal only). A head dimension with curves for one mask only uses them for both.

A calibrated profile carries its own kernel, :data:`MEASURED`: the attention the calibration
timed on the user's GPUs (``measured.attention`` rows), as curves of the same kind, so a
calibrated rate depends on sequence length and head dimension exactly as a published one does.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from simcluster.interp import interp
from simcluster.strict_numbers import NumbersNotBooleans

MEASURED = "measured"  # the kernel name of a calibrated profile's own attention curves
BWD_FLOPS_FACTOR = 2.5  # backward FLOPs over forward (FlashAttention benchmark convention)


class AttentionCurve(NumbersNotBooleans):
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


def _curve_tflops(curves: list[AttentionCurve], causal: bool, seq: float, backward: bool) -> float | None:
    """TFLOP/s of one head dimension's curves (None when that variant is missing)."""
    same = next((c for c in curves if c.causal == causal), None)
    if same is None:
        return None
    if not backward:
        return interp(same.fwd_tflops, seq, log_x=True)
    if same.bwd_tflops is not None:
        return interp(same.bwd_tflops, seq, log_x=True)
    other = next((c for c in curves if c.causal != causal and c.bwd_tflops is not None), None)
    if other is None:
        return None
    assert other.bwd_tflops is not None  # next() above picked a curve with a backward
    ratio = interp(same.fwd_tflops, seq, log_x=True) / interp(other.fwd_tflops, seq, log_x=True)
    return interp(other.bwd_tflops, seq, log_x=True) * ratio


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
    return interp(points, head_dim)


def row_flops(row: dict, backward: bool) -> float:
    """FLOPs of one ``measured.attention`` row's pass (benchmark convention, as above)."""
    flops: float = 4.0 * row["batch"] * row["heads"] * row["seq"] ** 2 * row["head_dim"]
    if row.get("causal", True):
        flops *= 0.5
    return flops * BWD_FLOPS_FACTOR if backward else flops


def curves_from_rows(rows: list[dict]) -> list[AttentionCurve]:
    """The :data:`MEASURED` kernel from ``measured.attention`` rows: one curve per head
    dimension and mask, TFLOP/s from each row's times, the best row where several share a
    sequence length (different head counts or batch sizes of one call shape)."""
    best: dict[tuple[int, bool], dict[str, dict[float, float]]] = {}
    for row in rows:
        key = (int(row["head_dim"]), bool(row.get("causal", True)))
        passes = best.setdefault(key, {"fwd": {}, "bwd": {}})
        for name, col, backward in (("fwd", "fwd_s", False), ("bwd", "bwd_s", True)):
            seconds = row.get(col)
            if seconds and seconds > 0:
                tflops = row_flops(row, backward) / seconds / 1e12
                seq = float(row["seq"])
                passes[name][seq] = max(passes[name].get(seq, 0.0), tflops)
    curves = []
    for (head_dim, causal), passes in sorted(best.items()):
        if not passes["fwd"]:
            continue
        curves.append(
            AttentionCurve(
                head_dim=head_dim,
                causal=causal,
                fwd_tflops=sorted(passes["fwd"].items()),
                bwd_tflops=sorted(passes["bwd"].items()) or None,
            )
        )
    return curves
