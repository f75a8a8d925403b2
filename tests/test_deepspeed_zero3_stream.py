"""DeepSpeed's ZeRO-3 with ``overlap_comm: false`` (``overlap.dp_grad_reduce: false`` under its
coordinator, as ``simcluster import deepspeed`` writes the config key).

microsoft/DeepSpeed, read in the 0.12.4 PyPI sdist: ``runtime/zero/stage3.py`` sets
``self.reduce_and_partition_stream = get_accelerator().Stream() if overlap_comm else
get_accelerator().default_stream()``, and ``runtime/zero/parameter_offload.py`` gives the
parameter coordinator ``get_accelerator().Stream() if overlap_comm else
get_accelerator().default_stream()`` as its ``__allgather_stream``
(``partitioned_param_coordinator.py``: ``with get_accelerator().stream(self.__allgather_stream)``
around each fetch). Without ``overlap_comm`` both are the default stream: every parameter
all-gather and gradient reduce-scatter runs in stream order with the compute kernels, so none
of them overlaps compute and the step is their sum. PyTorch FSDP has no such switch.
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import run

ZERO3 = ("zero3_param_all_gather", "zero3_grad_reduce_scatter")


def _doc(framework: str | None, overlap: bool) -> dict:
    return {
        "name": "ds3-stream", "model": "llama3.2-1b",
        **({"framework": framework} if framework else {}),
        # two nodes on slow NICs: the collectives take long enough to overlap compute visibly
        "cluster": {"hardware": "dgx-h100", "gpus": 16, "nic_gbps": 25.0},
        "parallel": {"zero": 3},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 32},
        "overlap": {"dp_grad_reduce": overlap},
    }  # fmt: skip


def _overlap_seconds(doc: dict) -> tuple[float, float]:
    """Seconds during which a ZeRO-3 collective and a compute kernel both run on rank 0, and
    the step time."""
    res = run(doc)
    ev = res.events[res.events["rank"] == 0]
    comm = ev[ev["name"].isin(ZERO3)]
    compute = ev[ev["stream"] == "compute"]
    assert len(comm) > 0
    both = 0.0
    for c_start, c_end in zip(comm["start_s"], comm["end_s"], strict=True):
        inside = compute[(compute["start_s"] < c_end) & (compute["end_s"] > c_start)]
        for k_start, k_end in zip(inside["start_s"], inside["end_s"], strict=True):
            both += max(0.0, min(c_end, k_end) - max(c_start, k_start))
    return both, res.summary["step_time_s"]


def test_without_overlap_comm_no_gather_or_reduce_scatter_runs_beside_compute():
    overlapped, fast = _overlap_seconds(_doc("deepspeed", True))
    serial, slow = _overlap_seconds(_doc("deepspeed", False))
    assert overlapped > 0.0  # the default: prefetched gathers and reductions under the kernels
    assert serial == pytest.approx(0.0, abs=1e-12)
    assert slow > fast


def test_the_same_bytes_go_on_the_wire_either_way():
    """overlap_comm picks the stream, not what is gathered or reduced."""
    sums = []
    for overlap in (True, False):
        ev = run(_doc("deepspeed", overlap)).events
        ev = ev[(ev["rank"] == 0) & ev["name"].isin(ZERO3)]
        sums.append(ev.groupby("name")["bytes"].sum().to_dict())
    assert sums[0] == sums[1]


def test_pytorch_fsdp_overlaps_whatever_the_setting():
    """Outside DeepSpeed's coordinator (no ``zero3.prefetch_bucket_size``) the setting changes
    nothing at ZeRO-3 (an inert note, ``simcluster/inert.py``)."""
    a, b = run(_doc(None, True)), run(_doc(None, False))
    assert a.summary["step_time_s"] == b.summary["step_time_s"]
    sc = build_context(scenario_from_dict(_doc("deepspeed", False))).scenario
    assert sc.zero3.prefetch_bucket_size is not None and not sc.overlap.dp_grad_reduce
