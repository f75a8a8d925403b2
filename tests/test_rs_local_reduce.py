"""The local reduction that ends a ring-exchange reduce-scatter.

A ring exchange only passes the row-parallel GEMM's partial outputs round the TP ring; each rank
ends holding ``tp`` partials of its own output shard, and one memory-bound kernel sums them:

* TransformerEngine ``transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp``,
  ``CommOverlapP2PBase::split_overlap_rs``: after the GEMM slices and send/recv ("Reduce GEMM
  output chunks") ``reduce_bf16(_ubufs[_tp_size - 1], rs_output, _tp_size, _ubufs[0].numel(),
  stream_main)``; ``userbuffers/userbuffers.cu`` ``reduce_bf16_cuda`` loads ``num_inputs``
  chunks of ``input_size`` elements and stores one: (tp + 1) shards of HBM traffic.
* PyTorch ``torch/distributed/_symmetric_memory/__init__.py``,
  ``_fused_matmul_reduce_scatter_impl``: ``_pipelined_produce_and_all2all`` fills
  ``stacked_partials`` (tp shards), then ``torch.sum(..., dim=0)`` on the current stream.

TE's pipelined reduce-scatter (``CommOverlapBase::split_overlap_rs``) sums inside its userbuffers
kernel (``userbuffers_fp16_sum_inplace_gpu_rr_rs_oop``), so it runs no such kernel.
"""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder, run
from test_tp_overlap import _tp_scenario

from simcluster.parallelism.segments import Comm, Compute
from simcluster.userbuffers import PRESETS, TE2, UbOverlap
from simcluster.userbuffers_traffic import ring_rs_reduce_bytes

RING_RS = "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"  # NeMo's FP8 preset: ring-exchange RS


def test_the_reduction_reads_tp_partials_and_writes_one_shard():
    """reduce_bf16_cuda: tp loads of a shard, one store; only a ring exchange runs it."""
    ring = UbOverlap("ring_exchange", 1, True)
    assert ring_rs_reduce_bytes(ring, 4, 1000.0) == 5000.0
    assert ring_rs_reduce_bytes(ring, 8, 1000.0) == 9000.0
    assert ring_rs_reduce_bytes(ring, 1, 1000.0) == 0.0
    assert ring_rs_reduce_bytes(TE2["proj_fprop"], 8, 1000.0) == 0.0  # pipeline: in-kernel sum
    assert ring_rs_reduce_bytes(UbOverlap("nccl", 0, False), 8, 1000.0) == 0.0
    assert ring_rs_reduce_bytes(UbOverlap("bulk", 16, True), 8, 1000.0) == 0.0


@pytest.mark.parametrize("cfg", [RING_RS, "pytorch-async-tp"])
def test_each_forward_ring_reduce_scatter_ends_with_its_reduction_at_the_hbm_rate(cfg):
    """tp = 8, b*s = 4096 tokens of h: the 16-bit shard is b*s*h*2/8 bytes; the kernel moves
    (8 + 1) of them through HBM, after the exchange's exposed last slice."""
    b = layer_builder(_tp_scenario(True, cfg))
    assert PRESETS[cfg][1]["proj_fprop"].method == PRESETS[cfg][1]["fc2_fprop"].method == "ring_exchange"
    h, tokens = b.shapes.model.hidden, b.shapes.tokens
    shard = tokens * h * 2 / 8
    fwd = b.layer(0, "F")
    names = [s.name for s in fwd]
    for block in ("attn", "mlp"):
        i = names.index(f"{block}_tp_rs_reduce")
        seg = fwd[i]
        assert isinstance(seg, Compute)
        assert seg.seconds == pytest.approx(b.km.memory(9 * shard))
        assert seg.seconds == pytest.approx(9 * shard / b.km.hbm_bytes_per_s + b.km.launch_s)
        assert dict(seg.work.parts) == {"memory": pytest.approx(seg.seconds)}
        assert isinstance(fwd[i - 1], Comm) and fwd[i - 1].name == f"{block}_tp_rs_tail"
    # the backward's reduce-scatters are bulk overlaps or NCCL calls: no separate kernel
    assert not any(s.name.endswith("_rs_reduce") for s in b.layer(0, "B") + b.layer(0, "BW"))


def test_a_pipelined_reduce_scatter_runs_no_reduction_kernel():
    """TE 2.x's default proj_fprop / fc2_fprop are pipelined: the sum happens in the comm kernel."""
    b = layer_builder(_tp_scenario(True, "te-2"))
    assert not any(s.name.endswith("_rs_reduce") for s in b.layer(0, "F"))
    assert not any(s.name.endswith("_rs_reduce") for s in layer_builder(_tp_scenario(False)).layer(0, "F"))


def test_the_reduction_runs_on_the_compute_stream_after_the_exchange():
    """It waits for the last slice's exchange (TE: stream_main waits on _stop_send/_stop_recv
    before reduce_bf16) and the block's output waits for it: it adds to the step."""
    events = run(_tp_scenario(True, RING_RS)).events
    fwd = events[(events["rank"] == 0) & (events["microbatch"] == 0) & (events["layer"] == 1)]
    tail = fwd[fwd["name"] == "mlp_tp_rs_tail"].iloc[0]
    red = fwd[fwd["name"] == "mlp_tp_rs_reduce"].iloc[0]
    assert red["stream"] == "compute"
    assert red["start_s"] >= tail["end_s"] - 1e-12
