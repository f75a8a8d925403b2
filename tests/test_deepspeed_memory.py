"""Per-GPU model-state memory under ``framework: deepspeed`` against the ZeRO paper and
DeepSpeed's own buffers.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
(SC'20), Sec. 5.1 and Figure 1: mixed-precision Adam holds 2Ψ fp16 weights, 2Ψ fp16 gradients
and KΨ of fp32 master weights, momentum and variance (K = 12); with N_d = 64 and Ψ = 7.5B the
baseline is 120 GB, P_os 31.4 GB (2Ψ + 2Ψ + KΨ/N_d), P_os+g 16.6 GB (2Ψ + (2 + K)Ψ/N_d) and
P_os+g+p 1.9 GB ((2 + 2 + K)Ψ/N_d). In bytes per parameter: 16, 4 + 12/64, 2 + 14/64, 16/64.
That is DeepSpeed's fp16 path (FP16_Optimizer, DeepSpeedZeroOptimizer stages 1 and 2,
DeepSpeedZeroOptimizer_Stage3). Beside it DeepSpeed holds buffers the paper leaves out:

- ZeRO-2: the ipg bucket, ``reduce_bucket_size`` (5e8) 16-bit elements, two with overlap_comm
  (``stage_1_and_2.py``: ``torch.empty(int(self.reduce_bucket_size))``, "double buffers");
- ZeRO-3: the contiguous gradient bucket of ``reduce_bucket_size`` elements, allocated whole
  (``stage3.py`` ``__ipg_bucket_flat_buffer``).

And bf16 at ZeRO-1 runs the BF16_Optimizer (Megatron-DeepSpeed, BLOOM): its 16-bit gradients
beside an fp32 gradient buffer of every local parameter (``bf16_optimizer.py``:
``fp32_groups_gradients_flat = torch.zeros_like(bf16_groups_flat, dtype=fp32)``), 2 + 2 + 4 B
plus 12/N_d; its reduction casts a whole flat group to bf16 (``engine.py`` ``allreduce_bucket``,
``tensor.to(communication_data_type)``), 2 B per parameter held until the copy back.

What else ``stage_1_and_2.py`` allocates, read against the counts above:
``bit16_groups_flat`` is the parameters' own storage (each ``param.data`` a view of it, after
``_update_model_bit16_weights``): the 2Ψ; ``single_partition_of_fp32_groups`` the fp32 master of
the shard (in 12Ψ/N_d); at ZeRO-2 ``grads_in_partition`` (``copy_grads_in_partition``:
``torch.empty`` of the partition's size in the model dtype) the reduced gradient shard, the
2Ψ/N_d; the parameter all-gather (``all_gather_dp_groups``) writes into the flat groups, no
buffer of ``allgather_bucket_size``. Not counted here: ``step``'s fp32 copy of each group's
gradient shard (``flatten_dense_tensors_aligned(self.averaged_gradients[i]).to(fp32)``, 6 B
per shard element while the cast runs, one group at a time, after the backward's activations
are gone and, at ZeRO-1, after ``free_grad_in_param_list(self.params_not_in_partition[i])`` has
freed the group's 16-bit gradients outside the shard, 2 B for each of the (N_d - 1)/N_d other
elements: with N_d >= 4 it never raises ZeRO-1's peak, 6/N_d <= 2(N_d - 1)/N_d), and ZeRO-1's ipg buffer without a pipeline in engines that leave
``contiguous_gradients`` on at stage 1 (``backward``: ``torch.empty(reduce_bucket_size)``,
held across the backward; ``_configure_zero_optimizer`` forces it off at stage 1 without MoE
in 0.6.5 to 0.9.2 at least, read in their PyPI sdists, and those releases flatten each bucket
instead: ``dp.flatten_copies``, tests/test_deepspeed_flatten.py).
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.memory import stage_params, static_memory
from simcluster.parallelism.data import cast_buffer_bytes, reduction_working_bytes
from simcluster.scenario import scenario_from_dict

ND = 64


def _ctx(zero: int, precision: str = "fp16"):
    doc = {
        "framework": "deepspeed",
        "model": "llama2-7b",
        "cluster": {"hardware": "dgx-a100", "gpus": ND},
        "parallel": {"zero": zero},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": ND, "precision": precision},
    }
    return build_context(scenario_from_dict(doc))


def _per_param(ctx) -> tuple[float, float]:
    """(model states, DeepSpeed's working buffers) in bytes, and the parameter count."""
    params = stage_params(ctx.model, ctx.layout, ctx.chunks[0])
    states = sum(static_memory(ctx.model, ctx.layout, ctx.scenario.training, params))
    work = sum(reduction_working_bytes(ctx.scenario, ctx.model, ctx.layout, ctx.chunks[0], params.total))
    return states / params.total, work


@pytest.mark.parametrize(("zero", "paper"), [(0, 16.0), (1, 4 + 12 / ND), (2, 2 + 14 / ND), (3, 16 / ND)])
def test_fp16_model_states_are_the_zero_papers(zero, paper):
    per, _ = _per_param(_ctx(zero))
    assert per == pytest.approx(paper, rel=1e-9)


def test_zero2_holds_one_ipg_bucket_beside_them():
    """overlap_comm is off at stage 2 by default (config.py: on for stage 3 only): one bucket of
    5e8 fp16 elements."""
    _, work = _per_param(_ctx(2))
    assert work == 5e8 * 2


def test_zero3_holds_its_contiguous_bucket_whole():
    ctx = _ctx(3)
    grads = reduction_working_bytes(ctx.scenario, ctx.model, ctx.layout, ctx.chunks[0], 0.0)[1]
    # the largest tensor's gradient before its copy into the bucket: the LM head's vocab x h
    # (with the final RMSNorm's h, which the engine's units carry with it)
    largest = ctx.model.vocab * ctx.model.hidden + ctx.model.hidden
    assert grads == (5e8 + largest) * 2


def test_bf16_zero1_adds_the_bf16_optimizers_fp32_gradient_buffer():
    per, _ = _per_param(_ctx(1, "bf16"))
    assert per == pytest.approx(2 + 2 + 4 + 12 / ND, rel=1e-9)


def test_the_bf16_optimizers_reduction_casts_its_whole_flat_group():
    """One bucket per chunk (``dp.bucket_mb`` 1e6: allreduce_no_retain never splits a tensor),
    cast to bf16: 2 B per local parameter, only while it is reduced (a transient of the engine's
    timeline, not a static buffer)."""
    ctx = _ctx(1, "bf16")
    params = stage_params(ctx.model, ctx.layout, ctx.chunks[0]).total
    assert cast_buffer_bytes(ctx.scenario, ctx.layout, params) == 2 * params
    _, work = _per_param(ctx)
    assert work == 0.0
