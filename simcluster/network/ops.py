"""Collective operations: names, validation and nccl-tests bandwidth definitions.

busbw = algbw x factor, algbw = S / t, with S the nccl-tests "size" of the op and n ranks
(NVIDIA/nccl-tests doc/PERFORMANCE.md): all_reduce 2(n-1)/n; all_gather, reduce_scatter and
all_to_all (n-1)/n; broadcast and send_recv 1.
"""

from __future__ import annotations

from collections.abc import Callable

from simcluster.errors import UserError, did_you_mean

BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
OPS: tuple[str, ...] = tuple(BUSBW_FACTOR)


def check_op(op: str, field: str = "op") -> str:
    """The op name, or a UserError with a did-you-mean hint."""
    if op not in BUSBW_FACTOR:
        raise UserError(
            field, f"unknown collective '{op}'{did_you_mean(op, OPS)}; one of {', '.join(OPS)}"
        )
    return op


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw for ``op`` on ``n`` ranks."""
    return BUSBW_FACTOR[check_op(op)](n) if n > 1 else 1.0


def bandwidths(op: str, nbytes: float, n: int, time_s: float) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s as nccl-tests reports them."""
    algbw = nbytes / time_s if time_s > 0 else float("inf")
    return algbw, algbw * busbw_factor(op, n)
