"""The stash of an F&B pair (Megatron-Core's combined 1F1B, DualPipe's pairs), moved in the
host's order of their layers.

Reference: Megatron-LM ``megatron/core/models/common/model_chunk_schedule_plan.py``,
``TransformerModelChunkSchedulePlan.run``: "Phase 1: forward_layer[0] + backward_layer[3] ...
Phase 4: forward_layer[3] + backward_layer[0]", each backward layer's ``release_state()`` right
after its pair, then the backward's remaining layers, then the forward's.
"""

from __future__ import annotations

import pytest

from simcluster.engine.pair_ledger import PairLedger
from simcluster.memory_report import LOSS_LOGITS, STASH, WEIGHT_GRADS, walk_peak
from simcluster.schedules import PipeOp, ScheduleSpec, get_schedule
from simcluster.schedules.ep_overlap import pair_orders
from simcluster.stash import pair_steps, unit_moves


def test_layers_pair_up_then_the_backwards_left_then_the_forwards_left():
    assert pair_steps(3, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]
    assert pair_steps(2, 4) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("B", 2), ("B", 3)]
    assert pair_steps(4, 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("F", 3)]


def test_unit_moves_save_forward_and_free_in_reverse():
    shares = (0.1, 0.5, 1.0)  # units of 0.1, 0.4 and 0.5 of a 10-byte stash
    assert unit_moves("F", 10.0, shares) == pytest.approx([1.0, 4.0, 5.0])
    # the backward runs the units in reverse: the last forward unit's 5 bytes go first
    assert unit_moves("BW", -10.0, shares) == pytest.approx([-5.0, -4.0, -1.0])


def test_the_ledger_makes_a_move_only_after_every_move_before_it():
    made: list[float] = []
    ledger = PairLedger.open([1.0, 2.0], [-3.0, -4.0], made.append)
    ledger.reach("F", 0)
    ledger.reach("F", 1)  # ahead of the backward's first layer: waits for it
    assert made == [1.0]
    ledger.reach("B", 0)
    assert made == [1.0, -3.0, 2.0]
    ledger.reach("B", 1)
    assert made == [1.0, -3.0, 2.0, -4.0] and ledger.done


def _one_stage(m: int = 4):
    (ops,) = pair_orders(get_schedule("1f1b").build(ScheduleSpec(p=1, m=m)))
    return ops  # F0, F1 &BW0, F2 &BW1, F3 &BW2, BW3


def test_a_pair_holds_one_microbatch_and_the_forwards_first_unit():
    # four equal units of 1.0: before each pair one microbatch (4.0) is held; the pair adds
    # the forward's first unit before the backward frees its first, then the two keep step
    top = walk_peak(_one_stage(), [4.0], shares=[(0.25, 0.5, 0.75, 1.0)])
    assert (top.bytes, top.part, top.stash) == (5.0, STASH, 5.0)
    # moved whole (one unit per op: the shares' default) the pair holds two microbatches
    assert walk_peak(_one_stage(), [4.0]).bytes == 8.0


def test_the_loss_copies_sit_on_the_pairs_highest_stash():
    # where the head's forward runs the engine may not have made every earlier move: the walk
    # puts the logits on the highest stash the pair reaches, an upper bound
    top = walk_peak(_one_stage(), [4.0], transient=[0.5], shares=[(0.25, 0.5, 0.75, 1.0)])
    assert (top.bytes, top.part, top.stash) == (5.5, LOSS_LOGITS, 5.0)


def test_a_backwards_end_sees_the_stash_where_the_moves_can_stop():
    # F of chunk 1 (one unit of 4.0) paired with BW of chunk 0 (four units of 1.0): the moves
    # run F0 B0 B1 B2 B3 (8, 7, 6, 5, 4). Once the backward has made its four units nothing
    # holds the ledger before the end, so its 16-bit gradients (5.0 at its end) sit on 4.0,
    # not on the 7.0 left after its first unit
    ops = [PipeOp("F", 0, 0), PipeOp("F", 0, 1), PipeOp("BW", 0, 0, True), PipeOp("BW", 0, 1)]
    shares = [(0.25, 0.5, 0.75, 1.0), (1.0,)]
    top = walk_peak(ops, [4.0, 4.0], grads=[(0.0, 5.0), (0.0, 0.0)], shares=shares)
    assert (top.bytes, top.part, top.stash) == (9.0, WEIGHT_GRADS, 4.0)


@pytest.mark.parametrize(
    ("parallel", "zero3"),
    [
        ({"pp": 4, "schedule": "1f1b", "layers_per_stage": [0, 4, 4, 0]}, None),  # edge-only stages
        ({"pp": 2, "schedule": "dualpipev"}, None),
        ({"pp": 1, "zero": 3}, {"buffers": "flat"}),  # FSDP1: the embedding and head units apart
    ],
)
def test_the_walks_unit_shares_are_the_plans(parallel, zero3):
    """The memory walk moves a pair's stash by ``plan.chunk_stash_shares`` without building the
    plan; the engine's ledger by the plan's own ``ChunkPlan.stash_shares``: the same numbers."""
    from simcluster.context import build_context
    from simcluster.engine.plan import build_plans, chunk_stash_shares, kernel_model
    from simcluster.scenario import scenario_from_dict

    doc = {
        "name": "u", "model": {"layers": 8, "hidden": 1024, "heads": 16, "ffn": 4096, "vocab": 32000},
        "cluster": {"hardware": "dgx-h100", "gpus": 8}, "parallel": parallel,
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 16, "precision": "bf16"},
    }  # fmt: skip
    if zero3:
        doc["zero3"] = zero3
    ctx = build_context(scenario_from_dict(doc))
    for plan, chunks in zip(build_plans(ctx, kernel_model(ctx)), ctx.chunks, strict=True):
        for cplan, chunk in zip(plan.chunks, chunks, strict=True):
            assert chunk_stash_shares(ctx, chunk) == cplan.stash_shares
