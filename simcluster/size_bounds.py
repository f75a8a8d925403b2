"""Sizes the model and the layout give together that no framework could run or simcluster
could simulate in reasonable time: refused with a one-line error naming the field, the bound
and its reason (the bounds and their sources are in :mod:`simcluster.limits`).

A value beyond these is a typo (a run-together zero, a token count in the wrong field), never a
real job: a run that far off would otherwise simulate for hours or print absurd finite times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcluster.errors import UserError
from simcluster.limits import MAX_EXPERTS, MAX_GEMM_DIM, MAX_LAYER_PASSES

if TYPE_CHECKING:
    from simcluster.layout import Layout
    from simcluster.model import ModelSpec

_GEMM_WHY = (
    f"the {MAX_GEMM_DIM:,} (INT_MAX) PyTorch lets a GEMM dimension reach (cuBLAS takes 32-bit sizes)"
)


def check_sizes(model: ModelSpec, layout: Layout, prefix: str = "model") -> None:
    """Refuse a layout whose GEMMs exceed cuBLAS's 32-bit dimensions or whose step has more
    layer passes than simcluster simulates in reasonable time (hours beyond the bound)."""
    # a linear layer's GEMM takes the microbatch's tokens on this rank as rows: with sequence
    # parallelism they are gathered back to the whole (context-parallel) sequence first
    rows = layout.micro_batch * (layout.seq_len // layout.cp)
    if rows > MAX_GEMM_DIM:
        field = "training.seq_len" if layout.seq_len // layout.cp > MAX_GEMM_DIM else "training.micro_batch"
        raise UserError(
            field,
            f"micro_batch {layout.micro_batch} x seq_len {layout.seq_len:,}"
            + (f" / cp {layout.cp}" if layout.cp > 1 else "")
            + f" = {rows:,} tokens, the rows of each linear layer's GEMM, above {_GEMM_WHY}; "
            "lower training.seq_len or training.micro_batch",
        )
    _check_expert_rows(model, layout, rows, prefix)
    # each width as one GPU's GEMMs see it: the MLP and the output head split over tp (the
    # head's vocabulary rows, Megatron's VocabParallelEmbedding), a routed expert over etp, and
    # the attention's fused QKV projection (query, key and value heads x head_dim columns,
    # Megatron's linear_qkv, split over tp by heads)
    d = model.d_head
    qkv = (model.heads + 2 * model.kv_heads) * d
    # the factor further above published models is the likelier typo: head dims reach 256, query
    # heads 128
    attention_key = "head_dim" if model.head_dim and d / 256 > model.heads / 128 else "heads"
    widths = [("hidden", model.hidden, 1, "", ""), ("ffn", model.ffn, layout.tp, "tp", ""),
              ("expert_ffn", model.expert_ffn, layout.etp, "etp", ""), ("vocab", model.vocab, layout.tp, "tp", ""),
              (attention_key, qkv, layout.tp, "tp",
               f" ((heads {model.heads:,} + 2 x kv_heads {model.kv_heads:,}) x head_dim {d:,}: the QKV projection's width)")]  # fmt: skip
    for key, width, split, over, what in widths:
        if width // split > MAX_GEMM_DIM:
            per_gpu = f" / {over} {split} = {width // split:,}" if split > 1 else ""
            raise UserError(
                f"{prefix}.{key}",
                f"{width:,}{what}{per_gpu} is a GEMM dimension above {_GEMM_WHY}; lower {prefix}.{key}",
            )
    passes = layout.microbatches * model.layers
    if passes > MAX_LAYER_PASSES:
        # the factor further above any published run is the likelier typo
        field = "training.global_batch" if layout.microbatches > model.layers else f"{prefix}.layers"
        raise UserError(
            field,
            f"{layout.microbatches:,} microbatches per pipeline x {model.layers:,} layers = {passes:,} "
            f"layer passes a step, more than the {MAX_LAYER_PASSES:,} simcluster simulates (about 16 "
            "events each: hours of simulation; the largest published run in validation/ has 71,680); "
            "lower training.global_batch or "
            f"{prefix}.layers, or raise training.micro_batch",
        )


def _check_expert_rows(model: ModelSpec, layout: Layout, rows: int, prefix: str) -> None:
    """Refuse more routed experts than :data:`MAX_EXPERTS`, and a routed expert whose GEMM rows
    pass INT_MAX: the tokens routed to it, on average each of its ep group's ``rows`` tokens
    ``top_k`` times over ``experts`` (the grouped GEMM runs one GEMM per expert, TE's
    GroupedLinear and torch._grouped_mm alike, each with its own 32-bit m)."""
    if not model.is_moe:
        return
    if model.experts > MAX_EXPERTS:
        raise UserError(
            f"{prefix}.experts",
            f"{model.experts:,} routed experts is more than the {MAX_EXPERTS:,} simcluster takes (16x the "
            "most any published model has: PEER's 1,048,576); lower it",
        )
    spread = layout.ep * model.top_k
    routed = rows * spread // model.experts
    if routed > MAX_GEMM_DIM:
        one_sequence = (layout.seq_len // layout.cp) * spread // model.experts
        raise UserError(
            "training.seq_len" if one_sequence > MAX_GEMM_DIM else "training.micro_batch",
            f"{rows:,} tokens per microbatch x ep {layout.ep} x top_k {model.top_k} / {model.experts:,} experts "
            f"= {routed:,} rows of each routed expert's GEMM, above {_GEMM_WHY}; lower training.micro_batch, "
            "training.seq_len or parallel.ep",
        )
