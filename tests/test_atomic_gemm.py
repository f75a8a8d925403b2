"""TransformerEngine's atomic GEMM under a forward reduce-scatter (``tp_comm_cfg`` ``atomic_gemm``).

Source: TransformerEngine 1.x ``CommOverlapBase::atomic_gemm_overlap_rs`` / ``UbufCommOverlap``
(``comm_gemm_overlap.h``): one ``nvte_cublas_atomic_gemm`` over the whole output with
``m_split = num_splits`` counters, and on the communication stream, per slice, ``consumer(counter,
i)`` then ``reducescatter2_userbuff_strided`` (or ``..._strided_atomic`` / ``..._fp8``): the GEMM
is one kernel, the reduce-scatter still runs in ``num_splits`` slices, the last one after the GEMM
(``split_overlap_rs`` instead launches ``num_splits`` GEMM kernels). MLPerf's llama2_70b_lora
userbuffers file ``h100tp4mbs1.yaml`` sets ``atomic_gemm: 1`` for proj_fprop and fc2_fprop.
"""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder
from test_tp_comm_switches import _doc

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.parallelism.segments import Comm, Compute
from simcluster.scenario import scenario_from_dict
from simcluster.userbuffers import resolve

PIPE = {"method": "pipeline", "num_sm": 16, "num_splits": 4, "set_sm_margin": True}


def _forward(atomic: bool) -> tuple[dict[str, Comm], dict[str, Compute]]:
    segments = layer_builder(_doc(tp_comm_cfg={"proj_fprop": {**PIPE, "atomic_gemm": atomic}})).layer(0, "F")
    return ({s.name: s for s in segments if isinstance(s, Comm)},
            {s.name: s for s in segments if isinstance(s, Compute)})  # fmt: skip


def test_atomic_gemm_runs_the_projection_whole_and_its_reduce_scatter_in_slices():
    """The output projection's GEMM (8192 tokens x 8192 x 2048 at tp 4) as one kernel instead of
    four 2048-token ones, on the same B200's 148 - 16 SMs; the reduce-scatter's exposed last
    slice is still a quarter of s x h."""
    builder = layer_builder(_doc())
    km, shapes = builder.km, builder.shapes
    t, h = shapes.tokens, shapes.model.hidden
    whole, split = km.gemm(t, h, h / 4, role="fwd"), 4 * km.gemm(t / 4, h, h / 4, role="fwd")
    comms, split_computes = _forward(False)
    atomic_comms, atomic_computes = _forward(True)
    sms = km.profile.gpu.sm_count
    assert sms == 148
    factor = sms / (sms - 16)
    saved = split_computes["attn_out"].seconds - atomic_computes["attn_out"].seconds
    assert saved == pytest.approx((split - whole) * factor, rel=1e-9) and saved > 0
    assert atomic_comms["attn_tp_rs_tail"].nbytes == comms["attn_tp_rs_tail"].nbytes == pytest.approx(
        shapes.tp_collective_bytes / 4)


def test_atomic_gemm_is_refused_beside_a_gather():
    with pytest.raises(UserError) as err:
        resolve({"qkv_fprop": {"method": "ring_exchange", "atomic_gemm": True}})
    assert "tp_comm_cfg.qkv_fprop.atomic_gemm" in str(err.value) and "proj_fprop, fc2_fprop" in str(err.value)


def test_atomic_gemm_must_be_a_flag():
    doc = _doc(tp_comm_cfg={"fc2_fprop": {**PIPE, "atomic_gemm": 1}})
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(doc))
    assert "fc2_fprop.atomic_gemm" in str(err.value) and "true or false" in str(err.value)
