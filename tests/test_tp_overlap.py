"""Tensor-parallel communication overlap (Megatron ``--tp-comm-overlap`` through
TransformerEngine userbuffers): the block's all-gather and reduce-scatter both run under the
block's GEMMs, each overlap takes the SMs its config gives it (TE ``initialize_ub`` defaults and
NeMo's presets; ``comm_gemm_overlap.cpp`` ``_math_sms`` under ``set_sm_margin``), and the
forward reduce-scatter's last slice follows the GEMM."""

from __future__ import annotations

import pytest
from engine_helpers import compute_seconds, layer_builder, pipeline_scenario, run

from simcluster.parallelism.layer import LayerBuilder

#: every userbuffers overlap without SMs of its own: the schedule alone
FREE = {name: {"num_sm": 0} for name in ("proj_fprop", "fc2_fprop", "qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")}


def _tp_scenario(overlap: bool, cfg=None, hardware: str = "dgx-h100") -> dict:
    data = pipeline_scenario(1, 1, "1f1b", layers=2)
    data["cluster"].update({"hardware": hardware, "gpus": 8, "gpus_per_node": 8, "network": "simulated"})
    data["parallel"].update({"tp": 8, "sequence_parallel": True})
    data["training"]["seq_len"] = 4096
    data["overlap"]["tp_comm"] = overlap
    if cfg is not None:
        data["overlap"]["tp_comm_cfg"] = cfg
    return data


def test_all_gather_and_reduce_scatter_both_run_under_the_mlp_block():
    """Forward MLP = [all-gather, reduce-scatter] around one fused compute segment: with overlap
    the MLP compute starts together with its all-gather (not after it) and the reduce-scatter
    follows on the TP stream while the MLP still computes."""
    events = run(_tp_scenario(True, FREE)).events
    fwd = events[(events["rank"] == 0) & (events["microbatch"] == 0) & (events["layer"] == 1)]
    fwd = fwd[fwd["kind"].isin(["forward", "all_gather", "reduce_scatter"])]
    mlp = fwd[(fwd["stream"] == "compute") & (fwd["name"] == "mlp")].iloc[0]
    ag = fwd[fwd["name"] == "mlp_tp_ag"].iloc[0]
    rs = fwd[fwd["name"] == "mlp_tp_rs"].iloc[0]
    assert ag["start_s"] == pytest.approx(mlp["start_s"], abs=1e-12)
    assert ag["end_s"] <= rs["start_s"] + 1e-12  # one after the other on the TP stream
    assert rs["start_s"] < mlp["end_s"]


def test_the_pipelined_reduce_scatters_last_slice_follows_the_gemm():
    """TE's pipelined GEMM + reduce-scatter reduces slice i while GEMM slice i + 1 runs, so the
    last of its 4 slices (``num_splits``, TE's initialize_ub default) is reduced after the GEMM,
    before the residual can use the block's output: a quarter of the block's bytes, blocking.
    Backward overlaps are bulk (whole collectives under whole GEMMs) and have no such tail."""
    from simcluster.parallelism.segments import Comm

    builder = _builder(True)
    size = builder.shapes.tp_collective_bytes
    fwd = [s for s in builder.layer(0, "F") if isinstance(s, Comm) and "_tp_rs" in s.name]
    by_name = {s.name: s for s in fwd}
    for block in ("attn", "mlp"):
        overlapped, tail = by_name[f"{block}_tp_rs"], by_name[f"{block}_tp_rs_tail"]
        assert overlapped.overlap and not tail.overlap
        assert tail.nbytes == pytest.approx(size / 4) and overlapped.nbytes == pytest.approx(0.75 * size)
    back = [s.name for s in builder.layer(0, "B") if isinstance(s, Comm)]
    assert not any(n.endswith("_tail") for n in back)
    blocking = [s for s in _builder(False).layer(0, "F") if isinstance(s, Comm) and "_tp_rs" in s.name]
    assert [s.nbytes for s in blocking] == [size, size]  # no overlap: one whole reduce-scatter
    events = run(_tp_scenario(True, FREE)).events
    fwd_ev = events[(events["rank"] == 0) & (events["microbatch"] == 0) & (events["layer"] == 1)]
    mlp = fwd_ev[(fwd_ev["stream"] == "compute") & (fwd_ev["name"] == "mlp")].iloc[0]
    tail_ev = fwd_ev[fwd_ev["name"] == "mlp_tp_rs_tail"].iloc[0]
    assert tail_ev["start_s"] >= mlp["end_s"] - 1e-12


def test_overlap_is_faster_than_blocking_tp_comm():
    blocking = run(_tp_scenario(False)).summary["step_time_s"]
    overlapped = run(_tp_scenario(True)).summary["step_time_s"]
    assert overlapped < blocking


def _builder(overlap: bool, cfg=None) -> LayerBuilder:
    return layer_builder(_tp_scenario(overlap, cfg))


def _column_and_row(b: LayerBuilder, phase: str) -> tuple[float, float]:
    """Standalone seconds of one layer's column-parallel (qkv, fc1) and row-parallel (proj, fc2)
    GEMMs in ``phase``, whole kernels."""
    att, mlp = b.attention_gemms(), b.mlp_gemms(b.shapes.model.ffn)
    cols, rows = att[:-1] + mlp[:-1], att[-1:] + mlp[-1:]
    return b._gemms(cols, phase).total, b._gemms(rows, phase).total


def test_transformer_engine_2_defaults_launch_pipeline_and_bulk_gemms_on_116_of_132_sms():
    """TE >= 2.0 ``get_default_config``: pipeline and bulk overlaps take 16 SMs with
    ``set_sm_margin`` (the GEMM is launched on sm_count - 16; comm_gemm_overlap.cpp
    ``_math_sms``), ring exchanges none. H100 SXM: 132 SMs (whitepaper). So the row-parallel
    forward GEMMs (pipelined reduce-scatter), the column-parallel input- and weight-gradient
    GEMMs (bulk) run 132/116 times longer; the column-parallel forward and row-parallel
    input-gradient GEMMs (ring exchange) and the row-parallel weight gradients do not."""
    free, te2 = _builder(True, FREE), _builder(True)
    assert te2.userbuffers["proj_fprop"].gemm_factor(132) == pytest.approx(132 / 116)
    f = 132 / 116
    for phase in ("F", "B", "W"):
        extra = compute_seconds(te2.layer(0, phase)) - compute_seconds(free.layer(0, phase))
        if phase == "F":
            rows = sum(free._linear(g, "F", blk, column=False).total for g, blk in
                       ((free.attention_gemms()[-1:], "attn"), (free.mlp_gemms(free.shapes.model.ffn)[-1:], "mlp")))
            assert extra == pytest.approx(rows * (f - 1))
        else:
            cols, _ = _column_and_row(free, phase)
            assert extra == pytest.approx(cols * (f - 1), rel=1e-6)
    # blocking TP communication takes no SMs from anything
    blocking = _builder(False)
    assert blocking.userbuffers is None and _builder(False, FREE).userbuffers is None


def test_nemo_preset_bulk_overlaps_hold_their_sms_only_while_in_flight():
    """NeMo/Megatron-Bridge userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192: bulk overlaps
    without a margin (qkv_dgrad 4, qkv_wgrad 24, fc1_dgrad 2, fc1_wgrad 4 SMs) ride on their
    collectives (``Comm.sms``); proj_fprop 24 and fc2_fprop 16 SMs with a margin slow their
    GEMMs for the GEMMs' whole length."""
    from simcluster.parallelism.segments import Comm

    preset = _builder(True, "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192")
    held = {s.name: s.sms for s in preset.layer(0, "B") if isinstance(s, Comm)}
    assert held == {"mlp_tp_ag": 0, "mlp_tp_ag_input": 2, "mlp_tp_rs": 4,
                    "attn_tp_ag": 0, "attn_tp_ag_input": 4, "attn_tp_rs": 24}  # fmt: skip
    fwd = {s.name: s.sms for s in preset.layer(0, "F") if isinstance(s, Comm)}
    assert set(fwd.values()) == {0}  # the forward reduce-scatters' SMs are a margin instead
    free = _builder(True, FREE)
    assert compute_seconds(preset.layer(0, "B")) == pytest.approx(compute_seconds(free.layer(0, "B")))
    proj, fc2 = preset.userbuffers["proj_fprop"], preset.userbuffers["fc2_fprop"]
    assert (proj.gemm_factor(132), fc2.gemm_factor(132)) == (pytest.approx(132 / 108), pytest.approx(132 / 116))


def test_a_bulk_reduce_scatter_without_margin_slows_the_gemm_it_runs_beside():
    """TE 1.x defaults (16 SMs, no margin): the collectives hold 16 of 132 SMs while they run, so
    the compute beside them runs longer than with SM-free overlaps, by at most 132/116 (the
    whole compute under a collective); TE 2.x's margins slow the overlapped GEMMs instead.
    Either way the step is slower than with free overlaps."""
    runs = {name: run(_tp_scenario(True, cfg)) for name, cfg in (("free", FREE), ("te-1", "te-1"), ("te-2", "te-2"))}
    busy = {}
    for name, res in runs.items():
        ev = res.events
        compute = ev[(ev["stream"] == "compute") & (ev["rank"] == 0)]
        busy[name] = float((compute["end_s"] - compute["start_s"]).sum())
    assert busy["free"] < busy["te-1"] <= busy["free"] * 132 / 116
    assert busy["free"] < busy["te-2"] <= busy["free"] * 132 / 116
    steps = {name: res.summary["step_time_s"] for name, res in runs.items()}
    assert steps["free"] < min(steps["te-1"], steps["te-2"])


def test_overlapped_gemms_run_in_the_slices_transformer_engine_cuts():
    """TE initialize_ub defaults (and NeMo's H100 presets): ring exchange (QKV and fc1 forward,
    projection and fc2 input gradient) runs one GEMM per tp rank's slice of the gathered tokens;
    the pipelined reduce-scatter (projection and fc2 forward) 4 slices; bulk overlaps and the
    weight gradients whole GEMMs. At tp 8 and 4096 tokens, fc1 forward = 8 kernels of 512 rows."""
    on, off = _builder(True, FREE), _builder(False)
    km, tokens = on.km, on.shapes.tokens
    fc1, fc2 = on.mlp_gemms(on.shapes.model.ffn)
    assert tokens == 4096
    slices = {(ph, col): on._overlap_of(ph, col, "mlp").slices(8) for ph, col in
              (("F", True), ("F", False), ("B", False), ("B", True))}  # fmt: skip
    assert slices == {("F", True): 8, ("F", False): 4, ("B", False): 8, ("B", True): 1}
    assert on._overlap_of("W", False, "mlp") is None and off._overlap_of("F", True, "mlp") is None
    assert on._gemms([fc1], "F", splits=8).total == pytest.approx(8 * km.gemm(512, fc1.n, fc1.k))
    assert on._gemms([fc2], "B", splits=8).total == pytest.approx(8 * km.gemm(512, fc2.k, fc2.n))
    # slices are smaller kernels: never faster than the whole GEMM
    assert on._gemms([fc1], "F", splits=8).total > off._gemms([fc1], "F").total
    assert compute_seconds(on.layer(0, "W")) == pytest.approx(compute_seconds(off.layer(0, "W")))


def test_a_ring_exchange_reduce_scatter_exposes_one_tp_slice():
    """The FP8 presets run proj_fprop/fc2_fprop as a ring exchange (RingExchangeOverlapCfg,
    set_sm_margin, 1 SM): the GEMM in tp slices, each passed on while the next computes, so
    1/tp of the bytes (not 1/num_splits) follows the GEMM, and the GEMMs lose one SM."""
    from simcluster.parallelism.segments import Comm

    b = _builder(True, "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192")
    size = b.shapes.tp_collective_bytes
    tails = [s.nbytes for s in b.layer(0, "F") if isinstance(s, Comm) and s.name.endswith("_tail")]
    assert tails == [pytest.approx(size / 8)] * 2
    assert b._overlap_of("F", False, "attn").slices(8) == 8
    assert b.userbuffers["fc2_fprop"].gemm_factor(132) == pytest.approx(132 / 131)


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        ("userbuffers_bf16_h100_h8192", "overlap.tp_comm_cfg"),
        ({"qkv_wgard": {"num_sm": 4}}, "overlap.tp_comm_cfg"),
        ({"qkv_wgrad": {"num_sms": 4}}, "overlap.tp_comm_cfg.qkv_wgrad"),
        ({"qkv_wgrad": {"method": "pipeline"}}, "overlap.tp_comm_cfg.qkv_wgrad.method"),
        ({"proj_fprop": {"num_sm": -1}}, "overlap.tp_comm_cfg.proj_fprop.num_sm"),
        ({"proj_fprop": {"num_sm": 132}}, "overlap.tp_comm_cfg.proj_fprop.num_sm"),
        ({"fc1_dgrad": {"set_sm_margin": "yes"}}, "overlap.tp_comm_cfg.fc1_dgrad.set_sm_margin"),
    ],
)
def test_a_bad_userbuffers_config_names_its_field(cfg, field):
    from simcluster.context import build_context
    from simcluster.errors import UserError
    from simcluster.scenario import Scenario

    with pytest.raises(UserError) as err:
        build_context(Scenario.model_validate(_tp_scenario(True, cfg)))
    assert err.value.field == field


@pytest.mark.parametrize(
    ("cfg", "expect"),
    [
        ("userbuffers_bf16_h100_h8192_tp4", "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"),  # did you mean
        ([1, 2], "preset name or a mapping"),
        ({"qkv_wgrad": 3}, "must be a mapping"),
    ],
)
def test_a_bad_userbuffers_config_exits_2_with_one_line(cli, tmp_path, cfg, expect):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_tp_scenario(True, cfg)))
    res = cli("run", str(path))
    assert res.code == 2 and "overlap.tp_comm_cfg" in res.err and len(res.err.strip().splitlines()) == 1
    assert expect in res.err


@pytest.mark.parametrize("overlap", [True, False])
def test_the_attention_backward_runs_in_backward_order_with_its_collectives_beside_their_gemms(overlap):
    """Megatron/TE autograd order for the attention block: the output projection's input
    gradient (after, or over, the all-gather of the output gradient), the core attention, then
    the QKV input gradient with the re-gather of the block's input launched right before it
    (``LinearWithGradAccumulationAndAsyncCommunication.backward``; TE's qkv_dgrad bulk overlap)
    and the reduce-scatter of its input gradient."""
    from simcluster.parallelism.segments import Comm, Compute

    segs = _builder(overlap, FREE).layer(0, "B")
    names = [s.name for s in segs if s.name.startswith("attn")]
    out, qkv = names.index("attn_out"), names.index("attn_qkv")
    assert names.index("attn_tp_ag") < out < qkv
    if overlap:  # both under the QKV GEMM, the re-gather issued first
        assert names.index("attn_tp_ag_input") == qkv - 2 and names.index("attn_tp_rs") == qkv - 1
    else:  # the re-gather is async under it, the reduce-scatter blocks after it
        assert names.index("attn_tp_ag_input") == qkv - 1 and names.index("attn_tp_rs") == qkv + 1
    assert all(isinstance(s, (Comm, Compute)) for s in segs)


def test_list_userbuffers_shows_each_presets_sms(cli):
    """``simcluster list userbuffers``: one row per preset with its overlaps' SMs; NeMo's Llama 3
    70B H100 BF16 preset reads pipe 24m / pipe 16m / bulk 4 / 24 / 2 / 4 (userbuffers.py)."""
    res = cli("list", "userbuffers")
    assert res.code == 0
    row = next(line for line in res.out.splitlines() if line.startswith("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192 "))
    assert row.split()[1:13] == ["pipe", "24m", "pipe", "16m", "bulk", "4", "bulk", "24", "bulk", "2", "bulk", "4"]


@pytest.mark.parametrize("ub", [True, False])
def test_a_fused_backward_reduce_scatters_the_input_gradient_under_the_weight_gradients(ub):
    """Megatron's LinearWithGradAccumulationAndAsyncCommunication.backward launches the
    sequence-parallel reduce-scatter of the input gradient asynchronously, then computes the
    weight gradient; TE's qkv_wgrad / fc1_wgrad bulk overlaps do the same with userbuffers. In
    BW (W not split off) each block's weight gradients follow its input gradients and the
    reduce-scatter runs under them; a split schedule's B keeps it in the backward (ZB's W runs
    later), and nanotron's synchronous linears block on it (overlap.tp_grad_async false)."""
    from simcluster.parallelism.segments import Comm

    b = _builder(ub, FREE)
    fused = b.layer(0, "BW")
    names = [s.name for s in fused]
    for block in ("mlp", "attn"):
        rs = names.index(f"{block}_tp_rs")
        assert names[rs + 1] == f"{block}_wgrad"
        seg = fused[rs]
        assert isinstance(seg, Comm) and seg.overlap and seg.holds_sms == (not ub)
    assert names.index("mlp_wgrad") < names.index("attn_tp_ag")  # the MLP's backward ends first
    split = [s.name for s in b.layer(0, "B")]
    assert "mlp_wgrad" not in split and "attn_wgrad" not in split
    data = _tp_scenario(ub, FREE)
    data["overlap"]["tp_grad_async"] = False
    sync = layer_builder(data)
    if ub:  # userbuffers overlaps are TE's, whatever the flag says
        assert [s.name for s in sync.layer(0, "BW")] == names
    else:
        assert sync.layer(0, "BW") == sync.layer(0, "B") + sync.layer(0, "W")
    events = run(_tp_scenario(ub, FREE)).events
    one = events[(events["rank"] == 0) & (events["microbatch"] == 0) & (events["layer"] == 1)]
    wgrad = one[one["name"] == "mlp_wgrad"].iloc[0]
    rs = one[(one["name"] == "mlp_tp_rs") & (one["kind"] == "reduce_scatter")].iloc[-1]
    assert rs["start_s"] <= wgrad["start_s"] + 1e-12 and rs["start_s"] < wgrad["end_s"]


def test_without_sequence_parallelism_the_input_gradient_all_reduce_runs_under_the_wgrad():
    """Megatron's column-parallel linear without SP (ColumnParallelLinearWithAsyncAllreduce, then
    LinearWithGradAccumulationAndAsyncCommunication with allreduce_dgrad) all-reduces the input
    gradient asynchronously and computes the weight gradient meanwhile: in BW each block's
    all-reduce is issued before its wgrad, holding NCCL's SMs; the forward's row-parallel
    all-reduce stays blocking; overlap.tp_grad_async false (Megatron-LM of SC'21,
    Megatron-DeepSpeed) keeps B then W. The step is shorter with it."""
    from simcluster.parallelism.segments import Comm

    data = _tp_scenario(False)
    data["parallel"]["sequence_parallel"] = False
    fused = layer_builder(data).layer(0, "BW")
    names = [s.name for s in fused]
    for block in ("mlp", "attn"):
        ar = names.index(f"{block}_tp_ar")
        assert names[ar + 1] == f"{block}_wgrad"
        assert fused[ar].overlap and fused[ar].holds_sms and fused[ar].op == "all_reduce"
    forward = [s for s in layer_builder(data).layer(0, "F") if isinstance(s, Comm)]
    assert [s.overlap for s in forward] == [False, False]
    sync = dict(data, overlap={**data["overlap"], "tp_grad_async": False})
    b = layer_builder(sync)
    assert b.layer(0, "BW") == b.layer(0, "B") + b.layer(0, "W")
    assert run(data).summary["step_time_s"] < run(sync).summary["step_time_s"]


def test_run_names_the_tp_overlap_when_tp_is_exposed(cli):
    # llama3-70b-64xh100 runs TP 8 with sequence parallelism and no TE overlap (Megatron-LM's
    # default): its exposed TP is well above 5% of the step, so `run` names overlap.tp_comm
    off = cli("run", "llama3-70b-64xh100")
    assert off.code == 0 and "overlap.tp_comm: true" in off.out
    on = cli("run", "llama3-70b-64xh100", "--set", "overlap.tp_comm=true")
    assert on.code == 0 and "overlap.tp_comm: true" not in on.out


def test_run_says_when_a_tp_group_leaves_the_nvlink_domain(cli):
    # tp 8 on the Alps GH200 node (4 GPUs on NVLink): half of each TP group is a node away, so its
    # collectives cross Slingshot; tp 4 stays inside a node and gets no such line
    wide = cli("run", "llama3-8b-256xgh200", "--set", "cluster.gpus=8", "--set", "parallel.tp=8",
               "--set", "training.global_batch=8")  # fmt: skip
    assert wide.code == 0 and "tp 8 spans 2 scale-up domains of 4 GPUs" in " ".join(wide.out.split())
    assert "--tp 1,2,4" in wide.out
    inside = cli("run", "llama3-8b-256xgh200", "--set", "cluster.gpus=8", "--set", "parallel.tp=4",
                 "--set", "training.global_batch=8")  # fmt: skip
    assert inside.code == 0 and "scale-up domains" not in inside.out


def test_a_tp_group_across_nodes_is_not_pointed_at_userbuffers(cli):
    # llama3-70b-64xh100 (TP 8 with SP, no TE overlap) on 4-GPU GH200 nodes: the group crosses
    # Slingshot, where userbuffers' NVLink overlap cannot help; run names the smaller tp instead
    res = cli("run", "llama3-70b-64xh100", "--set", "cluster.hardware=gh200")
    text = " ".join(res.out.split())
    assert res.code == 0 and "tp 8 spans 2 scale-up domains of 4 GPUs" in text
    assert "overlap.tp_comm: true" not in text


def test_pytorch_async_tp_leaves_the_input_gradient_reduce_scatter_blocking():
    """PyTorch's micro-pipelining pass (torch/_inductor/fx_passes/micro_pipeline_tp.py,
    ``fuse_matmul_reduce_scatter``) fuses ``reduce_scatter_tensor(A @ B)`` only when the
    reduce-scatter's input is one matmul with no other user. In the backward, the
    column-parallel input gradient is the sum of the q, k, v (w1, w3) input gradients, since one
    all-gather feeds them (torchtitan's PrepareModuleInput on attention and feed_forward), so
    its reduce-scatter stays a plain NCCL call: after the block's input-gradient GEMMs, before
    its weight gradients, not under them. The forward's fused ops (copy-engine rings) are
    TransformerEngine's ring exchanges' shape."""
    from simcluster.parallelism.segments import Comm

    b = _builder(True, "pytorch-async-tp")
    fused = b.layer(0, "BW")
    names = [s.name for s in fused]
    for block in ("mlp", "attn"):
        rs = fused[names.index(f"{block}_tp_rs")]
        assert isinstance(rs, Comm) and not rs.overlap
        assert names[names.index(f"{block}_tp_rs") + 1] == f"{block}_wgrad"
    forward = [s for s in b.layer(0, "F") if isinstance(s, Comm)]
    assert forward and all(s.overlap for s in forward if not s.name.endswith("_tail"))
    # slower than TransformerEngine's bulk overlap of the same reduce-scatter, faster than none
    steps = {
        cfg: run(_tp_scenario(on, cfg)).summary["step_time_s"]
        for on, cfg in ((True, "pytorch-async-tp"), (True, "te-2"), (False, None))
    }
    assert steps["te-2"] < steps["pytorch-async-tp"] < steps[None]


def test_torchtitan_async_tp_is_pytorchs():
    """``framework: torchtitan`` with ``overlap.tp_comm`` (its enable_async_tensor_parallel) runs
    PyTorch's async TP, not TransformerEngine's userbuffers; a scenario's own preset wins."""
    from simcluster.context import build_context
    from simcluster.scenario import scenario_from_dict

    data = _tp_scenario(True)
    data["framework"] = "torchtitan"
    data["parallel"]["zero"] = 3
    data["training"]["elementwise"] = "compiled-blocks"  # its async TP is an Inductor pass
    assert build_context(scenario_from_dict(data)).scenario.overlap.tp_comm_cfg == "pytorch-async-tp"
    data["overlap"]["tp_comm_cfg"] = "te-2"
    assert build_context(scenario_from_dict(data)).scenario.overlap.tp_comm_cfg == "te-2"
    data["overlap"] = {"tp_comm": False}
    assert build_context(scenario_from_dict(data)).scenario.overlap.tp_comm_cfg is None
