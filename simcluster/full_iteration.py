"""What a full-iteration CUDA graph (``training.cuda_graphs: [full_iteration]``) can capture.

Megatron-Core's ``FullCudaGraphWrapper`` (``megatron/core/full_cuda_graph.py``) wraps the
pipeline schedule's ``forward_backward_func``: after its warm-up steps it captures one call (every
microbatch's forward and backward, the pipeline's sends and receives, the tensor-, context- and
expert-parallel collectives and the gradient reduction that ``finalize_model_grads`` finishes)
and replays it each step. The optimizer step runs outside it (``TransformerConfig``: "1 CUDA graph
for the whole forward-backward path excluding the optimizer step"). A capture records kernels,
not Python, so nothing in the captured region may wait on the GPU from the host:

- a dropless MoE dispatcher reads its per-expert token counts back to the host every layer
  (``moe.reads_counts``); Megatron-Core's capturable path gives each expert-parallel rank a static
  receive budget instead (``moe_expert_rank_capacity_factor`` with ``moe_paged_stash``, whose
  fused grouped MLP walks the routed tokens from device-side offsets: SM100 only), which a
  scenario writes as ``moe.host_sync: false``; Megatron-Bridge's cuda-graphs skill card records
  the dynamic path's "host synchronization" blocking Hopper's dropless runs;
- the loss and gradient NaN checks read values on the host (Megatron-Bridge's cuda-graphs guide:
  full-iteration capture "requires disabling NaN checks": ``check_for_nan_in_loss`` and
  ``ddp.check_for_nan_in_grad`` false), ``dp.nan_check`` here.

The partial scopes (attn, mlp, moe_router, moe_preprocess) are TransformerEngine's per-layer
capture, which ``cuda_graph_impl: full_iteration`` replaces (``cuda_graph_modules`` "must be empty
when cuda_graph_impl=full_iteration"), so the two are not written together.
"""

from __future__ import annotations

from collections.abc import Collection

from simcluster.errors import UserError
from simcluster.model import ModelSpec
from simcluster.scenario import Scenario

FULL_ITERATION = "full_iteration"


def captures_iteration(graphs: Collection[str]) -> bool:
    """Whether ``training.cuda_graphs`` asks for the full-iteration graph."""
    return FULL_ITERATION in graphs


def check(scenario: Scenario, model: ModelSpec) -> None:
    """Refuse what a full-iteration graph cannot hold (a host sync inside it) or what it
    replaces (the per-layer scopes), naming the field and the fix."""
    graphs = scenario.training.cuda_graphs
    if not captures_iteration(graphs):
        return
    if parts := [g for g in graphs if g != FULL_ITERATION]:
        raise UserError(
            "training.cuda_graphs",
            f"full_iteration captures every layer part already ({', '.join(parts)} are TransformerEngine's "
            "per-layer scopes, which Megatron-Core refuses beside it); write [full_iteration] alone",
        )
    if model.is_moe and scenario.moe.reads_counts:
        raise UserError(
            "moe.host_sync",
            "a dropless MoE dispatcher reads its token counts on the host every layer, which a "
            "full-iteration CUDA graph cannot capture; set moe.host_sync: false (Megatron-Core's static "
            "expert-rank capacity with paged stash), or use the per-layer scopes",
        )
    if scenario.dp.nan_check:
        raise UserError(
            "dp.nan_check",
            "the loss and gradient NaN checks read values on the host, which a full-iteration CUDA graph "
            "cannot capture (Megatron-Bridge turns them off for it); set dp.nan_check: false",
        )
