"""A forward reduce-scatter into an FP8 userbuffer moves FP8 slices.

Sources: TransformerEngine 1.x ``_Linear.forward`` (``if ub_obj_projout.is_fp8_ubuf():
proj_out_index = tex.FP8FwdTensors.GEMM1_OUTPUT ... proj_out_tetype = fp8_dtype_forward``: the
row-parallel GEMM writes FP8 into the buffer) and ``split_overlap_rs`` (``if
(_ubuf.element_size() == 1) reducescatter2_userbuff_stridedoutput_fp8``: 1 byte per element read
from the peers, a 16-bit shard written), its ring exchange ``reduce_fp8_in_bf16_out``;
TransformerEngine >= 2.2 (``if get_ub(...).is_fp8_ubuf(): fp8_output = True``, and its GEMM writes
FP8 into the buffer only for the delayed-scaling quantizer); ``initialize_ub`` (``fp8_buf`` kept
for proj_fprop / fc2_fprop, its default ``pipeline`` names, whatever their method).
"""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder
from test_tp_comm_switches import _doc

from simcluster.parallelism.segments import Comm, Compute

PIPE = {"method": "pipeline", "num_sm": 16, "num_splits": 4, "set_sm_margin": True}
RING = {"method": "ring_exchange", "num_sm": 1, "set_sm_margin": True}


def _fp8_doc(recipe: str = "delayed", fp8_buf: bool = True, proj: dict = PIPE) -> dict:
    """Llama 2 70B at tp 4 on a B200 node, FP8, its output projection's reduce-scatter as given."""
    doc = _doc(tp_comm_cfg={"proj_fprop": {**proj, "fp8_buf": fp8_buf}})
    doc["training"].update(precision="fp8", fp8_recipe=recipe)
    return doc


def _forward(doc: dict) -> tuple[dict[str, Comm], dict[str, Compute], float]:
    builder = layer_builder(doc)
    segments = builder.layer(0, "F")
    comms = {s.name: s for s in segments if isinstance(s, Comm)}
    computes = {s.name: s for s in segments if isinstance(s, Compute)}
    # s x h elements of the block's output, tokens x hidden
    return comms, computes, builder.shapes.tokens * builder.shapes.model.hidden


def test_delayed_scaling_pipeline_moves_one_byte_per_element():
    """The pipelined proj_fprop with fp8_buf under delayed scaling: its three overlapped slices
    and its exposed last one (num_splits 4) carry s x h bytes in all, half the 16-bit volume;
    fc2_fprop, without the flag, still carries 2 s x h."""
    comms, _, elements = _forward(_fp8_doc())
    assert comms["attn_tp_rs"].nbytes + comms["attn_tp_rs_tail"].nbytes == pytest.approx(elements)
    assert comms["attn_tp_rs_tail"].nbytes == pytest.approx(elements / 4)
    assert comms["mlp_tp_rs"].nbytes + comms["mlp_tp_rs_tail"].nbytes == pytest.approx(2 * elements)


@pytest.mark.parametrize("recipe, fp8_buf", [("current", True), ("block", True), ("delayed", False)])
def test_other_recipes_or_a_16_bit_buffer_move_16_bit_slices(recipe: str, fp8_buf: bool):
    """Current or block scaling (the GEMM's output is 16-bit, TransformerEngine's gemm.cpp
    quantises in the GEMM only with a delayed-scaling quantizer) or no fp8_buf: 2 bytes."""
    comms, _, elements = _forward(_fp8_doc(recipe, fp8_buf))
    assert comms["attn_tp_rs"].nbytes + comms["attn_tp_rs_tail"].nbytes == pytest.approx(2 * elements)


def test_ring_exchange_reduction_reads_fp8_partials():
    """A ring-exchange proj_fprop with an FP8 buffer: the tp = 4 partials of this rank's shard
    are read at 1 byte per element and one 16-bit shard written, (4 x 1 + 2) / (4 x 2 + 2) =
    0.6 of the 16-bit kernel's bytes (reduce_fp8_in_bf16_out against reduce_bf16)."""
    _, fp8, _ = _forward(_fp8_doc(proj=RING))
    _, bf16, _ = _forward(_fp8_doc(proj=RING, fp8_buf=False))
    fp8_s, bf16_s = fp8["attn_tp_rs_reduce"].seconds, bf16["attn_tp_rs_reduce"].seconds
    assert fp8_s < bf16_s
    launch = layer_builder(_fp8_doc()).km.launch_s
    assert (fp8_s - launch) / (bf16_s - launch) == pytest.approx(0.6, rel=0.02)
