"""What sets a stage's activation peak (``memory_report.walk_peak``): its stash alone or a
transient held on it, and the `memory` line that says so."""

from __future__ import annotations

import json

import pytest

from simcluster.commands.memory import transient_line
from simcluster.memory_report import BUCKET_COPY, LOSS_LOGITS, STASH, activation_walk, walk_peak
from simcluster.schedules import ScheduleSpec, get_schedule


def _stage0(p: int = 2, m: int = 4):
    """Stage 0's 1F1B order: p - 1 warm-up forwards, then one forward and one backward each."""
    return get_schedule("1f1b").build(ScheduleSpec(p, m, 1))[0]


def test_a_1f1b_stage_peaks_on_its_p_stashes():
    # Narayanan et al. 2021 sec. 2.2: stage 0 of 1F1B holds p microbatches (1.0 each)
    top = walk_peak(_stage0(), [1.0])
    assert (top.bytes, top.part, top.stash) == (2.0, STASH, 2.0)


def test_the_loss_copies_on_the_peak_stash_set_the_peak():
    # held only during a forward (the last one of the warm-up and on), on top of what it stashed
    top = walk_peak(_stage0(), [1.0], transient=[0.5])
    assert (top.bytes, top.part, top.stash) == (2.5, LOSS_LOGITS, 2.0)


@pytest.mark.parametrize(("at", "share", "expected"), [("end", 0.0, (3.0, 0.0)), ("last", 0.5, (2.7, 0.5))])
def test_a_bucket_copy_is_walked_on_the_stash_left_when_it_is_made(at, share, expected):
    """After the last backward (ZeRO 0-1 without overlap) every stash is freed: the copy alone;
    made half-way through the last backward (its bucket closing with half the stash freed) it
    sits on the half still held, 1.0 x (1 - 0.5)."""
    size = 3.0 if at == "end" else 2.2
    top = walk_peak(_stage0(), [1.0], transient=[0.5], copies=[[(share, size)]], copies_at=at)
    assert (top.bytes, top.part) == (pytest.approx(expected[0]), BUCKET_COPY)
    assert top.stash == pytest.approx(expected[1])
    assert activation_walk(_stage0(), [1.0], transient=[0.5], copies=[[(share, size)]], copies_at=at) == top.bytes


def test_the_line_names_each_run_of_stages_and_stays_silent_on_the_stash():
    def stage(part: str, act: float, stash: float) -> dict:
        return {"peak_part": part, "activations_bytes": act, "peak_stash_bytes": stash}

    gib = 2.0**30
    line = transient_line([stage(BUCKET_COPY, 2 * gib, 0.0), stage(BUCKET_COPY, 2 * gib, 0.0), stage(STASH, gib, gib)])
    assert line == "activations peak with more than the stash — stages 0-1: a gradient bucket's flat copy or cast (2.00 GiB) on 0 B stashed"
    assert transient_line([stage(STASH, gib, gib)]) is None


def test_blooms_stages_peak_on_the_bf16_cast_of_their_gradients(cli):
    """BLOOM 176B (DeepSpeed's BF16_Optimizer, ZeRO-1 reduced after the backward): its fp32
    gradient buffer is cast to bf16 for the all-reduce (2 B a parameter) once every stash is
    freed, which on the first and last stages outweighs the full-recomputation stash."""
    doc = json.loads(cli("memory", "bloom-176b-384xa100", "--json").out)
    first = doc["per_stage"][0]
    assert (first["peak_part"], first["peak_stash_bytes"]) == (BUCKET_COPY, 0.0)
    # the cast of one GPU's whole stage: 2 B x its parameters
    assert first["activations_bytes"] == pytest.approx(2.0 * first["params_per_gpu"], rel=1e-12)
    out = " ".join(cli("memory", "bloom-176b-384xa100").out.split())
    assert "activations peak with more than the stash — stage 0: a gradient bucket's flat copy or cast" in out


@pytest.mark.parametrize(
    "layers_per_stage", [None, [0, 4, 4, 0]],  # the last two: stages of the embedding / the head alone
)
def test_chunk_unit_layers_are_the_engines_forward_units(layers_per_stage):
    """The memory walk places a bucket's copy by ``Chunk.unit_layers``; the engine runs the
    forward units its plan builds (engine/plan.py ``_units``): the same grouping, the embedding
    with the first layer, the LM head with the last."""
    from simcluster.context import build_context
    from simcluster.engine.plan import build_plans, kernel_model
    from simcluster.scenario import scenario_from_dict

    parallel = {"pp": 4, "schedule": "1f1b"}
    if layers_per_stage:
        parallel["layers_per_stage"] = layers_per_stage
    ctx = build_context(scenario_from_dict({
        "name": "u", "model": {"layers": 8, "hidden": 1024, "heads": 16, "ffn": 4096, "vocab": 32000},
        "cluster": {"hardware": "dgx-h100", "gpus": 8}, "parallel": parallel,
        "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 8, "precision": "bf16"},
    }))  # fmt: skip
    for plan, chunks in zip(build_plans(ctx, kernel_model(ctx)), ctx.chunks, strict=True):
        for cplan, chunk in zip(plan.chunks, chunks, strict=True):
            assert [list(u.layers) for u in cplan.phases["F"]] == chunk.unit_layers()
