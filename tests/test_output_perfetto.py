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
    """Per stage, a counter of the memory by category and one of its total, at the same times.
    The legacy chrome://tracing viewer draws the series of one counter as a stacked area chart
    (Trace Event Format document, "Counter Events"), so a total beside its parts was counted
    twice there: it has a counter name of its own."""
    counters = json.loads(json.dumps(_of(trace, "C")))  # as a viewer reads them back
    parts = {s: [c for c in counters if c["name"] == f"memory stage {s} (GiB)"] for s in range(4)}
    totals = {s: [c for c in counters if c["name"] == f"memory stage {s} total (GiB)"] for s in range(4)}
    assert len(counters) == sum(len(v) for v in parts.values()) + sum(len(v) for v in totals.values())
    for s in range(4):
        assert parts[s] and all("total" not in c["args"] for c in parts[s])
        assert all(c["args"].keys() == {"total"} for c in totals[s])
        assert [c["ts"] for c in totals[s]] == [c["ts"] for c in parts[s]]
        for part, total in zip(parts[s], totals[s], strict=True):  # the total is the sum of its parts
            assert sum(part["args"].values()) == pytest.approx(total["args"]["total"])
    peak = max(c["args"]["total"] for v in totals.values() for c in v)
    assert peak == pytest.approx(timeline.summary["peak_memory_bytes"] / 2**30)


def test_trace_is_deterministic(timeline):
    a = build_trace(timeline.events, timeline.rank_labels, timeline.memory)
    b = build_trace(
        timeline.events.sample(frac=1.0, random_state=0), timeline.rank_labels, timeline.memory
    )
    assert json.dumps(a) == json.dumps(b)


@pytest.mark.parametrize("batch", [1, 7, 10_000])
def test_streamed_trace_text_is_the_whole_documents_json(timeline, monkeypatch, batch):
    """trace.json is encoded a batch of events at a time (an all-ranks trace's millions of
    event dicts held at once took several times the text's memory); the text must be exactly
    the compact JSON of the whole document, whatever the batch."""
    from simcluster.output import perfetto

    monkeypatch.setattr(perfetto, "_ENCODE_BATCH", batch)
    args = (timeline.events, timeline.rank_labels, timeline.memory, timeline.summary)
    whole = perfetto.trace_json(perfetto.build_trace(*args))
    assert perfetto.trace_text(*args) == whole
    assert json.loads(whole)["traceEvents"]


# --- a validator for the format, run on a synthetic trace and on a simulated one ----------------
_PHASES = {"X", "M", "s", "f", "C"}
_METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def _number(value) -> bool:
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def trace_problems(text: str) -> list[str]:
    """What in ``text`` breaks the Trace Event Format as Perfetto imports it (empty: none):
    a JSON object with a ``traceEvents`` list; X slices with numeric ts and dur >= 0 (µs) on a
    named process and thread; M metadata naming them; s/f flow events paired by id, each in a
    slice of its thread; C counters with numeric values; no NaN or Infinity anywhere."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    try:
        trace = json.loads(text, parse_constant=refuse)
    except ValueError as exc:
        return [str(exc)]
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["not a JSON object with a traceEvents list"]
    seen = _Seen()
    problems = [p for i, e in enumerate(trace["traceEvents"]) for p in seen.event(i, e)]
    problems += [f"process {p} has no process_name" for p in sorted(seen.used_pids - seen.named_pids)]
    problems += [f"thread {t} has no thread_name" for t in sorted(seen.used_threads - seen.named_threads)]
    for (cat, flow), ends in seen.flows.items():
        problems += _flow_problems(f"flow {cat}/{flow}", ends, seen.slices)
    return problems


class _Seen:
    """What trace_problems has read so far: named and used processes and threads, each
    thread's slices, and the flow events by (category, id)."""

    def __init__(self):
        self.named_pids, self.named_threads, self.used_pids, self.used_threads = set(), set(), set(), set()
        self.slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
        self.flows: dict[tuple[str, int], list[dict]] = defaultdict(list)

    def event(self, i: int, e: dict) -> list[str]:
        """Read event ``i``; what breaks the format in it alone."""
        ph = e.get("ph")
        if ph not in _PHASES:
            return [f"[{i}] phase {ph!r}"]
        problems = [] if isinstance(e.get("pid"), int) else [f"[{i}] pid {e.get('pid')!r}"]
        if ph == "M":
            return problems + self._metadata(i, e)
        if not _number(e.get("ts")):
            return problems + [f"[{i}] ts {e.get('ts')!r}"]
        self.used_pids.add(e["pid"])
        if ph == "X":
            return problems + self._slice(i, e)
        if ph in ("s", "f"):
            self.flows[(e.get("cat"), e.get("id"))].append(e)
        elif not isinstance(e.get("args"), dict) or not all(_number(v) for v in e["args"].values()):
            problems.append(f"[{i}] counter values {e.get('args')!r}")
        return problems

    def _metadata(self, i: int, e: dict) -> list[str]:
        if e.get("name") not in _METADATA or not isinstance(e.get("args"), dict):
            return [f"[{i}] metadata {e.get('name')!r}"]
        if e["name"] == "process_name":
            self.named_pids.add(e["pid"])
        elif e["name"] == "thread_name":
            self.named_threads.add((e["pid"], e["tid"]))
        return []

    def _slice(self, i: int, e: dict) -> list[str]:
        if not _number(e.get("dur")) or e["dur"] < 0:
            return [f"[{i}] dur {e.get('dur')!r}"]
        if not isinstance(e.get("tid"), int) or not e.get("name"):
            return [f"[{i}] tid or name missing"]
        self.used_threads.add((e["pid"], e["tid"]))
        self.slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        return []


def _flow_problems(where: str, ends: list[dict], slices) -> list[str]:
    """A flow's problems: not one s and one f, an end outside every slice of its thread, a
    finish not bound to its enclosing slice."""
    phases = sorted(e["ph"] for e in ends)
    if phases != ["f", "s"]:
        return [f"{where}: {phases}, not one s and one f"]
    problems = [
        f"{where}: its {e['ph']} is in no slice of its thread"
        for e in ends
        if not any(a <= e["ts"] <= b for a, b in slices[(e["pid"], e.get("tid"))])
    ]
    (finish,) = [e for e in ends if e["ph"] == "f"]
    if finish.get("bp") != "e":
        problems.append(f"{where}: the finish does not bind to its enclosing slice")
    return problems


def test_the_validator_finds_what_breaks_the_format():
    good = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "compute"}},
        {"ph": "X", "name": "f", "pid": 0, "tid": 1, "ts": 0.0, "dur": 2.0},
        {"ph": "s", "cat": "p2p", "id": 1, "pid": 0, "tid": 1, "ts": 1.0},
        {"ph": "f", "cat": "p2p", "id": 1, "pid": 0, "tid": 1, "ts": 1.5, "bp": "e"},
    ]}  # fmt: skip
    assert trace_problems(json.dumps(good)) == []
    for broken in (
        '{"traceEvents": [{"ph": "X", "name": "f", "pid": 0, "tid": 1, "ts": NaN, "dur": 1}]}',
        json.dumps({"traceEvents": good["traceEvents"][:-1]}),  # an unpaired flow
        json.dumps({"traceEvents": good["traceEvents"][1:]}),  # an unnamed process
        json.dumps({"traceEvents": [*good["traceEvents"][:2], {**good["traceEvents"][2], "ts": "0"}]}),
        json.dumps([good["traceEvents"]]),
    ):
        assert trace_problems(broken), broken


def test_the_written_trace_follows_the_format(tmp_path, timeline):
    path = tmp_path / "trace.json"
    write_trace(path, timeline.events, timeline.rank_labels, timeline.memory, timeline.summary)
    assert trace_problems(path.read_text()) == []


def test_a_simulated_trace_follows_the_format(tmp_path):
    from tests.engine_helpers import pipeline_scenario, run

    result = run(pipeline_scenario(4, 8, "zb-h1"))  # sends and recvs: flows
    written = result.write(tmp_path / "out")
    text = written["trace.json"].read_text()
    assert trace_problems(text) == []
    assert '"ph":"s"' in text


def test_a_trace_with_nan_is_refused_not_written(tmp_path, timeline):
    from simcluster.errors import UserError

    with pytest.raises(UserError, match="NaN|Out of range"):
        write_trace(tmp_path / "t.json", timeline.events, timeline.rank_labels, None, {"mfu": float("nan")})
    assert not (tmp_path / "t.json").exists()
