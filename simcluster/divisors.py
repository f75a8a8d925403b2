"""The degrees that divide a count, for one-line errors that name a fix ('tp 1, 2, 4 or 8').

A layout check that refuses a degree not dividing some count (tp and the heads, ep and the
experts, kv_heads and the heads) names the values that would pass; ``fits`` narrows them to
the ones the next check would not refuse either (a tp that also fits the GPUs)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def divisors(count: int, fits: Callable[[int], bool] = lambda d: True) -> list[int]:
    """The positive divisors of ``count``, ascending, that ``fits`` accepts (found in pairs up
    to the square root: a mistyped count of a billion heads is answered at once)."""
    small = [d for d in range(1, math.isqrt(count) + 1) if count % d == 0]
    every = small + [count // d for d in reversed(small) if d * d != count]
    return [d for d in every if fits(d)]


def one_of(values: Sequence[int]) -> str:
    """'1, 2, 4 or 8' ('1' for one value), for the fix of an error message."""
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
