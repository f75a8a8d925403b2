"""Where today's features meet each other and older ones: properties checkable outside the
simulator (bytes conserved, a memory walk that agrees with the engine's timeline)."""

from __future__ import annotations

import pytest
from engine_helpers import gpt_model, run


def _doc(framework: str | None, zero: int, **sections: dict) -> dict:
    doc: dict = {
        "name": "cross",
        "model": gpt_model(4, 1024, 32000),
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"zero": zero},
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 16, "precision": "bf16"},
    }
    if framework:
        doc["framework"] = framework
    for key, value in sections.items():
        doc.setdefault(key, {}).update(value)
    return doc


@pytest.mark.parametrize("framework", [None, "deepspeed", "torchtitan"])
def test_zero3_reduces_each_gradient_once_whatever_overlap_dp_grad_reduce_says(framework):
    """ZeRO-3 reduce-scatters every unit's gradient as its backward ends (DeepSpeed stage3.py
    ``reduce_partition_and_remove_grads``, FSDP's post-backward hook), with or without
    DeepSpeed's ``overlap_comm`` (which picks the stream, not whether to reduce). So a step
    reduce-scatters each local gradient element once per microbatch: 2 bytes (bf16) x the
    parameters of one GPU's model copy x microbatches, with overlap.dp_grad_reduce false as
    with true. The engine once added ZeRO 0-1's bucket reduction after the backward at ZeRO-3
    too: every gradient reduced a second time (``simcluster import deepspeed`` writes
    overlap_comm false that way, DeepSpeedExamples' alpaca-lora ZeRO-3 config)."""
    per_mb = {}
    for overlap in (True, False):
        res = run(_doc(framework, 3, overlap={"dp_grad_reduce": overlap}))
        ev = res.events[(res.events["rank"] == 0) & (res.events["kind"] == "reduce_scatter")]
        assert set(ev["name"]) == {"zero3_grad_reduce_scatter"}
        per_mb[overlap] = ev.groupby("microbatch")["bytes"].sum().to_dict()
    assert per_mb[False] == per_mb[True]
    assert len(per_mb[True]) == 2  # 16 sequences on 8 GPUs at micro-batch 1: two microbatches
