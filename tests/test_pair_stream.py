"""The two ops of an F&B pair (DualPipe, DualPipeV) share one compute stream: every kernel either
op runs, including the data-parallel work started inside it, waits for the stream.

A GPU runs one kernel stream at a time per stream (the timeline's own rule, enforced by
``validate_events``). Megatron's pass over a gradient bucket before its reduction (the NaN check
and 1/dp scaling) and FSDP2's copy-out after each all-gather are kernels on the compute stream;
inside a pair they ran beside the other op's kernels, two events at once on one stream, so `run
--out` refused the timeline. Found by tools/metamorphic.py (seed 917, draw 12: Llama 3 70B on 16
B200 under Megatron-Core, DualPipeV, ZeRO-2).
"""

from __future__ import annotations

import pytest

from simcluster.engine import simulate
from simcluster.output.events import validate_events
from simcluster.scenario import scenario_from_dict


@pytest.mark.parametrize(
    "framework, parallel",
    [
        ("megatron-core", {"tp": 2, "pp": 1, "zero": 2, "schedule": "dualpipev"}),  # bucket passes
        # Megatron-Core runs no DualPipe over a pipeline: its bucket passes spelled out instead
        (None, {"tp": 2, "pp": 2, "zero": 1, "schedule": "dualpipe"}),
        ("torchtitan", {"tp": 2, "pp": 1, "zero": 3, "schedule": "dualpipev"}),  # FSDP2 copy-outs
    ],
)
def test_pair_ops_never_overlap_on_the_compute_stream(framework, parallel):
    sc = scenario_from_dict({
        "name": "pair", "model": "llama3-8b", "framework": framework,
        "cluster": {"hardware": "dgx-h100", "gpus": 16}, "parallel": parallel,
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 32},
        **({} if framework else {"dp": {"nan_check": True, "prescale": True}}),
    })  # fmt: skip
    result = simulate(sc)
    events = validate_events(result.events)  # raises on two events at once on one stream
    names = set(events["name"])
    assert "grad_bucket_pass" in names or "fsdp2_copy_out" in names  # the work that overlapped
