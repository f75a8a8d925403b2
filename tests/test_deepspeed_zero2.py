"""DeepSpeed's ZeRO-2 (``framework: deepspeed``, ``parallel.zero: 2``) with gradient accumulation.

Reference: microsoft/DeepSpeed ``deepspeed/runtime/zero/stage_1_and_2.py`` and
``runtime/zero/config.py``:

- stage 2 reduces gradients in every microbatch's backward (the engine: "ZeRO stage >= 2
  communicates during non gradient accumulation boundaries as well"); ``overlap_comm`` defaults
  to true only for stage 3, so stage 2 reduces on the current stream and the backward waits;
- each gradient is copied into the ipg bucket in its hook, the bucket divided by dp
  (``average_tensor``: ``tensor.div_``), flattened and, with ``use_multi_rank_bucket_allreduce``
  (default true), all-reduced whole (``allreduce_and_scatter`` -> ``dist.all_reduce``); the rank
  then keeps its slices;
- ``.grad`` is freed after each reduce epilogue (``zero_grad(set_to_none=True)``), so autograd
  never accumulates into it; the reduced gradient is added into the rank's partition only
  (``accumulated_grad.add_``), in the model's dtype (``engine.get_data_types``).
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine.plan import build_plans, kernel_model
from simcluster.errors import UserError
from simcluster.parallelism import wgrad
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import run

MICROBATCHES = 4  # per replica


def _scenario(**over):
    doc = {
        "name": "ds2", "model": "llama3.2-1b", "framework": "deepspeed",
        "cluster": {"hardware": "dgx-h100", "gpus": 16},
        "parallel": {"tp": 1, "pp": 1, "zero": 2},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 16 * MICROBATCHES},
    }  # fmt: skip
    for key, value in over.items():
        doc[key] = {**doc.get(key, {}), **value}
    return doc


def test_every_microbatch_all_reduces_every_bucket_and_the_backward_waits():
    result = run(_scenario())
    ev = result.events[result.events["rank"] == 0]
    reduce = ev[ev["name"] == "grad_all_reduce"]
    ctx = build_context(scenario_from_dict(_scenario()))
    assert ctx.layout.grad_collective == "all_reduce"
    buckets = reduce.groupby("layer").size()
    assert (buckets == MICROBATCHES).all()
    # the 16-bit gradient of every parameter, all-reduced once per microbatch
    plan = build_plans(ctx, kernel_model(ctx))[0]
    params = plan.params_dense + plan.params_expert
    assert reduce["bytes"].sum() == pytest.approx(MICROBATCHES * 2 * params, rel=0.01)
    # on the compute stream: no backward kernel runs while a bucket is being reduced
    compute = ev[(ev["stream"] == "compute") & (ev["kind"] == "backward")]
    for start, end in zip(reduce["start_s"], reduce["end_s"], strict=True):
        inside = compute[(compute["start_s"] < end - 1e-12) & (compute["end_s"] > start + 1e-12)]
        assert inside.empty


def test_overlap_comm_reduces_each_microbatch_beside_the_backward():
    """With overlap_comm the same reductions run on their own stream under the backward."""
    blocking = run(_scenario())
    overlapped = run(_scenario(overlap={"dp_grad_reduce": True}))
    n = (overlapped.events["name"] == "grad_all_reduce") & (overlapped.events["rank"] == 0)
    assert n.sum() == (blocking.events["name"] == "grad_all_reduce")[blocking.events["rank"] == 0].sum()
    assert overlapped.summary["step_time_s"] < blocking.summary["step_time_s"]


def test_only_the_shard_is_accumulated():
    """A 16-bit add (read 2 + 2, write 2 bytes) over 1/dp of the parameters, not autograd's add
    over all of them."""
    ctx = build_context(scenario_from_dict(_scenario()))
    assert ctx.layout.shard_accumulate
    assert wgrad.accumulation_bytes(ctx.scenario.training, ctx.layout) == pytest.approx(6.0 / 16)
    ctx1 = build_context(scenario_from_dict(_scenario(parallel={"zero": 1})))
    assert not ctx1.layout.shard_accumulate
    assert wgrad.accumulation_bytes(ctx1.scenario.training, ctx1.layout) > 6.0  # BF16_Optimizer


def test_shard_accumulate_without_a_gradient_shard_is_an_error():
    doc = _scenario(parallel={"zero": 1}, dp={"shard_accumulate": True})
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(doc))
    assert "dp.shard_accumulate" in err.value.one_line()


def test_routed_experts_accumulate_their_expert_data_parallel_shard():
    """A routed expert's gradient is reduced over, and sharded across, the expert-data-parallel
    group (dp·cp·tp / (ep·etp) replicas of it), so its rank holds 1/edp of the local experts'
    gradients, not 1/(dp·cp); the shared experts and the router are tensor-parallel like a dense
    MLP and sharded over dp·cp."""
    from simcluster.parallelism import expert
    from simcluster.parallelism.shapes import Shapes

    doc = {**_scenario(parallel={"ep": 8}), "model": "mixtral-8x7b"}
    ctx = build_context(scenario_from_dict(doc))
    lay, m = ctx.layout, ctx.model
    assert (lay.edp, lay.zero_group) == (2, 16)
    km = kernel_model(ctx)
    shapes = Shapes(m, lay, ctx.scenario.training)
    per_expert = m.hidden * (m.up_width(m.expert_ffn) + m.expert_ffn)
    routed = per_expert * m.experts / 8 * 6.0 / 2  # a 16-bit add over 1/edp of the local experts
    dense = (per_expert * m.shared_experts + m.hidden * m.experts) * 6.0 / 16
    assert expert._accumulate(shapes, km) == pytest.approx((routed + dense) / km.hbm_bytes_per_s)


def _overlapped(wait: bool):
    """overlap_comm on, 200 MB buckets (several per backward), a slow network (10 Gb/s NICs) so
    that a bucket's all-reduce outlasts the backward that fills the next one."""
    doc = _scenario(
        overlap={"dp_grad_reduce": True},
        dp={"bucket_mb": 200.0, "wait_reduction": wait, "backward_sync": "host" if wait else "none"},
        cluster={"nic_gbps": 10.0},
    )  # fmt: skip
    ev = run(doc).events
    return ev[ev["rank"] == 0]


def test_overlap_comm_keeps_one_reduction_in_flight():
    """DeepSpeed >= 0.14.4, stage_1_and_2.py ``average_tensor`` (two ipg buffers): before a
    bucket's reduction is queued, ``current_stream().wait_stream(reduction_stream)``, so the
    backward's next kernel waits for the bucket before it; and each backward ends in
    ``independent_gradient_partition_epilogue``'s ``synchronize()``, so the next forward starts
    after every reduction of the microbatch."""
    dp = build_context(scenario_from_dict(_scenario())).scenario.dp  # the preset's
    assert dp.wait_reduction and dp.backward_sync == "host"
    for wait in (True, False):
        ev = _overlapped(wait)
        reduce = ev[ev["name"] == "grad_all_reduce"].sort_values("start_s")
        compute = ev[ev["stream"] == "compute"].sort_values("start_s")
        passes = compute[compute["name"] == "grad_bucket_pass"]
        stalled = []
        for t in passes["end_s"]:
            before = reduce[reduce["start_s"] < t - 1e-12]
            after = compute[compute["start_s"] >= t - 1e-12]
            if len(before) and len(after):
                stalled.append(after["start_s"].iloc[0] >= before["end_s"].iloc[-1] - 1e-12)
        forwards = compute[compute["kind"] == "forward"].groupby("microbatch")["start_s"].min()
        synced = [
            forwards[mb + 1] >= reduce[reduce["start_s"] < forwards[mb + 1]]["end_s"].max() - 1e-12
            for mb in range(MICROBATCHES - 1)
        ]
        if wait:
            assert stalled and all(stalled) and all(synced)
        else:  # PyTorch-DDP-like queueing: the backward runs on under the reductions
            assert not all(stalled) and not all(synced)



def test_zero3_ends_each_backward_in_a_host_sync_without_bounding_the_reductions():
    """DeepSpeed ZeRO-3 (stage3.py, 0.14.4-0.19.8): reductions queue on
    reduce_and_partition_stream while the backward runs on (the compute stream never waits for
    it), and every microbatch's ``independent_gradient_partition_epilogue`` ends in
    ``reduce_and_partition_stream.synchronize()``: the next forward starts after the last one."""
    doc = _scenario(parallel={"zero": 3}, cluster={"nic_gbps": 10.0})
    dp = build_context(scenario_from_dict(doc)).scenario.dp
    assert dp.backward_sync == "host" and not dp.wait_reduction
    ev = run(doc).events
    ev = ev[ev["rank"] == 0]
    scatters = ev[ev["name"] == "zero3_grad_reduce_scatter"]
    compute = ev[ev["stream"] == "compute"]
    forwards = compute[compute["kind"] == "forward"].groupby("microbatch")["start_s"].min()
    backward = compute[(compute["kind"] == "backward") & (compute["microbatch"] == 0)]
    first = scatters[scatters["start_s"] < forwards[1]]
    # the backward runs on under its reduce-scatters
    assert (backward["start_s"] > first["start_s"].min()).any()
    assert backward["end_s"].max() < first["end_s"].max()
    for mb in range(MICROBATCHES - 1):
        assert forwards[mb + 1] >= scatters[scatters["start_s"] < forwards[mb + 1]]["end_s"].max() - 1e-12


def test_reduction_buckets_hold_gradient_copies_in_memory():
    """PyTorch DDP without gradient_as_bucket_view keeps a second copy of every gradient in its
    buckets (its documentation: the view "can reduce peak memory usage, where the saved memory
    size will be equal to the total gradients size"); DeepSpeed's ZeRO-2 copies into one ipg
    buffer of reduce_bucket_size elements, two with overlap_comm (setup_buckets' double
    buffers); without a data-parallel group there is nothing to reduce."""
    from simcluster.parallelism.data import bucket_buffer_bytes

    params = 1.0e9
    ds = build_context(scenario_from_dict(_scenario()))
    assert bucket_buffer_bytes(ds.scenario, ds.layout, params) == pytest.approx(1000.0e6)  # 5e8 x 2 B
    ds_overlap = build_context(scenario_from_dict(_scenario(overlap={"dp_grad_reduce": True})))
    assert bucket_buffer_bytes(ds_overlap.scenario, ds_overlap.layout, params) == pytest.approx(2000.0e6)
    assert bucket_buffer_bytes(ds.scenario, ds.layout, 1.0e8) == pytest.approx(2.0e8)  # under one bucket
    ddp = build_context(scenario_from_dict(_scenario(parallel={"zero": 0}, dp={"bucket_copies": True})))
    assert bucket_buffer_bytes(ddp.scenario, ddp.layout, params) == pytest.approx(2.0e9)  # every bf16 gradient
    single = build_context(scenario_from_dict(_scenario(cluster={"gpus": 1}, training={"global_batch": 4})))
    assert bucket_buffer_bytes(single.scenario, single.layout, params) == 0.0


@pytest.mark.parametrize(("release", "op"), [("0.2.0", "reduce_scatter"), ("0.12.3", "reduce_scatter"),
                                             ("0.12.4", "all_reduce"), (None, "all_reduce")])  # fmt: skip
def test_releases_before_0_12_4_reduce_each_slice_to_its_owner(release, op):
    """DeepSpeed's ZeRO-2 up to 0.12.3 (``stage_1_and_2.py`` ``average_tensor`` in the 0.10.0 and
    0.12.3 PyPI sdists, and the 2020 ``deepspeed/pt/deepspeed_zero_optimizer.py`` the ZeRO paper
    ran) divides the bucket by dp and sends each partition's slice to its owner with
    ``dist.reduce``: every rank sends each element once, a reduce-scatter's traffic, half an
    all-reduce's. 0.12.4 added ``use_multi_rank_bucket_allreduce`` (``zero/config.py``, default
    true): the bucket all-reduced whole. Dated in ``framework_releases.py`` for ZeRO-2 only."""
    name = "deepspeed" if release is None else f"deepspeed {release}"
    doc = {**_scenario(), "framework": name}
    ctx = build_context(scenario_from_dict(doc))
    assert ctx.layout.grad_collective == op
    ev = run(doc).events
    ev = ev[ev["rank"] == 0]
    wire = ev[ev["name"] == f"grad_{op}"]
    plan = build_plans(ctx, kernel_model(ctx))[0]
    # every microbatch, each 16-bit gradient once (nccl-tests' size: the whole bucket)
    assert wire["bytes"].sum() == pytest.approx(MICROBATCHES * 2 * (plan.params_dense + plan.params_expert), rel=0.01)
    # the other ZeRO stages keep the preset's collective whatever the release
    one = build_context(scenario_from_dict({**_scenario(parallel={"zero": 1}), "framework": name}))
    assert one.layout.grad_collective == "all_reduce"


def test_the_owner_reduction_is_cheaper_on_the_wire():
    """Same bytes in nccl-tests' terms, but a reduce-scatter moves (n-1)/n of them per rank where
    the ring all-reduce moves 2(n-1)/n: the blocking reductions of the old releases are shorter."""
    old = run({**_scenario(), "framework": "deepspeed 0.12.3"})
    new = run({**_scenario(), "framework": "deepspeed 0.12.4"})
    assert old.summary["exposed_comm_s"]["dp"] < new.summary["exposed_comm_s"]["dp"]
    assert old.summary["step_time_s"] < new.summary["step_time_s"]


@pytest.mark.parametrize(("zero", "precision", "extra"), [(2, "bf16", 26.0), (2, "fp16", 28.0), (1, "fp16", 28.0)])
def test_the_zero_optimizers_step_passes(zero, precision, extra):
    """DeepSpeedZeroOptimizer.step (``runtime/zero/stage_1_and_2.py``, the 0.12.4 PyPI sdist),
    per element of the rank's shard, beside what every framework's update is charged:
    ``get_grad_norm_direct``'s ``g.data.double().norm(2)`` writes and reads an fp64 copy of
    each 16-bit gradient (2 + 8 + 8 = 18 where Megatron's norm reads 4), ``step`` flattens the
    gradients into one 16-bit tensor before ``.to(fp32)`` (2 + 2) and ``unscale_and_clip_grads``
    multiplies the fp32 shard every step (4 + 4), bf16 too; fp16's ``_has_inf_or_nan``
    (``x.float().sum()``: 2 + 4 + 4) replaces the fused unscale-and-check (4 + 4)."""
    from simcluster.parallelism.data import optimizer_bytes_per_param

    doc = _scenario(parallel={"zero": zero}, training={"precision": precision})
    ds = scenario_from_dict(doc)
    assert ds.training.grad_clip == "deepspeed" and not ds.training.fp32_grad_accum
    megatron = scenario_from_dict({**doc, "training": {**doc["training"], "grad_clip": "shard"}})
    assert optimizer_bytes_per_param(ds) - optimizer_bytes_per_param(megatron) == extra


def test_the_bf16_optimizer_and_zero3_keep_their_own_step():
    """The BF16_Optimizer (bf16 at ZeRO 0/1 with fp32 accumulation, BLOOM's) and ZeRO-3's
    stage3.py are other classes: the preset leaves their clipping alone."""
    bf16_zero1 = scenario_from_dict(_scenario(parallel={"zero": 1}))
    zero3 = scenario_from_dict(_scenario(parallel={"zero": 3}))
    assert bf16_zero1.training.grad_clip == zero3.training.grad_clip == "shard"
