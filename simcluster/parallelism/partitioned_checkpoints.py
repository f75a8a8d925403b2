"""Checkpointed layer inputs kept as 1/tp slices (``training.recompute_partitioned``).

Under full recomputation each layer keeps only its input (2sbh bytes, Korthikanti et al. 2022:
2sbhL for L layers, 2sbhL/t when each input is stored distributed over the t TP ranks). Two
frameworks store it split:

- Megatron-LM ``--distribute-saved-activations`` (``--distribute-checkpointed-activations``
  before 2022): ``tensor_parallel/random.py`` ``CheckpointFunction.forward`` replaces the saved
  input's data by this rank's ``split_tensor_into_1d_equal_chunks``; ``backward`` first
  ``gather_split_1d_tensor``s it (an all-gather over the TP group on the current stream,
  blocking the recompute). The transformer block turns it off under sequence parallelism
  (``distribute_saved_activations and not sequence_parallel``): the input is already a 1/tp
  sequence shard.
- DeepSpeed ``activation_checkpointing.partition_activations``
  (``runtime/activation_checkpointing/checkpointing.py``: ``partition_activations`` keeps
  ``numel/mp_size`` of each floating-point input, ``gather_partitioned_activations`` all-gathers
  it over the model-parallel group at the start of the backward, on the default stream: its
  ``transport_stream`` use is commented out). GPT-NeoX passes its ``partition-activations``.
- metaseq (OPT-175B's ``--distribute-checkpointed-activations``):
  ``modules/checkpoint_activation_wrapper/checkpoint_activations.py`` splits a checkpointed
  layer's first input with Megatron's ``split_tensor_into_1d_equal_chunks`` and gathers it with
  ``gather_split_1d_tensor`` at the start of the backward, as Megatron does.

Not costed: the forward's copy of the 1/tp slice into its own buffer and DeepSpeed's zeroing
of the gather's output, each one memory pass over at most 2sbh bytes beside a layer's
recomputed forward. DeepSpeed's ``contiguous_memory_optimization`` (preallocated buffers
against fragmentation) and ``cpu_checkpointing`` (the slices kept in host memory) are not
modelled, nor Megatron-LM 2021's preallocated buffer for the slices
(``init_checkpointed_activations_memory_buffer``, one microbatch's worth, held all step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simcluster.layout import Layout
from simcluster.parallelism.segments import Comm
from simcluster.scenario import TrainingSection

if TYPE_CHECKING:  # shapes.py imports memory.py, which imports this module
    from simcluster.parallelism.shapes import Shapes


def partitions(training: TrainingSection, layout: Layout) -> bool:
    """Whether a fully recomputed layer's stored input is a 1/tp slice: the setting, full
    recomputation, a TP group and no sequence parallelism (which already splits it)."""
    return (
        training.recompute_partitioned
        and training.recompute == "full"
        and layout.tp > 1
        and not layout.sequence_parallel
    )


def input_gather(shapes: Shapes, layer: int) -> Comm:
    """The all-gather of a layer's checkpointed input before its recompute: nccl-tests size
    b*s*h*bytes/cp (the gathered output, ``Shapes.hidden_bytes``), blocking the compute."""
    return Comm("checkpoint_tp_ag", "tp", "all_gather", shapes.hidden_bytes, False, layer)
