"""The TP comm+GEMM overlaps' persistent buffers (simcluster.tp_overlap_buffers).

TransformerEngine's ``initialize_ub`` (transformer_engine/pytorch/module/base.py) builds one
communicator per overlap name on the shape Megatron passes,
``[seq_length * micro_batch_size // context_parallel_size, hidden_size]``
(megatron/training/initialize.py ``_initialize_tp_communicators``): ``CommOverlapBase`` and an
all-gather ``CommOverlapP2PBase`` register ``shape[0] * shape[1] * typeToSize(dtype)`` bytes, a
reduce-scatter ``CommOverlapP2PBase`` ``buffer_bytes / tp_size * (tp_size * 2 - 1)``
(comm_gemm_overlap.cpp); the buffer is ``torch.uint8`` for the all-gather names in an FP8 run
(``layers_all_gather_overlap``), bf16 (initialize_ub's ``dtype`` default) otherwise; and the
cuBLAS workspace is repeated ``_NUM_MAX_UB_STREAMS = 3`` times (32 MiB each on Hopper)."""

from __future__ import annotations

import json

import pytest

from simcluster.tp_overlap_buffers import (
    BufferShape,
    overlap_buffer_bytes,
    run_buffer_bytes,
    symmetric_workspace_bytes,
    userbuffer_bytes,
)
from simcluster.userbuffers import NAMES, resolve

MIB = 2**20
# Llama 3 70B as NeMo's userbuffers_*_h100_h8192_tp4_mbs1_seqlen8192 presets size it
SEQ, MBS, HIDDEN, TP = 8192, 1, 8192, 4
WHOLE_BF16 = SEQ * MBS * HIDDEN * 2  # 128 MiB


def _shape(fp8: bool, cp: int = 1, tp: int = TP) -> BufferShape:
    return BufferShape(rows=SEQ * MBS / cp, hidden=HIDDEN, tp=tp, act_bytes=2, fp8=fp8)


def test_bf16_te2_defaults_hold_ten_whole_buffers():
    cfg = resolve("te-2")
    per = {name: userbuffer_bytes(name, cfg[name], _shape(False)) for name in NAMES}
    assert per == {name: WHOLE_BF16 for name in NAMES}
    total = overlap_buffer_bytes(cfg, False, _shape(False), 9.0)
    # 10 x 128 MiB, and two more 32 MiB cuBLAS workspaces beside the one TE always keeps
    assert total["cublas_workspace"] == 64 * MIB
    assert sum(total.values()) == 10 * 128 * MIB + 64 * MIB


def test_fp8_makes_only_the_all_gather_buffers_one_byte():
    cfg = resolve("te-2")
    per = {name: userbuffer_bytes(name, cfg[name], _shape(True)) for name in NAMES}
    gathers = ("qkv_fprop", "qkv_dgrad", "proj_dgrad", "fc1_fprop", "fc1_dgrad", "fc2_dgrad")
    assert all(per[n] == WHOLE_BF16 / 2 for n in gathers)  # 64 MiB of uint8
    # the reduce-scatters' buffers hold the 16-bit partial sums (TE's default fp8_buf false)
    assert all(per[n] == WHOLE_BF16 for n in ("proj_fprop", "fc2_fprop", "qkv_wgrad", "fc1_wgrad"))
    assert sum(per.values()) == 896 * MIB


def test_a_ring_exchange_reduce_scatter_holds_2tp_minus_1_chunks():
    # Megatron-Bridge's FP8 H100 preset runs proj_fprop and fc2_fprop as ring exchanges
    cfg = resolve("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192")
    for name in ("proj_fprop", "fc2_fprop"):
        assert userbuffer_bytes(name, cfg[name], _shape(True)) == WHOLE_BF16 / TP * (2 * TP - 1)  # 224 MiB
    # a ring-exchange all-gather holds the whole gathered tensor once
    assert userbuffer_bytes("qkv_fprop", cfg["qkv_fprop"], _shape(True)) == WHOLE_BF16 / 2


def test_nemo_pipeline_presets_get_fp8_reduce_scatter_buffers():
    # NeMo / Megatron-Bridge PipelineOverlapCfg(fp8_buf=(False,)): a truthy tuple, so
    # initialize_ub gives their pipelined proj_fprop / fc2_fprop an FP8 buffer in an FP8 run
    bridge = resolve("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192")
    assert bridge["proj_fprop"].fp8_buf and bridge["fc2_fprop"].fp8_buf
    assert userbuffer_bytes("proj_fprop", bridge["proj_fprop"], _shape(True)) == WHOLE_BF16 / 2
    assert userbuffer_bytes("proj_fprop", bridge["proj_fprop"], _shape(False)) == WHOLE_BF16
    # TransformerEngine's own defaults leave it false; a mapping may ask (pipeline names only)
    assert not resolve("te-2")["proj_fprop"].fp8_buf
    assert resolve({"fc2_fprop": {"fp8_buf": True}})["fc2_fprop"].fp8_buf


def test_context_parallelism_divides_the_buffer_rows():
    # the 405B presets' cp 2: shape[0] = seq * mbs // cp
    assert userbuffer_bytes("qkv_fprop", resolve("te-2")["qkv_fprop"], _shape(False, cp=2)) == WHOLE_BF16 / 2


def test_ampere_workspace_copies_are_4_mib_each():
    total = overlap_buffer_bytes(resolve("te-2"), False, _shape(False), 8.0)
    assert total["cublas_workspace"] == 8 * MIB


def test_pytorch_async_tp_holds_one_symmetric_workspace():
    # _pipelined_produce_and_all2all asks for 2 output chunks (s b / tp rows, h wide, bf16)
    shape = _shape(False, tp=8)
    assert symmetric_workspace_bytes(shape) == 2 * SEQ * MBS // 8 * HIDDEN * 2  # 32 MiB
    assert overlap_buffer_bytes(resolve("pytorch-async-tp"), True, shape, 9.0) == {"symmetric_memory": 32 * MIB}


def test_no_overlap_no_buffers():
    assert overlap_buffer_bytes(None, False, _shape(False), 9.0) == {}


def test_the_memory_breakdown_counts_them(cli):
    from simcluster.context import build_context
    from simcluster.scenario import load_scenario

    args = ("--set", "overlap.tp_comm=true", "--set", "training.precision=fp8", "--json")
    on = json.loads(cli("memory", "llama3-70b-64xh100", *args).out)
    off = json.loads(cli("memory", "llama3-70b-64xh100", "--set", "training.precision=fp8", "--json").out)
    # tp 8, seq 8192, mbs 1, h 8192, TE 2 defaults: 6 FP8 gathers of 64 MiB, 4 bf16 of 128 MiB
    assert on["comm_buffers_bytes"] == pytest.approx(896 * MIB + 64 * MIB)
    assert off["comm_buffers_bytes"] == 0 and off["comm_buffers"] == {}
    assert on["total_bytes"] == pytest.approx(
        sum(on[k] for k in ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "other_bytes"))
        + on["comm_buffers_bytes"]
    )
    ctx = build_context(load_scenario("llama3-70b-64xh100"))
    assert run_buffer_bytes(ctx.scenario, ctx.model, ctx.layout, 9.0) == {}
    table = cli("memory", "llama3-70b-64xh100", *args[:-1]).out
    assert "comm buffers" in table and "TransformerEngine userbuffers 896.00 MiB" in table


def test_the_buffer_line_counts_only_the_overlaps_that_hold_a_buffer():
    """An overlap set to nccl (PyTorch's blocking collective) holds no userbuffer: the line
    counts the communicators that do, not every overlap name."""
    from simcluster.commands.memory import _buffer_line

    line = _buffer_line({"qkv_fprop": 2.0**20, "qkv_wgrad": 0.0, "fc1_wgrad": 0.0, "cublas_workspace": 2.0**26})
    assert "(1 overlap)" in line and "(3 overlaps)" not in line
