"""Megatron-Core's per-linear userbuffers switches and a frozen linear's input-gradient collective.

Sources: Megatron-Core ``TELayerNormColumnParallelLinear`` (``tp_comm_overlap_disable_qkv`` /
``_fc1`` pass ``ub_overlap_ag`` and ``ub_overlap_rs_dgrad`` false; ``tp_comm_overlap_rs_dgrad``
passes ``ub_overlap_rs_dgrad``); TransformerEngine ``initialize_ub`` (a non-bulk
``qkv_dgrad`` / ``fc1_dgrad`` is a reduce-scatter buffer, beside which no ``*_wgrad`` entry is
allowed) and its LayerNormLinear backward (bulk overlaps off under rs_dgrad, the norm output then
gathered by ``gather_along_first_dim(..., async_op=True)``; a frozen weight turns bulk wgrad off,
pull request 702, and its input gradient is reduce-scattered by NCCL and waited at once); NeMo's
LoRA adapter mixins (the adapter reads the gathered norm output only where the QKV gather is no
userbuffers overlap, else it gathers its shard itself)."""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder
from test_lora import lora_doc

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.parallelism.segments import Comm
from simcluster.scenario import scenario_from_dict

RING = {"method": "ring_exchange", "num_sm": 1, "set_sm_margin": True}


def _doc(lora: bool = False, **overlap) -> dict:
    """Llama 2 70B at tp 4 with sequence parallelism and userbuffers on one B200 node, bf16."""
    doc = lora_doc(tp=4)
    if not lora:
        doc.pop("lora")
    doc["overlap"] = {"tp_comm": True, **overlap}
    return doc


def _comms(doc: dict, phase: str) -> dict[str, Comm]:
    return {s.name: s for s in layer_builder(doc).layer(0, phase) if isinstance(s, Comm)}


def test_disabled_qkv_gathers_its_input_with_a_blocking_nccl_call():
    """tp_comm_overlap_disable_qkv: the attention block's forward all-gather leaves userbuffers
    (blocking, NCCL), the MLP's stays a ring exchange beside fc1's GEMM."""
    on, off = _comms(_doc(), "F"), _comms(_doc(tp_comm_disable_qkv=True), "F")
    assert on["attn_tp_ag"].overlap and not on["attn_tp_ag"].nccl
    assert not off["attn_tp_ag"].overlap and off["attn_tp_ag"].nccl
    assert off["mlp_tp_ag"].overlap


def test_rs_dgrad_runs_the_input_gradient_reduce_scatter_beside_its_gemm_in_tp_slices():
    """tp_comm_overlap_rs_dgrad with fc1_dgrad a ring exchange: the MLP's backward reduce-scatter
    runs in tp = 4 slices beside fc1's input-gradient GEMM, the last slice (1/4 of s x h) after
    it, not beside the weight-gradient GEMMs; the re-gather of the norm output for fc1's weight
    gradient becomes an asynchronous NCCL call taking SMs (TE: bulk dgrad off). The QKV linear,
    disabled, keeps its bulk overlaps."""
    doc = _doc(tp_comm_rs_dgrad=True, tp_comm_disable_qkv=True, tp_comm_cfg={"fc1_dgrad": RING})
    size = layer_builder(doc).shapes.tp_collective_bytes
    segments = layer_builder(doc).layer(0, "BW")
    comms = {s.name: s for s in segments if isinstance(s, Comm)}
    assert comms["mlp_tp_rs_tail"].nbytes == pytest.approx(size / 4) and not comms["mlp_tp_rs_tail"].overlap
    assert comms["mlp_tp_rs"].nbytes == pytest.approx(0.75 * size) and comms["mlp_tp_rs"].overlap
    assert comms["mlp_tp_ag_input"].nccl and comms["mlp_tp_ag_input"].holds_sms
    assert not comms["attn_tp_ag_input"].nccl and "attn_tp_rs_tail" not in comms
    names = [s.name for s in segments]
    # the ring exchange ends before fc1's weight gradient; its partials are summed by one kernel
    assert names.index("mlp_tp_rs_tail") < names.index("mlp_tp_rs_reduce") < names.index("mlp_wgrad")


def test_a_frozen_linears_input_gradient_collective_is_exposed():
    """A LoRA run's frozen QKV and fc1 take no weight gradient: the input gradient's
    reduce-scatter blocks after the block (TransformerEngine turns bulk wgrad off for a frozen
    weight, pull request 702, and waits for the NCCL call at once), not beside the adapters'
    weight gradients; under rs_dgrad fc1's runs beside its input-gradient GEMM instead."""
    frozen = _comms(_doc(lora=True), "BW")
    assert not frozen["attn_tp_rs"].overlap and frozen["attn_tp_rs"].nccl
    assert not frozen["mlp_tp_rs"].overlap
    trained = _comms(_doc(), "BW")
    assert trained["attn_tp_rs"].overlap and trained["mlp_tp_rs"].overlap
    sliced = _comms(_doc(lora=True, tp_comm_rs_dgrad=True, tp_comm_disable_qkv=True,
                         tp_comm_cfg={"fc1_dgrad": RING}), "BW")  # fmt: skip
    assert sliced["mlp_tp_rs"].overlap and "mlp_tp_rs_tail" in sliced and not sliced["attn_tp_rs"].overlap


def test_the_qkv_adapter_gathers_its_input_unless_the_qkv_gather_leaves_userbuffers():
    """With the QKV gather a userbuffers overlap NeMo's adapter gets the sequence shard and
    gathers it itself (s x h x 2 B = 128 MiB forward; its input gradient reduce-scattered
    backward); with tp_comm_overlap_disable_qkv TransformerEngine returns the gathered 16-bit norm
    output (the block's gather then 16-bit even in FP8) and the adapter gathers nothing."""
    wide = 8192 * 8192 * 2
    own = _comms(_doc(lora=True), "F")
    assert own["lora_qkv_input"].op == "all_gather" and own["lora_qkv_input"].nbytes == wide
    assert _comms(_doc(lora=True), "B")["lora_qkv_input"].op == "reduce_scatter"
    fp8 = {"precision": "fp8", "fp8_recipe": "delayed"}
    doc = _doc(lora=True, tp_comm_disable_qkv=True)
    doc["training"].update(fp8)
    reads = _comms(doc, "F")
    assert "lora_qkv_input" not in reads
    assert reads["attn_tp_ag"].nbytes == wide and reads["mlp_tp_ag"].nbytes == wide / 2  # fc1's input in FP8


@pytest.mark.parametrize(
    ("overlap", "field"),
    [
        ({"tp_comm_rs_dgrad": True}, "overlap.tp_comm_cfg.qkv_dgrad.method"),
        ({"tp_comm_cfg": {"fc1_dgrad": RING}}, "overlap.tp_comm_cfg.fc1_dgrad.method"),
        ({"tp_comm_rs_dgrad": True, "tp_comm_cfg": {"qkv_dgrad": RING, "fc1_dgrad": RING, "fc1_wgrad": {"num_sm": 8}}},
         "overlap.tp_comm_cfg.fc1_wgrad"),
    ],
)
def test_a_reduce_scatter_buffer_exactly_where_rs_dgrad_uses_one(overlap, field):
    """rs_dgrad on a linear whose *_dgrad buffer is bulk, a ring-exchange *_dgrad without
    rs_dgrad, and a *_wgrad entry beside a non-bulk *_dgrad are refused, naming the field."""
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(_doc(**overlap)))
    assert err.value.field == field


def test_rs_dgrad_with_reduce_scatter_buffers_on_both_linears_builds():
    doc = _doc(tp_comm_rs_dgrad=True, tp_comm_cfg={"qkv_dgrad": RING, "fc1_dgrad": {"method": "pipeline"}})
    comms = _comms(doc, "BW")
    assert {"attn_tp_rs_tail", "mlp_tp_rs_tail"} <= set(comms)


def test_nemos_lora_preset_runs_fc1s_reduce_scatter_as_a_pipeline_beside_its_gemm():
    """NeMo's userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora (tp_overlap_configs/userbuffers.py):
    fc1_dgrad a pipeline of 16 SMs in 4 splits with a margin, which finetune_llama3_70b.py pairs
    with tp_comm_overlap_disable_qkv and tp_comm_overlap_rs_dgrad: fc1's input-gradient
    reduce-scatter in 4 slices, the last quarter after the GEMM, no reduction kernel (a pipeline
    sums in its userbuffers kernel); without rs_dgrad the preset is refused."""
    preset = "userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora"
    doc = _doc(lora=True, tp_comm_cfg=preset, tp_comm_rs_dgrad=True, tp_comm_disable_qkv=True)
    doc["training"].update(precision="fp8", fp8_recipe="delayed")
    size = layer_builder(doc).shapes.tp_collective_bytes
    segments = layer_builder(doc).layer(0, "BW")
    comms = {s.name: s for s in segments if isinstance(s, Comm)}
    assert comms["mlp_tp_rs_tail"].nbytes == pytest.approx(size / 4)
    assert "mlp_tp_rs_reduce" not in {s.name for s in segments}
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(_doc(tp_comm_cfg=preset, tp_comm_disable_qkv=True)))
    assert err.value.field == "overlap.tp_comm_cfg.fc1_dgrad.method"


def test_a_reduce_scatter_dgrad_buffer_is_sized_as_initialize_ub_builds_it():
    """TransformerEngine's initialize_ub moves a non-bulk fc1_dgrad to its reduce-scatter list:
    as a ring exchange it holds 2 tp - 1 chunks of s x h / tp in 16 bits (its fp8_buf dropped),
    as a pipeline with fp8_buf one FP8 buffer of s x h; a bulk one stays the FP8 all-gather buffer
    of an FP8 run. s x h = 4096 x 8192 here, tp 4."""
    from simcluster.tp_overlap_buffers import BufferShape, userbuffer_bytes
    from simcluster.userbuffers import resolve

    shape = BufferShape(rows=4096, hidden=8192, tp=4, act_bytes=2, fp8=True)
    whole = 4096 * 8192
    ring = resolve({"fc1_dgrad": {"method": "ring_exchange", "fp8_buf": True}})["fc1_dgrad"]
    pipe = resolve({"fc1_dgrad": {"method": "pipeline", "fp8_buf": True}})["fc1_dgrad"]
    bulk = resolve(None)["fc1_dgrad"]
    assert userbuffer_bytes("fc1_dgrad", ring, shape) == whole * 2 / 4 * 7
    assert userbuffer_bytes("fc1_dgrad", pipe, shape) == whole
    assert userbuffer_bytes("fc1_dgrad", bulk, shape) == whole
    assert userbuffer_bytes("fc1_dgrad", resolve({"fc1_dgrad": {"method": "pipeline"}})["fc1_dgrad"], shape) == 2 * whole
