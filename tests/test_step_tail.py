"""The host's eager end of a step (``training.step_tail``, ``parallelism/step_tail.py``).

Sources: Megatron-Core ``DistributedOptimizer`` (``_copy_model_grads_to_main_grads``: a view, a
slice and ``.float()`` per shard tensor; ``_copy_main_params_to_model_params``: a slice and a
``copy_``), ``clip_grads.get_grad_norm_fp32`` (``total_norm.item()``: the sync that empties the
GPU's queue), TransformerEngine ``cast_master_weights_to_fp8`` (a Python pass over every FP8
weight); host unit: TransformerEngine issue 2053 (torch.nn.Linear forward 13.48 us of CPU on a
DGX H100, 37.08 on GB200); a bare op's CPU time: pytorch/pytorch issue 41383 (about 2 us).
"""

from __future__ import annotations

import pytest
from engine_helpers import run

from simcluster.context import build_context
from simcluster.parallelism.data import Bucket
from simcluster.parallelism.step_tail import (
    CPU_OP_SHARE,
    TailOps,
    local_tensors,
    megatron_tail,
    stage_fp8_weights,
)
from simcluster.placement import Chunk
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario


def test_the_tail_counts_the_shard_loops_and_every_fp8_weight():
    """10 shard tensors, 4 of them FP8 of 128 FP8 weights: kernels 8 fixed + 10 casts + 6
    copies back + 3 x 4 FP8 casts + 3 FP8 fixed = 39; CPU ops 5 x 10 + 5 x 128 = 690."""
    ops = megatron_tail(10, 128, 4, master=True)
    assert (ops.kernel_ops, ops.cpu_ops) == (39.0, 690.0)
    # fp32 training has no main copies: no casts, no copies back
    assert megatron_tail(10, 0, 0, master=False) == TailOps(8.0, 50.0)
    # without the distributed optimizer the copy back is one multi_tensor_scale launch
    assert megatron_tail(10, 0, 0, master=True, sharded=False) == TailOps(8.0 + 10 + 1, 50.0)
    # fp32 main gradients: .float() returns the tensor itself, a CPU-side op, no kernel
    assert megatron_tail(10, 0, 0, master=True, grad_cast=False) == TailOps(8.0 + 10, 60.0)


def test_a_cpu_op_costs_its_share_of_a_python_op():
    """2 us of a trivial op over the 13.48 us Linear call: 6.74 of them cost one Python op, at
    GB200's 37.08 us unit."""
    assert CPU_OP_SHARE == pytest.approx(2.0 / 13.48)
    assert TailOps(1.0, 6.74).seconds(37.08e-6) == pytest.approx(2 * 37.08e-6)


def test_a_shard_touches_its_share_of_the_tensors_and_one_more_a_bucket():
    assert local_tensors(195, 1, 5) == 195.0
    assert local_tensors(195, 256, 5) == pytest.approx(195 / 256 + 5)
    assert local_tensors(10, 2, 40) == 10.0  # never more tensors than the stage holds


def test_fp8_weights_are_the_linear_weights():
    """A dense layer's QKV, output projection, fc1 and fc2: four per layer, no norms."""
    ctx = build_context(scenario_from_dict(make_scenario(model={"preset": "llama3-8b"})))
    chunk = Chunk(virtual_stage=0, first_layer=0, layers=ctx.model.layers, embedding=True, head=True)
    assert stage_fp8_weights(ctx.model, [chunk]) == (4 * ctx.model.layers, 0)


def test_mla_fp8_weights_are_its_four_or_five_projections():
    """MLA's q (or q_a and q_b with a query LoRA rank), kv_a, kv_b and the output projection:
    DeepSeek-V2-Lite (q_lora_rank 0) four, DeepSeek-V3 (1536) five, beside the MLP's two (its
    first dense layers) or the routed and shared experts' fc1 and fc2."""
    for preset, attention in (("deepseek-v2-lite", 4), ("deepseek-v3", 5)):
        doc = make_scenario()
        doc["model"] = {"preset": preset}
        m = build_context(scenario_from_dict(doc)).model
        chunk = Chunk(virtual_stage=0, first_layer=0, layers=m.layers, embedding=True, head=True)
        mlps = sum(2 * m.shared_experts if m.is_moe_layer(i) else 2 for i in range(m.layers))
        moe = sum(1 for i in range(m.layers) if m.is_moe_layer(i))
        # one fc1 and one fc2 weight per local expert: 8 of them at DeepSeek-V3's 256 over EP 32
        assert stage_fp8_weights(m, [chunk], 8) == (attention * m.layers + mlps, 2 * 8 * moe)


def _doc(**training) -> dict:
    doc = make_scenario(
        model={"preset": "llama3-8b"},
        cluster={"hardware": "gb200-nvl72", "gpus": 8},
        parallel={"tp": 1, "pp": 1, "zero": 1},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "precision": "fp8",
                  "fp8_param_gather": True, **training},
    )  # fmt: skip
    return doc


def test_the_tail_waits_beside_the_optimizer_and_shows_as_host_time():
    """With the tail the step is longer by the host's time beyond the optimizer's kernels, and
    the wait is recorded as host-bound work."""
    with_tail, without = run(_doc()), run(_doc(step_tail="none"))
    events = with_tail.events
    host = events[(events["name"] == "optimizer_host")]
    assert len(host) >= 1
    waited = float((host["end_s"] - host["start_s"]).max())
    assert waited > 1e-3  # 32 layers' 128 FP8 weights at Grace's 37 us unit: milliseconds
    step = with_tail.summary["step_time_s"] - without.summary["step_time_s"]
    assert step == pytest.approx(waited, rel=1e-6)
    assert not (without.events["name"] == "optimizer_host").any()


@pytest.mark.parametrize("framework", ["deepspeed", "nanotron", "torchtitan", "pytorch-fsdp", "pytorch-ddp"])
def test_frameworks_whose_step_was_not_read_charge_none(framework: str):
    doc = make_scenario(framework=framework, model={"preset": "llama3-8b"}, parallel={"tp": 1, "pp": 1})
    if framework == "pytorch-fsdp":
        doc["parallel"]["zero"] = 3
    assert scenario_from_dict(doc).training.step_tail == "none"


def test_megatron_frameworks_and_the_default_charge_the_tail():
    for framework in (None, "megatron-core", "nemo"):
        doc = make_scenario(model={"preset": "llama3-8b"})
        if framework:
            doc["framework"] = framework
        assert scenario_from_dict(doc).training.step_tail == "megatron"


def test_mxfp8_parameters_have_no_fp8_pass_in_the_tail():
    """Megatron-Core's distributed optimizer copies the updated shard of MXFP8 parameters into
    the 16-bit buffer it all-gathers (reuse_grad_buf_for_mxfp8_param_ag), as for 16-bit
    parameters: no TransformerEngine pass over the FP8 weights (cast_master_weights_to_fp8)."""
    from simcluster.parallelism.step_tail import stage_tail_seconds

    def tail(**training) -> float:
        ctx = build_context(scenario_from_dict(_doc(**training)))
        return stage_tail_seconds(ctx, ctx.chunks[0], [Bucket(0, "dp", (0,), 1.0)])

    assert tail(fp8_recipe="block") == pytest.approx(tail(fp8_recipe="block", fp8_param_gather=False), rel=1e-12)
    assert tail(fp8_recipe="current") > tail(fp8_recipe="current", fp8_param_gather=False)


def test_megatron_core_holds_a_weight_per_local_expert_sharded_over_expert_dp():
    """Qwen3-30B-A3B (48 MoE layers of 128 experts) at EP 8 on 32 GPUs: TEGroupedMLP's
    GroupedLinear registers weight0..weight15 for fc1 and for fc2 (16 local experts), so a rank
    holds 48 x 2 x 16 = 1,536 routed-expert tensors beside 339 dense ones (a layer's two norms,
    QKV, projection, q/k norms, router; the embedding, final norm and untied head), and the
    distributed optimizer shards the experts over their expert-data-parallel group
    (32 / 8 = 4 ranks), the rest over all 32, each group's buffer adding one tensor a bucket."""
    from simcluster.parallelism.step_tail import (
        local_experts,
        stage_tail_seconds,
        stage_tensor_split,
    )

    doc = make_scenario(
        cluster={"hardware": "dgx-h100", "gpus": 32},
        parallel={"tp": 1, "pp": 1, "ep": 8, "zero": 1},
        training={"seq_len": 4096, "micro_batch": 1, "global_batch": 64, "precision": "bf16"},
    )  # fmt: skip
    doc["model"] = {"preset": "qwen3-30b-a3b"}
    ctx = build_context(scenario_from_dict(doc))
    assert local_experts(ctx.model, ctx.layout) == 16
    assert stage_tensor_split(ctx.model, ctx.chunks[0], 16) == (339, 1536)
    buckets = [Bucket(0, "dp", (0,), 1.0)] * 2 + [Bucket(0, "edp", (0,), 1.0)] * 3
    local = (339 / 32 + 2) + (1536 / 4 + 3)
    tr = ctx.scenario.training
    expected = megatron_tail(local, 0, 0, master=True, grad_cast=not tr.fp32_grad_accum)
    assert stage_tail_seconds(ctx, ctx.chunks[0], buckets) == pytest.approx(
        expected.seconds(ctx.profile.efficiency.host_op_us * 1e-6), rel=1e-12
    )
