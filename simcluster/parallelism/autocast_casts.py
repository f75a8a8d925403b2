"""torch.autocast's passes over fp32 weights and their gradients (``training.autocast``).

A model built in fp32 and run under ``torch.autocast(dtype=bfloat16)`` keeps fp32 parameters;
every linear's matmul first casts its weight to 16 bits, and the backward casts the 16-bit
weight gradient back to fp32 and adds it into ``.grad``. Each is a memory-bound kernel of its
own (PyTorch eager, one tensor per kernel):

- the forward's cast (``aten/src/ATen/autocast_mode.cpp`` ``cached_cast``: an fp32 leaf that
  requires grad is cast with ``_to_copy`` once and kept in the cast cache, which
  ``torch.autocast.__exit__`` clears when the outermost autocast region exits,
  ``clear_autocast_cache`` at nesting 0): read 4 B, write 2 B per weight element. The region is
  one microbatch's forward in a plain loop (calibrate/step_train.py), so every microbatch casts
  again; a checkpointed layer's recomputation re-enters autocast in the backward (the cache is
  empty then) and casts once more, which the recomputed forward's segments carry.
  Under a pipeline the calibrate loop wraps the whole schedule step in one region
  (calibrate/step_pipeline.py), so each weight is cast once per step: charged as 1/m of a
  cast per microbatch (the step's total exact, spread over its forwards; a recomputed forward
  finds the casts still cached and is charged its 1/m again, an upper bound). The cache then
  holds the casts all step (``memory.autocast_cache_bytes``).
- the backward's cast (``_to_copy``'s derivative, ``ToCopyBackward0``: the incoming 16-bit
  gradient ``.to(fp32)``): read 2 B, write 4 B, every microbatch.
- ``AccumulateGrad``: after ``zero_grad(set_to_none=True)`` the first microbatch's fp32
  gradient becomes ``.grad`` as it is (no kernel); every later one is added in place
  (``variable_grad += new_grad``, ``torch/csrc/autograd/functions/accumulate_grad.h``): read
  4 + 4 B, write 4 B. Charged as (m - 1)/m of an add per microbatch (the step's total exact).

The embedding is looked up in fp32 (``embedding`` is on none of autocast's lists): no cast,
its fp32 gradient only added. PyTorch FSDP gathers 16-bit parameters itself (its
MixedPrecision), so autocast finds nothing to cast there (``memory.autocast_weight_bytes``).
Norm weights multiply in fp32 and are left out (2h of about 12h^2 per layer)."""

from __future__ import annotations

from simcluster.compute import KernelModel
from simcluster.layout import Layout
from simcluster.parallelism.grad_passes import ADD_32_INTO_32, CAST_16_TO_32
from simcluster.scenario import TrainingSection

FORWARD_CAST_BYTES = 4.0 + 2.0  # _to_copy fp32 -> bf16: read the fp32 weight, write its cast


def casts_weights(training: TrainingSection, layout: Layout) -> bool:
    """Whether autocast casts fp32 weights here: a 16-bit autocast run whose parameters are not
    PyTorch FSDP's (which gathers them 16-bit already)."""
    return training.autocast and training.precision != "fp32" and not (layout.zero == 3 and layout.torch_fsdp)


def forward_cast_seconds(km: KernelModel, training: TrainingSection, layout: Layout, weights: list[float]) -> float:
    """Seconds of one microbatch's forward casting the fp32 weights of ``weights`` (elements of
    each tensor on this GPU) to 16 bits: one kernel each, once per microbatch (once per step
    under a pipeline, charged as 1/m of it)."""
    if not casts_weights(training, layout):
        return 0.0
    share = 1.0 / layout.microbatches if layout.pp > 1 else 1.0
    return share * sum(km.memory(n * FORWARD_CAST_BYTES) for n in weights if n > 0)


def gradient_bytes(layout: Layout, cast: bool = True) -> float:
    """HBM bytes per parameter, averaged over a step's microbatches, of one microbatch's
    gradient reaching fp32 ``.grad``: the backward's cast (``cast``: the gradient came out of
    a 16-bit matmul; the embedding's is fp32 already) and the add of all but the first."""
    m = layout.microbatches
    # ToCopyBackward0's cast, then AccumulateGrad's fp32 add into .grad
    return (CAST_16_TO_32 if cast else 0.0) + ADD_32_INTO_32 * (m - 1) / m
