"""Mixture-of-experts kernels besides the dense GEMMs, timed as frameworks run them.

- Grouped expert GEMMs over uneven token counts, by each implementation this torch has:
  ``loop`` issues one ``torch.mm`` per expert (PyTorch eager; TransformerEngine's
  ``GroupedLinear`` issues one cuBLAS GEMM per split, over several streams), ``grouped_mm``
  one ``torch._grouped_mm`` over all of them (torchtitan's ``_run_experts_grouped_mm``).
  In FP8 (when the run times fp8) the loop's GEMMs are ``torch._scaled_mm`` on E4M3 operands in
  cuBLASLt's TN layout, each expert's rows padded to 16 as TransformerEngine's ``Fp8Padding``
  pads them before ``GroupedLinear``. Each row also holds the same GEMMs timed one at a time
  and summed: the ratio of the grouped call to that sum is what the simulator applies to its
  per-GEMM model.
- The token permutation: ``index_select`` of the routed copies' rows (Megatron-Core's
  ``permute``) and its inverse, a ``scatter_add_`` back onto the tokens (``unpermute``).
- The router's softmax and top-k over fp32 logits.
- The read-back of the per-expert counts: ``.tolist()`` of a small device tensor once the
  device is idle (the dropless dispatchers' ``tokens_per_expert`` device-to-host copy).

Token counts come from a seeded multinomial draw (uniform routing), so every run times the
same uneven split.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from calibrate.gemm import (
    DTYPES,
    FP8_ALIGN,
    FP8_OUT,
    fp8_padded,
    iterations_for,
    operand_dtype,
    result_dtype,
)
from calibrate.moe_shapes import MoeShape
from calibrate.timers import Timer, robust_time, synchronize

#: implementations of a grouped GEMM, in the order a run times them
IMPLS = ("loop", "grouped_mm")


def routed_counts(total: int, bins: int, seed: int = 0) -> list[int]:
    """``total`` token copies routed uniformly at random into ``bins`` experts (seeded)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    picks = torch.randint(0, bins, (total,), generator=gen)
    return [int(c) for c in torch.bincount(picks, minlength=bins).tolist()]


def _operands(shape: MoeShape, dtype: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(tokens [sum t_i, k], weights [E, n, k] as stored by nn.Linear-style experts, counts:
    each expert's rows, padded to FP8_ALIGN in fp8)."""
    counts = routed_counts(shape.local_experts * shape.tokens_per_expert, shape.local_experts)
    kind = operand_dtype(dtype, device)
    if dtype == "fp8":
        counts = [fp8_padded(c) for c in counts]
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(sum(counts), shape.k, generator=gen).to(device=device, dtype=kind)
    w = torch.randn(shape.local_experts, shape.n, shape.k, generator=gen).to(device=device, dtype=kind)
    return x, w, counts


def _expert_mm(dtype: str, device: torch.device) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], object]:
    """One expert's GEMM ``rows @ b`` into ``out``: ``torch.mm``, or in fp8 ``torch._scaled_mm``
    (per-tensor scales of one, a bf16 result; ``b`` the transposed view of the stored weight,
    column-major as cuBLASLt's FP8 GEMMs take it)."""
    if dtype != "fp8":
        return lambda rows, b, out: torch.mm(rows, b, out=out)
    one = torch.ones((), device=device, dtype=torch.float32)
    return lambda rows, b, out: torch._scaled_mm(rows, b, scale_a=one, scale_b=one, out_dtype=FP8_OUT, out=out)


def grouped_mm_missing(device: torch.device, dtype: str) -> str | None:
    """Why ``torch._grouped_mm`` cannot run here (None when it can): absent from this torch
    build, or refusing this device or dtype (CUDA builds run it on Hopper and later only)."""
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no torch._grouped_mm"
    try:
        x = torch.ones(16, 16, device=device, dtype=DTYPES[dtype])
        w = torch.ones(2, 16, 16, device=device, dtype=DTYPES[dtype]).transpose(-2, -1)
        torch._grouped_mm(x, w, offs=torch.tensor([8, 16], device=device, dtype=torch.int32))
    except (RuntimeError, NotImplementedError) as exc:
        return f"torch._grouped_mm refused {dtype} on {device.type}: " + " ".join(str(exc).split())[:160]
    return None


def _calls(x: torch.Tensor, w: torch.Tensor, counts: list[int], dtype: str) -> dict[str, Callable[[], object]]:
    """The grouped call of each implementation, writing into one output."""
    out = torch.empty(x.shape[0], w.shape[1], device=x.device, dtype=result_dtype(dtype))
    xs, outs = torch.split(x, counts), torch.split(out, counts)
    wt = w.transpose(-2, -1)  # [E, k, n]: a view, read through the transpose as torchtitan does
    offs = torch.tensor(counts, device=x.device).cumsum(0).to(torch.int32)
    mm = _expert_mm(dtype, x.device)

    def loop() -> None:
        for i, rows in enumerate(xs):
            if rows.shape[0]:
                mm(rows, wt[i], outs[i])

    return {"loop": loop, "grouped_mm": lambda: torch._grouped_mm(x, wt, offs=offs)}


def measure_grouped(
    shape: MoeShape, dtype: str, device: torch.device, timer: Timer, budget_s: float, impls: tuple[str, ...]
) -> tuple[list[dict[str, object]], list[str]]:
    """Rows of ``measured.moe.grouped_gemm`` for one shape: each implementation's grouped call,
    beside the sum of the same per-expert GEMMs timed one at a time; and notes on the
    implementations that refused this shape (``torch._grouped_mm`` wants 16-byte aligned
    strides on a GPU), which are not timed. In fp8 the counts (``max_tokens``, the rate) are
    the padded ones the GEMMs run."""
    if dtype == "fp8" and (shape.n % FP8_ALIGN or shape.k % FP8_ALIGN):
        return [], [f"fp8 not timed at {shape.text()}: n and k must be multiples of {FP8_ALIGN} for an FP8 GEMM"]
    x, w, counts = _operands(shape, dtype, device)
    wt = w.transpose(-2, -1)
    mm = _expert_mm(dtype, device)
    singles = 0.0
    by_rows: dict[int, float] = {}  # experts with the same count run the same GEMM
    for i, rows in enumerate(torch.split(x, counts)):
        t = rows.shape[0]
        if t == 0:
            continue
        if t not in by_rows:
            out = torch.empty(t, shape.n, device=device, dtype=result_dtype(dtype))

            def one(rows: torch.Tensor = rows, b: torch.Tensor = wt[i], out: torch.Tensor = out) -> None:
                mm(rows, b, out)

            once = timer(one, iters=1, warmup=1)
            by_rows[t] = robust_time(timer, one, iterations_for(once, budget_s / len(counts)))
        singles += by_rows[t]
    calls = _calls(x, w, counts, dtype)
    flops = 2.0 * sum(counts) * shape.n * shape.k
    rows_out, notes = [], []
    for impl in impls:
        call = calls[impl]
        try:
            once = timer(call, iters=1, warmup=1)
        except (RuntimeError, NotImplementedError) as exc:
            reason = " ".join(str(exc).split())[:160]
            notes.append(f"{impl} not timed at {shape.text()}: {reason}")
            continue
        grouped = robust_time(timer, call, iterations_for(once, budget_s))
        rows_out.append(
            {
                "impl": impl, "dtype": dtype, "experts": shape.local_experts,
                "tokens_per_expert": shape.tokens_per_expert, "n": shape.n, "k": shape.k,
                "max_tokens": max(counts), "time_s": grouped, "singles_s": singles,
                "ratio": grouped / singles, "tflops": flops / grouped / 1e12,
            }
        )  # fmt: skip
    return rows_out, notes


def measure_permute(shape: MoeShape, dtype: str, device: torch.device, timer: Timer, budget_s: float) -> dict[str, object]:
    """A ``measured.moe.permute`` row: the routed copies gathered in expert order
    (``index_select``), and scattered back onto their tokens (``scatter_add_`` into zeros, as
    Megatron-Core's ``unpermute`` sums a token's top_k outputs)."""
    gen = torch.Generator(device="cpu").manual_seed(2)
    x = torch.randn(shape.tokens, shape.k, generator=gen).to(device=device, dtype=DTYPES[dtype])
    experts = torch.randint(0, shape.experts, (shape.routed_rows,), generator=gen)
    # the copies sorted by expert, each naming its token (Megatron's sorted_indices)
    order = torch.argsort(experts, stable=True)
    idx = (order // shape.top_k).to(device)
    gathered = torch.empty(shape.routed_rows, shape.k, device=device, dtype=x.dtype)
    back = torch.empty_like(x)
    wide = idx.unsqueeze(1).expand(-1, shape.k)

    def permute() -> None:
        torch.index_select(x, 0, idx, out=gathered)

    def unpermute() -> None:
        back.zero_().scatter_add_(0, wide, gathered)

    row: dict[str, object] = {
        "tokens": shape.tokens, "top_k": shape.top_k, "hidden": shape.k, "dtype": dtype,
        # each routed copy's row read once and written once: the least traffic either moves
        "bytes": 2 * shape.routed_rows * shape.k * x.element_size(),
    }  # fmt: skip
    for name, call in (("permute_s", permute), ("unpermute_s", unpermute)):
        once = timer(call, iters=1, warmup=1)
        row[name] = robust_time(timer, call, iterations_for(once, budget_s))
    return row


def measure_router(shape: MoeShape, device: torch.device, timer: Timer, budget_s: float) -> dict[str, object]:
    """A ``measured.moe.router`` row: softmax over fp32 logits [tokens, experts], then top-k
    (the routers of Megatron-Core, torchtitan and DeepSpeed score in fp32)."""
    gen = torch.Generator(device="cpu").manual_seed(3)
    logits = torch.randn(shape.tokens, shape.experts, generator=gen).to(device)

    def route() -> None:
        torch.topk(torch.softmax(logits, dim=-1), shape.top_k, dim=-1)

    once = timer(route, iters=1, warmup=1)
    t = robust_time(timer, route, iterations_for(once, budget_s))
    return {"tokens": shape.tokens, "experts": shape.experts, "top_k": shape.top_k, "time_s": t}


def measure_count_read(experts: int, device: torch.device, reads: int = 50) -> float:
    """Host seconds of ``.tolist()`` on a device tensor of per-expert counts, the device idle
    (what a dropless dispatcher's read-back costs the host besides waiting for the device);
    the median of ``reads`` reads, each after a ``bincount`` like the one it reads."""
    picks = torch.randint(0, experts, (4096,), generator=torch.Generator().manual_seed(4)).to(device)
    times = []
    for _ in range(reads + 2):
        counts = torch.bincount(picks, minlength=experts)
        synchronize(device.type)
        start = time.perf_counter()
        counts.tolist()
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])  # the first reads warm the copy path up
