"""Gradient buckets as the frameworks form them (``dp.bucket_mb``, ``dp.bucket_stages``).

torch DDP (``_compute_bucket_assignment_by_size``) and Megatron-Core's ``_ParamAndGradBuffer``
walk the parameters in reverse registration order (the order their gradients become ready in
backward) and close a bucket once it holds the cap or more; a parameter is never split, so a
layer larger than the cap spans several buckets. Megatron-Core's ``DistributedDataParallel``
sets the cap to max(40M, 1M x dp) parameters when ``bucket_size`` is unset, to infinity when
the reduction is not overlapped, and turns bucketing off (one bucket) on every pipeline rank
but the first and, through ``get_model``'s ``disable_bucketing``, on model chunks after the first.
"""

from __future__ import annotations

import copy
import math

import pytest
from engine_helpers import merge_sections, pipeline_scenario, run

from simcluster.context import build_context
from simcluster.parallelism.data import bucket_cap_params, build_buckets, unit_params, unit_tensors
from simcluster.scenario import scenario_from_dict


def _ctx(model: dict, **sections) -> object:
    data = {
        "name": "buckets",
        "model": model,
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"tp": 1, "pp": 1, "zero": 1},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "precision": "bf16"},
    }
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return build_context(scenario_from_dict(data))


GPT = {"layers": 2, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 32000, "mlp": "gelu",
       "norm": "layernorm", "bias": True}  # fmt: skip
MOE = {"layers": 2, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 32000, "mlp": "swiglu",
       "norm": "rmsnorm", "experts": 8, "top_k": 2, "expert_ffn": 1408, "shared_experts": 1}  # fmt: skip


@pytest.mark.parametrize("model, parallel", [(GPT, {"tp": 1}), (GPT, {"tp": 4}), (MOE, {"tp": 2, "ep": 4, "sequence_parallel": True})])
def test_a_units_tensors_add_up_to_its_parameters(model, parallel):
    ctx = _ctx(model, parallel=parallel)
    chunk = ctx.chunks[0][0]
    for unit in (-2, 1, 0, -1):
        tensors = unit_tensors(ctx.model, ctx.layout, chunk, unit)
        dense, expert = unit_params(ctx.model, ctx.layout, chunk, unit)
        assert sum(t.dense for t in tensors) == pytest.approx(dense)
        assert sum(t.expert for t in tensors) == pytest.approx(expert)
        assert all(t.dense >= 0 and t.expert >= 0 for t in tensors)


def test_a_gpt_layers_tensors_in_the_order_backward_readies_them():
    """h = 2048, 4h MLP with biases, LayerNorm: fc2 (h x 4h), fc1 (4h x h + its 4h bias + fc2's
    h bias + the MLP's norm 2h), the attention output (h x h), QKV (3h x h + 3h bias + the
    output bias h + the input norm 2h)."""
    ctx = _ctx(GPT)
    h = 2048
    got = unit_tensors(ctx.model, ctx.layout, ctx.chunks[0][0], 0)
    assert [t.dense for t in got] == [h * 4 * h, 4 * h * h + 4 * h + h + 2 * h, h * h, 3 * h * h + 3 * h + h + 2 * h]
    assert [t.mlp for t in got] == [True, True, False, False]


def test_a_bucket_closes_at_the_cap_and_never_splits_a_tensor():
    """torch DDP's 25 MiB of bf16 gradients = 13,107,200 parameters. fc2 (16.8M) and fc1
    (16.8M) are each above it and make a bucket alone; the output projection (4.2M) is below,
    so QKV (12.6M) joins it. The untied LM head and the embedding (65.5M each) are one bucket
    each: eight buckets, three per layer, each ready with its own layer."""
    ctx = _ctx(GPT)
    h = 2048
    buckets = build_buckets(ctx.model, ctx.layout, ctx.chunks[0], 25 * 2**20 / 2)
    per_layer = [h * 4 * h, 4 * h * h + 7 * h, h * h + 3 * h * h + 6 * h]
    assert [b.params for b in buckets] == [32000 * h + 2 * h, *per_layer, *per_layer, 32000 * h]
    assert [b.layers for b in buckets] == [(-2,), (1,), (1,), (1,), (0,), (0,), (0,), (-1,)]
    # a layer is 50.4M parameters here: a cap of 60M takes the head alone, then a layer and
    # the first tensor of the next, then the rest of that layer with the embedding
    wide = build_buckets(ctx.model, ctx.layout, ctx.chunks[0], 60e6)
    assert [b.layers for b in wide] == [(-2,), (1, 0), (0, -1)]


def test_megatron_cores_bucket_size():
    """max(40M, 1M x dp) parameters; no bucketing without the overlapped reduction."""
    small = _ctx(GPT, dp={"bucket_mb": "megatron-core"})
    assert bucket_cap_params(small.scenario, small.layout) == 40_000_000
    wide = _ctx(GPT, cluster={"gpus": 64}, training={"global_batch": 64}, dp={"bucket_mb": "megatron-core"})
    assert bucket_cap_params(wide.scenario, wide.layout) == 64_000_000
    blocking = _ctx(GPT, dp={"bucket_mb": "megatron-core"}, overlap={"dp_grad_reduce": False})
    assert bucket_cap_params(blocking.scenario, blocking.layout) == math.inf
    # NeMo 2's MegatronCommOverlapCallback and Megatron-Bridge's CommOverlapConfig
    # (_get_optimizer_overlap_cfgs: bucket_size = 128 * 1024 * 1024 with dp > 1), whatever dp
    for gpus in (8, 512):
        nemo = _ctx(GPT, cluster={"gpus": gpus}, training={"global_batch": gpus}, dp={"bucket_mb": "comm-overlap"})
        assert bucket_cap_params(nemo.scenario, nemo.layout) == 134_217_728
    blocking = _ctx(GPT, dp={"bucket_mb": "comm-overlap"}, overlap={"dp_grad_reduce": False})
    assert bucket_cap_params(blocking.scenario, blocking.layout) == math.inf
    # a fixed size is MB of gradients on the wire: 25 MB of fp32 gradients = 6.25M parameters
    fixed = _ctx(GPT, dp={"bucket_mb": 25})
    assert bucket_cap_params(fixed.scenario, fixed.layout) == 6_250_000


def _stage_buckets(res, stage: int):
    ev = res.events
    rank = ev[ev["stage"] == stage]["rank"].min()
    return ev[(ev["rank"] == rank) & (ev["name"] == "grad_reduce_scatter")].sort_values("start_s"), rank


def test_only_the_first_stage_buckets_its_gradients():
    """Megatron-Core: pipeline rank 0 reduces layer by layer under its last backward; rank 1
    reduces its whole stage as one bucket, after its last backward."""
    data = pipeline_scenario(2, 4, "1f1b", layers=8, cluster={"gpus": 4},
                             parallel={"zero": 1}, dp={"bucket_mb": 1, "bucket_stages": "first"})  # fmt: skip
    res = run(data)
    ev = res.events
    first, r0 = _stage_buckets(res, 0)
    second, r1 = _stage_buckets(res, 1)
    assert len(first) > 1 and len(second) == 1
    last_b = lambda r: ev[(ev["rank"] == r) & ev["kind"].str.startswith("backward")]["end_s"].max()  # noqa: E731
    assert first["start_s"].min() < last_b(r0)  # overlapped
    assert second["start_s"].iloc[0] >= last_b(r1) - 1e-12  # after the stage's backward
    every = run(merge_sections(copy.deepcopy(data), dp={"bucket_stages": "all"}))
    assert len(_stage_buckets(every, 1)[0]) > 1


def test_model_chunks_after_the_first_are_one_bucket():
    data = pipeline_scenario(2, 4, "interleaved", v=2, layers=8, cluster={"gpus": 4},
                             parallel={"zero": 1}, dp={"bucket_mb": 1, "bucket_stages": "first"})  # fmt: skip
    ctx = build_context(scenario_from_dict(data))
    from simcluster.engine.plan import build_plans, kernel_model

    plans = build_plans(ctx, kernel_model(ctx))
    per_chunk = lambda plan, c: [b for b in plan.buckets if b.chunk == c and b.group == "dp"]  # noqa: E731
    assert len(per_chunk(plans[0], 0)) > 1
    assert len(per_chunk(plans[0], 1)) == 1
    assert len(per_chunk(plans[1], 0)) == 1 and len(per_chunk(plans[1], 1)) == 1
    # overlap_param_gather_with_optimizer_step: get_model passes disable_bucketing to every
    # chunk (Megatron-Core training.py get_model: "disable_bucketing=(model_chunk_idx > 0) or
    # overlap_param_gather_with_optimizer_step"), so the first stage's first chunk is one too
    none = build_context(scenario_from_dict(merge_sections(copy.deepcopy(data), dp={"bucket_stages": "none"})))
    plans = build_plans(none, kernel_model(none))
    assert all(len(per_chunk(plan, c)) == 1 for plan in plans for c in (0, 1))



def test_a_bucket_closing_on_mlp_weights_goes_out_before_the_layers_attention_backward():
    """PyTorch DDP marks a bucket ready when its last parameter's gradient is accumulated; the
    MLP's weight gradients come before the attention's, so a bucket that closes on fc2 of the
    last layer is all-reduced while that layer's attention backward still runs."""
    data = {
        "name": "early",
        "model": {**GPT, "vocab": 8},  # a tiny head: its bucket is out of the way
        "cluster": {"hardware": "dgx-h100", "gpus": 2, "profile": {"gpu": {"speed_spread": 0.0}}},
        "parallel": {"zero": 0},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 2, "precision": "bf16"},
        "dp": {"bucket_mb": 25 * 2**20 / 1e6 * 2},  # 25 MiB of bf16 gradients, sent as fp32
    }
    res = run(data)
    ev = res.events[res.events["rank"] == 0]
    reduces = ev[ev["name"] == "grad_all_reduce"].sort_values("start_s")
    layer1 = ev[(ev["layer"] == 1) & (ev["stream"] == "compute") & (ev["kind"] == "backward")]
    mlp_done = layer1[layer1["name"].str.startswith("mlp")]["end_s"].max()
    attn_done = layer1[layer1["name"].str.startswith("attn")]["end_s"].max()
    # the tiny head joins fc2 of the last layer in the first bucket (25 MiB of bf16 reached at fc2)
    first = reduces.iloc[0]
    assert first["layer"] == -2 and mlp_done - 1e-12 <= first["start_s"] < attn_done
    # the bucket with the attention weights waits for the whole layer
    last = reduces[reduces["layer"] == 1].iloc[-1]
    assert last["start_s"] >= attn_done - 1e-12


def test_buckets_are_launched_in_gradient_order():
    """The LM head's weight gradient is computed inside the last layer's backward, ahead of its
    MLP's; its bucket (65.5M parameters, alone) is launched before that layer's MLP bucket,
    and both before the layer's attention backward ends, as DDP launches buckets in order."""
    data = {
        "name": "order",
        "model": GPT,
        "cluster": {"hardware": "dgx-h100", "gpus": 2, "profile": {"gpu": {"speed_spread": 0.0}}},
        "parallel": {"zero": 0},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 2, "precision": "bf16"},
        "dp": {"bucket_mb": 25 * 2**20 / 1e6 * 2},
    }
    res = run(data)
    ev = res.events[res.events["rank"] == 0]
    reduces = ev[ev["name"] == "grad_all_reduce"].sort_values("start_s")
    assert list(reduces["layer"])[:3] == [-2, 1, 1]  # head, then fc2 and fc1 of the last layer
    layer1 = ev[(ev["layer"] == 1) & (ev["stream"] == "compute") & (ev["kind"] == "backward")]
    attn_done = layer1[layer1["name"].str.startswith("attn")]["end_s"].max()
    assert reduces.iloc[0]["start_s"] < attn_done
