"""Where the step's time goes (engine/breakdown.py), per pipeline stage.

References: the 1F1B pipeline bubble (p-1)/(m+p-1) (Narayanan et al. 2021, SC'21 Sec 2.2);
full activation recomputation reruns every layer's forward once before its backward (Chen et
al. 2016; Korthikanti et al. 2022 Sec 4); the unfused vocab-parallel cross-entropy moves 9.5
fp32 logit passes forward and 3.5 backward (Megatron-LM ``vocab_parallel_cross_entropy``, see
``LayerBuilder._cross_entropy_bytes``).
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import layer_builder, merge_sections, pipeline_scenario, run

from simcluster.engine.breakdown import COMPUTE_KEYS
from simcluster.parallelism.segments import Compute, Work


def _total(part: dict) -> float:
    return sum(part.values())


@pytest.mark.parametrize(
    "data",
    [
        pipeline_scenario(4, 8, "1f1b"),
        pipeline_scenario(4, 8, "zb-h1"),
        make_scenario(cluster={"hardware": "dgx-h100", "gpus": 16}, parallel={"tp": 4, "pp": 2, "zero": 1}),
        make_scenario(
            cluster={"hardware": "dgx-a100", "gpus": 16},
            parallel={"tp": 1, "pp": 1, "zero": 3},
            training={"seq_len": 2048, "micro_batch": 1, "global_batch": 32},
        ),
    ],
    ids=["1f1b", "zb-h1", "tp-pp-dp", "zero3"],
)
def test_parts_add_up_to_the_step(data):
    res = run(data)
    step = res.summary["step_time_s"]
    per_stage = res.summary["time_breakdown_s"]["per_stage"]
    assert len(per_stage) == res.summary["parallel"]["pp"]
    for part in per_stage:
        assert _total(part) == pytest.approx(step, rel=1e-9)
        assert min(part.values()) >= 0


def test_pipeline_idle_is_the_1f1b_bubble():
    p, m = 4, 8
    res = run(pipeline_scenario(p, m, "1f1b"))
    step = res.summary["step_time_s"]
    for part in res.summary["time_breakdown_s"]["per_stage"]:
        # on an ideal network the pipeline's span is the step less the optimizer that follows
        # it, and what is not compute in it is the bubble
        span = step - part["optimizer"]
        assert part["idle"] / span == pytest.approx((p - 1) / (m + p - 1), abs=0.005)


def test_full_recompute_costs_one_forward_of_the_layers():
    data = make_scenario(
        cluster={"hardware": "dgx-h100", "gpus": 1},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 4, "recompute": "full"},
    )
    res = run(data)
    b = layer_builder(data)
    forward = sum(
        s.seconds for i in range(b.shapes.model.layers) for s in b.layer(i, "F") if isinstance(s, Compute)
    )
    part = res.summary["time_breakdown_s"]["per_stage"][0]
    assert part["recompute"] == pytest.approx(4 * forward, rel=1e-9)


def test_loss_is_the_cross_entropy_traffic():
    m = 4
    data = make_scenario(
        cluster={"hardware": "dgx-h100", "gpus": 1},
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": m},
    )
    res = run(data)
    b = layer_builder(data)
    logits = b.shapes.tokens * b.shapes.model.vocab * 4.0  # fp32 logits, tp 1
    expected = m * (b.km.memory(9.5 * logits) + b.km.memory(3.5 * logits))
    assert res.summary["time_breakdown_s"]["per_stage"][0]["loss"] == pytest.approx(expected, rel=1e-9)


def test_blocking_dp_reduce_is_exposed_in_full():
    # ZeRO-0 over two nodes with the gradient all-reduce after the backward: nothing hides it
    data = make_scenario(
        cluster={"hardware": "dgx-h100", "gpus": 16},
        parallel={"tp": 8, "pp": 1, "zero": 0},
        overlap={"dp_grad_reduce": False},
    )
    res = run(data)
    part = res.summary["time_breakdown_s"]["per_stage"][0]
    ev = res.events
    rank = ev["rank"].min()
    dp = ev[(ev["rank"] == rank) & (ev["group"] == "dp")]
    assert len(dp) > 0
    assert part["comm_dp"] == pytest.approx(float((dp["end_s"] - dp["start_s"]).sum()), rel=1e-6)


def test_compute_categories_sum_to_the_compute_stream():
    res = run(merge_sections(pipeline_scenario(2, 4, "1f1b"), training={"recompute": "selective"}))
    ev = res.events
    for stage, part in enumerate(res.summary["time_breakdown_s"]["per_stage"]):
        rank = ev.loc[ev["stage"] == stage, "rank"].min()
        busy = ev[(ev["rank"] == rank) & (ev["stream"] == "compute")]
        assert sum(part[k] for k in COMPUTE_KEYS) == pytest.approx(
            float((busy["end_s"] - busy["start_s"]).sum()), rel=1e-9
        )


def test_work_adds_scales_and_refuses_unknown_categories():
    w = Work.of(gemm=2.0, memory=1.0) + Work.of(gemm=1.0, loss=0.5)
    assert dict(w.parts) == {"gemm": 3.0, "memory": 1.0, "loss": 0.5}
    assert w.scaled(2).total == pytest.approx(9.0)
    assert Compute.of("x", w).seconds == w.total
    with pytest.raises(ValueError, match="unknown"):
        Work.of(flops=1.0)


def test_run_prints_the_breakdown_and_writes_its_plot(cli, tmp_path):
    out = tmp_path / "out"
    r = cli("run", "llama3-8b-8xh100", "--out", str(out))
    assert r.code == 0, r.err
    assert "where the time goes" in r.out and "GEMMs" in r.out
    png = (out / "breakdown.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_timeline_subtitle_names_the_largest_parts():
    from simcluster.output.gantt import describe_step

    res = run(pipeline_scenario(4, 8, "1f1b"))
    text = describe_step(res.summary)
    top = max(
        ((k, v) for k, v in res.summary["time_breakdown_s"]["per_stage"][res.summary["time_breakdown_s"]["stage"]].items()),
        key=lambda kv: kv[1],
    )
    assert "GEMMs" in text and top[0] == "gemm"
    assert describe_step({"layout": "dp1", "step_time_s": 1.0}) == "dp1 · step 1.000 s"
    # a title that already names the layout is not repeated below it
    assert describe_step({"layout": "dp1", "step_time_s": 1.0}, "x — dp1 on h100") == "step 1.000 s"


def test_the_plot_has_a_colour_for_every_part_of_the_breakdown():
    # a part without a colour would be dropped from breakdown.png, its time left blank
    from simcluster.engine.breakdown import LABELS
    from simcluster.output.breakdown_plot import COLORS

    assert set(LABELS) <= set(COLORS)


def test_share_labels_sit_inside_their_parts_and_never_overlap():
    """compare.png put a 7% label on each of a short bar's 7% parts (a 47B model beside a 70B
    one: parts a few pixels wide), and the labels ran into each other; a share is written
    only on a part wide enough to hold it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from simcluster.output.breakdown_plot import Bar, draw_bars

    long_bar = Bar("70b", {"gemm": 60.0, "attention": 8.0, "comm_tp": 18.0, "idle": 14.0}, 100.0)
    short = Bar("moe", {"gemm": 1.0, "attention": 0.12, "memory": 0.12, "loss": 0.12, "grad_accum": 0.12}, 1.48)
    fig = draw_bars([long_bar, short], "per million tokens")
    renderer = FigureCanvasAgg(fig).get_renderer()
    (ax,) = fig.axes
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts]
    assert [text for text, _ in boxes if text == "60%"], "the long bar keeps its labels"
    for i, (_, a) in enumerate(boxes):
        for _, b in boxes[i + 1 :]:
            assert not a.overlaps(b), boxes
    parts = [p.get_window_extent(renderer) for p in ax.patches]
    for text, box in boxes:  # each label within the part under its centre
        (part,) = [p for p in parts if p.x0 <= (box.x0 + box.x1) / 2 <= p.x1 and p.y0 <= (box.y0 + box.y1) / 2 <= p.y1]
        assert part.x0 <= box.x0 and box.x1 <= part.x1, (text, box, part)


def test_a_category_too_thin_to_see_gives_its_share_in_the_legend():
    """compare.png of llama3-8b-8xh100 against its full-recompute variant (2026-12-01) listed
    "optimizer" and "exposed dp" in its legend over parts of 13 ms and 10 ms in 6.4 s and 7.8 s
    steps: under a pixel each, no colour to find. A category thinner than THIN_PX in every bar
    names its largest share of a bar (13.4 ms of 6.380 s is 0.21%); one that shows keeps its
    plain label."""
    from simcluster.engine.breakdown import LABELS
    from simcluster.output.breakdown_plot import Bar, draw_bars

    base = {"gemm": 4.194, "attention": 1.058, "memory": 0.446, "recompute": 0.271, "optimizer": 0.0134}
    full = {**base, "gemm": 4.146, "memory": 0.437, "recompute": 1.733}
    fig = draw_bars([Bar("selective", base, sum(base.values())), Bar("full", full, sum(full.values()))], "t")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"{LABELS['optimizer']} (0.2%, too thin to see)" in legend
    assert LABELS["gemm"] in legend and LABELS["recompute"] in legend


def test_the_legend_fits_the_figure_when_thin_parts_lengthen_its_entries():
    """breakdown.png of nanotron's 1.34B on one node (2026-12-02) cut its legend at both edges:
    three thin categories' '(0.1%, too thin to see)' were written into five columns after the
    legend was laid out. The entries are now final before it is, in as many columns as fit the
    10-inch width, and the figure grows by the rows that adds; the axes keep their width."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from simcluster.output.breakdown_plot import Bar, draw_bars

    parts = {"gemm": 1.62, "attention": 0.67, "memory": 0.65, "loss": 0.0, "grad_accum": 0.05, "optimizer": 0.03,
             "host": 0.003, "comm_dp": 0.02, "comm_embd": 0.003, "comm_pp": 0.003, "idle": 0.14}  # fmt: skip
    roomy = draw_bars([Bar("stage 0", {"gemm": 1.0, "idle": 0.5}, 1.5)], "t")
    fig = draw_bars([Bar("stage 0", parts, sum(parts.values()))], "t")
    renderer = FigureCanvasAgg(fig).get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    assert sum("too thin to see" in t.get_text() for t in legend.get_texts()) == 3
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width
    assert fig.get_figheight() > roomy.get_figheight()
    assert fig.axes[0].get_window_extent(renderer).y0 > box.y1  # the axes above the legend
