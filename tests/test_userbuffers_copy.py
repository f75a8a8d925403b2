"""TransformerEngine's copy of a rank's shard into the userbuffer before an overlapped all-gather.

Sources (TransformerEngine, transformer_engine/pytorch/module/): the backward re-gather of the
saved input is copied in every version (TE 1.x ``copy_input_to_ubuf(ln_out, 1)``, TE 2.x
``copy_into_buffer(ln_out, ..., local_chunk=True)``); the output gradient in TE 1.x only when it
is 16-bit (base.py ``grad_output_preprocess``: an FP8 one is cast into ``get_ubuf_output(0)``),
in TE 2.x always; the forward gather's input (the norm's output) only since pull request 1711
(``fill_userbuffers_buffer_for_all_gather``), before which the norm wrote into the buffer.
Each copy reads and writes the shard once: 2 x tokens x hidden x bytes / tp.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine.plan import kernel_model
from simcluster.parallelism import layer as layer_module
from simcluster.parallelism.layer import LayerBuilder
from simcluster.parallelism.segments import Compute
from simcluster.parallelism.shapes import Shapes
from simcluster.scenario import scenario_from_dict
from simcluster.userbuffers_traffic import gather_copy_bytes, writes_in_place

SHARD = 8192 * 8192 * 2 / 4  # Llama 3 70B's hidden state of one 8K sequence, bf16, over tp 4


@pytest.mark.parametrize(
    ("role", "quantised", "in_place", "copied"),
    [
        ("input_gather", False, True, True), ("input_gather", True, True, True),
        ("grad_gather", False, True, True), ("grad_gather", True, True, False),
        ("gather", False, True, False), ("gather", True, True, False),
        ("input_gather", True, False, True), ("grad_gather", True, False, True), ("gather", False, False, True),
    ],
)  # fmt: skip
def test_which_gathers_copy_in_which_transformer_engine(role, quantised, in_place, copied):
    assert gather_copy_bytes(role, SHARD, quantised, in_place) == (2 * SHARD if copied else 0.0)


def test_the_legacy_path_is_named_by_te_1_and_the_nemo_2_0_presets():
    assert writes_in_place("te-1")
    assert writes_in_place("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192@nemo-2.0")
    assert not writes_in_place("te-2") and not writes_in_place(None)
    assert not writes_in_place("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192")
    assert not writes_in_place({"qkv_dgrad": {"num_sm": 4}})


def _layer_compute(cfg: str, precision: str, phase: str) -> float:
    sc = scenario_from_dict({
        "model": {"name": "llama3-70b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 4},
        "parallel": {"tp": 4, "sequence_parallel": True},
        "training": {"seq_len": 8192, "micro_batch": 1, "global_batch": 1, "precision": precision},
        "overlap": {"tp_comm": True, "tp_comm_cfg": cfg},
    })  # fmt: skip
    ctx = build_context(sc)
    builder = LayerBuilder(Shapes(ctx.model, ctx.layout, sc.training), kernel_model(ctx), sc)
    return sum(s.seconds for s in builder.layer(0, phase) if isinstance(s, Compute))


@pytest.mark.parametrize(
    ("cfg", "precision", "forward", "backward"),
    [
        # TE 2.x: the two forward gathers, and both backward gathers of each block
        ("te-2", "bf16", 2, 4),
        # TE 1.x: the norm writes into the buffer; 16-bit output gradients are copied
        ("te-1", "bf16", 0, 4),
        # TE 1.x FP8: the output gradient is cast into the buffer; the saved input still copied
        ("te-1", "fp8", 0, 2),
    ],
)
def test_a_layer_pays_one_hbm_pass_per_copied_shard(monkeypatch, cfg, precision, forward, backward):
    with_copies = {ph: _layer_compute(cfg, precision, ph) for ph in ("F", "B")}
    monkeypatch.setattr(layer_module, "gather_copy_bytes", lambda *a: 0.0)
    without = {ph: _layer_compute(cfg, precision, ph) for ph in ("F", "B")}
    sc = scenario_from_dict({"model": {"name": "llama3-70b"}, "cluster": {"hardware": "dgx-h100", "gpus": 4},
                             "training": {"seq_len": 8192, "micro_batch": 1, "global_batch": 4,
                                          "precision": precision}})  # fmt: skip
    km = kernel_model(build_context(sc))
    shard = SHARD / (2 if precision == "fp8" else 1)  # the FP8 run gathers 1-byte operands
    one = km.memory(2 * shard)
    # 2 x 16.8 MB read and written at the H100 profile's HBM rate: tens of microseconds
    assert 5e-6 < one < 5e-5
    assert with_copies["F"] - without["F"] == pytest.approx(forward * one, rel=1e-9, abs=1e-12)
    assert with_copies["B"] - without["B"] == pytest.approx(backward * one, rel=1e-9, abs=1e-12)
