"""Pipeline schedules executed by the SimPy engine on an ideal network (issue 4).

Analytic references: 1F1B/GPipe bubble (p-1)/(m+p-1) (Narayanan et al. 2021, Huang et al. 2019);
interleaved (p-1)/(v*m+p-1) (Narayanan et al. 2021 Sec 2.2.2); ZB-H1 bubble (p-1)(F+B-W) against
1F1B's (p-1)(F+B+W) and activation peaks p (1F1B, ZB-H1), m (GPipe), 2p-1 (ZB-H2) (Qi et al.
ICLR'24 Sec 3); DualPipe p+1 (DeepSeek-V3 report, Table 2).
"""

import json

import pytest

from simcluster.context import build_context
from simcluster.engine.plan import planned_orders
from simcluster.scenario import scenario_from_dict
from simcluster.schedules import get_schedule
from simcluster.schedules.check import bubble_time, check_timeline, replay, span
from tests.engine_helpers import pipeline_scenario, run

P, M = 4, 16


@pytest.fixture(scope="module")
def results():
    cases = {
        "afab": (1,),
        "1f1b": (1,),
        "interleaved": (2,),
        "looped-bfs": (2,),
        "zb-h1": (1,),
        "zb-h2": (1,),
        "zb-1p": (1,),
        "zb-2p": (1,),
        "zbv": (1,),
        "zbv-fixed": (1,),
        "interleaved-zb": (2,),
        "v-half": (1,),
        "v-min": (1,),
        "dualpipe": (1,),
        "dualpipev": (1,),
    }
    out = {}
    for name, (v,) in cases.items():
        sc = pipeline_scenario(P, M, name, v)
        # a fused loss: no transient logit copies on the head's stage, so the stash alone is
        # the activation curve these tests count microbatches on
        sc["training"]["fused_cross_entropy"] = True
        out[name] = run(sc)
    return out


def _span(res):
    pipe = res.events[
        res.events["kind"].isin(["forward", "backward_input", "backward_weight", "backward"])
    ]
    return max(rows["end_s"].max() - rows["start_s"].min() for _, rows in pipe.groupby("stage"))


def _bubble_time(res):
    return res.summary["bubble_fraction"] * _span(res)


@pytest.mark.parametrize("name", ["afab", "1f1b"])
def test_gpipe_and_1f1b_bubble(results, name):
    assert results[name].summary["bubble_fraction"] == pytest.approx(
        (P - 1) / (M + P - 1), rel=0.01
    )


# The formula assumes balanced stages and free p2p; the engine's end stages also carry the
# embedding and LM head. Breadth-first lands 2% above it (interleaved within 1%); the replay
# test below checks the engine against the schedule with the model's own op times exactly.
@pytest.mark.parametrize(("name", "rel"), [("interleaved", 0.01), ("looped-bfs", 0.03)])
def test_interleaved_bubble(results, name, rel):
    v = 2
    assert results[name].summary["bubble_fraction"] == pytest.approx(
        (P - 1) / (v * M + P - 1), rel=rel
    )


def test_zb_h1_bubble_against_1f1b():
    """The closed form (p-1)(F+B-W) of Qi et al. assumes W is not the longest pass (their
    Table 1: W = 24bsh^2 FLOPs <= F, B). At 1024 tokens per microbatch on H100 the fp32
    main-gradient traffic makes W the longest, so this check runs at 2048 tokens with 16-bit
    gradients accumulated in the GEMM's epilogue (2 B per parameter instead of 8)."""
    plain = {"training": {"seq_len": 2048, "fp32_grad_accum": False, "grad_accum_fusion": True}}
    one_f_one_b = run(pipeline_scenario(P, M, "1f1b", **plain))
    zb = run(pipeline_scenario(P, M, "zb-h1", **plain))
    per = zb.summary["compute_per_microbatch_s"]
    f, b, w = per["forward"], per["backward_input"], per["backward_weight"]
    assert w < min(f, b)
    expected = _bubble_time(one_f_one_b) * (f + b - w) / (f + b + w)
    assert _bubble_time(zb) == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize(
    "name",
    [
        "zb-h2", "zbv", "v-half", "v-min", "dualpipe", "dualpipev", "zb-h1", "zb-1p", "zb-2p",
        "interleaved", "looped-bfs",
    ],  # fmt: skip
)
def test_engine_matches_independent_replay(results, name):
    """The engine's bubble equals a plain list-scheduler replay with the model's own F/B/W."""
    res = results[name]
    sched = get_schedule(name)
    from simcluster.schedules import ScheduleSpec

    v = 2 if name in ("interleaved", "looped-bfs") else 1
    spec = ScheduleSpec(P, M, v)
    per = res.summary["compute_per_microbatch_s"]
    chunks = sched.chunks(spec)
    f, b, w = (per[k] / chunks for k in ("forward", "backward_input", "backward_weight"))
    # the engine runs an F&B pair's compute back to back (communication overlapped), so the
    # pair lasts the sum of its ops (replay's default)
    # the order the engine ran (cost-aware schedules plan it with the modelled op times)
    data = pipeline_scenario(P, M, name, v, training={"fused_cross_entropy": True})
    orders = planned_orders(build_context(scenario_from_dict(data)))
    timeline = replay(sched, spec, orders, f, b, w)
    # first/last stages carry the (tiny) embedding and head, so compare within 1% of the step
    assert _span(res) == pytest.approx(span(timeline), rel=0.01)
    assert _bubble_time(res) == pytest.approx(bubble_time(timeline), abs=0.01 * span(timeline))


@pytest.mark.parametrize("name", ["zb-h2", "zbv", "dualpipev"])
def test_zero_bubble_schedules_beat_1f1b(results, name):
    assert (
        results[name].summary["bubble_fraction"] < 0.5 * results["1f1b"].summary["bubble_fraction"]
    )


def _activation_units(res, stage):
    mem = res.memory[res.memory["stage"] == stage]
    layer_bytes = mem["activations"].max()
    return layer_bytes


# looped BFS holds every microbatch of both of its chunks; its unit (the smallest step up) is a
# half-stage chunk, so 2M of them
@pytest.mark.parametrize("name, units", [("1f1b", P), ("afab", M), ("zb-h1", P), ("looped-bfs", 2 * M)])
def test_activation_peak_on_stage0(results, name, units):
    one = _per_microbatch_activation(results, name)
    assert _activation_units(results[name], 0) / one == pytest.approx(units, abs=0.05)


def test_zb_h2_activation_peak(results):
    # 2p-1 microbatches in flight when W is deferred (Qi et al.); our stash frees B's share early,
    # so the peak lies between p and 2p-1 microbatches
    one = _per_microbatch_activation(results, "zb-h2")
    units = _activation_units(results["zb-h2"], 0) / one
    assert P < units <= 2 * P - 1 + 1e-9


def test_dualpipe_activation_peak(results):
    # DeepSeek-V3's PP + 1 chunks' activations: stage 0's two chunks differ (one holds the
    # embedding, the other the output layer's stash), so in units of the larger
    one = _per_microbatch_activation(results, "dualpipe", largest=True)
    units = _activation_units(results["dualpipe"], 0) / one
    assert units <= (P + 1) * 1.001


def _per_microbatch_activation(results, name, largest=False):
    """One microbatch's stash through stage 0's smallest chunk (the engine saves it layer by
    layer, so the timeline's smallest step up is one layer's), or its largest."""
    from simcluster.memory import chunk_activation_bytes

    v = 2 if name == "looped-bfs" else 1
    sc = pipeline_scenario(P, M, name, v)
    sc["training"]["fused_cross_entropy"] = True
    ctx = build_context(scenario_from_dict(sc))
    training = ctx.scenario.training
    pick = max if largest else min
    return pick(chunk_activation_bytes(ctx.model, ctx.layout, training, ch) for ch in ctx.chunks[0])


@pytest.mark.parametrize(
    "name",
    ["afab", "1f1b", "interleaved", "looped-bfs", "zb-h1", "zb-h2", "zbv", "zbv-fixed", "interleaved-zb",
     "dualpipe", "dualpipev"],
)  # fmt: skip
def test_executed_timeline_is_valid(results, name):
    """F before B before W per (microbatch, chunk), cross-stage dependencies, no compute overlap."""
    res = results[name]
    ev = res.events[res.events["stream"] == "compute"]
    sched = get_schedule(name)
    from simcluster.schedules import PipeOp, ScheduleSpec

    spec = ScheduleSpec(P, M, 2 if name in ("interleaved", "looped-bfs", "interleaved-zb") else 1)
    kinds = {"forward": "F", "backward_input": "B", "backward_weight": "W", "backward": "BW"}
    flags = {
        (st, op.kind, op.microbatch, op.chunk)
        for st, ops in enumerate(sched.build(spec))
        for op in ops
        if op.overlap
    }
    timeline = []
    for stage in range(P):
        rows = ev[(ev["stage"] == stage) & ev["kind"].isin(kinds)]
        grouped = rows.groupby(["kind", "microbatch", "chunk"], sort=False).agg(
            start=("start_s", "min"), end=("end_s", "max")
        )
        ops = [
            (PipeOp(kinds[k], int(mb), int(c), (stage, kinds[k], int(mb), int(c)) in flags), s, e)
            for (k, mb, c), (s, e) in grouped.iterrows()
        ]
        timeline.append(sorted(ops, key=lambda r: r[1]))
    check_timeline(sched, spec, timeline)
    starts = ev.sort_values(["rank", "start_s"])
    for _, rows in starts.groupby("rank"):
        assert (rows["start_s"].to_numpy()[1:] >= rows["end_s"].to_numpy()[:-1] - 1e-12).all()


def test_deterministic_json():
    data = pipeline_scenario(P, 8, "1f1b")
    data["cluster"]["network"] = "simulated"
    a, b = run(data).summary, run(data).summary
    a.pop("sim_wall_s"), b.pop("sim_wall_s")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
