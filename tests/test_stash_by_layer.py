"""The engine saves a microbatch's activations layer by layer as its forward runs, and frees
them in reverse as its backward runs, as a PyTorch memory profile of a training step shows.

Each step up of the memory timeline during a forward is one layer's stash, Korthikanti et al.
2022 Table 2 without parallelism: sbh(34 + 5as/h) bytes (GPT layer, dropout, unfused
attention); the peak is where the memory walk of `simcluster memory` puts it.
"""

import numpy as np
import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.memory import chunk_activation_bytes, stash_cumulative_shares
from simcluster.memory_report import memory_summary
from simcluster.scenario import scenario_from_dict
from tests.conftest import make_scenario

S, B, H, A, L = 2048, 2, 1024, 16, 8  # the GPT-like layer of tests/conftest.py, 8 layers
KORTHIKANTI_LAYER = S * B * H * (34 + 5 * A * S / H)


def _scenario(**training):
    base = {"seq_len": S, "micro_batch": B, "global_batch": 2 * B * 8, "flash_attention": False,
            "fused_cross_entropy": True,
            # the 16-bit gradients kept all step (grad_lifetime.py 'step'): the activations
            # column then steps up by the stash alone, one layer at a time
            "grad_16bit_freed": "step"}  # fmt: skip
    return scenario_from_dict(make_scenario(training={**base, **training}, cluster={"hardware": "dgx-h100", "gpus": 8},
                                            parallel={"tp": 1, "pp": 1}))  # fmt: skip


@pytest.fixture(scope="module")
def run():
    sc = _scenario()
    return sc, simulate(sc)


def _first_forward(res):
    ev = res.events
    f = ev[(ev["rank"] == 0) & (ev["kind"] == "forward") & (ev["microbatch"] == 0)]
    return f["start_s"].min(), f["end_s"].max()


def test_each_step_up_in_a_forward_is_one_layer(run):
    _, res = run
    mem = res.memory[res.memory["stage"] == 0]
    start, end = _first_forward(res)
    levels = mem[(mem["time_s"] >= start) & (mem["time_s"] <= end)]["activations"].to_numpy()
    ups = np.diff(np.concatenate([[0.0], levels]))
    ups = ups[ups > 0]
    # the first layer's unit also holds the embedding's dropout mask, sbh bytes (Korthikanti Sec.
    # 4.3); the last layer's unit also holds the output layer's stash (the loss's logits)
    assert len(ups) == L
    assert ups[0] == pytest.approx(KORTHIKANTI_LAYER + S * B * H, rel=1e-12)
    assert ups[1 : L - 1] == pytest.approx([KORTHIKANTI_LAYER] * (L - 2), rel=1e-12)
    assert ups[-1] > KORTHIKANTI_LAYER


def test_a_backward_frees_the_stash_layer_by_layer_down_to_nothing(run):
    sc, res = run
    ctx = build_context(sc)
    stash = chunk_activation_bytes(ctx.model, ctx.layout, sc.training, ctx.chunks[0][0])
    mem = res.memory[res.memory["stage"] == 0]
    ev = res.events
    bw = ev[(ev["rank"] == 0) & (ev["kind"] == "backward") & (ev["microbatch"] == 0)]
    before = mem[mem["time_s"] <= bw["start_s"].min()]["activations"].iloc[-1]
    during = mem[(mem["time_s"] > bw["start_s"].min()) & (mem["time_s"] <= bw["end_s"].max())]
    levels = during["activations"].to_numpy()
    levels = levels[: int(np.argmax(levels == 0.0)) + 1]  # the next forward starts as it ends
    # pp = 1: one microbatch in flight, its whole stash held when its backward starts
    assert before == pytest.approx(stash, rel=1e-12)
    # a fused B+W frees it one layer at a time (the last layer, with the head, first; the first
    # layer, with the embedding's dropout mask, last)
    drops = -np.diff(np.concatenate([[before], levels]))
    assert np.all(drops >= 0)
    drops = drops[drops > 0]
    assert len(drops) == L
    assert drops[1:-1] == pytest.approx([KORTHIKANTI_LAYER] * (L - 2), rel=1e-12)
    assert drops[-1] == pytest.approx(KORTHIKANTI_LAYER + S * B * H, rel=1e-12)
    # exactly nothing left once the backward is done, and at the step's end
    assert levels[-1] == 0.0
    assert mem["activations"].iloc[-1] == 0.0


def test_the_peak_is_the_memory_walks(run):
    sc, res = run
    assert res.summary["peak_memory_bytes"]["max"] == pytest.approx(
        memory_summary(build_context(sc))["total_bytes"], rel=1e-12
    )


def test_the_shares_end_at_exactly_one_and_follow_the_layers():
    sc = _scenario()
    ctx = build_context(sc)
    chunk = ctx.chunks[0][0]
    units = [(i,) for i in chunk.layer_indices]
    shares = stash_cumulative_shares(ctx.model, ctx.layout, sc.training, chunk, units)
    assert shares[-1] == 1.0
    assert shares == pytest.approx([(i + 1) / L for i in range(L)], rel=1e-12)
