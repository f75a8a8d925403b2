"""Whether a sequence-parallel column linear keeps its all-gathered input for the backward.

Sequence parallelism all-gathers a block's input (the norm's output, sharded over the sequence)
before its column-parallel linears. What the weight gradient reads in the backward then
depends on the code:

* Megatron-LM / Megatron-Core and TransformerEngine save only the local 1/tp shard and
  all-gather it again in the backward (Korthikanti et al. 2022, Sec. 4.2.2;
  ``LinearWithGradAccumulationAndAsyncCommunication.backward``; TE's ``qkv_dgrad`` /
  ``fc1_dgrad`` userbuffers all-gather), as nanotron does with ``tp_recompute_allgather``
  (its default);
* PyTorch's DTensor tensor parallelism (torchtitan, and the PyTorch stacks simcluster names
  after it) gathers with a redistribute (``PrepareModuleInput`` Shard(1) -> Replicate, a
  functional ``all_gather_into_tensor``) whose output is an ordinary tensor the linears'
  ``mm`` saves for its weight gradient: the backward has the gathered input and gathers
  nothing again, the stash holding tp times the shard's bytes. Under ``torch.compile``
  AOTAutograd's partitioner saves it too: a collective is not on its recomputable allow-list
  (``torch/_functorch/partitioners.py``: ``ban_recompute_not_in_allowlist``);
* PyTorch's async TP (``torch/_inductor/fx_passes/micro_pipeline_tp.py``) replaces the
  all-gather and its matmuls by ``fused_all_gather_matmul``, which returns the gathered A
  beside the products, and points every other user of the gather's result at it
  (``ag_res_node.replace_all_uses_with``): the saved input stays the gathered one.

torchtitan's op-level selective checkpointing (``training.recompute: op``) saves the outputs
of its ``_save_list`` (every other ``mm``, the attention, the reduce-scatters), not the
all-gather's, so its backward reruns the gather: that rerun is the re-gather the model keeps.
Under full recomputation the rerun forward's gather is the one its backward reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simcluster.layout import Layout
    from simcluster.scenario import Scenario


def keeps_gather(scenario: Scenario, tp: int) -> bool:
    """Whether the run's column-parallel linears keep the gathered input (no backward
    re-gather): sequence parallelism over tp > 1 with ``parallel.sp_regather`` false (resolved:
    :attr:`Scenario.sp_regather`), except under op-level checkpointing, which reruns it."""
    sp = scenario.parallel.sequence_parallel and tp > 1
    return sp and not scenario.sp_regather and scenario.training.recompute != "op"


def gathered_factor(layout: Layout) -> int:
    """How many times its 1/tp shard a column-parallel linear's saved input is: tp when it keeps
    the gathered input, else 1 (the shard, or the whole input without sequence parallelism,
    where nothing is gathered)."""
    return layout.tp if layout.sp_keeps_gather else 1
