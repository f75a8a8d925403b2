"""FP8 delayed scaling's amax reduction (``training.fp8_recipe: delayed`` under Megatron-Core).

TransformerEngine's DelayedScaling keeps each FP8 tensor's scale from a history of its amaxes;
every rank's history must agree, so at the exit of each ``fp8_autocast`` region the amaxes the
region's modules recorded are concatenated and all-reduced (MAX) over the autocast's
``fp8_group`` before the fused history-and-scale update
(``FP8GlobalStateManager.reduce_and_update_fp8_tensors``, transformer_engine/pytorch/fp8.py:
``torch.distributed.all_reduce(..., op=ReduceOp.MAX, group=group, async_op=False)``): the
compute stream waits for it. The backward does the same once, in the backward of the region's
first FP8 module, the last to run (``reduce_and_update_bwd_fp8_tensors``).

Megatron-Core wraps each model chunk's transformer layers in one autocast
(``TransformerBlock.forward``'s fp8 context; ``use_outer_fp8_context`` for delayed scaling in
later releases) whose group is ``parallel_state.get_amax_reduction_group(with_context_parallel=
True)``: the tensor-, context- and data-parallel ranks together, every rank of the pipeline
stage (with ``--tp-only-amax-red``, ``training.tp_only_amax_red``, the tensor- and
context-parallel ranks only: each data-parallel replica keeps its own scales). So each microbatch's forward of a chunk ends with one blocking all-reduce over the whole
stage, and its backward with another; the LM head runs outside TE's FP8 modules. The message
is a few floats per GEMM, latency-bound: what costs is the collective's latency over a group
that spans the data-parallel replicas, and in an all-ranks run the wait for the slowest of them.

TransformerEngine up to 1.5 read ``NVTE_ASYNC_AMAX_REDUCTION``: with it set the all-reduce was
issued ``async_op=True`` and waited on by the next autocast region's first module
(``training.fp8_amax_async``), so the compute stream did not stop for it; 1.6 (pull request 575)
dropped the variable.

Current scaling reduces no history (its amax pass is the cast's own, ``compute.quantise``) and
block scaling takes scales inside the cast, so neither runs it; frameworks that train with
torchao's float8 or their own FP8 (torchtitan, nanotron) are not TE's autocast.
"""

from __future__ import annotations

from simcluster.frameworks.stacks import runs_megatron_core
from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.parallelism.segments import Comm, Segment
from simcluster.scenario import Scenario

#: amaxes TE's DelayedScaling keeps per GEMM: forward input, weight and output
#: (``FP8FwdTensors``), backward output and input gradients (``FP8BwdTensors``)
AMAXES_PER_GEMM = {"F": 3, "B": 2}


def delayed_under_te_autocast(scenario: Scenario) -> bool:
    """FP8 GEMMs with delayed scaling under Megatron-Core's autocast (or no framework named:
    simcluster's Megatron-like defaults)."""
    tr = scenario.training
    return tr.precision == "fp8" and tr.fp8_recipe == "delayed" and runs_megatron_core(scenario.framework)


def amax_group(scenario: Scenario) -> str:
    """The reduction's group: every rank of the stage, or with ``training.tp_only_amax_red``
    (Megatron-Core's --tp-only-amax-red) its tensor- and context-parallel ranks only."""
    return "amax_tp" if scenario.training.tp_only_amax_red else "amax"


def reduces_amax(scenario: Scenario, layout: Layout) -> bool:
    """Whether the run all-reduces FP8 amaxes: delayed scaling under TE's autocast over a
    group of more than one rank."""
    ranks = layout.tp * layout.cp if scenario.training.tp_only_amax_red else layout.world // layout.pp
    return delayed_under_te_autocast(scenario) and ranks > 1


def layer_gemms(model: ModelSpec, layout: Layout, layer: int) -> int:
    """TE GEMMs (one amax set each) of one transformer layer: QKV, projection, fc1 and fc2, a
    routed MLP's two grouped linears one GEMM per local expert."""
    if not model.is_moe_layer(layer):
        return 4
    return 2 + 2 * max(model.experts // max(layout.ep, 1), 1)


def amax_reduction(scenario: Scenario, model: ModelSpec, layout: Layout, layers: list[int], phase: str) -> list[Segment]:
    """The blocking amax all-reduce that ends a chunk's ``phase`` (F, or B / BW: the backward's)
    over its transformer ``layers``; none without delayed scaling or layers."""
    key = "F" if phase == "F" else "B"
    if phase == "W" or not layers or not reduces_amax(scenario, layout):
        return []
    floats = AMAXES_PER_GEMM[key] * sum(layer_gemms(model, layout, layer) for layer in layers)
    edge = layers[-1] if key == "F" else layers[0]
    name = f"fp8_amax_{'fwd' if key == 'F' else 'bwd'}"
    # TE <= 1.5 with NVTE_ASYNC_AMAX_REDUCTION=1 (training.fp8_amax_async): async_op=True, the
    # next region's first module waits on the handle, so the compute stream runs on
    return [Comm(name, amax_group(scenario), "all_reduce", 4.0 * floats, scenario.training.fp8_amax_async, edge)]
