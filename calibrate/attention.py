"""Causal GQA attention: ``scaled_dot_product_attention`` forward and backward times.

FLOP counts follow the FlashAttention-2 benchmark convention: forward 4·b·h·s²·d, halved when
causal; backward 2.5 × forward (two matmuls recomputed or re-read plus three gradient matmuls).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from calibrate.gemm import DTYPES, iterations_for
from calibrate.timers import Timer, robust_time
from simcluster.attention_kernels import BWD_FLOPS_FACTOR


@dataclass(frozen=True)
class AttentionShape:
    """Query heads ``heads`` share ``kv_heads`` key/value heads (GQA)."""

    batch: int
    seq: int
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool = True

    @property
    def fwd_flops(self) -> float:
        """Forward FLOPs: QK^T and PV, 2·2·b·h·s²·d, halved by the causal mask."""
        full = 4.0 * self.batch * self.heads * self.seq**2 * self.head_dim
        return full / 2 if self.causal else full


def default_shapes(device: str, quick: bool) -> list[AttentionShape]:
    """The call shapes timed: on a GPU the FlashAttention papers' sweep (16K tokens per call,
    hidden 2048, sequence 512 to 16K, head dims 64 and 128, causal), so the measured curves
    compare point for point with the published ones; GQA with 4 query heads per KV head."""
    if quick:
        return [AttentionShape(1, s, 8, 2, 64) for s in (128, 512)]
    if device == "cuda":
        return [
            AttentionShape(16384 // s, s, 2048 // d, 2048 // d // 4, d)
            for d in (64, 128)
            for s in (512, 1024, 2048, 4096, 8192, 16384)
        ]
    return [AttentionShape(1, s, h, h // 4, 64) for s in (256, 1024) for h in (8, 16)]


def backward_call(out: torch.Tensor, inputs: tuple[torch.Tensor, ...], grad: torch.Tensor) -> Callable[[], object]:
    """One attention backward, as often as it is called: the input gradients returned, not
    accumulated. ``out.backward`` would add each call's gradients into the leaves' ``.grad``
    after the first (autograd's AccumulateGrad), one more read-read-write pass over Q, K and V
    that a training step, whose Q, K and V are not leaves, never makes: for 16K tokens of hidden
    2048 in bf16, 288 MiB moved (~100 us at an H100's ~3 TB/s) beside a backward of 86 GFLOP at
    sequence 512 (a few hundred us)."""
    return lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True)


def measure_attention(
    shape: AttentionShape, dtype: str, device: torch.device, timer: Timer, budget_s: float
) -> dict[str, object]:
    """Time forward and backward of one shape; returns a ``measured.attention`` row."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    dt = DTYPES[dtype]

    def tensor(heads: int) -> torch.Tensor:
        t = torch.randn(shape.batch, heads, shape.seq, shape.head_dim, generator=gen)
        return t.to(device=device, dtype=dt).requires_grad_(True)

    q, k, v = tensor(shape.heads), tensor(shape.kv_heads), tensor(shape.kv_heads)
    gqa = shape.heads != shape.kv_heads

    def fwd() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal, enable_gqa=gqa)

    with torch.no_grad():
        once = timer(fwd, iters=1, warmup=1)
        fwd_s = robust_time(timer, fwd, iterations_for(once, budget_s / 2))
    out = fwd()
    bwd = backward_call(out, (q, k, v), torch.ones_like(out))
    once = timer(bwd, iters=1, warmup=1)
    bwd_s = robust_time(timer, bwd, iterations_for(once, budget_s / 2))
    return {
        "batch": shape.batch,
        "seq": shape.seq,
        "heads": shape.heads,
        "kv_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "causal": shape.causal,
        "dtype": dtype,
        "fwd_s": fwd_s,
        "bwd_s": bwd_s,
        "fwd_tflops": shape.fwd_flops / fwd_s / 1e12,
        "bwd_tflops": BWD_FLOPS_FACTOR * shape.fwd_flops / bwd_s / 1e12,
    }
