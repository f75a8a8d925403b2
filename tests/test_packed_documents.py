"""Packed sequences: documents that attend only within themselves (``training.document_tokens``).

Sources: TransformerEngine's THD format (``qkv_format="thd"`` with ``cu_seqlens_q`` /
``cu_seqlens_kv``: each document a separate causal attention) as NeMo's and Megatron-Core's
``PackedSeqParams`` hand it; flash-attn's ``flash_attn_varlen_func``. Causal attention FLOPs of
one document of d tokens: 2·h·d²·(d_qk + d_v)·½ (FlashAttention-2 paper, Sec. 4's count halved
for the mask), so n = s/d documents cost d/s of one causal attention over s tokens.
"""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder, run

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.flops import token_flops
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario

SEQ = 4096


def _doc(**training) -> dict:
    """Llama 2 7B on 8 A100s (no batch x head table: one curve rate per length)."""
    doc = make_scenario(training={"seq_len": SEQ, "global_batch": 8, **training})
    doc["model"], doc["cluster"]["hardware"] = {"preset": "llama2-7b"}, "dgx-a100"
    return doc


def _core(doc: dict, phase: str) -> float:
    return layer_builder(doc).attention_core(phase)


@pytest.mark.parametrize("phase", ["F", "B"])
def test_packed_sequence_costs_its_documents_as_separate_sequences(phase: str):
    """Eight 512-token documents in a 4096-token sequence take eight times one 512-token
    sequence's kernel time, less the seven launches one varlen call saves."""
    packed = _core(_doc(document_tokens=512), phase)
    single = _core(_doc(seq_len=512), phase)
    launch = layer_builder(_doc()).km.launch_s
    assert packed - launch == pytest.approx(8 * (single - launch), rel=1e-9)


def test_documents_cut_the_causal_flops_by_their_share_of_the_sequence():
    """Documents of half the sequence cost about half the attention: the FLOPs d/s = 1/2 (the
    A100 curves hold their 4K rate beyond it, so only the launch differs)."""
    full, half = _core(_doc(seq_len=16384), "F"), _core(_doc(seq_len=16384, document_tokens=8192), "F")
    assert 0.5 <= half / full < 0.56


def test_one_document_per_sequence_is_the_default():
    assert _core(_doc(document_tokens=SEQ), "B") == _core(_doc(), "B")


@pytest.mark.parametrize(
    "training, parallel, field_text",
    [
        ({"document_tokens": 8192}, {}, "longer than training.seq_len"),
        ({"document_tokens": 512, "flash_attention": False}, {}, "needs fused attention"),
        ({"document_tokens": 512}, {"cp": 2, "cp_comm": "all_gather"}, "cp_comm=all_gather is not modelled"),
    ],
)
def test_impossible_or_unmodelled_packing_is_refused(training: dict, parallel: dict, field_text: str):
    doc = _doc(**training)
    doc["parallel"].update(parallel)
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(doc))
    assert "training.document_tokens" in str(err.value) and field_text in str(err.value)


def test_model_flops_count_each_tokens_document():
    """MFU's model FLOPs count a token's attention over its own document (2·d·heads·(d_qk + d_v)
    per layer, no causal discount, as Narayanan et al. 2021 count s), so packing lowers them:
    8 sequences x 4096 tokens x the FLOPs per token at d = 512."""
    packed = run(_doc(document_tokens=512)).summary
    model = layer_builder(_doc()).shapes.model
    assert packed["model_flops_per_step"] == pytest.approx(token_flops(model, 512).total * 8 * SEQ)
    assert token_flops(model, 512).total < token_flops(model, SEQ).total


@pytest.mark.parametrize("phase", ["F", "B"])
def test_a_context_parallel_ring_splits_each_document_as_a_sequence(phase: str):
    """Under cp 2's p2p ring, eight 512-token documents packed in a 4096-token sequence run the
    ring's per-step kernels (diagonal and visiting blocks) of a micro-batch of eight 512-token
    sequences: TransformerEngine's THD path splits every document into 2 cp chunks."""
    packed = _doc(document_tokens=512)
    unpacked = _doc(seq_len=512, micro_batch=8, global_batch=64)
    for doc in (packed, unpacked):
        doc["cluster"]["gpus"] = 16
        doc["parallel"].update(cp=2, cp_comm="p2p")
    a, b = layer_builder(packed).core_times(phase), layer_builder(unpacked).core_times(phase)
    assert (a.total, a.diagonal, a.block) == pytest.approx((b.total, b.diagonal, b.block))
