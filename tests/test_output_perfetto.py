"""trace.json follows the Chrome Trace Event Format as Perfetto imports it.

Format: "Trace Event Format" (Google, catapult docs): X = complete event with ts/dur in µs,
M = metadata (process_name / thread_name), s/f = flow start/finish (bp "e" binds the finish to
the enclosing slice), C = counter. Perfetto rounds ts/dur to integer ns on import
(json_utils.cc CoerceToTs: llround(us * 1000)), so overlaps are checked on that grid.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from output_timeline import make_1f1b

from simcluster.output.perfetto import STREAM_TID, build_trace, write_trace


@pytest.fixture(scope="module")
def timeline():
    return make_1f1b(p=4, m=8, layers=2, tp_comm=0.05, tp=2, dp=1)


@pytest.fixture(scope="module")
def trace(tmp_path_factory, timeline):
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    write_trace(path, timeline.events, timeline.rank_labels, timeline.memory, timeline.summary)
    return json.loads(path.read_text())


def _ns(us: float) -> int:
    return round(us * 1000)


def _of(trace, phase):
    return [e for e in trace["traceEvents"] if e["ph"] == phase]


def test_every_event_becomes_a_complete_kernel_slice(trace, timeline):
    slices = _of(trace, "X")
    assert len(slices) == len(timeline.events)
    for e in slices:
        assert {"pid", "tid", "ts", "dur", "name"} <= e.keys()
        assert e["cat"] == "kernel"
        assert e["dur"] >= 0
    total_us = sum(e["dur"] for e in slices)
    total_s = (timeline.events["end_s"] - timeline.events["start_s"]).sum()
    assert total_us == pytest.approx(total_s * 1e6, rel=1e-9)


def test_processes_are_gpus_and_threads_are_streams(trace, timeline):
    meta = _of(trace, "M")
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    used = {(e["pid"], e["tid"]) for e in _of(trace, "X")}
    assert {pid for pid, _ in used} <= procs.keys()
    assert used <= threads.keys()
    assert procs[1] == "GPU 1: " + timeline.rank_labels[1]  # "stage 0 / tp 1 / dp 0"
    assert all(threads[(p, t)] == {v: k for k, v in STREAM_TID.items()}[t] for p, t in used)


def test_slices_on_one_thread_never_overlap(trace):
    lanes = defaultdict(list)
    for e in _of(trace, "X"):
        lanes[(e["pid"], e["tid"])].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    for spans in lanes.values():
        spans.sort()
        assert all(nxt[0] >= cur[1] for cur, nxt in zip(spans, spans[1:], strict=False))


def test_p2p_flows_go_from_send_slice_to_recv_slice(trace, timeline):
    slices = _of(trace, "X")
    starts = {e["id"]: e for e in _of(trace, "s")}
    finishes = {e["id"]: e for e in _of(trace, "f")}
    n_sends = int((timeline.events["kind"] == "send").sum())
    assert len(starts) == len(finishes) == n_sends
    for flow_id, s in starts.items():
        f = finishes[flow_id]
        assert f["bp"] == "e" and s["cat"] == f["cat"]

        def inside(point, op):
            return [
                x
                for x in slices
                if x["pid"] == point["pid"]
                and x["tid"] == point["tid"]
                and x["args"]["op"] == op
                and _ns(x["ts"]) <= _ns(point["ts"]) <= _ns(x["ts"]) + _ns(x["dur"])
            ]

        assert len(inside(s, "send")) == 1
        assert len(inside(f, "recv")) == 1
        assert s["pid"] != f["pid"]  # the arrow crosses GPUs


def test_slice_args_carry_microbatch_layer_bytes_op(trace):
    tp = [
        e
        for e in _of(trace, "X")
        if e["args"]["op"] == "all_reduce" and e["args"].get("group") == "tp"
    ]
    assert tp and all({"microbatch", "layer", "bytes"} <= e["args"].keys() for e in tp)
    opt = [e for e in _of(trace, "X") if e["args"]["op"] == "optimizer"]
    assert opt and all("microbatch" not in e["args"] for e in opt)  # -1 means "not applicable"


def test_memory_counters_per_stage(trace, timeline):
    counters = _of(trace, "C")
    names = {c["name"] for c in counters}
    assert names == {f"memory stage {s} (GiB)" for s in range(4)}
    peak = max(c["args"]["total"] for c in counters)
    assert peak == pytest.approx(timeline.summary["peak_memory_bytes"] / 2**30)


def test_trace_is_deterministic(timeline):
    a = build_trace(timeline.events, timeline.rank_labels, timeline.memory)
    b = build_trace(
        timeline.events.sample(frac=1.0, random_state=0), timeline.rank_labels, timeline.memory
    )
    assert json.dumps(a) == json.dumps(b)
