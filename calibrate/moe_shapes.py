"""The mixture-of-experts shapes a measuring run times: a default grid and a scenario's own.

Pure Python (no torch) so the CLI can read ``--scenario`` before any measurement starts.
One :class:`MoeShape` describes one rank's MoE layer for one microbatch: the experts it holds,
the mean routed tokens each receives, the width of one expert GEMM (fc1's forward, the first
GEMM a framework runs on the dispatched tokens), and the router's and the permutation's sizes.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from calibrate.shapes import FP32_BYTES
from simcluster.errors import UserError
from simcluster.units import format_bytes


@dataclass(frozen=True, order=True)
class MoeShape:
    """One rank's MoE layer: ``local_experts`` GEMMs of [t_i, k] @ [k, n] with t_i tokens
    each (``tokens_per_expert`` on average); a router over ``experts`` logits choosing
    ``top_k`` for each of ``tokens`` tokens; permutes of ``tokens * top_k`` rows ``k`` wide."""

    local_experts: int
    tokens_per_expert: int
    n: int
    k: int
    experts: int
    top_k: int
    tokens: int

    @property
    def routed_rows(self) -> int:
        """Token copies the permutation moves: one per routed expert."""
        return self.tokens * self.top_k

    @property
    def operand_bytes(self) -> int:
        """What timing it holds at once, in fp32 (the widest dtype a run times it in): the
        grouped GEMM's tokens, weights and output, or the permute's tokens, routed copies and
        scattered-back tokens, whichever is larger."""
        rows = self.local_experts * self.tokens_per_expert
        grouped = rows * self.k + self.local_experts * self.n * self.k + rows * self.n
        permute = 2 * self.tokens * self.k + self.routed_rows * self.k
        return FP32_BYTES * max(grouped, permute)

    def text(self) -> str:
        """How a progress line names it."""
        return f"{self.local_experts} experts x {self.tokens_per_expert} tokens, {self.n}x{self.k}"


def _grid(local: int, experts: int, top_k: int, n: int, k: int, per_expert: tuple[int, ...]) -> list[MoeShape]:
    # uniform routing over an EP group of experts / local ranks, each routing its own tokens:
    # every expert receives tokens * top_k * ep / experts = tokens * top_k / local of them
    return [MoeShape(local, t, n, k, experts, top_k, max(1, t * local // top_k)) for t in per_expert]


#: Tokens per expert span the launch-bound few (fine-grained experts at a small micro-batch)
#: to the compute-bound thousands. The GPU grid has Qwen3-30B-A3B's widths (HF config.json:
#: hidden 2048, moe_intermediate_size 768 gated, so fc1 is 2048 -> 1536; 128 experts, top 8),
#: 16 local experts as at EP 8; the CPU grids are smaller so that a run stays in seconds.
_GPU = _grid(16, 128, 8, 1536, 2048, (16, 64, 256, 1024, 4096))
_CPU = _grid(8, 64, 8, 256, 512, (8, 32, 128, 512))
_QUICK = _grid(4, 16, 2, 64, 128, (4, 16, 64))


def default_moe_shapes(device: str, quick: bool) -> list[MoeShape]:
    """The built-in MoE grid of a device."""
    if quick:
        return list(_QUICK)
    return list(_GPU if device == "cuda" else _CPU)


#: Hook for the simulator's MoE layer sizes: ``moe_shapes(scenario_path) -> list[tuple of
#: MoeShape's fields]`` (simcluster/moe_kernels.py), looked up lazily like the GEMM hook.
SCENARIO_HOOK = ("simcluster.moe_kernels", "scenario_moe_shapes")


def scenario_moe_shapes(scenario: str) -> list[MoeShape]:
    """The MoE layer of ``scenario`` as one rank runs it (empty for a dense model)."""
    module_name, func_name = SCENARIO_HOOK
    func = getattr(importlib.import_module(module_name), func_name)
    shapes = [MoeShape(*(int(v) for v in fields)) for fields in func(scenario)]
    for s in shapes:
        if min(s.local_experts, s.tokens_per_expert, s.n, s.k, s.tokens) <= 0:
            raise UserError("--scenario", f"its MoE layer has an empty dimension ({s.text()})")
    return shapes


def check_moe_fits(shapes: list[MoeShape], capacity_bytes: int, limit: str) -> None:
    """Each MoE shape's operands fit in ``capacity_bytes`` (``limit`` says what that is): one
    that cannot would fail deep in the run (out of memory, or a hang until --timeout)."""
    for shape in shapes:
        if shape.operand_bytes > capacity_bytes:
            raise UserError(
                "--scenario",
                f"its MoE layer ({shape.text()}) takes {format_bytes(shape.operand_bytes)} in fp32, "
                f"more than {limit}; calibrate a scenario with a smaller micro_batch or seq_len",
            )
