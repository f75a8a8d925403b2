"""Megatron-Core's expert-parallel communication overlap (``overlap.ep_comm``).

Reference: Megatron-LM ``megatron/core/pipeline_parallel/schedules.py`` — "When enabling
overlap_moe_expert_parallel_comm, we schedule one extra micro-batch forward step before the
1f1b stages. This is needed to ensure the forward and backward computations are independent in
all 1f1b steps"; without pipeline parallelism the combined 1F1B runs MB0 forward, then MB0
backward with MB1 forward, ..., then the last backward alone. Megatron-Bridge's validation:
ep > 1, and with pp > 1 a virtual pipeline (interleaved schedule).
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import run

from simcluster.context import build_context
from simcluster.engine.plan import chunk_stash_shares
from simcluster.errors import UserError
from simcluster.memory_report import memory_summary
from simcluster.scenario import scenario_from_dict
from simcluster.schedules import ScheduleSpec, get_schedule
from simcluster.schedules.ep_overlap import pair_orders

MOE = {
    "name": "small-moe", "layers": 4, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn": 5632,
    "vocab": 1024, "experts": 8, "top_k": 2, "expert_ffn": 5632,
    "position": "rope",  # not the learned 2048-row table of make_scenario's GPT: seq_len is 4096
}  # fmt: skip


def _moe(ep_comm: bool, m: int = 8, **parallel) -> dict:
    return make_scenario(
        model=MOE,
        cluster={"hardware": "dgx-h100", "gpus": 16},
        parallel={"tp": 1, "pp": 1, "ep": 8, **parallel},
        # the 16-bit gradients kept all step (grad_lifetime.py 'step'), so the activations column
        # holds the stash alone and the two-microbatch pairs show as twice it
        training={"seq_len": 4096, "micro_batch": 1, "global_batch": 16 * m, "fused_cross_entropy": True,
                  "grad_16bit_freed": "step"},
        overlap={"ep_comm": ep_comm},
    )


def test_one_stage_order_is_megatrons_combined_1f1b():
    (ops,) = pair_orders(get_schedule("1f1b").build(ScheduleSpec(p=1, m=4)))
    assert " ".join(map(str, ops)) == "F0.0 F1.0 &BW0.0 F2.0 &BW1.0 F3.0 &BW2.0 BW3.0"


@pytest.mark.parametrize("p,m,v", [(2, 8, 2), (4, 8, 2), (4, 12, 3)])
def test_interleaved_pairs_hold_different_microbatches_after_one_more_warmup(p, m, v):
    plain = get_schedule("interleaved").build(ScheduleSpec(p=p, m=m, v=v))
    paired = pair_orders(plain)
    for before, after in zip(plain, paired, strict=True):
        assert sorted(map(str, before)) == sorted(str(op).lstrip("&") for op in after)
        first_b = next(i for i, op in enumerate(before) if op.kind == "BW")
        first_pair = next(i for i, op in enumerate(after) if op.overlap)
        # the schedule's warm-up plus its first steady forward run alone, then one more
        # forward opens the first pair: one extra warm-up step
        assert first_pair == first_b + 1
        for i, op in enumerate(after):
            if op.overlap:
                f = after[i - 1]
                assert f.kind == "F" and (f.microbatch, f.chunk) != (op.microbatch, op.chunk)


def test_overlap_hides_the_all_to_alls_and_holds_one_more_layer():
    m = 8
    off, on = run(_moe(False, m)), run(_moe(True, m))
    ep_off, ep_on = off.summary["exposed_comm_s"]["ep"], on.summary["exposed_comm_s"]["ep"]
    assert ep_off > 0
    # only the first forward and the last backward run alone: about 1/m of the all-to-alls
    # stay exposed when the other microbatch's compute is longer than them
    assert ep_on < 2.5 * ep_off / m
    assert on.summary["step_time_s"] < off.summary["step_time_s"]
    # Megatron-Core's TransformerModelChunkSchedulePlan.run issues forward layer i with
    # backward layer i (popped from the end) and releases each backward layer's state before
    # the next pair: beside the one microbatch 1F1B holds, a pair holds at most the forward's
    # first layer with the embedding's output (later layers are matched by the backward's
    # frees; the LM head's forward, last, by its backward, first)
    ctx = build_context(scenario_from_dict(_moe(True, m)))
    (chunk,) = ctx.chunks[0]
    first = chunk_stash_shares(ctx, chunk)[0]
    assert 0 < first < 0.5
    act = {name: r.memory["activations"].max() for name, r in (("off", off), ("on", on))}
    assert act["on"] == pytest.approx((1 + first) * act["off"], rel=1e-9)
    # the whole second microbatch, as a pair moved whole would hold, is well above it
    assert act["on"] < 1.5 * act["off"]


def test_memory_command_walks_the_same_order():
    sc = scenario_from_dict(_moe(True))
    engine_peak = run(_moe(True)).summary["peak_memory_bytes"]["max"]
    assert memory_summary(build_context(sc))["total_bytes"] == pytest.approx(engine_peak, rel=1e-9)


@pytest.mark.parametrize(
    "parallel,training,needle",
    [
        ({"ep": 1}, {}, "parallel.ep > 1"),
        ({"pp": 2}, {}, "interleaved"),
        ({"pp": 2, "schedule": "dualpipe"}, {}, "dualpipe overlaps"),
        ({}, {"recompute": "full"}, "full recomputation"),
    ],
)
def test_where_megatron_cannot_overlap_is_a_one_line_error(cli, tmp_path, parallel, training, needle):
    import yaml

    data = _moe(True, **parallel)
    data["training"].update(training)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(data))
    assert err.value.field == "overlap.ep_comm" and needle in str(err.value)
    r = cli("run", str(path))
    assert r.code == 2 and "overlap.ep_comm" in r.err and "Traceback" not in r.err


def test_a_pair_runs_layer_by_layer():
    """Within a combined step the forward leads the backward by at most one layer (DualPipe's
    Fig. 4 and Megatron's combined 1F1B alternate the two directions layer by layer). With
    selective recomputation the backward has more blocks per layer than the forward, which
    would otherwise run ahead and leave the backward's last layers alone."""
    data = _moe(True, m=4)
    data["model"]["layers"] = 8
    data["training"].update(recompute="selective", recompute_modules=["layernorm", "moe_act"])
    res = run(data)
    ev = res.events[(res.events["stream"] == "compute") & (res.events["layer"] >= 0)]
    layers = 8
    for k in range(1, 4):  # pairs: F(k) with BW(k - 1)
        fwd = ev[(ev["kind"] == "forward") & (ev["microbatch"] == k)].groupby("layer")["start_s"].min()
        bwd = ev[ev["kind"].isin(["backward", "recompute"]) & (ev["microbatch"] == k - 1)]
        bwd = bwd.groupby("layer")["start_s"].min()
        for i in range(1, layers):
            # forward unit i is layer i; backward unit i - 1 is layer layers - i
            assert fwd[i] >= bwd[layers - i] - 1e-12
