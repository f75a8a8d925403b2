"""Engine-driven outputs: SimResult's Gantt, Perfetto trace and memory plot agree with the summary."""

import json

import pytest

from tests.engine_helpers import pipeline_scenario, run


@pytest.fixture(scope="module")
def result():
    data = pipeline_scenario(4, 8, "zb-h1")
    data["cluster"]["network"] = "simulated"
    return run(data)


def test_events_frame_columns(result):
    cols = ["rank", "stage", "stream", "kind", "group", "name", "microbatch", "chunk", "layer", "start_s", "end_s", "bytes"]
    assert list(result.events.columns[: len(cols)]) == cols
    assert set(result.events["kind"]) >= {"forward", "backward_input", "backward_weight", "send", "recv", "optimizer"}


def test_perfetto_from_a_simulation(result, tmp_path):
    path = tmp_path / "trace.json"
    result.to_perfetto(path)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    slices = [e for e in events if e.get("ph") == "X"]
    assert len(slices) == len(result.events)
    assert any(e.get("ph") == "s" for e in events) and any(e.get("ph") == "f" for e in events)


def test_perfetto_to_a_gz_path_is_the_json_gzipped(result, tmp_path):
    import gzip

    result.to_perfetto(tmp_path / "trace.json")
    result.to_perfetto(tmp_path / "trace.json.gz")
    packed = (tmp_path / "trace.json.gz").read_bytes()
    assert packed[:2] == b"\x1f\x8b"  # RFC 1952's magic: Perfetto reads it as gzip
    assert gzip.decompress(packed) == (tmp_path / "trace.json").read_bytes()


def test_gantt_and_memory_plot(result, tmp_path):
    result.plot_gantt(tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = result.plot_memory(tmp_path / "m.png")
    assert data.peak_bytes == pytest.approx(result.summary["peak_memory_bytes"]["max"])


def test_write_all(result, tmp_path):
    out = tmp_path / "out"
    result.write(out, svg=True)
    names = {p.name for p in out.iterdir()}
    assert {"summary.json", "events.csv", "trace.json", "timeline.png", "timeline.svg", "memory.png"} <= names
    assert json.loads((out / "summary.json").read_text())["step_time_s"] == pytest.approx(result.summary["step_time_s"])


def test_the_title_counts_one_gpu_in_the_singular():
    from tests.engine_helpers import pipeline_scenario

    assert run(pipeline_scenario(1, 2, "1f1b")).title.endswith("on dgx-h100 (1 GPU)")
    assert run(pipeline_scenario(2, 2, "1f1b")).title.endswith("on dgx-h100 (2 GPUs)")


def test_a_steady_state_step_is_split_in_breakdown_png_too(tmp_path):
    """With the optimizer's post-validation run printed where the step goes but wrote no
    breakdown.png (the timeline has no step boundary to mark, which is another matter)."""
    from tests.engine_helpers import pipeline_scenario

    steady = run(pipeline_scenario(4, 8, "zb-2p", training={"optimizer_post_validation": True}))
    assert steady.summary["optimizer_post_validation"] and "time_breakdown_s" in steady.summary
    written = steady.write(tmp_path / "out")
    assert "breakdown.png" in written and written["breakdown.png"].read_bytes()[:4] == b"\x89PNG"


def test_row_labels_name_only_the_dimensions_the_layout_has():
    """A pure pipeline's rows are its stages; a dp x tp x ep layout's rows carry each of those
    coordinates (the rank grid of layout.py: tp innermost), and no "cp 0" without context
    parallelism."""
    from simcluster.context import build_context
    from simcluster.engine.simulate import _label
    from simcluster.scenario import load_scenario

    pipeline = build_context(load_scenario("gpt-28b-zb2p-32xa100"))  # pp 32 alone
    assert _label(pipeline, 5) == "stage 5 (rank 5)"
    moe = build_context(load_scenario("mixtral-8x7b-32xh100"))  # tp 2, ep 8, dp 16
    label = _label(moe, 3)
    assert label.startswith("stage 0 / tp 1 / ep ") and label.endswith(" / dp 1 (rank 3)")
    assert "cp" not in label
    assert _label(moe, 3, slow=1.25).endswith("(rank 3, straggler x1.25)")
