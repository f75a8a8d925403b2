"""The training loop of ``calibrate measure-step``: the scenario's model under
DistributedDataParallel or FSDP2, through a PyTorch pipeline schedule when it has pipeline
stages (``calibrate/step_pipeline.py``), stepped as a plain PyTorch loop does (clipping, fused
AdamW), timed between device synchronisations (each step its slowest rank's), and optionally
one profiled step."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def train(
    ctx: Any, dctx: Any, steps: int, warmup: int, progress: Callable[..., None], trace: Path | None = None
) -> list[float]:
    """Seconds of each timed step on this rank (warm-up steps run first, untimed); with
    ``trace``, one more step runs under the profiler and rank 0 writes its chrome trace;
    ``progress`` is :func:`simcluster.progress.progress_bar`'s ``advance``."""
    import torch
    import torch.distributed as dist

    from calibrate.timers import synchronize

    layout, scenario = ctx.layout, ctx.scenario
    torch.manual_seed(1234 + dctx.rank)
    accum = layout.global_batch // (layout.micro_batch * layout.dp)
    shape = (accum, layout.micro_batch, layout.seq_len + 1)
    tokens = torch.randint(ctx.model.vocab, shape, device=dctx.device)
    inputs, targets = tokens[..., :-1], tokens[..., 1:]
    bf16 = scenario.training.precision == "bf16"

    def autocast() -> Any:
        return torch.autocast(dctx.device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    mesh = None
    if dctx.distributed:
        from calibrate.step_parallel import rank_mesh

        mesh = rank_mesh(layout, dctx.device.type)
    if layout.pp > 1:
        from calibrate.step_pipeline import pipeline_step

        passes, params = pipeline_step(ctx, dctx, mesh, inputs, targets, autocast)
    else:
        passes, params = _data_parallel_passes(ctx, dctx, mesh, inputs, targets, autocast)
    # fused: one pass over the states, as the simulator's optimizer step and apex/TE FusedAdam
    optimizer = torch.optim.AdamW(params, lr=1e-5, fused=True)

    def step() -> None:
        passes()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    times = []
    for k in range(warmup + steps):
        label = f"{'warm-up' if k < warmup else 'timed'} step {k + 1}"
        progress(label, cost=0.0, count=0)  # names the step under way
        dctx.barrier()
        synchronize(dctx.device.type)
        start = time.perf_counter()
        step()
        synchronize(dctx.device.type)
        elapsed = time.perf_counter() - start
        if dctx.distributed:  # a step ends when its slowest rank's does
            probe = torch.tensor([elapsed], dtype=torch.float64, device=dctx.device)
            dist.all_reduce(probe, op=dist.ReduceOp.MAX)
            elapsed = float(probe.item())
        if k >= warmup:
            times.append(elapsed)
        progress(label)
    if trace is not None:  # after the timed steps: the profiler's own cost is not in them
        progress("profiled step", cost=0.0, count=0)
        _profiled(step, dctx, trace)
    return times


def _data_parallel_passes(
    ctx: Any, dctx: Any, mesh: Any, inputs: Any, targets: Any, autocast: Any
) -> tuple[Any, list[Any]]:
    """(one step's forwards and backwards over the micro-batches, the trained parameters) of the
    whole model (with its LoRA adapters, the rest frozen, under ``lora:``) under
    DistributedDataParallel (zero 0) or FSDP2 (zero 3), tensor-parallel first when tp > 1 (``mesh``: :func:`calibrate.step_parallel.rank_mesh`'s, None in a single process)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from calibrate.step_lora import apply_lora, trained
    from calibrate.step_model import Transformer
    from calibrate.step_parallel import wrap_data_parallel
    from calibrate.step_tensor import apply_tensor_parallel, loss_context

    layout = ctx.layout
    model: torch.nn.Module = Transformer(ctx.model, layout.seq_len, ctx.scenario.training.recompute)
    if layout.lora is not None:
        apply_lora(model, layout.lora)
    model = model.to(dctx.device)
    if mesh is not None:
        if layout.tp > 1:
            apply_tensor_parallel(model, mesh["tp"])
        model = wrap_data_parallel(model, layout, mesh, dctx.device, pipelined=False)
    accum = inputs.shape[0]
    ddp = isinstance(model, DistributedDataParallel)

    def passes() -> None:
        for i in range(accum):
            # DDP reduces once, in the last micro-batch; FSDP2 reduce-scatters every one
            sync = model.no_sync() if ddp and i < accum - 1 else contextlib.nullcontext()  # type: ignore[operator]
            with sync, loss_context(layout.tp):
                with autocast():
                    logits = model(inputs[i])
                loss = F.cross_entropy(logits.float().flatten(0, 1), targets[i].flatten()) / accum
                loss.backward()

    return passes, trained(model)


def _profiled(step: Any, dctx: Any, path: Path) -> None:
    """Run ``step`` under the PyTorch profiler on every rank (DDP needs them all); rank 0
    writes the trace atomically (the profiler writes only to a path: a scratch file first)."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile, record_function

    from calibrate.timers import synchronize
    from simcluster.output.atomic import atomic_write_bytes

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dctx.device.type == "cuda" else [])
    dctx.barrier()
    with profile(activities=activities) as prof:
        with record_function("ProfilerStep#0"):
            step()
        synchronize(dctx.device.type)
    if dctx.is_main:
        with tempfile.TemporaryDirectory() as scratch:
            raw = Path(scratch) / "trace.json"
            prof.export_chrome_trace(str(raw))
            atomic_write_bytes(path, raw.read_bytes(), "--trace-out")
