"""Tensor-parallel communication overlap (Megatron ``--tp-comm-overlap`` through
TransformerEngine userbuffers): the block's all-gather and reduce-scatter both run under the
block's GEMMs, and the pipelined reduce-scatter reserves SMs from the row-parallel forward GEMM
(TE ``set_sm_margin=True``; default ``num_comm_sm`` 16)."""

from __future__ import annotations

import pytest
from engine_helpers import compute_seconds, layer_builder, pipeline_scenario, run

from simcluster.parallelism.layer import LayerBuilder


def _tp_scenario(overlap: bool, **profile: int) -> dict:
    data = pipeline_scenario(1, 1, "1f1b", layers=2)
    data["cluster"].update({"gpus": 8, "gpus_per_node": 8, "network": "simulated"})
    data["parallel"].update({"tp": 8, "sequence_parallel": True})
    data["training"]["seq_len"] = 4096
    data["overlap"]["tp_comm"] = overlap
    if profile:
        data["cluster"]["profile"] = {"efficiency": profile}
    return data


def test_all_gather_and_reduce_scatter_both_run_under_the_mlp_block():
    """Forward MLP = [all-gather, reduce-scatter] around one fused compute segment: with overlap
    the MLP compute starts together with its all-gather (not after it) and the reduce-scatter
    follows on the TP stream while the MLP still computes."""
    events = run(_tp_scenario(True, tp_overlap_sms=0)).events
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

    builder = _builder(True, 0)
    size = builder.shapes.tp_collective_bytes
    fwd = [s for s in builder.layer(0, "F") if isinstance(s, Comm) and "_tp_rs" in s.name]
    by_name = {s.name: s for s in fwd}
    for block in ("attn", "mlp"):
        overlapped, tail = by_name[f"{block}_tp_rs"], by_name[f"{block}_tp_rs_tail"]
        assert overlapped.overlap and not tail.overlap
        assert tail.nbytes == pytest.approx(size / 4) and overlapped.nbytes == pytest.approx(0.75 * size)
    back = [s.name for s in builder.layer(0, "B") if isinstance(s, Comm)]
    assert not any(n.endswith("_tail") for n in back)
    blocking = [s for s in _builder(False, 0).layer(0, "F") if isinstance(s, Comm) and "_tp_rs" in s.name]
    assert [s.nbytes for s in blocking] == [size, size]  # no overlap: one whole reduce-scatter
    events = run(_tp_scenario(True, tp_overlap_sms=0)).events
    fwd_ev = events[(events["rank"] == 0) & (events["microbatch"] == 0) & (events["layer"] == 1)]
    mlp = fwd_ev[(fwd_ev["stream"] == "compute") & (fwd_ev["name"] == "mlp")].iloc[0]
    tail_ev = fwd_ev[fwd_ev["name"] == "mlp_tp_rs_tail"].iloc[0]
    assert tail_ev["start_s"] >= mlp["end_s"] - 1e-12


def test_overlap_is_faster_than_blocking_tp_comm():
    blocking = run(_tp_scenario(False)).summary["step_time_s"]
    overlapped = run(_tp_scenario(True)).summary["step_time_s"]
    assert overlapped < blocking


def _builder(overlap: bool, sms: int) -> LayerBuilder:
    return layer_builder(_tp_scenario(overlap, tp_overlap_sms=sms))


def test_row_parallel_forward_gemm_runs_on_the_sms_left_by_the_reduce_scatter():
    """H100 has 132 SMs (whitepaper); with 16 reserved the row-parallel forward GEMM runs
    132/116 times longer; the backward and the column-parallel GEMMs are untouched."""
    free, taken = _builder(True, 0), _builder(True, 16)
    assert taken._row_parallel_slowdown("F") == pytest.approx(132 / 116)
    assert taken._row_parallel_slowdown("B") == 1.0
    assert _builder(False, 16)._row_parallel_slowdown("F") == 1.0  # blocking comm takes no SMs
    row = free._gemms(free.mlp_gemms(free.shapes.model.ffn)[-1:], "F", splits=4).total
    row += free._gemms(free.attention_gemms()[-1:], "F", splits=4).total
    extra = compute_seconds(taken.layer(0, "F")) - compute_seconds(free.layer(0, "F"))
    assert extra == pytest.approx(row * (132 / 116 - 1))
    assert compute_seconds(taken.layer(0, "B")) == pytest.approx(compute_seconds(free.layer(0, "B")))


@pytest.mark.parametrize("value", [108, -1])
def test_bad_tp_overlap_sms_names_the_field(value):
    from simcluster.errors import UserError
    from simcluster.hardware import load_profile

    with pytest.raises(UserError) as err:
        load_profile("dgx-a100", patch={"efficiency": {"tp_overlap_sms": value}})  # 108 SMs
    assert err.value.field == "cluster.profile.efficiency.tp_overlap_sms"


def test_overlapped_gemms_run_in_the_slices_transformer_engine_cuts():
    """TE initialize_ub defaults (and NeMo's H100 presets): ring exchange (QKV and fc1 forward,
    projection and fc2 input gradient) runs one GEMM per tp rank's slice of the gathered tokens;
    the pipelined reduce-scatter (projection and fc2 forward) 4 slices; bulk overlaps and the
    weight gradients whole GEMMs. At tp 8 and 4096 tokens, fc1 forward = 8 kernels of 512 rows."""
    on, off = _builder(True, 0), _builder(False, 0)
    km, tokens = on.km, on.shapes.tokens
    fc1, fc2 = on.mlp_gemms(on.shapes.model.ffn)
    assert tokens == 4096
    assert on._overlap_splits("F", column=True) == 8
    assert on._overlap_splits("F", column=False) == 4
    assert on._overlap_splits("B", column=False) == 8
    assert on._overlap_splits("B", column=True) == 1
    assert on._overlap_splits("W", column=True) == off._overlap_splits("F", column=True) == 1
    assert on._gemms([fc1], "F", splits=8).total == pytest.approx(8 * km.gemm(512, fc1.n, fc1.k))
    assert on._gemms([fc2], "B", splits=8).total == pytest.approx(8 * km.gemm(512, fc2.k, fc2.n))
    # slices are smaller kernels: never faster than the whole GEMM
    assert on._gemms([fc1], "F", splits=8).total > off._gemms([fc1], "F").total
    assert compute_seconds(on.layer(0, "W")) == pytest.approx(compute_seconds(off.layer(0, "W")))
