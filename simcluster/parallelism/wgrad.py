"""Adding each microbatch's weight gradients into the accumulated (main) gradients.

Mixed-precision trainers keep an fp32 "main" gradient per parameter and add every
microbatch's weight gradient into it, in one of three ways, each a different number of HBM
bytes per parameter beyond the GEMM benchmarks' own 16-bit output write:

- fused (``training.grad_accum_fusion``): Megatron-LM's and Megatron-Core's
  ``gradient_accumulation_fusion`` (apex ``fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32``,
  a cuBLAS GEMM with beta = 1 on the fp32 ``main_grad``; TransformerEngine
  ``fuse_wgrad_accumulation``): the epilogue reads the fp32 gradient and writes it back
  (4 + 4 bytes) instead of writing 16 bits (2): 6 bytes;
- an in-place add of the 16-bit gradient (Megatron without the fusion, ``main_grad.add_(grad)``;
  nanotron's ``FP32GradientAccumulator``, ``fp32_grad.add_(half_grad)``): reads 2 + 4, writes 4:
  10 bytes;
- a cast, then an add (``training.grad_accum_cast``: DeepSpeed's ``BF16_Optimizer.update_hp_grads``,
  ``hp_grad.add_(lp.grad.to(fp32))``, after every microbatch's backward): the cast reads 2 and
  writes a 4-byte temporary, the add reads 4 + 4 and writes 4: 18 bytes.

Each is charged its own bytes: 6, 10 and 18. (Until 2026-11-27 the first two were charged
alike, 8 bytes; the Zero Bubble cases, which run the fork's fused accumulation, were then
charged an in-place add, and now say ``grad_accum_fusion`` as the fork's script leaves it on.)

Tensor-core work does not hide it. Unfused it is its own kernel. Fused it is the epilogue of
each output tile, which runs after that tile's main loop; cuBLAS's large tiles hold one CTA per
SM (an assumption from their register and shared-memory use), so nothing else runs on the SM
meanwhile. The GEMM efficiency curves were measured with 16-bit outputs and beta = 0, so they do
not contain it. It matters when the reduction dimension of the weight-gradient GEMM (the
microbatch's tokens) is short: at 1024 tokens 6-10 bytes cost about a sixth of the GEMM.

Trainers that keep the accumulated gradient in 16 bits (``training.fp32_grad_accum: false``:
Megatron-Core with ``grad_reduce_in_fp32=False``, DeepSpeed's fp16 ``.grad``) still add every
microbatch into it: fused, the epilogue reads the 16-bit gradient it then writes (2 bytes
beyond the benchmark's write); unfused, autograd's in-place add reads both 16-bit gradients
and writes one (6 bytes). Autograd's first microbatch writes ``.grad`` without an add; it is
charged like the others (one pass in m, a simplification).

DeepSpeed's ZeRO-2 and ZeRO-3 (``dp.shard_accumulate``) free ``.grad`` once each microbatch's
bucket is reduced, so autograd never adds into it; the reduced gradient is added into the rank's
shard only, in the gradient dtype: the same add over 1/dp of the parameters (the first
microbatch copies instead, charged alike).
"""

from __future__ import annotations

from simcluster.compute import KernelModel
from simcluster.layout import Layout
from simcluster.parallelism import autocast_casts, fsdp2_accumulation
from simcluster.parallelism.grad_passes import (
    ADD_16_INTO_16,
    ADD_16_INTO_32,
    ADD_32_INTO_32,
    CAST_16_TO_32,
)
from simcluster.scenario import TrainingSection

# bytes per parameter beyond the benchmark's 16-bit output write (module docstring)
ACCUM_FP32_FUSED = 6.0  # the epilogue reads and writes the fp32 gradient (8) instead of a 16-bit write (2)
ACCUM_FP32_INPLACE = ADD_16_INTO_32  # main_grad.add_(grad): 16-bit and fp32 read (2 + 4), fp32 written (4)
ACCUM_FP32_CAST_ADD = CAST_16_TO_32 + ADD_32_INTO_32  # grad.to(fp32), then the fp32 add: 18
ACCUM_16BIT_FUSED = 2.0  # the epilogue's read of the 16-bit gradient it accumulates into
ACCUM_16BIT_UNFUSED = ADD_16_INTO_16  # autograd's add: both 16-bit gradients read, one written


def accumulation_bytes(
    training: TrainingSection, layout: Layout, gemm: bool = True, shard_group: int | None = None
) -> float:
    """HBM bytes per parameter, beyond the GEMM benchmarks' own output write, of adding one
    microbatch's weight gradients into the accumulated gradient. ``gemm`` = the gradient comes
    out of a weight-gradient GEMM, which ``grad_accum_fusion`` can fuse; the embedding's does not
    (its backward scatters the token gradients into a dense 16-bit gradient, which the trainer's
    hook then adds in place: Megatron-Core's ``main_grad.add_(param.grad)`` for parameters whose
    gradient was not already added to ``main_grad``). PyTorch FSDP adds nothing here: it
    reduce-scatters each microbatch's 16-bit gradients and accumulates only its fp32 shard
    (FSDP1 sets the FlatParameter's ``.grad`` to None before each reduce-scatter, so the next
    microbatch writes a fresh one: ``_runtime_utils.py`` ``_reduce_grad``)
    (parallelism/data.py), except where FSDP2's gradient sync waits for the last microbatch
    (under a pipeline, or ``zero3.gradient_sync: last_microbatch``) and it accumulates every
    microbatch unsharded in the reduce dtype (``parallelism/fsdp2_accumulation.py``); under
    ``training.autocast`` each 16-bit gradient is cast to fp32 and added into ``.grad``
    (``parallelism/autocast_casts.py``); fp32 training
    writes fp32 gradients the benchmarks already count. ``shard_group`` is the group a
    ``shard_accumulate`` gradient is sharded over (``layout.zero_group`` unless given: routed
    experts' gradients are reduced over, and sharded across, the expert-data-parallel group)."""
    if training.precision == "fp32":
        return 0.0
    if fsdp2_accumulation.accumulates_unsharded(layout):
        # FSDP2's unsharded accumulator: one cast and m - 1 adds (parallelism/fsdp2_accumulation.py)
        return fsdp2_accumulation.accumulation_bytes(training, layout)
    if layout.torch_fsdp and not layout.zero3_pipelined:
        return 0.0
    if autocast_casts.casts_weights(training, layout):
        # fp32 parameters under torch.autocast: the 16-bit gradient cast back to fp32, then
        # AccumulateGrad's fp32 add (parallelism/autocast_casts.py); nothing to fuse it into
        return autocast_casts.gradient_bytes(layout, cast=gemm)
    if layout.shard_accumulate and not layout.zero3_pipelined:
        add = ACCUM_FP32_INPLACE if training.fp32_grad_accum else ACCUM_16BIT_UNFUSED
        return add / (shard_group or layout.zero_group)
    fused = training.grad_accum_fusion and gemm
    if training.fp32_grad_accum:
        if training.grad_accum_cast and not fused:
            return ACCUM_FP32_CAST_ADD
        return ACCUM_FP32_FUSED if fused else ACCUM_FP32_INPLACE
    return ACCUM_16BIT_FUSED if fused else ACCUM_16BIT_UNFUSED


def accumulation_seconds(
    km: KernelModel, training: TrainingSection, layout: Layout, params: float, gemm: bool = True,
    shard_group: int | None = None,
) -> float:
    """Time to add one microbatch's gradients of ``params`` parameters into the accumulated
    (main) gradients (``gemm`` and ``shard_group``: as :func:`accumulation_bytes`)."""
    if params <= 0:
        return 0.0
    return params * accumulation_bytes(training, layout, gemm, shard_group) / km.hbm_bytes_per_s
