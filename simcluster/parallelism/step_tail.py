"""The host's eager tail of a training step: Megatron's optimizer step issued from Python.

The layers' kernels are issued ahead of the GPU (``parallelism/host.py``), but the step's end
is not: Megatron's ``get_grad_norm_fp32`` reads the gradient norm back with ``.item()`` after
the last reduction, and NeMo's Lightning loop syncs earlier still (``self.log`` of Python
scalars through ``torch.tensor(..., device=cuda)`` and the progress bar's ``.item()``), so the
optimizer step's Python runs with the GPU's queue empty and every op it issues waits for it.
Under a full-iteration CUDA graph this is the step's only eager part (NVIDIA's CUDA-graph
guide, Llama 3.1 405B example: "Optimizer step (Megatron distributed optimizer), Learning rate
scheduling, Loss logging" stay eager).

What the tail issues, read from Megatron-Core's ``DistributedOptimizer`` (``optimizer.py``,
``distrib_optimizer.py``, ``clip_grads.py``) and TransformerEngine's
``cast_master_weights_to_fp8`` (``tensor/utils.py``), per pipeline stage:

- per parameter tensor overlapping the rank's optimizer shard (``local``): the gradient's copy
  into the fp32 main gradient (two views and a ``.float()``, a cast kernel only where the
  gradients are 16-bit, ``training.fp32_grad_accum: false``), the clipping list, FusedAdam's
  per-parameter list building and the updated shard's copy back into the model parameter (a
  view and a ``copy_``);
- fixed: the norm's two ``zeros``, ``multi_tensor_l2norm`` and power, the clip's scale, one
  ``multi_tensor_adam`` per parameter group (two: with and without weight decay) and the
  gradient buffers' ``zero_()``;
- with FP8 weights kept by the optimizer (``training.fp8_param_gather``): a Python pass over
  every FP8 weight of the stage (its quantizer, scale views and amax slot: about five
  CPU-side tensor ops each), and per local FP8 shard the 16-bit cast, the amax and the cast
  back instead of the copy, plus the amax buffer's ``zeros``, its all-reduce and the scales'
  kernel.

Ops that launch a kernel cost ``efficiency.host_op_us`` each (parallelism/host.py's unit, a
small ``torch.nn.Linear`` call: an upper bound for a bare op); CPU-only tensor ops (views,
slices, a quantizer's attributes) :data:`CPU_OP_SHARE` of it. The all-reduces are a few bytes
each (latency-bound, not charged). Lightning's own per-step Python and logging are not counted,
so the tail errs low there; Megatron-LM's loop copies the gradients before its norm's sync,
where they may still hide under the last reductions, so there it errs high by ``3 x local``
ops. Without a sharded optimizer (zero 0, ``Float16OptimizerWithFloat16Params``) every tensor
is local and the copy back is one ``multi_tensor_scale`` launch over lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.parallelism.data import Bucket, adapter_tensors
from simcluster.parallelism.fp8_weights import requantises_mxfp8_parameters
from simcluster.parallelism.unpack import attention_linears, mlp_tensors, stage_tensors
from simcluster.placement import Chunk

if TYPE_CHECKING:
    from simcluster.context import Context

#: a CPU-only tensor op (view, slice) against a Python op that launches a kernel: about 2 us of
#: CPU for a trivial op (pytorch/pytorch issue 41383, half of it Python) over the 13.48 us of a
#: torch.nn.Linear forward on the same kind of host (TransformerEngine issue 2053, DGX H100's
#: Xeon 8480C), so it scales with the host as host_op_us does
CPU_OP_SHARE = 2.0 / 13.48
#: kernel-launching ops the tail issues once per step: the norm (two zeros, l2norm, power),
#: the clip's scale, FusedAdam's two parameter groups, the gradient buffers' zero_ (two)
FIXED_KERNEL_OPS = 8.0
#: CPU-side ops per local-shard tensor: the gradient's view and slice, the clip's and Adam's
#: list entries, the copy back's slice
CPU_OPS_PER_LOCAL = 5.0
#: CPU-side ops of TransformerEngine's pass over each FP8 weight (quantizer, scale and
#: scale-inverse views, amax slot, cached high-precision value cleared)
CPU_OPS_PER_FP8_WEIGHT = 5.0
#: kernels per local FP8 shard (16-bit cast, amax, cast back) and once per step (the amax
#: buffer's two zeros and the scales' kernel)
KERNELS_PER_LOCAL_FP8 = 3.0
FP8_FIXED_KERNELS = 3.0


@dataclass(frozen=True)
class TailOps:
    """The tail's kernel-launching Python ops and its CPU-only tensor ops for one stage."""

    kernel_ops: float
    cpu_ops: float

    def seconds(self, host_op_s: float) -> float:
        """Host seconds at ``host_op_s`` per kernel-launching op."""
        return (self.kernel_ops + self.cpu_ops * CPU_OP_SHARE) * host_op_s


def megatron_tail(
    local: float, fp8_weights: float, fp8_local: float, master: bool, *, sharded: bool = True, grad_cast: bool = True
) -> TailOps:
    """The ops of Megatron's optimizer step on a stage with ``local`` parameter tensors in the
    rank's shard, ``fp8_weights`` FP8 weights (``fp8_local`` of them in the shard); ``master``:
    16-bit parameters with fp32 main copies (the gradient's ``.float()`` and the copy back);
    ``grad_cast``: the gradients are 16-bit, so that ``.float()`` launches a cast (on fp32 main
    gradients it returns the tensor itself, a CPU-side op); ``sharded``: the distributed
    optimizer, which copies each shard back with a ``copy_`` of its own
    (``Float16OptimizerWithFloat16Params`` copies all of them with one ``multi_tensor_scale``)."""
    kernels = FIXED_KERNEL_OPS
    cpu = CPU_OPS_PER_LOCAL * local
    if master:
        kernels += (local - fp8_local) if sharded else 1.0  # the copies back
        if grad_cast:
            kernels += local
        else:
            cpu += local
    if fp8_weights > 0:
        kernels += KERNELS_PER_LOCAL_FP8 * fp8_local + FP8_FIXED_KERNELS
        cpu += CPU_OPS_PER_FP8_WEIGHT * fp8_weights
    return TailOps(kernels, cpu)


def local_tensors(tensors: int, shards: int, buckets: int) -> float:
    """Parameter tensors a rank's optimizer shard touches: every one without sharding, else a
    ``1/shards`` share plus one a bucket (Megatron's buffer is cut into contiguous pieces per
    bucket, so a piece can start and end inside tensors)."""
    if shards <= 1:
        return float(tensors)
    return min(float(tensors), tensors / shards + max(buckets, 1))


def _moe_layers(model: ModelSpec, chunks: list[Chunk]) -> int:
    return sum(1 for chunk in chunks for index in chunk.layer_indices if model.is_moe_layer(index))


def local_experts(model: ModelSpec, layout: Layout) -> int:
    """Routed experts of one MoE layer a rank holds (``experts / ep``; each one ``1/etp`` of an
    expert's matrices, still one tensor each)."""
    return model.experts // layout.ep if model.is_moe else 0


def stage_tensor_split(model: ModelSpec, chunks: list[Chunk], experts: int) -> tuple[int, int]:
    """(dense, routed-expert) parameter tensors one rank of a stage holds with ``experts``
    local experts a MoE layer, as Megatron-Core holds them: TEGroupedMLP's TransformerEngine
    ``GroupedLinear`` registers ``weight0`` .. ``weight{n-1}`` (and a bias each) for fc1 and
    for fc2, one per local expert, as SequentialMLP's per-expert linears do; only the legacy
    GroupedMLP (``--moe-use-legacy-grouped-gemm``) and the opt-in single grouped weight
    (``moe_single_grouped_weight``, TransformerEngine 2.14 and later, off by default) hold two
    tensors, as :func:`~simcluster.parallelism.unpack.stage_tensors` counts them."""
    stacked = _moe_layers(model, chunks) * mlp_tensors(model)
    return stage_tensors(model, chunks) - stacked, stacked * experts


def stage_fp8_weights(model: ModelSpec, chunks: list[Chunk], experts: int = 1) -> tuple[int, int]:
    """(dense, routed-expert) linear weights one rank of a stage holds (the tensors
    TransformerEngine keeps in FP8): the attention's projections and the MLP's two, a MoE
    layer's shared experts' fc1 and fc2 and each of its ``experts`` local experts' (the router
    stays 16-bit)."""
    dense = 0
    for chunk in chunks:
        for index in chunk.layer_indices:
            mlp = 2 * model.shared_experts if model.is_moe_layer(index) else 2
            dense += attention_linears(model) + mlp
    return dense, 2 * experts * _moe_layers(model, chunks)


def stage_tail_seconds(ctx: Context, chunks: list[Chunk], buckets: Sequence[Bucket]) -> float:
    """Host seconds of Megatron's optimizer step on the stage holding ``chunks`` (its gradient
    buffers cut into ``buckets``): a LoRA run steps its adapters alone, its frozen FP8 weights
    never re-cast. The routed experts' tensors are sharded over their own expert-data-parallel
    group (Megatron-Core's DistributedDataParallel keeps them in buffers of that group)."""
    tr, layout = ctx.scenario.training, ctx.layout
    if layout.lora is not None:
        layers = sum(len(c.layer_indices) for c in chunks)
        tensors, fp8 = (len(adapter_tensors(ctx.model, layout)) * layers, 0), (0, 0)
    else:
        experts = local_experts(ctx.model, layout)
        tensors = stage_tensor_split(ctx.model, chunks, experts)
        # MXFP8 parameters: the 16-bit shard is copied back as for 16-bit parameters and
        # quantised after the gather (fp8_weights.requantises_mxfp8_parameters), no FP8 pass
        mxfp8 = requantises_mxfp8_parameters(tr, layout, ctx.profile.gpu.compute_capability)
        fp8_pass = (tr.fp8_param_gather and not mxfp8) or tr.fp4_param
        fp8 = stage_fp8_weights(ctx.model, chunks, experts) if fp8_pass else (0, 0)
    sharded = layout.zero >= 1
    groups = (layout.zero_group, layout.expert_zero_group) if sharded else (1, 1)
    local = fp8_local = 0.0
    for group, count, weights, shards in zip(("dp", "edp"), tensors, fp8, groups, strict=True):
        if count:
            share = local_tensors(count, shards, sum(1 for b in buckets if b.group == group))
            local += share
            fp8_local += weights * share / count
    ops = megatron_tail(
        local, sum(fp8), fp8_local, tr.precision != "fp32", sharded=sharded, grad_cast=not tr.fp32_grad_accum
    )
    return ops.seconds(ctx.profile.efficiency.host_op_us * 1e-6)
