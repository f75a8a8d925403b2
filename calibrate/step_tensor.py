"""Tensor parallelism in ``calibrate measure-step``: torchtitan's DTensor plan for a Llama
layer (``parallelize_module``), with sequence parallelism and a vocabulary-parallel loss.

Per layer: the norms run on 1/tp of the tokens (``SequenceParallel``); the attention and MLP
blocks all-gather their input (``PrepareModuleInput`` to ``Replicate``), their first
projection is column-parallel and their last row-parallel, reduce-scattering back to token
shards. The embedding is row-parallel over the vocabulary (its output reduce-scattered), the
final norm sequence-parallel, the LM head column-parallel with its logits left sharded over the
vocabulary for ``loss_parallel``. The collectives block (DTensor's eager redistributes), which
``overlap.tp_grad_async: false`` describes.
"""

from __future__ import annotations

import contextlib
from typing import Any

from simcluster.errors import UserError


def check_tensor_parallel(ctx: Any) -> None:
    """One-line refusals of what the tensor-parallel plan does not cover."""
    layout, model = ctx.layout, ctx.model
    tp = layout.tp
    if tp <= 1:
        return
    if layout.dp > 1 and layout.zero != 3:
        raise UserError(
            "parallel.zero",
            "with tp > 1 measure-step shards over the data-parallel ranks with FSDP2 (zero 3); "
            "DDP of DTensor parameters is not run: set zero: 3 or dp 1",
        )
    if not layout.sequence_parallel:
        raise UserError("parallel.sequence_parallel", "measure-step runs torchtitan's TP plan, which is sequence parallel; set it true")
    refusals = (
        (model.has_qk_norm, "model.qk_norm", "query/key norms"),
        (model.dropout, "model.dropout", "dropout"),
        (model.position == "learned", "model.position", "learned positions"),
        (model.tied_embeddings, "model.tied_embeddings", "tied embeddings"),
    )
    for refused, field, what in refusals:
        if refused:
            raise UserError(field, f"measure-step's tensor-parallel plan does not cover {what}; drop it or use tp 1")
    for value, field in ((model.kv_heads, "model.kv_heads"), (model.vocab, "model.vocab"), (layout.seq_len, "training.seq_len")):
        if value % tp:
            raise UserError(field, f"{value} does not split over tp={tp}; use a multiple of {tp}")


def apply_tensor_parallel(chunk: Any, mesh: Any) -> None:
    """Parallelise a :class:`calibrate.step_model.ModelChunk` in place over ``mesh`` (1-D)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    for block in chunk.blocks:
        parallelize_module(
            block,
            mesh,
            {
                "attn_norm": SequenceParallel(),
                "attn": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
                "attn.qkv": ColwiseParallel(),
                "attn.out": RowwiseParallel(output_layouts=Shard(1)),
                "mlp_norm": SequenceParallel(),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "mlp.up": ColwiseParallel(),
                "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
            },
        )
    plan: dict[str, Any] = {}
    if chunk.embed is not None:
        plan["embed"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if chunk.head is not None:
        plan["norm"] = SequenceParallel()
        plan["head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)
    if plan:
        parallelize_module(chunk, mesh, plan)


def loss_context(tp: int) -> Any:
    """The context the loss and its backward run in: ``loss_parallel`` when the logits are
    sharded over the vocabulary (tp > 1)."""
    if tp <= 1:
        return contextlib.nullcontext()
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()
