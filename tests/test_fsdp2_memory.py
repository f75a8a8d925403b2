"""FSDP2's static memory per parameter: fp32 shards of the weights and gradients, and the moments.

PyTorch FSDP2 (``fully_shard``) keeps each parameter as a shard in the dtype the model was built
in (fp32 under mixed precision: ``MixedPrecisionPolicy.param_dtype`` casts only the all-gather's
input) and the optimizer steps that shard in place, so there is no separate master copy. The
reduce-scatter's output is cast back to the shard's dtype and added into the sharded ``.grad``
(``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`` ``foreach_reduce``). Adam: 4 + 4 +
8 = 16 bytes per parameter over the shard group, where Megatron's mixed precision keeps 16-bit
weights beside an fp32 master (2 + 4 or 6 + 12).

The first test measures it: a real FSDP2 model on one gloo rank, after two accumulated
microbatches and an AdamW step, its tensors' bytes counted per parameter.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from simcluster.context import build_context
from simcluster.memory import fsdp2_bytes_per_param, stage_params, static_memory
from simcluster.scenario import scenario_from_dict

_MEASURE = """
import sys
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in model:
    if any(True for _ in layer.parameters()):
        fully_shard(layer, mp_policy=policy)
fully_shard(model, mp_policy=policy)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(2):
    model(torch.randn(8, 64)).float().square().mean().backward()
optimizer.step()


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def nbytes(tensors):
    return sum(local(t).numel() * local(t).element_size() for t in tensors)


params = list(model.parameters())
n = sum(local(p).numel() for p in params)
states = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
print(nbytes(params) / n, nbytes(p.grad for p in params) / n, nbytes(states) / n)
dist.destroy_process_group()
"""


def test_fsdp2_keeps_fp32_shards_and_no_master_copy_measured(tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(tmp_path / "pg")], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    params, grads, states = (float(x) for x in proc.stdout.split())
    expected = fsdp2_bytes_per_param("adam")
    assert (params, grads, states) == (expected.params, expected.grads, expected.optimizer) == (4.0, 4.0, 8.0)


def _scenario(**zero3: object) -> dict:
    return {
        "name": "fsdp2",
        "model": "llama3-8b",
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"zero": 3},
        "framework": "torchtitan",
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 16, "precision": "bf16"},
        "zero3": dict(zero3),
    }


def _static(data: dict) -> tuple[float, float, float, float, int]:
    ctx = build_context(scenario_from_dict(data))
    params = stage_params(ctx.model, ctx.layout, ctx.chunks[0])
    return (*static_memory(ctx.model, ctx.layout, ctx.scenario.training, params), params.total, ctx.layout.zero_group)


def test_torchtitan_zero3_is_16_bytes_per_parameter_over_the_group():
    p_b, g_b, o_b, n_params, n = _static(_scenario())
    assert n == 8
    assert p_b == pytest.approx(n_params * 4.0 / n)  # fp32 shards, stepped in place
    assert g_b == pytest.approx(n_params * 4.0 / n)  # fp32 gradient shards
    assert o_b == pytest.approx(n_params * 8.0 / n)  # Adam's two fp32 moments, no master
    # Megatron-style ZeRO-3 (zero3.buffers: views) keeps 16-bit weights and an fp32 master, and
    # fp32 main gradients, each 16-bit gradient freed once added (grad_16bit_freed add)
    vp, vg, vo, _, _ = _static({**_scenario(buffers="views"), "framework": None})
    assert (vp + vg + vo) / n_params * n == pytest.approx(2.0 + 4.0 + 12.0)


def test_kept_gathers_hold_the_16_bit_copy_beside_the_shards():
    """reshard_after_forward false: every layer's bf16 gather stays from its forward to its
    backward, on top of FSDP2's fp32 shards."""
    p_b, _, _, n_params, n = _static(_scenario(reshard_after_forward=False))
    assert p_b == pytest.approx(n_params * (2.0 + 4.0 / n))


def test_fsdp2_optimizer_steps_its_fp32_shards_without_a_16_bit_refresh():
    """The update reads and writes the fp32 shard and both moments and reads the fp32 gradient
    shard, and clipping reads that gradient: 8 + 16 + 4 + 4 = 32 B per shard parameter. Megatron's
    mixed precision adds the refresh of its 16-bit copy from the master (4 + 2 B); FSDP2 casts
    at each all-gather instead, on its copy-in stream."""
    from simcluster.parallelism.data import optimizer_bytes_per_param

    fsdp2 = scenario_from_dict(_scenario())
    views = scenario_from_dict({**_scenario(buffers="views"), "framework": None})
    assert optimizer_bytes_per_param(fsdp2) == 32.0
    assert optimizer_bytes_per_param(views) == 32.0 + 4 + 2


def test_zero3_holds_its_largest_unit_gathered_twice_and_its_gradients():
    """Beyond its shards ZeRO-3 holds the unit it computes and the one it prefetches gathered
    (16-bit), that unit's unsharded 16-bit gradients and, under FSDP2 (one reduce-scatter in
    flight), the reduce-scatter input in fp32 until the next post-backward. Llama 3 8B's largest
    unit is its untied LM head: 128,256 x 4,096 weights and the final norm's 4,096."""
    from simcluster.engine.plan import build_plans, kernel_model
    from simcluster.memory_report import memory_by_stage
    from simcluster.parallelism.data import zero3_working_bytes

    head = 128256 * 4096 + 4096
    ctx = build_context(scenario_from_dict(_scenario()))
    work_p, work_g = zero3_working_bytes(ctx.scenario, ctx.model, ctx.layout, ctx.chunks[0])
    assert work_p == pytest.approx(2 * head * 2.0)
    assert work_g == pytest.approx(head * 2.0 + head * 4.0)
    # the engine's memory timeline and `simcluster memory` both carry it
    plan = build_plans(ctx, kernel_model(ctx))[0]
    p_b, g_b, _, _, _ = _static(_scenario())
    assert plan.static_bytes["params"] == pytest.approx(p_b + work_p)
    assert plan.static_bytes["grads"] == pytest.approx(g_b + work_g)
    assert memory_by_stage(ctx)[0].params_bytes == pytest.approx(p_b + work_p)
    # FSDP1-style views keep no reduce-scatter buffer; a kept gather adds no second copy
    views = build_context(scenario_from_dict({**_scenario(buffers="views"), "framework": None}))
    assert zero3_working_bytes(views.scenario, views.model, views.layout, views.chunks[0])[1] == pytest.approx(head * 2.0)
    kept = build_context(scenario_from_dict(_scenario(reshard_after_forward=False)))
    assert zero3_working_bytes(kept.scenario, kept.model, kept.layout, kept.chunks[0])[0] == 0.0
