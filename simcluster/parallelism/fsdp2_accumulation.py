"""FSDP2's gradient accumulation across microbatches without a reduce-scatter each
(``zero3.gradient_sync: last_microbatch``, and under a pipeline), and its parameters kept
gathered from one backward into the next forward (``zero3.reshard_after_backward: false``).

From PyTorch's ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``
(``FSDPParamGroup.post_backward``, read at commit 002a76f; the same structure since torch 2.4)
and ``_fsdp_param.py``:

- every post-backward first runs ``accumulate_unsharded_grad_if_needed``: when an unsharded
  accumulator exists, ``unsharded_accumulated_grad += unsharded_param.grad`` (fp32 += bf16:
  read 4 + 2 B, write 4 B per element) and the 16-bit ``.grad`` is dropped;
- with ``reduce_grads`` false (``set_requires_gradient_sync(False)``) it reshards only if
  ``reshard_after_backward`` and then ``to_accumulated_grad_if_needed``: the first time, the
  16-bit gradient is cast into a new accumulator in the reduce dtype (read 2 B, write 4 B),
  returning with no reduce-scatter. When the reduce dtype is the parameters' own (bf16
  reduction) it returns at once and autograd's ``AccumulateGrad`` adds each later microbatch
  into the unsharded ``.grad`` in place (read 2 + 2 B, write 2 B);
- the synchronising post-backward (the last microbatch) reduce-scatters the accumulator.

So a step of m microbatches makes one cast and m - 1 adds per parameter, which the plan's
weight-gradient segments carry as their average per microbatch; the accumulators, one per
local parameter in the reduce dtype, live from the first backward to the last microbatch's
reduce-scatter, which the static memory counts (the step's peak is in a later microbatch's
backward, when they are all alive beside its activations). torch.distributed.pipelining runs
every stage this way (``layout.zero3_pipelined``). The synchronising post-backward's copy-in
(``foreach_reduce``'s ``chunk_cat`` into the reduce-scatter buffer) then reads the accumulator
at its reduce width (4 B with fp32 reduction) where FSDP2's ordinary copy-in reads the 16-bit
gradient (2 B): 2 B per parameter more, once per step (``engine/simulate.py``
``_fsdp2_copies``).
"""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.layout import Layout
from simcluster.parallelism.grad_passes import ADD_16_INTO_16, ADD_16_INTO_32, CAST_16_TO_32
from simcluster.scenario import Scenario, TrainingSection


def reduce_width(training: TrainingSection) -> float:
    """Bytes of an element of the unsharded accumulator: FSDP2's reduce dtype (fp32 with
    ``training.fp32_grad_accum``, else the 16-bit parameters' own)."""
    return 4.0 if training.precision == "fp32" or training.fp32_grad_accum else 2.0


def accumulates_unsharded(layout: Layout) -> bool:
    """Whether FSDP2 accumulates gradients unsharded across the step's microbatches: a
    pipelined stage always (its every backward runs without gradient sync), otherwise with
    the sync deferred and more than one microbatch (one is the last, reduced at once)."""
    deferred = layout.zero3_deferred_sync and layout.microbatches > 1
    return layout.fsdp2_copies and (deferred or layout.zero3_pipelined)


def accumulation_bytes(training: TrainingSection, layout: Layout) -> float:
    """HBM bytes per parameter and microbatch (the step's average) of FSDP2's unsharded
    accumulation: one cast and m - 1 adds into a wider accumulator, or m - 1 of autograd's
    16-bit adds when the reduce dtype is the parameters'."""
    m = layout.microbatches
    if reduce_width(training) > 2.0:
        # to_accumulated_grad_if_needed's cast, then accumulate_unsharded_grad_if_needed's adds
        return (CAST_16_TO_32 + ADD_16_INTO_32 * (m - 1)) / m
    return ADD_16_INTO_16 * (m - 1) / m  # AccumulateGrad into the bf16 .grad


def unsharded_grad_bytes(training: TrainingSection, layout: Layout) -> float:
    """Bytes per local parameter of the accumulators held across the microbatches without a
    pipeline (a pipelined stage's are in its static memory already); none with one
    microbatch, whose post-backward reduces at once."""
    if layout.zero3_pipelined or not accumulates_unsharded(layout):
        return 0.0
    return reduce_width(training)


def check(scenario: Scenario) -> None:
    """Both settings are FSDP2's ``FSDPModule`` methods: refused for the other ZeRO-3 engines."""
    z = scenario.zero3
    if scenario.parallel.zero != 3 or scenario.fsdp2:
        return
    engine = "FSDP1 (zero3.buffers: flat)" if scenario.fsdp1 else "DeepSpeed / Megatron-FSDP (zero3.buffers: views)"
    if z.gradient_sync == "last_microbatch":
        raise UserError(
            "zero3.gradient_sync",
            f"last_microbatch is FSDP2's set_requires_gradient_sync(False), which {engine} does "
            "not run here; drop it (every_microbatch) or use FSDP2 (zero3.buffers: copies)",
        )
    if not z.reshard_after_backward:
        raise UserError(
            "zero3.reshard_after_backward",
            f"false is FSDP2's set_reshard_after_backward(False), which {engine} does not run "
            "here; drop it (true) or use FSDP2 (zero3.buffers: copies)",
        )
