"""Expert tensor parallelism (``parallel.etp``): each routed expert split over etp ranks.

References, all Megatron-Core:
- ``parallel_state.initialize_model_parallel``: "if expert_tensor_parallel_size is None:
  expert_tensor_parallel_size = tensor_model_parallel_size"; the expert ranks come from a
  ``RankGenerator(tp=etp, ep=ep, dp=world/(etp*ep*pp), pp=pp, order="tp-ep-dp-pp")``, so global
  rank = etp_rank + etp * (ep_rank + ep * (edp_rank + edp * pp_rank)).
- ``MoEAlltoAllTokenDispatcher``: after the dispatch all-to-all, tokens are all-gathered over
  the expert TP group (``gather_from_sequence_parallel_region``); before the combine all-to-all
  the partial outputs are reduce-scattered over it.
- DeepSpeed-MoE ``enable_expert_tensor_parallelism`` and torchtitan
  ``expert_tensor_parallel_degree`` both default to no expert TP.
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import layer_builder, run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.layout import Layout
from simcluster.memory import stage_params
from simcluster.parallelism.expert import a2a_bytes
from simcluster.scenario import scenario_from_dict

MOE = {
    "name": "small-moe", "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn": 4096,
    "vocab": 1024, "experts": 8, "top_k": 2, "expert_ffn": 4096, "position": "rope", "bias": False,
}  # fmt: skip


def _moe(gpus: int = 16, **parallel) -> dict:
    return make_scenario(
        model=MOE,
        cluster={"hardware": "dgx-h100", "gpus": gpus},
        parallel={"pp": 1, "sequence_parallel": True, **parallel},
        training={"seq_len": 4096, "micro_batch": 1, "global_batch": gpus, "fused_cross_entropy": True},
    )


def _megatron_rank(etp_rank: int, ep_rank: int, edp_rank: int, etp: int, ep: int) -> int:
    """Megatron-Core's expert RankGenerator, order tp-ep-dp-pp, one stage."""
    return etp_rank + etp * (ep_rank + ep * edp_rank)


def test_expert_groups_follow_megatrons_rank_generator():
    etp, ep, world = 2, 4, 16
    lay = Layout(
        dp=4, tp=4, pp=1, cp=1, ep=ep, vpp=1, zero=1, sequence_parallel=True, schedule="1f1b",
        order=("tp", "cp", "dp", "pp"), micro_batch=1, global_batch=4, seq_len=8, gpus_per_node=8, etp=etp,
    )  # fmt: skip
    edp = world // (etp * ep)
    assert lay.edp == edp
    for rank in range(world):
        t, e, d = rank % etp, (rank // etp) % ep, rank // (etp * ep)
        assert lay.group("etp", rank) == [_megatron_rank(i, e, d, etp, ep) for i in range(etp)]
        assert lay.group("ep", rank) == [_megatron_rank(t, i, d, etp, ep) for i in range(ep)]
        assert lay.group("edp", rank) == [_megatron_rank(t, e, i, etp, ep) for i in range(edp)]


def test_etp_defaults_to_tp_for_moe_and_one_otherwise():
    assert build_context(scenario_from_dict(_moe(tp=4, ep=4))).layout.etp == 4
    assert build_context(scenario_from_dict(_moe(tp=4, ep=4, etp=1))).layout.etp == 1
    dense = make_scenario(cluster={"hardware": "dgx-h100", "gpus": 8}, parallel={"tp": 4})
    assert build_context(scenario_from_dict(dense)).layout.etp == 1
    # torchtitan with FSDP2 (its DDP runs alone)
    for framework, zero in (("torchtitan", 3), ("deepspeed", 0)):
        data = {**_moe(tp=2, ep=4, zero=zero), "framework": framework}
        assert build_context(scenario_from_dict(data)).layout.etp == 1


@pytest.mark.parametrize(
    "model,parallel,needle",
    [
        (None, {"tp": 2, "etp": 2}, "needs a mixture-of-experts model"),
        # the etp values named divide both dp*cp*tp / ep and expert_ffn: 16/8 = 2 -> 1 or 2
        (MOE, {"tp": 4, "ep": 8, "etp": 4}, "ep*etp = 8*4 must divide dp*cp*tp=16, the ranks of one pipeline stage (expert groups are carved from them); use etp 1 or 2"),
        # 4098 = 2 * 3 * 683 and 16/2 = 8: etp 1 or 2
        ({**MOE, "expert_ffn": 4098}, {"tp": 4, "ep": 2, "etp": 4}, "must divide the experts' hidden width expert_ffn=4098; use etp 1 or 2"),
    ],
)
def test_impossible_expert_tp_names_the_field(model, parallel, needle):
    data = _moe(**parallel) if model is not None else make_scenario(cluster={"gpus": 16}, parallel=parallel)
    if model is not None:
        data["model"] = model
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == "parallel.etp"
    assert needle in str(err.value)


def test_expert_parameters_and_flops_are_split_not_duplicated():
    plain = build_context(scenario_from_dict(_moe(tp=4, ep=2, etp=1)))
    split = build_context(scenario_from_dict(_moe(tp=4, ep=2, etp=4)))
    m = plain.model
    routed_per_gpu = m.moe_layers * m.experts * m.expert_params()
    for ctx, shard in ((plain, 2), (split, 8)):
        assert stage_params(ctx.model, ctx.layout, ctx.chunks[0]).expert == pytest.approx(routed_per_gpu / shard)
    # the expert GEMMs: etp times the rows on 1/etp of the width, so about the same time per GPU
    # (only the shapes' efficiency differs)
    seconds = {}
    for etp in (1, 4):
        segments = layer_builder(_moe(tp=4, ep=2, etp=etp)).layer(0, "F")
        seconds[etp] = next(s.seconds for s in segments if s.name == "experts")
    assert seconds[4] == pytest.approx(seconds[1], rel=0.25)


def test_dispatch_gathers_and_combine_scatters_over_the_etp_group():
    etp = 4
    result = run(_moe(tp=4, ep=2, etp=etp))
    ev = result.events
    gathers = ev[ev["name"].str.startswith("etp_") & ev["name"].str.endswith("_ag")]
    scatters = ev[ev["name"].str.startswith("etp_") & ev["name"].str.endswith("_rs")]
    # forward and backward, once per MoE layer and microbatch on the simulated rank
    assert len(gathers) == len(scatters) == 2 * MOE["layers"] * result.summary["microbatches"]
    shapes = layer_builder(_moe(tp=4, ep=2, etp=etp)).shapes
    sc = scenario_from_dict(_moe(tp=4, ep=2, etp=etp))
    # nccl-tests sizes: an all-gather's total output, a reduce-scatter's total input
    assert gathers["bytes"].iloc[0] == pytest.approx(etp * a2a_bytes(shapes, sc.moe))
    assert scatters["bytes"].iloc[0] == pytest.approx(etp * a2a_bytes(shapes, sc.moe))
    assert set(gathers["group"]) == {"ep"}  # reported with the MoE dispatch
    assert result.summary["parallel"]["etp"] == etp


def _tp_comms(data: dict, phase: str) -> list[str]:
    return [s.name for s in layer_builder(data).layer(0, phase) if getattr(s, "group", None) == "tp"]


def test_megatron_moe_layer_routes_its_sequence_shard_without_a_tp_collective():
    # Megatron-Core token_dispatcher.py: the MoE layer's input is the sequence-parallel shard
    # ("num_local_tokens: S/TP*B"), and the alltoall dispatcher runs permute -> A2A(EP) ->
    # AG(expert TP) -> experts -> RS(expert TP) -> A2A(EP) -> unpermute: no all-gather or
    # reduce-scatter over the attention's TP group around the block (only the attention's own)
    data = _moe(tp=4, ep=2, etp=4)
    for phase in ("F", "B"):
        assert not [n for n in _tp_comms(data, phase) if n.startswith("moe_")], phase
        assert [n for n in _tp_comms(data, phase) if n.startswith("attn_")], phase


def test_shared_experts_and_torchtitan_keep_the_moe_blocks_tp_collectives():
    # a shared expert is a tensor-parallel MLP (Megatron-Core SharedExpertMLP: fc1 gathers the
    # shard, fc2 reduce-scatters); torchtitan's apply_moe_ep_tp wraps the moe module in
    # PrepareModuleInputOutput (Shard(1) -> Replicate in, Partial -> Shard(1) out)
    shared = _moe(tp=4, ep=2, etp=4)
    shared["model"] = {**MOE, "shared_experts": 1}
    # (torchtitan at etp 1 takes ep a multiple of tp, and its FSDP2: its DDP runs alone)
    titan = {**_moe(tp=2, ep=4, etp=1, zero=3), "framework": "torchtitan"}
    for data in (shared, titan):
        assert {"moe_tp_ag", "moe_tp_rs"} <= set(_tp_comms(data, "F"))


# --- token dropping: moe.capacity_factor / moe.pad_to_capacity ----------------------------------
# Megatron-Core: capacity = num_tokens * topk / num_experts * moe_expert_capacity_factor
# (moe_utils.get_capacity); with moe_pad_expert_input_to_capacity every expert's input is padded
# to it and MoEAlltoAllTokenDispatcher's drop-and-pad path fixes the token counts without a
# device-to-host read; without padding, tokens past the capacity are dropped.


def _gemm(segment) -> float:
    return dict(segment.work.parts)["gemm"]


def _expert_segments(**moe) -> dict:
    data = _moe(tp=1, ep=8, etp=1)
    data["moe"] = {"load_imbalance": 1.5, **moe}
    segments = layer_builder(data).layer(0, "F")
    return {s.name: s for s in segments}


def test_padding_to_capacity_runs_every_expert_at_its_capacity_without_a_sync():
    base = layer_builder(_moe(tp=1, ep=8, etp=1))
    mean = next(s for s in base.layer(0, "F") if s.name == "experts")
    padded = _expert_segments(capacity_factor=1.25, pad_to_capacity=True)
    dropless = _expert_segments()
    # the grouped GEMMs run capacity rows (1.25 x the mean share), not the 1.5 x imbalance
    assert _gemm(padded["experts"]) == pytest.approx(1.25 * _gemm(mean), rel=0.1)
    assert _gemm(dropless["experts"]) == pytest.approx(1.5 * _gemm(mean), rel=0.1)
    # the all-to-alls carry the padding; the counts are fixed, so no host sync
    shapes = base.shapes
    sc = scenario_from_dict({**_moe(tp=1, ep=8, etp=1), "moe": {"capacity_factor": 1.25, "pad_to_capacity": True}})
    assert a2a_bytes(shapes, sc.moe) == pytest.approx(1.25 * a2a_bytes(shapes, scenario_from_dict(_moe(tp=1, ep=8, etp=1)).moe))
    assert not padded["router"].sync and dropless["router"].sync


def test_dropping_without_padding_cuts_the_busiest_expert_at_its_capacity():
    dropped = _expert_segments(capacity_factor=1.0)
    dropless = _expert_segments()
    assert _gemm(dropped["experts"]) == pytest.approx(_gemm(dropless["experts"]) / 1.5, rel=0.1)
    assert dropped["router"].sync  # the counts still vary: Megatron reads them back


def test_padding_to_capacity_keeps_the_padded_rows_for_the_backward():
    """Padded to capacity, each expert's grouped GEMMs read capacity_factor x the mean rows,
    and those (padded) inputs are what autograd keeps: the routed part of a layer's stash grows
    by the factor; dropless routing keeps the mean (the busiest expert moves between layers)."""
    from simcluster.memory import layer_activation_bytes

    ctx = build_context(scenario_from_dict(_moe(tp=1, ep=8, etp=1)))
    padded = scenario_from_dict({**_moe(tp=1, ep=8, etp=1), "moe": {"capacity_factor": 1.25, "pad_to_capacity": True}})
    dropless = scenario_from_dict({**_moe(tp=1, ep=8, etp=1), "moe": {"load_imbalance": 1.5}})
    assert padded.moe.padded_rows == 1.25 and dropless.moe.padded_rows == 1.0
    args = (ctx.model, ctx.layout, ctx.scenario.training, 0)
    mean, with_pad = layer_activation_bytes(*args), layer_activation_bytes(*args, routed_rows=1.25)
    # the routed experts' kept tensors per routed row, 2 B each: the first GEMM's input (h),
    # the activation's input (the up-projection's width) and its output (expert_ffn)
    m = ctx.model
    s, k = 4096, m.top_k
    per_row = 2 * (m.hidden + m.up_width(m.expert_ffn) + m.expert_ffn)
    assert with_pad - mean == pytest.approx(0.25 * s * k * per_row, rel=1e-9)
    # and the run's memory walk uses it
    padded_data = {**_moe(tp=1, ep=8, etp=1), "moe": {"capacity_factor": 1.25, "pad_to_capacity": True}}
    peak = {
        name: run(data).summary["peak_memory_bytes"]["max"]
        for name, data in (("mean", _moe(tp=1, ep=8, etp=1)), ("padded", padded_data))
    }
    assert peak["padded"] - peak["mean"] == pytest.approx(0.25 * s * k * per_row * MOE["layers"], rel=0.05)


def test_padding_needs_a_capacity():
    data = {**_moe(tp=1, ep=8, etp=1), "moe": {"pad_to_capacity": True}}
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == "moe.pad_to_capacity"


def test_dense_and_expert_parameter_gathers_interleave_in_forward_order():
    """Megatron-Core keeps expert parameters in their own buffer; with overlap_param_gather each
    buffer's bucket groups are gathered in forward order, one ahead of the forward
    (``next_param_gather_bucket_group``), so the first layer waits for its own buckets only,
    not for every expert bucket of the stage."""
    data = {**_moe(tp=2, ep=2, etp=1), "framework": "nemo"}
    data["model"] = {**MOE, "layers": 4}
    data["parallel"]["zero"] = 1
    ev = run(data).events
    gathers = ev[ev["name"] == "param_all_gather"].sort_values("start_s")
    layers = [int(x) for x in gathers["layer"]]
    # forward order: the embedding's bucket first, then layer by layer (each layer's dense and
    # expert buckets next to each other)
    assert layers[0] == -1
    body = [x for x in layers if x >= 0]
    assert body == sorted(body)
    first = ev[(ev["stream"] == "compute") & (ev["kind"] == "forward")]["start_s"].min()
    assert first < gathers["end_s"].max()


def test_run_points_at_a_defaulted_expert_tp_when_its_all_to_alls_show(cli):
    """Mixtral 8x7B at tp 2, ep 8 on 32 H100s: Megatron-Core's default splits each expert over
    2 GPUs, so an expert group spans two nodes; run says so and names the knob."""
    base = ["run", "mixtral-8x7b-32xh100"]
    defaulted = cli(*base, "--set", "parallel.etp=null")
    assert defaulted.code == 0
    text = " ".join(defaulted.out.split())
    assert "Megatron-Core's default (etp = tp)" in text and "--etp 1,2" in text
    explicit = cli(*base)  # the shipped scenario sets etp: 1
    assert explicit.code == 0 and "Megatron-Core's default (etp = tp)" not in " ".join(explicit.out.split())
