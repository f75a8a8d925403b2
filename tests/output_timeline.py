"""A small, genuine 1F1B timeline for the output tests (no engine needed).

Lays out the 1F1B (PipeDream-Flush) schedule of Narayanan et al., "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM" (SC'21), Fig. 4: stage s runs
min(p-s-1, m) warm-up forwards, then alternates one forward and one backward, then drains
the remaining backwards. Each op waits for its input (activation from s-1 or gradient from
s+1) to arrive over a p2p transfer on the comm_pp lane of both GPUs. With zero-cost p2p the
step is (m+p-1)(F+B) and stage 0 stashes p microbatches of activations (same paper, §2.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

UNIT_S = 1e-3  # one "unit" of compute time = 1 ms


@dataclass
class Timeline:
    """What the engine hands to output/: events, memory, capacity, summary, labels."""

    events: pd.DataFrame
    memory: pd.DataFrame
    capacity_bytes: float
    summary: dict
    rank_labels: dict[int, str]
    busy_s: dict[tuple[int, str], float] = field(default_factory=dict)


def one_f_one_b_order(p: int, m: int, stage: int) -> list[tuple[str, int]]:
    """The 1F1B op order of one stage: [("F"|"B", microbatch), ...]."""
    warmup = min(p - stage - 1, m)
    order = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i), ("B", i)]
    order += [("B", i) for i in range(m - warmup, m)]
    return order


@dataclass
class _Lanes:
    """Append-only lanes: each (stage, stream) is free again at its last end."""

    free: dict[tuple[int, str], float] = field(default_factory=dict)

    def at(self, stage: int, stream: str) -> float:
        return self.free.get((stage, stream), 0.0)


def make_1f1b(
    p: int = 4,
    m: int = 8,
    f: float = 1.0,
    b: float = 2.0,
    p2p: float = 0.1,
    layers: int = 1,
    tp_comm: float = 0.0,
    dp_comm: float = 0.5,
    tp: int = 1,
    dp: int = 1,
    act_bytes: float = 2.0 * 2**30,
    static_bytes: tuple[float, float, float, float] = (4 * 2**30, 4 * 2**30, 16 * 2**30, 2**30),
) -> Timeline:
    """Lay out one 1F1B step. Times in units of ``UNIT_S``; every tp x dp peer of a stage
    is a separate rank with the same timing (rank grid dp, pp, tp as in picotron).

    ``layers`` > 1 splits each F/B into per-layer events; ``tp_comm`` > 0 adds a blocking
    TP all-reduce after each layer's compute; ``dp_comm`` > 0 adds the DP gradient
    all-reduce after the last backward, followed by the optimizer step.
    """
    rows: list[dict] = []
    lanes = _Lanes()
    done: dict[tuple[str, int, int], float] = {}  # (F|B, mb, stage) -> compute end
    arrived: dict[tuple[str, int, int], float] = {}  # input of (F|B, mb, stage) on that stage
    mem_steps: dict[int, list[tuple[float, float]]] = {s: [] for s in range(p)}
    flow = [0]

    def add(stage, stream, kind, group, name, mb, layer, start, end, nbytes=0.0, flow_id=-1):
        rows.append(
            dict(
                stage=stage,
                stream=stream,
                kind=kind,
                group=group,
                name=name,
                microbatch=mb,
                chunk=0 if mb >= 0 else -1,
                layer=layer,
                start_s=start,
                end_s=end,
                bytes=nbytes,
                flow_id=flow_id,
            )
        )
        lanes.free[(stage, stream)] = end

    def compute(stage, op, mb, ready):
        kind, dur = ("forward", f) if op == "F" else ("backward", b)
        t = max(ready, lanes.at(stage, "compute"))
        for layer in range(layers):
            lyr = layer if layers > 1 else -1
            add(stage, "compute", kind, "", f"{op}{mb}", mb, lyr, t, t + dur / layers)
            t += dur / layers
            if tp_comm > 0:
                t0 = max(t, lanes.at(stage, "comm_tp"))
                add(stage, "comm_tp", "all_reduce", "tp", "tp_ar", mb, lyr, t0, t0 + tp_comm, 1e8)
                t = t0 + tp_comm
                lanes.free[(stage, "compute")] = t  # compute waits for the TP all-reduce
        return t

    def transfer(src, dst, op, mb, ready):
        t = max(ready, lanes.at(src, "comm_pp"), lanes.at(dst, "comm_pp"))
        flow[0] += 1
        add(src, "comm_pp", "send", "pp", f"send_{op}{mb}", mb, -1, t, t + p2p, 6.4e7, flow[0])
        add(dst, "comm_pp", "recv", "pp", f"recv_{op}{mb}", mb, -1, t, t + p2p, 6.4e7, flow[0])
        arrived[(op, mb, dst)] = t + p2p

    orders = {s: one_f_one_b_order(p, m, s) for s in range(p)}
    cursor = dict.fromkeys(range(p), 0)

    # List scheduling: always run the runnable op that can start earliest, so lanes fill in
    # time order and no lane ever needs an event inserted before its last one.
    while any(cursor[s] < len(orders[s]) for s in range(p)):
        runnable = [
            (_ready_time(orders[s][cursor[s]], s, p, done, arrived, lanes), s)
            for s in range(p)
            if cursor[s] < len(orders[s])
        ]
        start, stage = min((t, s) for t, s in runnable if t is not None)
        op, mb = orders[stage][cursor[stage]]
        cursor[stage] += 1
        end = compute(stage, op, mb, start)
        done[(op, mb, stage)] = end
        mem_steps[stage].append((end, act_bytes if op == "F" else -act_bytes))
        dst = _receiver(op, stage, p)
        if dst is not None:
            transfer(stage, dst, op, mb, end)

    if dp_comm > 0:
        _dp_and_optimizer(add, lanes, p, dp_comm)
    return _assemble(rows, mem_steps, p, m, tp, dp, static_bytes)


def _receiver(op: str, stage: int, p: int) -> int | None:
    """The stage an op's output goes to: an F's activation to the next stage, a B's gradient to
    the previous one; None from the stage at that end of the pipeline."""
    dst = stage + 1 if op == "F" else stage - 1
    return dst if 0 <= dst < p else None


def _ready_time(
    op_mb: tuple[str, int],
    stage: int,
    p: int,
    done: dict[tuple[str, int, int], float],
    arrived: dict[tuple[str, int, int], float],
    lanes: _Lanes,
) -> float | None:
    """When ``stage`` can start its next op: its input there (the F's activation, the B's
    gradient, or on the last stage its own F) and its compute lane free; None until then."""
    op, mb = op_mb
    if op == "F":
        dep = 0.0 if stage == 0 else arrived.get(("F", mb, stage))
    else:
        dep = done.get(("F", mb, stage)) if stage == p - 1 else arrived.get(("B", mb, stage))
    return None if dep is None else max(dep, lanes.at(stage, "compute"))


def _dp_and_optimizer(add: Callable[..., None], lanes: _Lanes, p: int, dp_comm: float) -> None:
    """Each stage's DP gradient all-reduce after its last backward, then its optimizer step."""
    for s in range(p):
        t = max(lanes.at(s, "compute"), lanes.at(s, "comm_dp"))
        add(s, "comm_dp", "all_reduce", "dp", "dp_grad_ar", -1, -1, t, t + dp_comm, 1e9)
        t0 = t + dp_comm
        add(s, "compute", "optimizer", "", "adam", -1, -1, t0, t0 + 0.2)


def _assemble(rows, mem_steps, p, m, tp, dp, static_bytes) -> Timeline:
    base = pd.DataFrame(rows)
    for col in ("start_s", "end_s"):
        base[col] = base[col] * UNIT_S
    frames, labels = [], {}
    n_flows = int(base["flow_id"].max())
    for d in range(dp):
        for s in range(p):
            for t in range(tp):
                rank = (d * p + s) * tp + t
                labels[rank] = f"stage {s} / tp {t} / dp {d}"
                part = base[base["stage"] == s].copy()
                part.insert(0, "rank", rank)
                # each peer copy has its own transfers, so its own flow ids
                has_flow = part["flow_id"] >= 0
                part.loc[has_flow, "flow_id"] += (d * tp + t) * n_flows
                frames.append(part)
    events = pd.concat(frames, ignore_index=True)
    busy = (events["end_s"] - events["start_s"]).groupby([events["rank"], events["stream"]]).sum()
    params, grads, optim, other = static_bytes
    static = params + grads + optim + other
    mem_rows = []
    for s in range(p):
        level = 0.0
        mem_rows.append(dict(stage=s, time_s=0.0, activations=0.0))
        for t, delta in sorted(mem_steps[s]):
            level += delta
            mem_rows.append(dict(stage=s, time_s=t * UNIT_S, activations=level))
    memory = pd.DataFrame(mem_rows)
    memory["params"], memory["grads"], memory["optimizer"], memory["other"] = (
        params,
        grads,
        optim,
        other,
    )
    memory["total"] = static + memory["activations"]
    memory = memory[
        ["stage", "time_s", "params", "grads", "optimizer", "activations", "other", "total"]
    ]
    step = float(events["end_s"].max())
    summary = {
        "scenario": f"1f1b-p{p}-m{m}",
        "layout": f"dp{dp} tp{tp} pp{p}",
        "step_time_s": step,
        "peak_memory_bytes": float(memory["total"].max()),
    }
    return Timeline(events, memory, 80 * 2**30, summary, labels, busy.to_dict())
