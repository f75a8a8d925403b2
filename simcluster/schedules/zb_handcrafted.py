"""Shared builder of the handcrafted zero-bubble orders ZB-H1 and ZB-H2 (Qi et al. ICLR'24)."""

from __future__ import annotations

from simcluster.schedules.base import PipeOp


def zb_stage_order(m: int, warmup: int, w_lag: int) -> list[PipeOp]:
    """One stage's order: ``warmup`` F, then after the k-th B (1-based) a W of microbatch
    k - w_lag once k > w_lag, then the next F; the remaining W drain at the end.

    Paper Figure 3 (p=4, m=8): ZB-H1 stage 0 = F1-F4, B1 W1 F5, B2 W2 F6, ...;
    last stage = F1 B1 F2 B2 F3 B3 F4 B4 W1 F5 B5 W2 ...
    """
    warmup = min(warmup, m)
    ops = [PipeOp("F", mb) for mb in range(warmup)]
    next_f, next_w = warmup, 0
    for k in range(1, m + 1):
        ops.append(PipeOp("B", k - 1))
        if k > w_lag:
            ops.append(PipeOp("W", next_w))
            next_w += 1
        if next_f < m:
            ops.append(PipeOp("F", next_f))
            next_f += 1
    ops += [PipeOp("W", mb) for mb in range(next_w, m)]
    return ops
