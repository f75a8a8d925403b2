"""How many microbatches a stage holds at its activation peak (``simcluster/held_microbatches.py``),
against the schedules' published in-flight counts."""

from __future__ import annotations

import json

import pytest

from simcluster.commands.memory import held_line
from simcluster.held_microbatches import Held, held_at_peak
from simcluster.schedules import ScheduleSpec, get_schedule


def _held(name: str, p: int, m: int, v: int = 1, kept: float = 0.5) -> list[Held]:
    sched = get_schedule(name)
    spec = ScheduleSpec(p, m, v)
    chunks = sched.chunks(spec)
    return [held_at_peak(ops, [1.0] * chunks, [kept] * chunks) for ops in sched.build(spec)]


@pytest.mark.parametrize(("p", "m"), [(4, 8), (8, 16), (6, 5)])
def test_1f1b_stage_s_holds_p_minus_s_and_gpipe_all_m(p, m):
    # Narayanan et al. 2021 sec. 2.2: 1F1B keeps at most p microbatches in flight (stage s:
    # p - s, its warm-up's p - s - 1 forwards and one more); GPipe keeps every microbatch
    assert [h.forward for h in _held("1f1b", p, m)] == [min(p - s, m) for s in range(p)]
    assert _held("afab", p, m) == [Held(m, 0)] * p


def test_interleaved_holds_megatrons_warm_up_plus_one():
    # Megatron's interleaved warm-up on stage s: (p - s - 1) * 2 + (v - 1) * p chunk passes, then
    # one more forward before the first backward
    p, m, v = 4, 8, 2
    assert [h.forward for h in _held("interleaved", p, m, v)] == [(p - s - 1) * 2 + (v - 1) * p + 1 for s in range(p)]


def test_zb_h1_ds_holds_its_deferred_weight_passes():
    """Under full recomputation a B keeps more than its forward stashed (every linear's input,
    recomputed), so the peak comes when the most are held for W: the last forward's split
    backward on stage s > 0 leaves s + 1 queued (tests/test_zb_h1_ds.py's orders) beside the
    p - s - 1 forwards still stashed; the first stage never splits."""
    p = 4
    held = _held("zb-h1-ds", p, 8, kept=3.0)
    assert held == [Held(p, 0), *(Held(p - s - 1, s + 1) for s in range(1, p))]


def test_the_line_groups_stages_that_hold_alike():
    line = held_line([Held(2, 0), Held(2, 0), Held(1, 1)], "microbatches")
    assert line.endswith("(stage: microbatches stashed by their forward + held for their weight gradients): 0-1: 2, 2: 1 + 1")


def test_memory_says_what_each_stage_holds(cli):
    out = " ".join(cli("memory", "llama3-70b-64xh100").out.split())
    assert "(stage: microbatches stashed by their forward): 0: 4, 1: 3, 2: 2, 3: 1" in out
    doc = json.loads(cli("memory", "llama3-70b-64xh100", "--json").out)
    assert [st["held"] for st in doc["per_stage"]] == [{"forward": 4 - s, "for_weights": 0} for s in range(4)]
