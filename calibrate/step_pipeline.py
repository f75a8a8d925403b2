"""The pipelined loop of ``calibrate measure-step`` (``parallel.pp`` > 1): the scenario's
model cut into the simulator's chunks (``Context.chunks``: the same layers on the same stages),
each chunk a ``torch.distributed.pipelining`` ``PipelineStage``, run by the PyTorch schedule of
the scenario's ``parallel.schedule``; data parallelism across pipeline replicas under
DistributedDataParallel (zero 0) or FSDP2 (zero 3, ``fully_shard`` per layer and per chunk,
parameters kept gathered between forward and backward, as torchtitan composes it with
pipelining).

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


def _groups(layout: Any, rank: int) -> tuple[Any, Any]:
    """This rank's pipeline group and data-parallel group (None at dp 1); every rank creates
    every group, in the same order, as ``new_group`` requires."""
    import torch.distributed as dist

    pp_group = dp_group = None
    for d in range(layout.dp):
        ranks = [layout.rank(dp=d, pp=s) for s in range(layout.pp)]
        group = dist.new_group(ranks)
        if rank in ranks:
            pp_group = group
    if layout.dp > 1:
        for s in range(layout.pp):
            ranks = [layout.rank(dp=d, pp=s) for d in range(layout.dp)]
            group = dist.new_group(ranks)
            if rank in ranks:
                dp_group = group
    return pp_group, dp_group


def _wrap(chunk: Any, layout: Any, dp_group: Any, device: Any) -> Any:
    """A chunk under its data-parallel wrapper: DDP (zero 0) or FSDP2 (zero 3)."""
    if dp_group is None:
        return chunk
    if layout.zero == 3:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard

        mesh = DeviceMesh.from_group(dp_group, device.type)
        # torchtitan under pipelining: reshard_after_forward = not pp_enabled
        for block in chunk.blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=False)
        return fully_shard(chunk, mesh=mesh, reshard_after_forward=False)
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(chunk, device_ids=ids, bucket_cap_mb=25, process_group=dp_group)


def pipeline_step(
    ctx: Any, dctx: Any, inputs: Any, targets: Any, autocast: Callable[[], Any]
) -> tuple[Callable[[], None], list[Any]]:
    """(one training step's forward and backward through the pipeline, this rank's
    parameters). ``inputs`` and ``targets`` hold the rank's whole batch (microbatches first)."""
    import torch
    import torch.distributed.pipelining as pipelining
    import torch.nn.functional as F

    from calibrate.step_model import ModelChunk

    layout, scenario = ctx.layout, ctx.scenario
    pp_group, dp_group = _groups(layout, dctx.rank)
    stage = layout.coords(dctx.rank)["pp"]
    chunks = ctx.chunks[stage]
    total = max(c.virtual_stage for cs in ctx.chunks for c in cs) + 1
    modules, stages = [], []
    for c in chunks:
        module = ModelChunk(
            ctx.model, layout.seq_len, c.layer_indices, c.embedding, c.head, scenario.training.recompute
        ).to(dctx.device)
        module = _wrap(module, layout, dp_group, dctx.device)
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
        with autocast():
            schedule.step(*args, **kwargs)

    return step, [p for m in modules for p in m.parameters()]
