"""Every shipped scenario loads, reports its memory, simulates and writes its outputs: the
examples a user starts from (README) must keep working as the model changes. They are real layouts, so they fit in
their GPUs' memory (DeepSeek-V3's trained on 80 GB H800s, its report Sec 3.2) and land in the
MFU range published runs of their kind report (20-70%)."""

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.memory_report import memory_summary
from simcluster.scenario import load_scenario, shipped_scenarios

NAMES = shipped_scenarios()
#: lower MFU bounds of kinds of run that publish less than 20%: a fine-grained MoE (128 experts
#: 768 wide, 8 chosen) runs GEMMs of a few GFLOP each; Megatron-Bridge's published Qwen3-30B-A3B
#: row on 16 H100 is 121 model TFLOP/s, 12% of the H100's dense BF16 peak (docs/accuracy.md)
MFU_FLOOR = {"qwen3-30b-a3b-16xh100": 0.1}


def test_there_are_examples_for_dense_moe_and_both_gpu_generations():
    assert len(NAMES) >= 5
    hardware = {load_scenario(n).cluster.hardware for n in NAMES}
    assert {"dgx-a100", "dgx-h100"} <= hardware


@pytest.mark.parametrize("name", NAMES)
def test_memory_report_says_it_fits(name):
    doc = memory_summary(build_context(load_scenario(name)))
    assert doc["fits"], (name, doc["total_bytes"] / 2**30)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_simulates_within_memory_and_a_plausible_mfu(name, tmp_path):
    result = simulate(load_scenario(name))
    summary = result.summary
    assert summary["fits_in_memory"]
    assert MFU_FLOOR.get(name, 0.2) < summary["mfu"] < 0.7, (name, summary["mfu"])
    assert summary["step_time_s"] > 0 and summary["events"] > 0
    # what `simcluster run NAME --out DIR` writes: its events must be a valid timeline (one
    # event at a time per stream); DeepSeek-V3's host waits inside DualPipe's F&B pairs once
    # overlapped the other op's kernels and nothing was written (2026-11-29)
    written = result.write(tmp_path / "out")
    assert {"timeline.png", "trace.json", "summary.json", "events.csv"} <= set(written)
