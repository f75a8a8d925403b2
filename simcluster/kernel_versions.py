"""A fused-attention kernel's library version, written in its name.

The same kernel library runs at different rates release by release: cuDNN's fused attention on
sm_100 runs the same causal 8K call 1.14x faster forward and 1.22x faster backward in 9.17 than
in 9.13.1 (NVIDIA/cudnn-frontend sdpa_benchmark_training artifacts: GB200 with cuDNN 9.17 at
commit d48a60e against B200 with 9.13.1 at commit 0b1577c, a GPU of the same die). A profile
keeps the release its default curves were measured with under the plain name (``cudnn``) and an
older one under the name with the version (``cudnn-9.13``), so a run whose container held that
release names it. FP8 curves keep :data:`simcluster.fp8_attention.SUFFIX` last
(``cudnn-9.13-fp8``).

What a kernel can train (head dimensions, attention sinks) is the library's, whatever the
release: :func:`family` is the name those tables are keyed by.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"^(?P<base>.+?)-(?P<version>\d+(?:\.\d+)+)(?P<rest>-fp8)?$")


def family(kernel: str) -> str:
    """``kernel`` without its library version (``cudnn-9.13`` -> ``cudnn``,
    ``cudnn-9.13-fp8`` -> ``cudnn-fp8``); a name without one is its own family."""
    found = _NAME.match(kernel)
    return kernel if found is None else found["base"] + (found["rest"] or "")


def release(kernel: str) -> tuple[int, ...] | None:
    """The library release written in ``kernel`` as numbers (``cudnn-9.10`` -> (9, 10)), None
    for a name without one (a profile's default curves)."""
    found = _NAME.match(kernel)
    return None if found is None else tuple(int(part) for part in found["version"].split("."))
