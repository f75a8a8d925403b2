"""The pipelined loop of ``calibrate measure-step`` (``parallel.pp`` > 1): the scenario's
model cut into the simulator's chunks (``Context.chunks``: the same layers on the same stages),
each chunk a ``torch.distributed.pipelining`` ``PipelineStage``, run by the PyTorch schedule of
the scenario's ``parallel.schedule``; data parallelism across pipeline replicas under
DistributedDataParallel (zero 0) or FSDP2 (zero 3, ``fully_shard`` per layer and per chunk,
parameters kept gathered between forward and backward, as torchtitan composes it with
pipelining), each chunk tensor-parallel first when tp > 1 (``calibrate/step_tensor.py``).

Gradient clipping runs over each stage's own gradients (``clip_grad_norm_`` per rank): a
correct global norm would add one small all-reduce across the pipeline, which the measured
time barely notices and the simulator's clipping (``grad_clip: local_scale``) does not model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simcluster.errors import UserError

#: parallel.schedule -> torch.distributed.pipelining's schedule class that runs that order
TORCH_SCHEDULES = {
    "1f1b": "Schedule1F1B",
    "afab": "ScheduleGPipe",
    "interleaved": "ScheduleInterleaved1F1B",
    "looped-bfs": "ScheduleLoopedBFS",
    "interleaved-zb": "ScheduleInterleavedZeroBubble",
    "zbv-fixed": "ScheduleZBVZeroBubble",
}
#: the classes that take one stage per rank (the others take a list)
SINGLE = ("Schedule1F1B", "ScheduleGPipe")


def check_pipeline(ctx: Any) -> None:
    """One-line refusals of what the pipelined loop cannot run."""
    layout, scenario = ctx.layout, ctx.scenario
    if layout.pp <= 1:
        return
    name = scenario.parallel.schedule
    if name not in TORCH_SCHEDULES:
        raise UserError(
            "parallel.schedule",
            f"measure-step runs PyTorch's pipeline schedules ({', '.join(TORCH_SCHEDULES)}), not {name}",
        )
    if layout.zero == 3 and layout.dp < 2:
        raise UserError("parallel.zero", "FSDP2 under a pipeline needs dp >= 2 to shard over; use zero 0")
    if ctx.model.tied_embeddings:
        raise UserError(
            "model.tied_embeddings",
            "with pp > 1 the embedding and the LM head sit on different stages; measure-step "
            "needs them untied (tied_embeddings: false)",
        )


def pipeline_step(
    ctx: Any, dctx: Any, mesh: Any, inputs: Any, targets: Any, autocast: Callable[[], Any]
) -> tuple[Callable[[], None], list[Any]]:
    """(one training step's forward and backward through the pipeline, this rank's
    parameters). ``mesh`` is :func:`calibrate.step_parallel.rank_mesh`'s; ``inputs`` and
    ``targets`` hold the rank's whole batch (microbatches first)."""
    import torch
    import torch.distributed.pipelining as pipelining
    import torch.nn.functional as F

    from calibrate.step_lora import apply_lora, trained
    from calibrate.step_model import ModelChunk
    from calibrate.step_parallel import wrap_data_parallel
    from calibrate.step_tensor import apply_tensor_parallel, loss_context

    layout, scenario = ctx.layout, ctx.scenario
    pp_group = mesh["pp"].get_group()
    stage = layout.coords(dctx.rank)["pp"]
    chunks = ctx.chunks[stage]
    total = max(c.virtual_stage for cs in ctx.chunks for c in cs) + 1
    modules, stages = [], []
    for c in chunks:
        module = ModelChunk(
            ctx.model, layout.seq_len, c.layer_indices, c.embedding, c.head, scenario.training.recompute
        )
        if layout.lora is not None:
            apply_lora(module, layout.lora)
        module = module.to(dctx.device)
        if layout.tp > 1:
            apply_tensor_parallel(module, mesh["tp"])
        module = wrap_data_parallel(module, layout, mesh, dctx.device, pipelined=True)
        modules.append(module)
        stages.append(pipelining.PipelineStage(module, c.virtual_stage, total, dctx.device, group=pp_group))

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())

    cls = getattr(pipelining, TORCH_SCHEDULES[scenario.parallel.schedule])
    accum = inputs.shape[0]
    schedule = cls(stages[0] if cls.__name__ in SINGLE else stages, n_microbatches=accum, loss_fn=loss_fn)
    first = any(c.embedding for c in chunks)
    last = any(c.head for c in chunks)
    batch, labels = inputs.flatten(0, 1), targets.flatten(0, 1)

    def step() -> None:
        args = (batch,) if first else ()
        kwargs: dict[str, Any] = {"target": labels, "losses": []} if last else {}
        with autocast(), loss_context(layout.tp):
            schedule.step(*args, **kwargs)

    return step, [p for m in modules for p in trained(m)]
