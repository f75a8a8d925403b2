"""Megatron-Core's second token permutation: the alltoall dispatcher sorts what it received by
local expert before the grouped GEMM and unsorts it after, whenever a rank holds more than one
expert.

References, Megatron-Core (core_r0.12.0 and later; the alltoall dispatcher since 0.9):
- ``MoEAlltoAllTokenDispatcher.dispatch_postprocess``: "Permutation 2: Sort tokens by local
  expert. if self.num_local_experts > 1:" ``sort_chunks_by_idxs`` (dropless) or
  ``.view(tp_size * ep_size, num_local_experts, capacity, h).transpose(0, 1).contiguous()``
  (drop-and-pad), both a copy of every received row; ``combine_preprocess`` unsorts before the
  combine all-to-all.
- megatron/core/transformer/moe/README.md, parallel-mapping rule 4: "If EP size increased to
  the number of expert, the local token permutation/un-permutation for experts computation are
  omitted."
"""

from __future__ import annotations

import pytest
from engine_helpers import layer_builder

from simcluster.parallelism import expert

MOE = {
    "name": "small-moe", "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn": 4096,
    "vocab": 1024, "experts": 8, "top_k": 2, "expert_ffn": 4096, "position": "rope",
}  # fmt: skip


def _builder(ep: int, etp: int = 1, tp: int = 1, moe: dict | None = None) -> object:
    gpus = max(ep * etp, tp)
    return layer_builder(
        {
            "model": MOE,
            "cluster": {"hardware": "dgx-h100", "gpus": gpus},
            "parallel": {"tp": tp, "ep": ep, "etp": etp, "sequence_parallel": tp > 1},
            "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": gpus},
            "moe": moe or {},
        }
    )


def test_two_local_experts_copy_their_rows_twice_each_way():
    """ep 4 of 8 experts (2 local): 4,096 tokens x top-2 = 8,192 rows of 2,048 bf16 arrive;
    the sort and the unsort each read and write all of them (2 x 33.6 MB), forward and again
    (the conjugate copies) in backward; the weight-gradient phase has none."""
    b = _builder(ep=4)
    km = b.km
    rows = 4096 * 2
    copy = km.memory(2 * rows * 2048 * 2)
    assert copy == pytest.approx(2 * rows * 2048 * 2 / km.hbm_bytes_per_s + km.launch_s)
    for phase in ("F", "B"):
        assert expert.chunk_sort_seconds(b.shapes, km, b.scenario.moe, phase) == pytest.approx(2 * copy)
    assert expert.chunk_sort_seconds(b.shapes, km, b.scenario.moe, "W") == 0.0


def test_expert_tp_sorts_the_gathered_rows():
    """With expert TP the sort runs after the ETP all-gather, over etp x the rows received."""
    b = _builder(ep=2, etp=2, tp=2)
    km = b.km
    rows = 4096 / 2 * 2 * 2  # the tp shard's tokens x top-2, gathered over etp 2
    want = 2 * km.memory(2 * rows * 2048 * 2)
    assert expert.chunk_sort_seconds(b.shapes, km, b.scenario.moe, "F") == pytest.approx(want)


def test_no_sort_with_one_local_expert_or_behind_deepep():
    """ep = experts leaves one expert a rank (the README's rule 4: nothing to sort); DeepEP's
    flex dispatcher permutes differently and is not charged here; no expert parallelism at all
    takes the dispatcher-free path."""
    for b in (_builder(ep=8), _builder(ep=4, moe={"dispatcher": "deepep"}), _builder(ep=1)):
        assert expert.chunk_sort_seconds(b.shapes, b.km, b.scenario.moe, "F") == 0.0


def test_padded_capacity_sorts_the_padding_too():
    """Drop-and-pad at capacity 1.25 moves the padded capacity: 1.25 x the routed rows."""
    b = _builder(ep=4, moe={"capacity_factor": 1.25, "pad_to_capacity": True})
    km = b.km
    want = 2 * km.memory(2 * 4096 * 2 * 1.25 * 2048 * 2)
    assert expert.chunk_sort_seconds(b.shapes, km, b.scenario.moe, "F") == pytest.approx(want)


def test_the_experts_block_carries_the_copies():
    """moe_block's experts segment is the grouped GEMMs plus the sort and unsort: with 2 local
    experts its forward is longer than the GEMM work by exactly the two copies."""
    b = _builder(ep=4)
    km, moe = b.km, b.scenario.moe
    segments = expert.moe_block(b.shapes, km, moe, "F", 0)
    experts = next(s for s in segments if getattr(s, "name", "") == "experts")
    routed = expert.expert_work(b.shapes, km, moe, "F").total
    assert experts.seconds == pytest.approx(routed + expert.chunk_sort_seconds(b.shapes, km, moe, "F"))
    assert expert.chunk_sort_seconds(b.shapes, km, moe, "F") > 0
