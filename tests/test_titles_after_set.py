"""After ``--set model=...`` the figures, the trace and the table name the model simulated,
not only the scenario file's name (before, timeline.png read "llama3-8b-8xh100 — ..." for a
run of Llama 3.2 1B); with any ``--set`` the figures and trace also carry the overrides, as
the table's "with --set" line does. memory.png says when the peak does not fit."""

from __future__ import annotations

import json

from simcluster.names import run_heading


def test_run_heading_names_the_model_only_when_the_scenario_name_does_not():
    assert run_heading("llama3-8b-8xh100", "llama3-8b") == "llama3-8b-8xh100"
    assert run_heading("grok1-314b-128xgb200", "grok-1") == "grok1-314b-128xgb200"  # separators aside
    assert run_heading("llama3-70b-64xh100", "llama3.1-405b") == "llama3-70b-64xh100 (model llama3.1-405b)"
    assert run_heading("my-job", None) == "my-job"
    assert run_heading("my-job", "custom") == "my-job"  # model.py's name for a shape given by its fields


def test_figures_trace_and_table_name_the_model_after_set(cli, tmp_path):
    out = tmp_path / "out"
    res = cli("run", "llama3-8b-8xh100", "--set", "model=llama3.2-1b", "--out", str(out))
    assert res.code == 0, res.err
    table_title = " ".join(res.out.split())
    assert "llama3-8b-8xh100 (model llama3.2-1b) —" in table_title
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == "llama3.2-1b" and summary["overrides"] == ["model=llama3.2-1b"]
    # the trace's title is the heading every figure of the run is drawn with (output/writer.py)
    title = json.loads((out / "trace.json").read_text())["otherData"]["title"]
    assert title.startswith("llama3-8b-8xh100 (model llama3.2-1b) — ")
    assert title.endswith("\nwith --set model=llama3.2-1b")


def test_the_png_titles_are_that_heading(monkeypatch, tmp_path):
    """timeline.png, memory.png and breakdown.png are drawn with the run's heading."""
    import simcluster.output.writer as writer
    from simcluster.engine import simulate
    from simcluster.scenario import load_scenario

    seen: dict[str, str] = {}
    draw_gantt, draw_memory, draw_breakdown = writer.draw_gantt, writer.draw_memory, writer.draw_breakdown

    def gantt(frame, labels, heading, *rest):
        seen["timeline"] = heading
        return draw_gantt(frame, labels, heading, *rest)

    def memory(data, heading):
        seen["memory"] = heading
        return draw_memory(data, heading)

    def breakdown(summary, heading):
        seen["breakdown"] = heading
        return draw_breakdown(summary, heading)

    monkeypatch.setattr(writer, "draw_gantt", gantt)
    monkeypatch.setattr(writer, "draw_memory", memory)
    monkeypatch.setattr(writer, "draw_breakdown", breakdown)
    result = simulate(load_scenario("llama3-8b-8xh100", [("model", "llama3.2-1b")]))
    result.write(tmp_path / "out")
    assert set(seen) == {"timeline", "memory", "breakdown"}
    assert all("(model llama3.2-1b)" in text for text in seen.values()), seen
    result.title += "\nwith --set model=llama3.2-1b"  # as `run` adds it
    result.write(tmp_path / "again")
    assert seen["breakdown"].endswith(": where the step goes\nwith --set model=llama3.2-1b")


def test_memory_png_says_when_the_peak_does_not_fit():
    import pandas as pd

    from simcluster.output.memory_plot import draw_memory, memory_plot_data
    from simcluster.units import GiB

    rows = [(0, 0.0, 10 * GiB, 0.0, 0.0, 0.0, 0.0), (0, 1.0, 10 * GiB, 0.0, 0.0, 80 * GiB, 0.0)]
    frame = pd.DataFrame(rows, columns=["stage", "time_s", "params", "grads", "optimizer", "activations", "other"])
    frame["total"] = frame[["params", "grads", "optimizer", "activations", "other"]].sum(axis=1)
    over = draw_memory(memory_plot_data(frame, 80 * GiB))
    under = draw_memory(memory_plot_data(frame, 100 * GiB))
    assert over._suptitle is not None and over._suptitle.get_text().endswith(": does not fit")
    assert under._suptitle is not None and "does not fit" not in under._suptitle.get_text()


def test_memory_names_the_model_after_set(cli):
    res = cli("memory", "llama3-8b-8xh100", "--set", "model=llama3.2-1b")
    assert res.code == 0, res.err
    assert "llama3-8b-8xh100 (model llama3.2-1b) —" in " ".join(res.out.split())
    doc = json.loads(cli("memory", "llama3-8b-8xh100", "--set", "model=llama3.2-1b", "--json").out)
    assert doc["model"] == "llama3.2-1b"
