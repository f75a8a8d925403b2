"""Hybrid sharding (``parallel.zero_shard``): ZeRO state sharded inside replicas of S ranks,
the replicas all-reducing their shard (PyTorch FSDP HYBRID_SHARD / HSDP; Megatron-Core's
``num_distributed_optimizer_instances``)."""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.memory import stage_params, static_memory
from simcluster.scenario import scenario_from_dict


def _scenario(zero: int, shard: int | None, gpus: int = 16, **training) -> dict:
    parallel = {"tp": 1, "pp": 1, "zero": zero}
    if shard is not None:
        parallel["zero_shard"] = shard
    return make_scenario(
        cluster={"hardware": "dgx-h100", "gpus": gpus},
        parallel=parallel,
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": gpus, **training},
    )


def test_groups_split_the_data_parallel_group_into_replicas():
    lay = build_context(scenario_from_dict(_scenario(1, 4))).layout
    assert lay.zero_group == 4 and lay.zero_replicas == 4
    assert lay.group("dps", 5) == [4, 5, 6, 7]  # the replica holding rank 5's copy
    assert lay.group("dpr", 5) == [1, 5, 9, 13]  # the ranks holding the same shard
    shards = lay.groups("dps")
    assert sorted(r for g in shards for r in g) == list(range(16))
    assert "shard4x4" in lay.describe()


def test_state_is_sharded_over_the_replica_only():
    """Rajbhandari et al. (ZeRO, SC'20) mixed-precision Adam: 2 + 2 + 12/N_d bytes per parameter
    at stage 1, N_d the ranks sharing the state; with hybrid sharding N_d = S."""
    def optimizer_bytes(shard):
        sc = scenario_from_dict(_scenario(1, shard, fp32_grad_accum=False))
        ctx = build_context(sc)
        params = stage_params(ctx.model, ctx.layout, ctx.chunks[0])
        return static_memory(ctx.model, ctx.layout, sc.training, params)[2] / params.total

    assert optimizer_bytes(None) == pytest.approx(12 / 16)
    assert optimizer_bytes(4) == pytest.approx(12 / 4)


def test_reduce_scatter_in_the_replica_then_all_reduce_of_the_shard():
    res = run(_scenario(3, 4))
    ev = res.events
    rs = ev[ev["name"] == "zero3_grad_reduce_scatter"]
    ar = ev[ev["name"] == "zero3_grad_reduce_scatter_replicas"]
    assert len(rs) == len(ar) > 0
    # the replicas all-reduce a quarter of what each reduce-scatter reduced, layer by layer
    assert sorted(ar["bytes"] * 4) == pytest.approx(sorted(rs["bytes"]))
    assert set(ar["kind"]) == {"all_reduce"} and set(ar["group"]) == {"dp"}
    assert (ar.set_index("layer")["start_s"] >= rs.set_index("layer")["end_s"] - 1e-12).all()


def test_all_ranks_mode_agrees_and_one_replica_is_plain_zero():
    sym = run(_scenario(1, 4)).summary["step_time_s"]
    every = run(_scenario(1, 4), all_ranks=True).summary["step_time_s"]
    assert every == pytest.approx(sym, rel=1e-6)
    plain = run(_scenario(1, None)).summary["step_time_s"]
    assert run(_scenario(1, 16)).summary["step_time_s"] == plain


@pytest.mark.parametrize(
    ("zero", "shard", "extra", "needle"),
    [
        (0, 4, {}, "set parallel.zero"),
        (1, 3, {}, "must divide dp*cp = 16"),
        (1, 4, {"dp": {"grad_collective": "all_reduce"}}, "reduce_scatter"),
    ],
)
def test_bad_hybrid_sharding_is_a_one_line_error(cli, tmp_path, zero, shard, extra, needle):
    import yaml

    raw = _scenario(zero, shard) | extra
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    res = cli("run", str(path), "--out", str(tmp_path / "o"))
    assert res.code == 2
    assert "parallel.zero_shard" in res.err and needle in res.err and res.err.count("\n") == 1


def test_sharding_inside_a_node_keeps_parameter_gathers_on_nvlink():
    """Two 8-GPU nodes with one 100 Gb/s NIC each (a plain cloud node, not a DGX's eight
    rails), ZeRO-3: gathering each layer's parameters over the node's 8 GPUs (NVLink) is far
    faster than over all 16, whose ring crosses the NIC: HSDP's reason to exist. (With a DGX's
    eight 400 Gb/s rails a two-node ring all-gather runs near NVLink's bus bandwidth, so there
    it would not be.)"""
    def gathers(shard):
        raw = _scenario(3, shard)
        raw["cluster"].update(nics_per_node=1, nic_gbps=100)
        raw["model"].update(layers=4, hidden=4096, heads=32, ffn=16384)  # 200M parameters a layer
        ev = run(raw).events
        g = ev[ev["name"] == "zero3_param_all_gather"]
        return g.groupby("layer")["end_s"].first() - g.groupby("layer")["start_s"].first()

    inside, across = gathers(8), gathers(None)
    assert (inside < 0.5 * across).all()


def test_sweep_axis_sets_the_shard():
    from simcluster.sweep import candidates

    cands = candidates(_scenario(3, None), {"zero_shard": [8, 16]})
    assert [c.scenario["parallel"]["zero_shard"] for c in cands] == [8, 16]


def test_a_slow_gpu_under_hybrid_sharding_does_not_deadlock_the_ranks():
    """Under hybrid sharding each bucket's reduction is a reduce-scatter in the replica and an
    all-reduce across replicas, issued back to back on the DP stream. A slower GPU (which forces
    every rank to be simulated) used to let a later bucket's reduce-scatter take the stream
    between the two on some ranks, and the ranks waited for each other for ever (the step came
    out 0 s). Found by a random-layout search; the step must now be at least the healthy one."""
    from simcluster.engine import simulate
    from simcluster.scenario import scenario_from_dict

    def step(sim):
        return simulate(scenario_from_dict({
            "model": {"preset": "llama3-8b", "layers": 6},
            "cluster": {"hardware": "dgx-a100", "gpus": 48},
            "parallel": {"tp": 8, "zero": 2, "zero_shard": 2},
            "training": {"seq_len": 4096, "global_batch": 24},
            "simulation": sim,
        })).summary["step_time_s"]  # fmt: skip

    healthy = step({"all_ranks": True})
    slow = step({"stragglers": [{"gpu": 0, "compute": 1.1}]})
    assert healthy < slow < 1.1 * healthy


@pytest.mark.parametrize(
    ("setting", "framework", "replicated_microbatches"),
    [
        (None, None, {0, 1}),  # PyTorch FSDP2's default: every microbatch all-reduced
        ("last_microbatch", None, {1}),
        (None, "torchtitan", {1}),  # its trainer: set_requires_all_reduce(is_last)
        (None, "automodel", {0, 1}),  # not read from NeMo AutoModel: FSDP2's default kept
    ],
)
def test_replicas_all_reduce_every_microbatch_or_only_the_last(setting, framework, replicated_microbatches):
    """HSDP with two microbatches per step. PyTorch FSDP2 (pytorch/pytorch#126166) reduce-
    scatters in the replica every microbatch and, by default, all-reduces the shard across
    replicas every microbatch too; ``set_requires_all_reduce(False)`` skips the all-reduce, the
    shard is accumulated and only the last microbatch's all-reduce runs, over the accumulated
    shard (the same bytes). torchtitan's trainer does this when dp_replicate > 1
    (pytorch/torchtitan#4505)."""
    raw = _scenario(3, 4, global_batch=32)
    if setting:
        raw["zero3"] = {"replica_all_reduce": setting}
    if framework:
        raw["framework"] = framework
    ev = run(raw).events
    ev = ev[ev["rank"] == 0]
    rs = ev[ev["name"] == "zero3_grad_reduce_scatter"]
    ar = ev[ev["name"] == "zero3_grad_reduce_scatter_replicas"]
    assert set(rs["microbatch"]) == {0, 1}
    assert set(ar["microbatch"]) == replicated_microbatches
    last = rs[rs["microbatch"] == 1]
    assert sorted(ar[ar["microbatch"] == 1]["bytes"] * 4) == pytest.approx(sorted(last["bytes"]))


def _moe_scenario(zero: int, shard: int) -> dict:
    """16 GPUs, ep 4 (whole experts, packed): each expert shard's data-parallel ranks are
    {r, r+4, r+8, r+12}."""
    raw = _scenario(zero, shard)
    raw["model"].update(layers=2, hidden=1024, heads=8, ffn=4096, vocab=1024, mlp="swiglu", norm="rmsnorm",
                        bias=False, experts=8, top_k=2, expert_ffn=512)  # fmt: skip
    raw["parallel"].update(ep=4)
    return raw


def test_experts_shard_inside_the_replica_too():
    """torchtitan shards the experts on the (dp_replicate, efsdp) mesh: with 2 replicas of 8
    ranks, rank 0's expert shard group is the two ranks of its replica that hold its experts
    ({0, 4}), and the replicas all-reduce with the rank holding the same shard in the other
    ({0, 8}); memory shards the experts' state over 2 ranks, not 4."""
    ctx = build_context(scenario_from_dict(_moe_scenario(1, 8)))
    lay = ctx.layout
    assert lay.group("edp", 0) == [0, 4, 8, 12]
    assert lay.group("edps", 0) == [0, 4] and lay.group("edpr", 0) == [0, 8]
    assert lay.group("edps", 12) == [8, 12] and lay.group("edpr", 12) == [4, 12]
    assert lay.expert_zero_group == 2
    params = stage_params(ctx.model, lay, ctx.chunks[0])
    optimizer = static_memory(ctx.model, lay, ctx.scenario.training, params)[2]
    assert optimizer == pytest.approx(12 * (params.dense / 8 + params.expert / 2))


def test_expert_reduce_scatters_stay_in_the_replica_then_all_reduce_across():
    """Each reduce-scatter is followed on the DP stream by its replicas' all-reduce of the
    shard it produced: 1/2 of the experts' bytes (2 expert ranks per replica), 1/8 of the
    dense ones (8 ranks per replica)."""
    ev = run(_moe_scenario(3, 8)).events
    ev = ev[(ev["rank"] == 0) & ev["name"].str.startswith("zero3_grad_reduce_scatter")].sort_values("start_s")
    routed = 8 * 3 * 1024 * 512 / 4 * 4  # fp32 gradients (fp32_grad_accum), ep 4
    ratios = []
    for (_, before), (_, after) in zip(ev.iloc[:-1].iterrows(), ev.iloc[1:].iterrows(), strict=True):
        if after["name"].endswith("_replicas"):
            assert not before["name"].endswith("_replicas")
            ratios.append(after["bytes"] / before["bytes"])
            if after["bytes"] / before["bytes"] == pytest.approx(0.5):
                assert before["bytes"] == pytest.approx(routed)
    assert len(ratios) == (ev["name"].str.endswith("_replicas")).sum()
    assert sorted(set(round(r, 6) for r in ratios)) == [0.125, 0.5]


def test_a_shard_that_splits_the_expert_groups_unevenly_is_a_one_line_error():
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(_moe_scenario(1, 2)))
    assert err.value.field == "parallel.zero_shard" and "expert" in str(err.value)
    assert "\n" not in err.value.one_line()
    build_context(scenario_from_dict(_moe_scenario(1, 4)))  # whole EP groups per replica


@pytest.mark.parametrize("zero", [1, 3])
def test_expert_hybrid_sharding_agrees_in_all_ranks_mode(zero):
    """Every rank simulated meets its expert shard and replica groups in the same order as the
    symmetric run's representative (no rank waits for a collective its peers never issue)."""
    sym = run(_moe_scenario(zero, 8)).summary["step_time_s"]
    assert run(_moe_scenario(zero, 8), all_ranks=True).summary["step_time_s"] == pytest.approx(sym, rel=1e-9)


@pytest.mark.parametrize("buffers", ["copies", "flat"])
def test_pytorch_fsdp_all_reduces_the_replicas_on_a_stream_of_its_own(buffers):
    """PyTorch FSDP runs HSDP's all-reduce on its own stream over the replicate process group
    (FSDP1 ``_init_streams``: ``_all_reduce_stream`` is a new stream under hybrid sharding, and
    ``_reduce_grad`` all-reduces there after waiting on the post-backward stream; FSDP2
    ``foreach_reduce``: ``all_reduce_stream.wait_stream(reduce_scatter_stream)``), so the next
    layer's reduce-scatter does not queue behind the previous layer's all-reduce: each
    all-reduce starts after its own reduce-scatter, the all-reduces keep their order on their
    stream, and the shard group's next collectives (a gather, a reduce-scatter) run while one
    is in flight (2 nodes: the all-reduce crosses the network, the shard group is NVLink)."""
    raw = _scenario(3, 8)
    raw["zero3"] = {"buffers": buffers}
    every = run(raw).events
    every = every[every["rank"] == 0]
    ev = every[every["name"].str.startswith("zero3_grad_reduce_scatter")]
    rs = ev[ev["name"] == "zero3_grad_reduce_scatter"].sort_values("start_s")
    ar = ev[ev["name"] == "zero3_grad_reduce_scatter_replicas"].sort_values("start_s")
    assert set(ar["stream"]) == {"comm_dp_ar"} and set(rs["stream"]) == {"comm_dp"}
    assert len(ar) == len(rs) > 1
    for (_, r), (_, a) in zip(rs.iterrows(), ar.iterrows(), strict=True):
        assert a["start_s"] >= r["end_s"] - 1e-12  # the all-reduce reduces what it produced
    assert (ar["start_s"].iloc[1:].to_numpy() >= ar["end_s"].iloc[:-1].to_numpy() - 1e-12).all()
    shard_group = every[every["stream"] == "comm_dp"]
    overlapped = [
        a["start_s"] <= c["start_s"] < a["end_s"] for (_, a) in ar.iterrows() for (_, c) in shard_group.iterrows()
    ]
    assert any(overlapped)
